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
	"bytes"
	"fmt"
	"io"

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
)

// ParseMetrics parses the Prometheus text exposition of a vLLM engine. Counters are found with
// or without the `_total` suffix (the text parser reports the family under its declared name,
// which differs between prometheus_client versions). Unknown metrics are ignored.
func ParseMetrics(r io.Reader) (EngineMetrics, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return EngineMetrics{}, fmt.Errorf("read engine metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(keepWanted(data)))
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
	return m, nil
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
	[]byte(mPrefixHits), []byte(mPrefixOld), []byte(mPreemptions), []byte(mPromptTokens), []byte(mGenTokens), []byte(mCacheConfig),
}

// keepWanted drops the lines of families the router does not read before the text parser sees
// them. A vLLM page is mostly histogram buckets (tens of families × ~20 buckets × labels); parsing
// them for nothing cost most of the scrape CPU (100 engines scraped every second). The parser
// still validates every line it gets.
func keepWanted(data []byte) []byte {
	out := make([]byte, 0, 4096)
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i+1], data[i+1:]
		} else {
			data = nil
		}
		name := line
		if bytes.HasPrefix(name, []byte("# HELP ")) || bytes.HasPrefix(name, []byte("# TYPE ")) {
			name = name[7:]
		}
		for _, w := range wanted {
			if bytes.HasPrefix(name, w) {
				out = append(out, line...)
				if line[len(line)-1] != '\n' {
					out = append(out, '\n')
				}
				break
			}
		}
	}
	return out
}
