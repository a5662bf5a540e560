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
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
)

// liveSample is a two-run live comparison with per-request times: run "round-robin" has TTFTs
// 0.1..n/10 s, run "kvrouter" a tenth of that, one failed and one unfinished request each.
func liveSample(n int) *Report {
	r := sample()
	r.Mode = "live"
	for i := range r.Policies {
		r.Policies[i].Extra = map[string]float64{"time_scale": 0.2}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, run := range []struct {
		policy string
		div    float64
	}{{"round-robin", 1}, {"kvrouter", 10}} {
		var recs []metrics.Record
		for i := range n {
			at := float64(i) * 0.5
			ttft := float64(i+1) / 10 / run.div
			recs = append(recs, metrics.Record{Endpoint: fmt.Sprintf("engine-%d", i%4), Arrival: at, FirstToken: at + ttft, Finish: at + ttft + 2})
		}
		recs = append(recs, metrics.Record{Arrival: 1, Failed: true}, metrics.Record{Endpoint: "engine-0", Arrival: 2})
		rng.Shuffle(len(recs), func(a, b int) { recs[a], recs[b] = recs[b], recs[a] })
		r.Requests = append(r.Requests, RequestsOf(run.policy, recs))
	}
	return r
}

func TestRequestsOfKeepsTimes(t *testing.T) {
	recs := []metrics.Record{{Endpoint: "e1", Arrival: 1, FirstToken: 1.5, Finish: 3, PromptTokens: 99}, {Arrival: 2, Failed: true}}
	got := RequestsOf("p", recs)
	if got.Policy != "p" || len(got.Requests) != 2 {
		t.Fatalf("got %+v", got)
	}
	if r := got.Requests[0]; r.Endpoint != "e1" || r.Arrival != 1 || r.FirstToken != 1.5 || r.Finish != 3 || r.Failed {
		t.Fatalf("request 0 = %+v", r)
	}
	if !got.Requests[1].Failed {
		t.Fatal("the failed request lost its flag")
	}
}

func TestTTFTCDF(t *testing.T) {
	run := liveSample(20).Requests[0] // round-robin: TTFT 0.1..2.0 s, 22 requests
	cdf := ttftCDF(run, 1000)
	if len(cdf) != 20 {
		t.Fatalf("%d points, want one per request with a first token (20)", len(cdf))
	}
	for i, p := range cdf {
		wantTTFT := float64(i+1) / 10
		if d := p.TTFT - wantTTFT; d > 1e-9 || d < -1e-9 {
			t.Fatalf("point %d TTFT %g, want %g (sorted ascending)", i, p.TTFT, wantTTFT)
		}
		if want := float64(i+1) / 22; p.Frac != want {
			t.Fatalf("point %d share %g, want %g (over all 22 requests)", i, p.Frac, want)
		}
	}
	if last := cdf[len(cdf)-1].Frac; last >= 1 {
		t.Fatalf("a run with a failed and an unfinished request reaches share %g, want < 1", last)
	}

	thin := ttftCDF(run, 5)
	if len(thin) != 5 {
		t.Fatalf("%d points, want 5", len(thin))
	}
	if thin[0] != cdf[0] || thin[4] != cdf[len(cdf)-1] {
		t.Fatalf("thinned curve %v must keep the first and last points of %v", thin, cdf)
	}
	for i := 1; i < len(thin); i++ {
		if thin[i].TTFT < thin[i-1].TTFT || thin[i].Frac <= thin[i-1].Frac {
			t.Fatalf("thinned curve not increasing: %v", thin)
		}
	}
	if got := ttftCDF(RunRequests{Policy: "x", Requests: []RequestTiming{{Arrival: 1, Failed: true}}}, 10); got != nil {
		t.Fatalf("a run without a first token has no curve, got %v", got)
	}
}

func TestTimelineSample(t *testing.T) {
	run := liveSample(300).Requests[1] // shuffled, 302 requests
	all := timelineSample(run, 1000)
	if len(all) != len(run.Requests) {
		t.Fatalf("%d rows, want all %d", len(all), len(run.Requests))
	}
	for i := 1; i < len(all); i++ {
		if all[i].Arrival < all[i-1].Arrival {
			t.Fatalf("rows not in arrival order at %d", i)
		}
	}
	s := timelineSample(run, 50)
	if len(s) != 50 {
		t.Fatalf("%d rows, want 50", len(s))
	}
	if s[0] != all[0] || s[49] != all[len(all)-1] {
		t.Fatal("the sample must keep the first and the last arrival")
	}
	// Evenly spaced: no gap between sampled ranks is more than one longer than another.
	idx := evenly(302, 50)
	lo, hi := 1<<30, 0
	for i := 1; i < len(idx); i++ {
		lo, hi = min(lo, idx[i]-idx[i-1]), max(hi, idx[i]-idx[i-1])
	}
	if hi-lo > 1 || lo < 1 {
		t.Fatalf("uneven sample gaps %d..%d", lo, hi)
	}
	if len(evenly(0, 5)) != 0 || len(evenly(5, 0)) != 0 || evenly(7, 1)[0] != 6 {
		t.Fatal("evenly: edge cases")
	}
}

var dataPoints = regexp.MustCompile(`data-points="(\d+)"`)

func TestHTMLRequestCharts(t *testing.T) {
	r := liveSample(400)
	var b bytes.Buffer
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	h := b.String()
	if strings.Count(h, `data-chart="ttft-cdf"`) != 1 || strings.Count(h, `data-chart="timeline"`) != 1 {
		t.Fatal("want one TTFT distribution and one timeline")
	}
	pts := dataPoints.FindAllStringSubmatch(h, -1)
	if len(pts) != 2 {
		t.Fatalf("want one CDF line per run, got %d", len(pts))
	}
	for _, m := range pts {
		if m[1] != fmt.Sprint(cdfPoints) {
			t.Fatalf("a 400-request run draws %s points, want the cap %d", m[1], cdfPoints)
		}
	}
	if !strings.Contains(h, fmt.Sprintf(`data-requests="%d"`, timelineRows)) {
		t.Fatalf("timeline rows are not capped at %d per run", timelineRows)
	}
	if !strings.Contains(h, fmt.Sprintf("%d of %d requests", timelineRows, 402)) {
		t.Fatal("the page must say the timeline is sampled")
	}
	if !strings.Contains(h, "engine-3") || !strings.Contains(h, "coloured by engine") {
		t.Fatal("the timeline is coloured by engine when the runs recorded engines")
	}
	if !strings.Contains(h, "simulated seconds (vllm-sim at --time-scale 0.2)") {
		t.Fatal("times of a vllm-sim run must be labelled simulated seconds")
	}
	for _, bad := range []string{"<script", "<link", "src=\"http", "href=\"http", "NaN", "Inf"} {
		if strings.Contains(h, bad) {
			t.Errorf("report.html contains %q", bad)
		}
	}

	var none bytes.Buffer
	if err := WriteHTML(&none, sample()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(none.String(), "data-chart") || !strings.Contains(none.String(), "no per-request times") {
		t.Fatal("a report without request times says so and draws no request charts")
	}
}

func TestReportJSONKeepsRequests(t *testing.T) {
	dir := t.TempDir()
	r := liveSample(3)
	if err := WriteFiles(dir, r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"requests"`, `"arrival_s"`, `"first_token_s"`, `"finish_s"`, `"endpoint"`, `"failed"`} {
		if !bytes.Contains(b, []byte(f)) {
			t.Errorf("report.json lacks %s", f)
		}
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Requests) != 2 || len(back.Requests[0].Requests) != 5 || back.Requests[1].Policy != "kvrouter" {
		t.Fatalf("requests did not survive report.json: %+v", back.Requests)
	}
}

// A run's lines have the colour its policy has in the headline charts, whatever the order of
// the per-request data.
func TestRequestChartsUsePolicyColours(t *testing.T) {
	r := liveSample(10) // Policies: kvrouter, round-robin; Requests: round-robin, kvrouter
	var b bytes.Buffer
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	for i, p := range r.Policies {
		line := regexp.MustCompile(`<polyline data-policy="` + p.Policy + `" data-points="\d+" fill="none" stroke="([^"]+)"`).FindStringSubmatch(b.String())
		if line == nil || line[1] != colour(i) {
			t.Fatalf("TTFT line of %s: %v, want colour %s", p.Policy, line, colour(i))
		}
	}
}

func TestNiceStep(t *testing.T) {
	for _, span := range []float64{0.037, 1, 7.3, 242, 999, 12345} {
		step := niceStep(span, 6)
		if n := span / step; n > 6+1e-9 || n < 2 {
			t.Errorf("span %g: step %g gives %.1f intervals, want 2..6", span, step, n)
		}
		m := step / math.Pow(10, math.Floor(math.Log10(step)))
		if math.Abs(m-1) > 1e-9 && math.Abs(m-2) > 1e-9 && math.Abs(m-5) > 1e-9 {
			t.Errorf("span %g: step %g is not 1, 2 or 5 times a power of ten", span, step)
		}
	}
	if niceStep(0, 6) != 1 || niceStep(math.NaN(), 6) != 1 {
		t.Error("an empty span gets step 1")
	}
}
