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

package metrics

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// This file holds the serving figures as `vllm bench serve` defines them (its calculate_metrics),
// computed from the same Records as Summarize: TTFT, TPOT, ITL and E2E distributions, request and
// token throughput over the run's duration, and goodput as requests per second meeting every SLO.

// Timing is one request's streamed timeline, on top of its Record.
type Timing struct {
	// ITL holds the gaps between successive output chunks (seconds): one per chunk after the
	// first, whatever the number of tokens the chunk carries, as vllm bench serve counts them.
	ITL []float64
}

// GoodputSLO is the per-request objective of `--goodput` (seconds; 0: not set). A request is good
// when every objective that is set holds.
type GoodputSLO struct {
	TTFT float64 `json:"ttft_s,omitempty"`
	TPOT float64 `json:"tpot_s,omitempty"`
	E2E  float64 `json:"e2el_s,omitempty"`
}

// Empty reports whether no objective is set.
func (s GoodputSLO) Empty() bool { return s.TTFT <= 0 && s.TPOT <= 0 && s.E2E <= 0 }

// String renders the objectives as the flag takes them, in milliseconds.
func (s GoodputSLO) String() string {
	var parts []string
	for _, kv := range []struct {
		k string
		v float64
	}{{"ttft", s.TTFT}, {"tpot", s.TPOT}, {"e2el", s.E2E}} {
		if kv.v > 0 {
			parts = append(parts, fmt.Sprintf("%s:%g", kv.k, kv.v*1000))
		}
	}
	return strings.Join(parts, " ")
}

// ParseGoodput reads objectives written as vllm bench serve's --goodput takes them:
// "KEY:MILLISECONDS" pairs for the keys ttft, tpot and e2el, separated by spaces or commas. It
// adds to s, so that the flag may be repeated.
func ParseGoodput(s *GoodputSLO, text string) error {
	fields := strings.FieldsFunc(text, func(r rune) bool { return r == ' ' || r == ',' })
	if len(fields) == 0 {
		return fmt.Errorf("goodput %q: want KEY:MS pairs such as ttft:500 tpot:50 e2el:10000", text)
	}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, ":")
		if !ok {
			return fmt.Errorf("goodput %q: want KEY:MS, e.g. ttft:500", f)
		}
		ms, err := strconv.ParseFloat(v, 64)
		if err != nil || ms <= 0 || math.IsInf(ms, 0) || math.IsNaN(ms) {
			return fmt.Errorf("goodput %q: the value must be a positive number of milliseconds", f)
		}
		switch k {
		case "ttft":
			s.TTFT = ms / 1000
		case "tpot":
			s.TPOT = ms / 1000
		case "e2el":
			s.E2E = ms / 1000
		default:
			return fmt.Errorf("goodput %q: unknown metric %q (want ttft, tpot or e2el)", f, k)
		}
	}
	return nil
}

// Dist summarises one latency distribution (seconds), as vllm bench serve prints it.
type Dist struct {
	N      int     `json:"n"`
	Mean   float64 `json:"mean_s"`
	Median float64 `json:"median_s"`
	Std    float64 `json:"std_s"`
	P90    float64 `json:"p90_s"`
	P99    float64 `json:"p99_s"`
}

// NewDist summarises v (numpy's linear-interpolation percentiles and population standard
// deviation, which is what vllm bench serve uses). It does not modify v.
func NewDist(v []float64) Dist {
	if len(v) == 0 {
		return Dist{}
	}
	s := slices.Clone(v)
	var sum float64
	for _, x := range s {
		sum += x
	}
	mean := sum / float64(len(s))
	var ss float64
	for _, x := range s {
		ss += (x - mean) * (x - mean)
	}
	return Dist{N: len(s), Mean: mean, Median: Percentile(s, 50), Std: math.Sqrt(ss / float64(len(s))),
		P90: Percentile(s, 90), P99: Percentile(s, 99)}
}

// Serving is a run's figures in vllm bench serve's terms.
type Serving struct {
	Completed    int     `json:"completed"`
	Failed       int     `json:"failed"`
	DurationS    float64 `json:"duration_s"`
	InputTokens  int     `json:"total_input_tokens"`
	OutputTokens int     `json:"total_output_tokens"`

	RequestThroughput float64 `json:"request_throughput_req_s"`
	OutputThroughput  float64 `json:"output_throughput_tok_s"`
	TotalThroughput   float64 `json:"total_token_throughput_tok_s"`

	SLO GoodputSLO `json:"goodput_slo"`
	// GoodRequests met every objective of SLO; RequestGoodput is their number over the duration
	// (0 when no objective is set).
	GoodRequests   int     `json:"good_requests"`
	RequestGoodput float64 `json:"request_goodput_req_s"`

	TTFT Dist `json:"ttft"`
	TPOT Dist `json:"tpot"`
	ITL  Dist `json:"itl"`
	E2E  Dist `json:"e2el"`
}

// TPOT is the request's time per output token after the first: (E2E - TTFT) / (output tokens -
// 1); 0 for answers of one token (vllm bench serve leaves those out of the TPOT distribution and
// counts them as 0 against a TPOT objective).
func (r *Record) TPOT() float64 {
	if r.OutputTokens < 2 {
		return 0
	}
	return (r.Finish - r.FirstToken) / float64(r.OutputTokens-1)
}

// SummarizeServing computes the serving figures. timings[i] belongs to recs[i] (nil entries are
// allowed); duration is the run's span, from the start of the run to the end of its last request.
func SummarizeServing(recs []Record, timings []Timing, duration float64, slo GoodputSLO) Serving {
	var s Serving
	s.SLO, s.DurationS = slo, duration
	var ttft, tpot, itl, e2e []float64
	for i := range recs {
		r := &recs[i]
		if !r.Done() {
			s.Failed++
			continue
		}
		s.Completed++
		s.InputTokens += r.PromptTokens
		s.OutputTokens += r.OutputTokens
		ttft = append(ttft, r.TTFT())
		e2e = append(e2e, r.Finish-r.Arrival)
		if r.OutputTokens > 1 {
			tpot = append(tpot, r.TPOT())
		}
		if i < len(timings) {
			itl = append(itl, timings[i].ITL...)
		}
		if !slo.Empty() && meets(r, slo) {
			s.GoodRequests++
		}
	}
	if duration > 0 {
		s.RequestThroughput = float64(s.Completed) / duration
		s.OutputThroughput = float64(s.OutputTokens) / duration
		s.TotalThroughput = float64(s.InputTokens+s.OutputTokens) / duration
		s.RequestGoodput = float64(s.GoodRequests) / duration
	}
	s.TTFT, s.TPOT, s.ITL, s.E2E = NewDist(ttft), NewDist(tpot), NewDist(itl), NewDist(e2e)
	return s
}

func meets(r *Record, slo GoodputSLO) bool {
	if slo.TTFT > 0 && r.TTFT() > slo.TTFT {
		return false
	}
	if slo.TPOT > 0 && r.TPOT() > slo.TPOT {
		return false
	}
	if slo.E2E > 0 && r.Finish-r.Arrival > slo.E2E {
		return false
	}
	return true
}
