/*
Copyright 2026 The kvrouter Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package workload

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// TraceRecord is one request of a public trace.
type TraceRecord struct {
	At           float64 // seconds from the trace's first request
	InputTokens  int
	OutputTokens int
	// HashIDs are Mooncake's prefix-block ids (512 tokens each; an equal id means an equal prefix
	// up to and including that block). Empty for traces without prefix data (Azure).
	HashIDs []uint64
}

type mooncakeLine struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int     `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// ReadMooncake reads a Mooncake FAST'25 JSONL trace (timestamp in ms).
func ReadMooncake(path string) ([]TraceRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseMooncake(f)
}

// ParseMooncake parses Mooncake JSONL from r.
func ParseMooncake(r io.Reader) ([]TraceRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	var out []TraceRecord
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var m mooncakeLine
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("mooncake trace line %d: %w", line, err)
		}
		if m.Timestamp == nil || m.InputLength == nil || m.OutputLength == nil {
			return nil, fmt.Errorf("mooncake trace line %d: timestamp, input_length and output_length are required", line)
		}
		if *m.InputLength < 1 || *m.OutputLength < 0 {
			return nil, fmt.Errorf("mooncake trace line %d: bad lengths %d/%d", line, *m.InputLength, *m.OutputLength)
		}
		out = append(out, TraceRecord{At: *m.Timestamp / 1000, InputTokens: *m.InputLength, OutputTokens: *m.OutputLength, HashIDs: m.HashIDs})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mooncake trace: %w", err)
	}
	return rebase(out), nil
}

// ReadAzure reads an Azure LLM inference 2023 CSV (TIMESTAMP,ContextTokens,GeneratedTokens).
func ReadAzure(path string) ([]TraceRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseAzure(f)
}

// ParseAzure parses the Azure 2023 CSV from r.
func ParseAzure(r io.Reader) ([]TraceRecord, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 3
	hdr, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("azure trace header: %w", err)
	}
	if hdr[0] != "TIMESTAMP" {
		return nil, fmt.Errorf("azure trace: unexpected header %v", hdr)
	}
	var out []TraceRecord
	var t0 time.Time
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("azure trace line %d: %w", line, err)
		}
		// Timestamps carry 7 fractional digits, which Go parses with the .9999999 layout.
		ts, err := time.Parse("2006-01-02 15:04:05.9999999", rec[0])
		if err != nil {
			return nil, fmt.Errorf("azure trace line %d: %w", line, err)
		}
		in, err1 := strconv.Atoi(rec[1])
		outTok, err2 := strconv.Atoi(rec[2])
		if err1 != nil || err2 != nil || in < 1 || outTok < 0 {
			return nil, fmt.Errorf("azure trace line %d: bad lengths %q/%q", line, rec[1], rec[2])
		}
		if t0.IsZero() {
			t0 = ts
		}
		out = append(out, TraceRecord{At: ts.Sub(t0).Seconds(), InputTokens: in, OutputTokens: outTok})
	}
	return rebase(out), nil
}

// rebase shifts arrivals so the first is at 0 and makes them non-decreasing (a trace that goes
// back in time is replayed in file order).
func rebase(recs []TraceRecord) []TraceRecord {
	if len(recs) == 0 {
		return recs
	}
	t0 := recs[0].At
	last := 0.0
	for i := range recs {
		recs[i].At -= t0
		if recs[i].At < last {
			recs[i].At = last
		}
		last = recs[i].At
	}
	return recs
}
