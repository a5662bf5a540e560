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

package report

import (
	"math"
	"sort"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
)

// RequestTiming is one request's path through a run, in seconds from the run's start (simulated
// seconds when the target is vllm-sim at a --time-scale).
type RequestTiming struct {
	Arrival float64 `json:"arrival_s"`
	// FirstToken and Finish are 0 when the request got no token / did not finish.
	FirstToken float64 `json:"first_token_s,omitempty"`
	Finish     float64 `json:"finish_s,omitempty"`
	Endpoint   string  `json:"endpoint,omitempty"`
	Failed     bool    `json:"failed,omitempty"`
}

// RunRequests are the requests of one run (one policy of a comparison), for the TTFT
// distribution and the per-request timeline of report.html.
type RunRequests struct {
	Policy   string          `json:"policy"`
	Requests []RequestTiming `json:"requests"`
}

// RequestsOf keeps what the charts need of a run's records.
func RequestsOf(policy string, recs []metrics.Record) RunRequests {
	out := RunRequests{Policy: policy, Requests: make([]RequestTiming, 0, len(recs))}
	for _, r := range recs {
		out.Requests = append(out.Requests, RequestTiming{Arrival: r.Arrival, FirstToken: r.FirstToken,
			Finish: r.Finish, Endpoint: r.Endpoint, Failed: r.Failed})
	}
	return out
}

// hasFirstToken reports whether the request's TTFT is known.
func (r RequestTiming) hasFirstToken() bool { return !r.Failed && r.FirstToken > 0 }

// cdfPoint says that a share Frac of the run's requests had their first token within TTFT.
type cdfPoint struct {
	TTFT, Frac float64
}

// ttftCDF is the empirical distribution of a run's TTFT, over all its requests: requests that
// never got a token keep the curve below 1, so a run that fails requests does not look faster.
// With more than maxPoints requests it keeps maxPoints evenly spaced ranks, always the last.
func ttftCDF(run RunRequests, maxPoints int) []cdfPoint {
	var ttft []float64
	for _, r := range run.Requests {
		if r.hasFirstToken() {
			ttft = append(ttft, math.Max(0, r.FirstToken-r.Arrival))
		}
	}
	if len(ttft) == 0 {
		return nil
	}
	sort.Float64s(ttft)
	n := float64(len(run.Requests))
	idx := evenly(len(ttft), maxPoints)
	out := make([]cdfPoint, 0, len(idx))
	for _, i := range idx {
		out = append(out, cdfPoint{TTFT: ttft[i], Frac: float64(i+1) / n})
	}
	return out
}

// timelineSample is at most max of a run's requests, in arrival order, evenly spaced over it
// (the first and the last always kept), so that a long run still draws one readable row each.
func timelineSample(run RunRequests, max int) []RequestTiming {
	reqs := append([]RequestTiming(nil), run.Requests...)
	sort.SliceStable(reqs, func(a, b int) bool { return reqs[a].Arrival < reqs[b].Arrival })
	idx := evenly(len(reqs), max)
	out := make([]RequestTiming, 0, len(idx))
	for _, i := range idx {
		out = append(out, reqs[i])
	}
	return out
}

// evenly picks at most max indices of 0..n-1, evenly spaced, including the first and the last.
func evenly(n, max int) []int {
	if n <= 0 || max <= 0 {
		return nil
	}
	if n <= max {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	if max == 1 {
		return []int{n - 1}
	}
	out := make([]int, 0, max)
	for k := range max {
		out = append(out, int(math.Round(float64(k)*float64(n-1)/float64(max-1))))
	}
	return out
}
