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
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestSummarizeServing(t *testing.T) {
	// Three completed requests and one failure, over a 10 s run.
	recs := []Record{
		{Arrival: 0, FirstToken: 0.1, Finish: 1.1, PromptTokens: 100, OutputTokens: 11}, // TPOT 0.1
		{Arrival: 1, FirstToken: 1.5, Finish: 2.5, PromptTokens: 50, OutputTokens: 21},  // TPOT 0.05, TTFT 0.5
		{Arrival: 2, FirstToken: 2.2, Finish: 2.2, PromptTokens: 10, OutputTokens: 1},   // one token: no TPOT
		{Arrival: 3, Failed: true},
	}
	timings := []Timing{{ITL: []float64{0.1, 0.2}}, {ITL: []float64{0.3}}, {}, {}}
	s := SummarizeServing(recs, timings, 10, GoodputSLO{TTFT: 0.3, TPOT: 0.08})
	if s.Completed != 3 || s.Failed != 1 || s.InputTokens != 160 || s.OutputTokens != 33 {
		t.Fatalf("counts %+v", s)
	}
	if !near(s.RequestThroughput, 0.3) || !near(s.OutputThroughput, 3.3) || !near(s.TotalThroughput, 19.3) {
		t.Fatalf("throughput %+v", s)
	}
	// Request 1 misses TPOT, request 2 misses TTFT; the one-token answer counts TPOT as 0.
	if s.GoodRequests != 1 || !near(s.RequestGoodput, 0.1) {
		t.Fatalf("goodput %d %g", s.GoodRequests, s.RequestGoodput)
	}
	if s.TPOT.N != 2 || !near(s.TPOT.Mean, 0.075) || !near(s.TPOT.Median, 0.075) {
		t.Fatalf("TPOT %+v", s.TPOT)
	}
	if s.ITL.N != 3 || !near(s.ITL.Mean, 0.2) || !near(s.ITL.Std, math.Sqrt(0.02/3)) {
		t.Fatalf("ITL %+v", s.ITL)
	}
	if s.TTFT.N != 3 || !near(s.TTFT.Mean, (0.1+0.5+0.2)/3) || !near(s.TTFT.P99, 0.2+0.98*0.3) {
		t.Fatalf("TTFT %+v", s.TTFT)
	}
	if !near(s.E2E.Median, 1.1) {
		t.Fatalf("E2E %+v", s.E2E)
	}
	if z := SummarizeServing(recs, timings, 10, GoodputSLO{}); z.GoodRequests != 0 || z.RequestGoodput != 0 {
		t.Fatal("goodput without an objective")
	}
	if e := SummarizeServing(recs, timings, 10, GoodputSLO{E2E: 1.2}); e.GoodRequests != 2 {
		t.Fatalf("e2el objective: %d good", e.GoodRequests)
	}
}

func TestParseGoodput(t *testing.T) {
	var s GoodputSLO
	if err := ParseGoodput(&s, "ttft:500 tpot:50"); err != nil {
		t.Fatal(err)
	}
	if err := ParseGoodput(&s, "e2el:2500"); err != nil {
		t.Fatal(err)
	}
	if !near(s.TTFT, 0.5) || !near(s.TPOT, 0.05) || !near(s.E2E, 2.5) || s.String() != "ttft:500 tpot:50 e2el:2500" {
		t.Fatalf("%+v %q", s, s.String())
	}
	for _, bad := range []string{"", "ttft", "ttft:-1", "ttft:abc", "itl:5", "ttft:NaN", "tpot:0"} {
		var x GoodputSLO
		if err := ParseGoodput(&x, bad); err == nil {
			t.Errorf("%q accepted", bad)
		} else if !strings.Contains(err.Error(), "goodput") {
			t.Errorf("%q: unclear error %v", bad, err)
		}
	}
}

func TestNewDistLeavesInputAlone(t *testing.T) {
	v := []float64{3, 1, 2}
	d := NewDist(v)
	if v[0] != 3 || d.Median != 2 || d.N != 3 {
		t.Fatalf("%v %+v", v, d)
	}
	if NewDist(nil) != (Dist{}) {
		t.Fatal("empty")
	}
}
