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

package loadsignal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// EngineMetrics is what the router reads from one engine's /metrics. Gauges are current values;
// counters are cumulative since the engine started. Sums are over every series of a name (a
// data-parallel engine reports one series per rank and the router may address the whole pod).
type EngineMetrics struct {
	Running, Waiting float64
	// KVUsage is the fraction (0–1) of KV blocks in use; the maximum over series.
	KVUsage float64
	// Counters.
	PrefixQueries, PrefixHits float64
	Preemptions               float64
	PromptTokens, GenTokens   float64
	// From vllm:cache_config_info (empty when the engine does not report it).
	BlockSize, HashAlgo string
	// LoRA is vllm:lora_requests_info (zero when the engine does not report it: LoRA off).
	LoRA LoRAInfo
}

// LoRAInfo is an engine's LoRA adapter state as vLLM reports it.
type LoRAInfo struct {
	// Reported is true when the page had a well-formed vllm:lora_requests_info.
	Reported bool
	// Running and Waiting are the adapters of the running and of the waiting requests.
	Running, Waiting []string
	// MaxLoRAs is the engine's adapter slots (--max-loras).
	MaxLoRAs int
	// Err says why a vllm:lora_requests_info present on the page was not used.
	Err string
}

// Metric names as vLLM exposes them (docs/vllm-contract.md §5). mKVUsageOld and the
// mPrefixOld counters are the names of vLLM before 0.9 (later versions can still show them as
// deprecated metrics); they are read only when the current name is absent, so an engine that
// exposes both is counted once.
const (
	mRunning       = "vllm:num_requests_running"
	mWaiting       = "vllm:num_requests_waiting"
	mKVUsage       = "vllm:kv_cache_usage_perc"
	mKVUsageOld    = "vllm:gpu_cache_usage_perc"
	mPrefixQueries = "vllm:prefix_cache_queries"
	mPrefixHits    = "vllm:prefix_cache_hits"
	mPrefixOld     = "vllm:gpu_prefix_cache_"
	mPreemptions   = "vllm:num_preemptions"
	mPromptTokens  = "vllm:prompt_tokens"
	mGenTokens     = "vllm:generation_tokens"
	mCacheConfig   = "vllm:cache_config_info"
	mLoRAInfo      = "vllm:lora_requests_info"
)

// Default bounds of ParseMetrics (Scraper.MaxBytes and Scraper.MaxReadBytes override them).
const (
	// DefaultMaxKeptBytes bounds the lines of the families the router reads: the memory a
	// scrape may hold.
	DefaultMaxKeptBytes = 4 << 20
	// DefaultMaxReadBytes bounds the whole page. It is far above what the kept families need
	// because a page grows with families the router skips (and with the old series of
	// vllm:lora_requests_info, which vLLM never removes), and a huge but well-formed page must
	// still be read; it exists so that an endless body ends with an error.
	DefaultMaxReadBytes = 64 << 20
)

// ParseMetrics parses the Prometheus text exposition of a vLLM engine within the default bounds
// (see ParseMetricsWithin).
func ParseMetrics(r io.Reader) (EngineMetrics, error) {
	return ParseMetricsWithin(r, DefaultMaxKeptBytes, DefaultMaxReadBytes)
}

// ParseMetricsWithin parses the Prometheus text exposition of a vLLM engine, read line by line:
// only the lines of the families the router reads are kept (at most maxKept bytes of them), and
// at most maxRead bytes are read. A page beyond either bound is an error, never a page read in
// part: a cut page would read as zeros (an idle engine) in the families after the cut. Counters
// are found with or without the `_total` suffix (the text parser reports the family under its
// declared name, which differs between prometheus_client versions). Unknown metrics are ignored.
func ParseMetricsWithin(r io.Reader, maxKept, maxRead int64) (EngineMetrics, error) {
	data, err := keepWanted(r, maxKept, maxRead)
	if err != nil {
		return EngineMetrics{}, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return EngineMetrics{}, fmt.Errorf("parse engine metrics: %w", err)
	}
	var m EngineMetrics
	m.Running = sum(fams, mRunning)
	m.Waiting = sum(fams, mWaiting)
	if f := fams[mKVUsage]; f != nil {
		m.KVUsage = maxOf(f)
	} else if f := fams[mKVUsageOld]; f != nil {
		m.KVUsage = maxOf(f)
	}
	m.PrefixQueries = counterOr(fams, mPrefixQueries, mPrefixOld+"queries")
	m.PrefixHits = counterOr(fams, mPrefixHits, mPrefixOld+"hits")
	m.Preemptions = counter(fams, mPreemptions)
	m.PromptTokens = counter(fams, mPromptTokens)
	m.GenTokens = counter(fams, mGenTokens)
	if f := fams[mCacheConfig]; f != nil && len(f.GetMetric()) > 0 {
		for _, lp := range f.GetMetric()[0].GetLabel() {
			switch lp.GetName() {
			case "block_size":
				m.BlockSize = lp.GetValue()
			case "prefix_caching_hash_algo":
				m.HashAlgo = lp.GetValue()
			}
		}
	}
	if f := fams[mLoRAInfo]; f != nil {
		m.LoRA = parseLoRAInfo(f)
	}
	return m, nil
}

// parseLoRAInfo reads vllm:lora_requests_info. vLLM sets the series of the current label values
// (max_lora, and the comma-separated adapters of the running and of the waiting requests) to the
// current time, and the series of earlier label values stay on the page with the time they were
// last set: the newest series is the current state.
func parseLoRAInfo(f *dto.MetricFamily) LoRAInfo {
	var newest *dto.Metric
	for _, m := range f.GetMetric() {
		if newest == nil || value(m) > value(newest) {
			newest = m
		}
	}
	if newest == nil {
		return LoRAInfo{Err: mLoRAInfo + " has no series"}
	}
	info := LoRAInfo{Reported: true}
	seen := map[string]bool{}
	for _, lp := range newest.GetLabel() {
		switch lp.GetName() {
		case "max_lora":
			n, err := strconv.Atoi(strings.TrimSpace(lp.GetValue()))
			if err != nil || n < 1 {
				return LoRAInfo{Err: fmt.Sprintf("%s: max_lora %q is not a positive integer", mLoRAInfo, lp.GetValue())}
			}
			info.MaxLoRAs = n
		case "running_lora_adapters":
			info.Running = splitAdapters(lp.GetValue(), seen)
		case "waiting_lora_adapters":
			info.Waiting = splitAdapters(lp.GetValue(), seen)
		}
	}
	if info.MaxLoRAs == 0 {
		return LoRAInfo{Err: mLoRAInfo + " has no max_lora label"}
	}
	return info
}

// splitAdapters splits a comma-separated adapter list, dropping empty and repeated names (seen
// spans both lists, as an adapter with requests both running and waiting is one adapter).
func splitAdapters(v string, seen map[string]bool) []string {
	var out []string
	for _, a := range strings.Split(v, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if !seen[a] {
			out = append(out, a)
		}
		seen[a] = true
	}
	return out
}

// counterOr reads counter name, or old when the page has no family called name.
func counterOr(fams map[string]*dto.MetricFamily, name, old string) float64 {
	if fams[name] == nil && fams[name+"_total"] == nil {
		return counter(fams, old)
	}
	return counter(fams, name)
}

func counter(fams map[string]*dto.MetricFamily, name string) float64 {
	if _, ok := fams[name+"_total"]; ok {
		return sum(fams, name+"_total")
	}
	return sum(fams, name)
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

func sum(fams map[string]*dto.MetricFamily, name string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var s float64
	for _, m := range f.GetMetric() {
		s += value(m)
	}
	return s
}

func maxOf(f *dto.MetricFamily) float64 {
	var v float64
	for _, m := range f.GetMetric() {
		v = max(v, value(m))
	}
	return v
}

// wanted are the name prefixes of the families ParseMetrics reads.
var wanted = [][]byte{
	[]byte(mRunning), []byte(mWaiting), []byte(mKVUsage), []byte(mKVUsageOld), []byte(mPrefixQueries),
	[]byte(mPrefixHits), []byte(mPrefixOld), []byte(mPreemptions), []byte(mPromptTokens), []byte(mGenTokens), []byte(mCacheConfig), []byte(mLoRAInfo),
}

// keepWanted reads a page and returns the lines of the families the router reads, dropping the
// others before the text parser sees them. A vLLM page is mostly histogram buckets (tens of
// families × ~20 buckets × labels); parsing them for nothing cost most of the scrape CPU (100
// engines scraped every second). Of vllm:lora_requests_info only the series with the largest
// value is kept: vLLM sets the series of the current adapters to the current time and never
// removes the series of earlier adapter sets, so a long-running engine's page holds one series
// per set it ever had (tens of bytes per request served), and only the newest is its state. The
// parser still validates every line it gets.
func keepWanted(r io.Reader, maxKept, maxRead int64) ([]byte, error) {
	lr := &io.LimitedReader{R: r, N: maxRead + 1}
	br := bufio.NewReaderSize(lr, 64<<10)
	out := make([]byte, 0, 4096)
	// The vllm:lora_requests_info family: its HELP and TYPE lines and its newest series, added
	// at the end (a family's lines are contiguous on a well-formed page, so moving it whole
	// keeps the page well-formed).
	var loraHead, loraBest []byte
	loraBestValue := math.Inf(-1)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) <= int(maxKept)+1 {
			line = append(line, chunk...)
		} else {
			// Too long to keep: only its start (the name) matters now.
			line = append(line, chunk[:max(0, int(maxKept)+1-len(line))]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("read engine metrics: %w", err)
		}
		if lr.N <= 0 {
			return nil, fmt.Errorf("engine metrics page exceeds %d bytes", maxRead)
		}
		if len(line) > 0 {
			if line[len(line)-1] != '\n' {
				line = append(line, '\n')
			}
			switch kind, lora := classify(line); {
			case kind == lineDropped:
			case lora && kind == lineSample:
				if v, ok := sampleValue(line); !ok {
					// Malformed: kept for the parser to reject.
					out = append(out, line...)
				} else if v > loraBestValue || loraBest == nil {
					loraBestValue = v
					loraBest = append(loraBest[:0], line...)
				}
			case lora:
				loraHead = append(loraHead, line...)
			default:
				out = append(out, line...)
			}
			if int64(len(out)+len(loraHead)+len(loraBest)) > maxKept {
				return nil, fmt.Errorf("engine metrics the router reads exceed %d bytes", maxKept)
			}
		}
		line = line[:0]
		if err == io.EOF {
			break
		}
	}
	out = append(out, loraHead...)
	return append(out, loraBest...), nil
}

type lineKind uint8

const (
	lineDropped lineKind = iota // not a family the router reads (or a plain comment)
	lineMeta                    // # HELP or # TYPE of a wanted family
	lineSample                  // a sample of a wanted family
)

// classify says whether the router reads line's family, and whether it is
// vllm:lora_requests_info.
func classify(line []byte) (kind lineKind, lora bool) {
	name, kind := line, lineSample
	if bytes.HasPrefix(name, []byte("# HELP ")) || bytes.HasPrefix(name, []byte("# TYPE ")) {
		name, kind = name[7:], lineMeta
	}
	for _, w := range wanted {
		if bytes.HasPrefix(name, w) {
			rest := name[len(w):]
			lora = bytes.Equal(w, []byte(mLoRAInfo)) && len(rest) > 0 && (rest[0] == '{' || rest[0] == ' ' || rest[0] == '\n')
			return kind, lora
		}
	}
	return lineDropped, false
}

// sampleValue reads the value of a sample line: the first field after the labels (a timestamp
// may follow it).
func sampleValue(line []byte) (float64, bool) {
	rest := line
	if i := bytes.LastIndexByte(rest, '}'); i >= 0 {
		rest = rest[i+1:]
	} else if i := bytes.IndexByte(rest, ' '); i >= 0 {
		rest = rest[i:]
	}
	f := bytes.Fields(rest)
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(f[0]), 64)
	return v, err == nil
}
