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
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	v := []float64{4, 1, 3, 2, 5}
	if got := Percentile(v, 50); got != 3 {
		t.Fatalf("p50 = %v, want 3", got)
	}
	if got := Percentile([]float64{1, 2}, 90); math.Abs(got-1.9) > 1e-9 {
		t.Fatalf("p90 = %v, want 1.9 (linear interpolation)", got)
	}
	if Percentile(nil, 99) != 0 {
		t.Fatal("no data must give 0")
	}
}

func TestSummarize(t *testing.T) {
	recs := []Record{
		{Endpoint: "a", Arrival: 0, FirstToken: 0.5, Finish: 1.5, PromptTokens: 100, CachedTokens: 80, OutputTokens: 11},
		{Endpoint: "a", Arrival: 0, FirstToken: 3, Finish: 4, PromptTokens: 100, CachedTokens: 0, OutputTokens: 11, Preemptions: 2},
		{Endpoint: "b", Arrival: 1, Failed: true, PromptTokens: 100},
	}
	r := Summarize(recs, []float64{0.1, 0.1}, []string{"a", "b", "c"}, SLO{TTFT: 1, ITL: 0.2}, 0, nil)
	if r.Completed != 2 || r.Failed != 1 || r.Preemptions != 2 {
		t.Fatalf("counts %+v", r)
	}
	if r.DurationS != 4 || r.OutputThroughput != 22.0/4 || r.Goodput != 11.0/4 {
		t.Fatalf("duration %v throughput %v goodput %v", r.DurationS, r.OutputThroughput, r.Goodput)
	}
	if r.HitRate != 0.4 {
		t.Fatalf("hit rate %v, want 0.4 (80 of 200 prompt tokens of completed requests)", r.HitRate)
	}
	// Requests per endpoint 2, 1, 0: mean 1, population sd sqrt(2/3).
	if math.Abs(r.ImbalanceCoV-math.Sqrt(2.0/3)) > 1e-9 {
		t.Fatalf("CoV %v", r.ImbalanceCoV)
	}
	if r.SLOAttainment != 1.0/3 {
		t.Fatalf("SLO attainment %v", r.SLOAttainment)
	}
}

// One engine left with the longest answers sets a run's duration; the balanced duration is what
// the run would have lasted had the fleet's output been spread so that every engine finished
// together at the rate it kept.
func TestBalancedDurationPricesAnUnevenEnd(t *testing.T) {
	recs := []Record{
		// a: 100 tokens by t=10 (10 tok/s); b: 300 tokens by t=20 (15 tok/s).
		{Endpoint: "a", Arrival: 0, FirstToken: 1, Finish: 10, PromptTokens: 10, OutputTokens: 100},
		{Endpoint: "b", Arrival: 0, FirstToken: 1, Finish: 12, PromptTokens: 10, OutputTokens: 100},
		{Endpoint: "b", Arrival: 0, FirstToken: 1, Finish: 20, PromptTokens: 10, OutputTokens: 200},
		// Failed and shed requests served nothing: they move neither the output nor the spans.
		{Endpoint: "b", Arrival: 0, Failed: true, Finish: 30, PromptTokens: 10, OutputTokens: 50},
		{Endpoint: "c", Arrival: 0, Failed: true, Shed: true, PromptTokens: 10},
	}
	r := Summarize(recs, nil, []string{"a", "b", "c"}, SLO{TTFT: 9, ITL: 9}, 0, nil)
	if r.DurationS != 20 {
		t.Fatalf("duration %v, want 20", r.DurationS)
	}
	// 400 tokens at 10 + 15 tok/s.
	if want := 400.0 / 25; math.Abs(r.BalancedDurationS-want) > 1e-9 {
		t.Fatalf("balanced duration %v, want %v", r.BalancedDurationS, want)
	}
	even := Summarize(recs[:1], nil, []string{"a"}, SLO{TTFT: 9, ITL: 9}, 0, nil)
	if even.BalancedDurationS != even.DurationS {
		t.Fatalf("one engine: balanced %v, duration %v; want them equal", even.BalancedDurationS, even.DurationS)
	}
	if none := Summarize(recs[3:], nil, []string{"b", "c"}, SLO{TTFT: 9, ITL: 9}, 0, nil); none.BalancedDurationS != 0 {
		t.Fatalf("no output: balanced %v, want 0", none.BalancedDurationS)
	}
}

func TestScaleUpShare(t *testing.T) {
	recs := []Record{
		{Endpoint: "old", Arrival: 5, FirstToken: 6, Finish: 7, OutputTokens: 1},
		{Endpoint: "old", Arrival: 11, FirstToken: 12, Finish: 13, OutputTokens: 1},
		{Endpoint: "new", Arrival: 12, FirstToken: 13, Finish: 14, OutputTokens: 1},
	}
	r := Summarize(recs, nil, []string{"old", "new"}, SLO{TTFT: 9, ITL: 9}, 0, &ScaleUp{At: 10, Added: []string{"new"}, Total: 2})
	if r.ScaledUpShare == nil || *r.ScaledUpShare != 0.5 || *r.ScaledUpFairShare != 0.5 {
		t.Fatalf("share %v fair %v", r.ScaledUpShare, r.ScaledUpFairShare)
	}
}

func TestMeanOverSeeds(t *testing.T) {
	half, fair := 0.25, 0.5
	more := 0.75
	a := Result{Policy: "p", Rate: 10, Requests: 10, Completed: 9, OutputThroughput: 100, BalancedDurationS: 8, TTFTP99: 2, HitRate: 0.5,
		Preemptions: 3, ScaledUpShare: &half, ScaledUpFairShare: &fair, PerEndpoint: map[string]int{"e0": 4}, Extra: map[string]float64{"x": 1}}
	b := Result{Policy: "p", Rate: 10, Requests: 12, Completed: 12, OutputThroughput: 200, BalancedDurationS: 12, TTFTP99: 4, HitRate: 0.7,
		Preemptions: 4, ScaledUpShare: &more, ScaledUpFairShare: &fair, PerEndpoint: map[string]int{"e0": 6}, Extra: map[string]float64{"x": 3}}
	m := Mean([]Result{a, b})
	if m.Policy != "p" || m.Rate != 10 || m.Requests != 11 || m.Completed != 11 || m.Preemptions != 4 {
		t.Fatalf("counts %+v", m)
	}
	if m.OutputThroughput != 150 || m.TTFTP99 != 3 || m.BalancedDurationS != 10 || math.Abs(m.HitRate-0.6) > 1e-12 {
		t.Fatalf("means %+v", m)
	}
	if *m.ScaledUpShare != 0.5 || m.PerEndpoint["e0"] != 5 || m.Extra["x"] != 2 {
		t.Fatalf("share %v per %v extra %v", *m.ScaledUpShare, m.PerEndpoint, m.Extra)
	}
	if m.Extra["seeds"] != 2 || m.Extra["output_tok_s_min"] != 100 || m.Extra["output_tok_s_max"] != 200 {
		t.Fatalf("spread %v", m.Extra)
	}
	if one := Mean([]Result{a}); one.OutputThroughput != 100 || one.Extra["seeds"] != 0 {
		t.Fatalf("one run changed: %+v", one)
	}
}
