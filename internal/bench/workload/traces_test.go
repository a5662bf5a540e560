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
	"math"
	"path/filepath"
	"runtime"
	"testing"
)

// tracesDir is the repository's bench/traces, where the public traces are vendored.
func tracesDir(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "bench", "traces")
}

// The parsers read the vendored traces whole, with the record counts and spans that
// bench/traces/README.md states.
func TestVendoredTracesParse(t *testing.T) {
	dir := tracesDir(t)
	for _, c := range []struct {
		file    string
		read    func(string) ([]TraceRecord, error)
		records int
		span    float64 // seconds from the first arrival to the last
		prefix  bool
	}{
		{"conversation_trace.jsonl", ReadMooncake, 12031, 3536.999, true},
		{"synthetic_trace.jsonl", ReadMooncake, 3993, 1022.025, true},
		{"AzureLLMInferenceTrace_conv.csv", ReadAzure, 19366, 3501.7219, false},
		{"AzureLLMInferenceTrace_code.csv", ReadAzure, 8819, 3435.9481, false},
	} {
		t.Run(c.file, func(t *testing.T) {
			recs, err := c.read(filepath.Join(dir, c.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != c.records {
				t.Fatalf("%d records, want %d", len(recs), c.records)
			}
			if got := recs[len(recs)-1].At; math.Abs(got-c.span) > 1e-3 {
				t.Fatalf("last arrival at %.4f s, want %.4f s", got, c.span)
			}
			for i, r := range recs {
				if c.prefix {
					// One 512-token block per hash id, the last one partial.
					if want := (r.InputTokens + 511) / 512; len(r.HashIDs) != want {
						t.Fatalf("record %d: %d hash ids for %d input tokens, want %d", i, len(r.HashIDs), r.InputTokens, want)
					}
				} else if len(r.HashIDs) != 0 {
					t.Fatalf("record %d: an Azure trace has no prefix data, got hash ids", i)
				}
			}
		})
	}
}

// The trap every router meets on the conversation trace: block 0 opens every request.
func TestConversationTraceSharesBlockZero(t *testing.T) {
	recs, err := ReadMooncake(filepath.Join(tracesDir(t), "conversation_trace.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if len(r.HashIDs) == 0 || r.HashIDs[0] != 0 {
			t.Fatalf("record %d starts with %v, want block 0", i, r.HashIDs[:min(1, len(r.HashIDs))])
		}
	}
}

// Every trace workload in bench/workloads names a file that is vendored in bench/traces, and
// generates requests from it.
func TestShippedTraceWorkloadsFindTheirTraces(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(file), "..", "..", "..", "bench", "workloads", "*.yaml"))
	formats := map[string]int{}
	for _, f := range files {
		s, err := LoadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if s.Kind != KindTrace {
			continue
		}
		formats[s.Trace.Format]++
		s.Load.Requests = 50
		reqs, err := Generate(s, s.PrimaryRate(), Options{TracesDir: tracesDir(t), MaxPromptTokens: s.Fleet.MaxModelLen})
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
		if len(reqs) != 50 {
			t.Fatalf("%s: %d requests, want 50", filepath.Base(f), len(reqs))
		}
	}
	// Workloads are added over time (issue 18 replays the conversation trace on other fleets);
	// the two of each format shipped first must stay.
	if formats["mooncake"] < 2 || formats["azure"] < 2 {
		t.Fatalf("trace workloads by format %v, want at least two Mooncake and two Azure", formats)
	}
}
