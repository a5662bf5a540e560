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
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
)

// fig is one policy's per-seed figures at one rate: goodput, ITL p90, TTFT p90 (one value per
// seed; a single value is repeated for every seed).
type fig struct {
	policy           string
	rate             float64
	goodput, itl, tt []float64
}

func at(v []float64, i int) float64 {
	if len(v) == 1 {
		return v[0]
	}
	return v[i]
}

// matrixReport builds a simulate report with nSeeds per-seed runs per figure.
func matrixReport(name string, headline float64, nSeeds int, fams map[string]string, figs ...fig) *Report {
	r := &Report{Workload: name, Mode: "simulate", Seed: 42, Rate: headline}
	for p, f := range fams {
		r.SetFamily(p, f)
	}
	for i := range nSeeds {
		r.Seeds = append(r.Seeds, 42+uint64(i))
	}
	for _, f := range figs {
		var runs []metrics.Result
		for i := range nSeeds {
			g := at(f.goodput, i)
			res := metrics.Result{Policy: f.policy, Rate: f.rate, Goodput: g, OutputThroughput: g, ITLP90: at(f.itl, i), TTFTP90: at(f.tt, i)}
			runs = append(runs, res)
			r.Runs = append(r.Runs, SeedRun{Seed: 42 + uint64(i), Result: res})
		}
		r.Sweep = append(r.Sweep, metrics.Mean(runs))
	}
	return r
}

var families = map[string]string{
	"kvrouter": "kvrouter", "kvrouter-prefill": "kvrouter", "round-robin": "baseline", "oracle": "oracle",
	"dynamo": "dynamo", "dynamo-queue": "dynamo", "llmd-precise": "llm-d", "llmd-precise-fc": "llm-d",
}

// alpha: at rate 5 kvrouter passes every criterion; at rate 10 (the headline) it fails every one.
func alpha(kvrouterGoodputAt10 float64) *Report {
	v := func(x ...float64) []float64 { return x }
	return matrixReport("alpha", 10, 3, families,
		// Rate 5. kvrouter's median goodput is 100 (seeds 120, 90, 100: odd count).
		fig{"kvrouter", 5, v(120, 90, 100), v(0.030), v(1.0)},
		// kvrouter's own variants and the oracle are not peers, however good.
		fig{"kvrouter-prefill", 5, v(500), v(0.001), v(0.01)},
		fig{"oracle", 5, v(500), v(0.001), v(0.01)},
		fig{"round-robin", 5, v(50), v(0.020), v(0.5)},
		// dynamo has the best single seed (300) but the lower median (97): the best variant of
		// the dynamo family, and the best peer, is dynamo-queue (99).
		fig{"dynamo", 5, v(95, 300, 97), v(0.029), v(1.3)},
		fig{"dynamo-queue", 5, v(99), v(0.028), v(1.2)},
		// llmd-precise finished nothing in time: its low TTFT is not a reference, and its ITL
		// p90 of 0 (missing) is not the lowest.
		fig{"llmd-precise", 5, v(0), v(0), v(0.1)},
		fig{"llmd-precise-fc", 5, v(98), v(0.040), v(1.4)},

		fig{"kvrouter", 10, v(kvrouterGoodputAt10), v(0.050), v(2.0)},
		fig{"round-robin", 10, v(40), v(0.020), v(5)},
		fig{"dynamo", 10, v(85), v(0.030), v(1.5)},
		fig{"llmd-precise", 10, v(90, 91, 89), v(0.035), v(1.8)},
	)
}

func TestStatOfMedian(t *testing.T) {
	if s := StatOf([]float64{3, 1, 2}); s != (Stat{Median: 2, Min: 1, Max: 3, N: 3}) {
		t.Errorf("odd: %+v", s)
	}
	if s := StatOf([]float64{4, 1, 3, 2}); s != (Stat{Median: 2.5, Min: 1, Max: 4, N: 4}) {
		t.Errorf("even: %+v", s)
	}
	if s := StatOf(nil); s != (Stat{}) {
		t.Errorf("empty: %+v", s)
	}
}

func TestVerdictRows(t *testing.T) {
	v := func(x ...float64) []float64 { return x }
	// shared-prefix with two seeds (an even count: the median is the mean of the two).
	sp := matrixReport("shared-prefix", 40, 2, families,
		fig{"kvrouter", 40, v(200, 220), v(0.02), v(1)},
		fig{"round-robin", 40, v(90, 110), v(0.02), v(3)},
		fig{"dynamo", 40, v(205, 215), v(0.02), v(1)},
		fig{"kvrouter", 60, v(300, 320), v(0.02), v(1)},
		fig{"round-robin", 60, v(100, 200), v(0.02), v(3)},
		fig{"dynamo", 60, v(300), v(0.02), v(1)},
	)
	verdict, err := ComputeVerdict([]*Report{sp, alpha(80)}, nil, VerdictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(verdict.Rows) != 4 {
		t.Fatalf("want 4 rows (alpha 5, 10, shared-prefix 40, 60), got %+v", verdict.Rows)
	}
	pass := verdict.Rows[0]
	if pass.Workload != "alpha" || pass.Rate != 5 || pass.Headline || pass.Seeds != 3 {
		t.Fatalf("row 0: %+v", pass)
	}
	if pass.Goodput != (Stat{Median: 100, Min: 90, Max: 120, N: 3}) {
		t.Errorf("kvrouter goodput %+v, want median 100 [90–120]", pass.Goodput)
	}
	if pass.BestPeer != "dynamo-queue" || pass.BestFamily != "dynamo" || pass.PeerGoodput.Median != 99 {
		t.Errorf("best peer %s (%s) %v, want dynamo-queue (dynamo) 99", pass.BestPeer, pass.BestFamily, pass.PeerGoodput)
	}
	if len(pass.Families) != 2 || pass.Families[0].Policy != "dynamo-queue" || pass.Families[1].Policy != "llmd-precise-fc" {
		t.Errorf("family bests %+v, want dynamo-queue and llmd-precise-fc", pass.Families)
	}
	if pass.GoodputMark != Pass || pass.ITL.Mark != Pass || pass.TTFT.Mark != Pass || len(pass.Fails()) != 0 {
		t.Errorf("row 0 marks %s %s %s, want all pass", pass.GoodputMark, pass.ITL.Mark, pass.TTFT.Mark)
	}
	if pass.ITL.Peer != "dynamo-queue" || pass.ITL.Best.Median != 0.028 {
		t.Errorf("ITL reference %s %v, want dynamo-queue 0.028", pass.ITL.Peer, pass.ITL.Best)
	}
	if pass.TTFT.Peer != "dynamo-queue" || pass.TTFT.Best.Median != 1.2 {
		t.Errorf("TTFT reference %s %v, want dynamo-queue 1.2 (llmd-precise has no goodput)", pass.TTFT.Peer, pass.TTFT.Best)
	}
	if pass.VsBaseline != 2 {
		t.Errorf("× round-robin %v, want 2", pass.VsBaseline)
	}

	fail := verdict.Rows[1]
	if fail.Rate != 10 || !fail.Headline || fail.BestPeer != "llmd-precise" || fail.PeerGoodput.Median != 90 {
		t.Fatalf("row 1: %+v", fail)
	}
	if fail.GoodputMark != Fail || fail.ITL.Mark != Fail || fail.TTFT.Mark != Fail {
		t.Errorf("row 1 marks %s %s %s, want all fail", fail.GoodputMark, fail.ITL.Mark, fail.TTFT.Mark)
	}
	if fail.ITL.Peer != "dynamo" || math.Abs(fail.ITL.Ratio-0.05/0.03) > 1e-9 || fail.TTFT.Peer != "dynamo" {
		t.Errorf("row 1 references: ITL %+v TTFT %+v", fail.ITL, fail.TTFT)
	}

	// The even seed count: kvrouter 210 (200, 220), round-robin 100 (90, 110) at the headline.
	if len(verdict.SharedPrefix) != 2 {
		t.Fatalf("shared-prefix ratios %+v", verdict.SharedPrefix)
	}
	if s := verdict.SharedPrefix[0]; s.Rate != 40 || !s.Headline || s.KVRouter != 210 || s.RoundRobin != 100 || s.Mark != Pass {
		t.Errorf("shared-prefix at 40: %+v, want 210/100 = 2.1 pass", s)
	}
	if s := verdict.SharedPrefix[1]; s.Ratio != 310.0/150 || s.Mark != Fail {
		t.Errorf("shared-prefix at 60: %+v, want 310/150 fail", s)
	}
	sum := verdict.Summary
	behindEverySeed := Count{Pass: 3, Fail: 1, FailEverySeed: 1}
	if sum.Rows != 4 || sum.Goodput != behindEverySeed || sum.ITL != behindEverySeed ||
		sum.TTFT != behindEverySeed || sum.AllPass != 3 {
		t.Errorf("summary %+v", sum)
	}
}

// With -before, each row shows the earlier kvrouter goodput and marks, and the summary both.
func TestVerdictBefore(t *testing.T) {
	v, err := ComputeVerdict([]*Report{alpha(95)}, []*Report{alpha(60)}, VerdictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := v.Rows[1]
	if r.Before == nil || r.Before.Goodput.Median != 60 || r.Before.GoodputMark != Fail || r.GoodputMark != Pass {
		t.Fatalf("before %+v, after %s", r.Before, r.GoodputMark)
	}
	if v.BeforeSummary == nil || v.BeforeSummary.Goodput.Fail != 1 || v.Summary.Goodput.Fail != 0 {
		t.Fatalf("summaries %+v / %+v", v.Summary, v.BeforeSummary)
	}
	var b bytes.Buffer
	if err := WriteVerdictMarkdown(&b, v); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"| alpha | **10** | 3 | 95 | llmd-precise | 90 [89–91] | 1.056 | ✓ | 50.0ms | 30.0ms (dynamo) | 1.667 | ✗ |",
		"| 60 | ✗✗✗ |",
		"| goodput ≥ best peer − 1 % | 2 (before 1) | 0 (before 1) |",
		"- alpha at 10: ITL p90 1.67× dynamo (behind on 3 of 3 seeds); TTFT p90 1.33× dynamo (behind on 3 of 3 seeds)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// Every policy is held to kvrouter's bar against all the others: a row no policy meets is told
// apart from one a peer meets, and a fail inside the seeds' ranges is counted as such.
func TestVerdictMetByAndOverlap(t *testing.T) {
	v := func(x ...float64) []float64 { return x }
	beta := matrixReport("beta", 1, 3, families,
		// dynamo meets every criterion against kvrouter; kvrouter misses ITL (far, on every
		// seed) and TTFT (inside the seeds' ranges, ahead on the first seed).
		fig{"kvrouter", 1, v(100), v(0.050), v(0.85, 1.0, 1.1)},
		fig{"dynamo", 1, v(100), v(0.020), v(0.9, 0.85, 0.95)},
		fig{"round-robin", 1, v(200), v(0.001), v(0.01)}, // a baseline is not held to the bar
	)
	verdict, err := ComputeVerdict([]*Report{alpha(80), beta}, nil, VerdictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		// At 5 dynamo-queue is the best peer on every criterion but kvrouter's TTFT is lower.
		"alpha 5": {"kvrouter"},
		// At 10 llmd-precise has the best goodput and misses ITL; nobody else reaches its goodput.
		"alpha 10": {},
		"beta 1":   {"dynamo"},
	}
	for _, r := range verdict.Rows {
		key := fmt.Sprintf("%s %g", r.Workload, r.Rate)
		if !slices.Equal(r.MetBy, want[key]) {
			t.Errorf("%s: met by %q, want %q", key, r.MetBy, want[key])
		}
	}
	b := verdict.Rows[2]
	if b.ITL.Mark != Fail || b.ITL.Overlap || b.ITL.Behind != 3 || b.ITL.Paired != 3 ||
		b.TTFT.Mark != Fail || !b.TTFT.Overlap || b.TTFT.Behind != 2 || b.TTFT.Paired != 3 {
		t.Errorf("beta: ITL %+v, TTFT %+v", b.ITL, b.TTFT)
	}
	sum := verdict.Summary
	if sum.Unmet != 1 || !maps.Equal(sum.MetBy, map[string]int{"kvrouter": 1, "dynamo": 1}) ||
		sum.TTFT != (Count{Pass: 1, Fail: 2, FailOverlap: 1, FailEverySeed: 1}) ||
		sum.ITL != (Count{Pass: 1, Fail: 2, FailEverySeed: 2}) {
		t.Errorf("summary %+v", sum)
	}
	var md bytes.Buffer
	if err := WriteVerdictMarkdown(&md, verdict); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"goodput 0 of 1, ITL p90 0 of 2, TTFT p90 1 of 2;",
		"holds seed by seed, however small, and unlikely to be chance): goodput 1, ITL p90 2, TTFT p90 1.",
		"rows of 3 on which each meets every criterion: dynamo 1, kvrouter 1; rows on which none does: 1.",
		"- alpha at 10: goodput -11.1 % vs llmd-precise (behind on 3 of 3 seeds); ITL p90 1.67× dynamo (behind on 3 of 3 seeds); " +
			"TTFT p90 1.33× dynamo (behind on 3 of 3 seeds) — no policy meets every criterion here",
		"- beta at 1: ITL p90 2.50× dynamo (behind on 3 of 3 seeds); TTFT p90 1.11× dynamo (behind on 2 of 3 seeds, ranges overlap)\n",
	} {
		if !strings.Contains(md.String(), line) {
			t.Errorf("markdown lacks %q:\n%s", line, md.String())
		}
	}

	// A report without per-seed runs (one seed, or an older report) pairs nothing.
	beta.Runs = nil
	unpaired, err := ComputeVerdict([]*Report{beta}, nil, VerdictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := unpaired.Rows[0]; r.ITL.Mark != Fail || r.ITL.Paired != 0 || r.ITL.Behind != 0 || r.TTFT.Paired != 0 {
		t.Errorf("unseeded: ITL %+v, TTFT %+v", r.ITL, r.TTFT)
	}
}

// A report written before families were recorded: the baselines and kvrouter's variants are
// still not peers, and a resolver (the peers package, in kvbench) names the real families.
func TestFamilyOfWithoutRecord(t *testing.T) {
	r := &Report{}
	for p, want := range map[string]string{"round-robin": FamilyBaseline, "kvrouter-decode": FamilyKVRouter, "oracle-bounded": FamilyOracle, "dynamo": "dynamo"} {
		if got := FamilyOf(r, p, nil); got != want {
			t.Errorf("FamilyOf(%s) = %s, want %s", p, got, want)
		}
	}
	if got := FamilyOf(r, "dynamo-queue", func(string) string { return "dynamo" }); got != "dynamo" {
		t.Errorf("resolver ignored: %s", got)
	}
}

// The same policy and rate in two reports of one workload is a mistake (two runs mixed up), not
// more seeds.
func TestVerdictRejectsDuplicates(t *testing.T) {
	if _, err := ComputeVerdict([]*Report{alpha(80), alpha(80)}, nil, VerdictOptions{}); err == nil {
		t.Fatal("want an error for a workload given twice")
	}
}

// Reports round-trip through report.json with their per-seed runs and families.
func TestLoadReportsKeepsRuns(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFiles(filepath.Join(dir, "alpha"), alpha(80)); err != nil {
		t.Fatal(err)
	}
	rs, err := LoadReports([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || len(rs[0].Runs) != 3*12 || rs[0].Runs[1].Seed != 43 || rs[0].Runs[1].Goodput != 90 || rs[0].Families["dynamo-queue"] != "dynamo" {
		t.Fatalf("loaded %+v", rs)
	}
}

// Shed requests fail in goodput and are outside the TTFT p90 of the served ones, so the verdict
// says where kvrouter (and its TTFT reference) shed, and how much.
func TestVerdictReportsShedShare(t *testing.T) {
	v := func(x ...float64) []float64 { return x }
	r := matrixReport("overload", 60, 3, families,
		fig{"kvrouter", 60, v(200), v(0.05), v(5)},
		fig{"llmd-precise-fc", 60, v(190), v(0.05), v(60)},
		fig{"kvrouter", 10, v(100), v(0.02), v(1)},
		fig{"llmd-precise-fc", 10, v(100), v(0.02), v(1)},
	)
	shed := map[string][]int{"kvrouter": {100, 300, 200}, "llmd-precise-fc": {50, 50, 50}}
	for i := range r.Runs {
		run := &r.Runs[i].Result
		run.Requests = 1000
		if run.Rate == 60 {
			run.Shed = shed[run.Policy][r.Runs[i].Seed-42]
		}
	}
	verdict, err := ComputeVerdict([]*Report{r}, nil, VerdictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(verdict.Rows) != 2 || verdict.Rows[0].Shed != 0 || verdict.Rows[1].Shed != 0.2 || verdict.Rows[1].TTFTPeerShed != 0.05 {
		t.Fatalf("rows %+v, want no shed at 10, kvrouter 20 %% and its reference 5 %% at 60", verdict.Rows)
	}
	var b strings.Builder
	if err := WriteVerdictMarkdown(&b, verdict); err != nil {
		t.Fatal(err)
	}
	if want := "overload at 60: 20.0 % (TTFT reference llmd-precise-fc: 5.0 %)."; !strings.Contains(b.String(), want) {
		t.Fatalf("markdown lacks %q:\n%s", want, b.String())
	}
	if strings.Contains(b.String(), "overload at 10:") {
		t.Fatalf("a row without sheds is listed:\n%s", b.String())
	}
}

// The shared-prefix line says what bounds the ratio where the runs carry it: kvrouter's output
// had its engines all finished together, and its hit rate against the workload's ceiling.
func TestVerdictSharedPrefixLimits(t *testing.T) {
	v := func(x ...float64) []float64 { return x }
	build := func(withLimits bool) *Report {
		r := matrixReport("shared-prefix", 40, 3, families,
			fig{"kvrouter", 40, v(180, 200, 190), v(0.02), v(1)},
			fig{"round-robin", 40, v(100), v(0.02), v(3)},
		)
		// kvrouter's runs lasted 100 s; evenly ended they would have lasted 80, 90 and 95 s.
		balanced := []float64{80, 90, 95}
		for i := range r.Runs {
			run := &r.Runs[i].Result
			if run.Policy != "kvrouter" || !withLimits {
				continue
			}
			k := r.Runs[i].Seed - 42
			run.DurationS, run.BalancedDurationS = 100, balanced[k]
			run.HitRate = []float64{0.88, 0.89, 0.87}[k]
			run.Extra = map[string]float64{"hit_rate_ceiling": []float64{0.90, 0.91, 0.89}[k]}
		}
		return r
	}
	verdict, err := ComputeVerdict([]*Report{build(true)}, nil, VerdictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sp := verdict.SharedPrefix[0]
	// Balanced outputs per seed: 180·100/80 = 225, 200·100/90 ≈ 222.2, 190·100/95 = 200; the
	// median over round-robin's 100.
	if want := 20000.0 / 90 / 100; math.Abs(sp.BalancedRatio-want) > 1e-9 || sp.Ratio != 1.9 {
		t.Errorf("ratio %v, balanced %v; want 1.9 and %v", sp.Ratio, sp.BalancedRatio, want)
	}
	if sp.HitRate != 0.88 || sp.HitCeiling != 0.90 {
		t.Errorf("hit rate %v of %v, want the medians 0.88 of 0.90", sp.HitRate, sp.HitCeiling)
	}
	var b strings.Builder
	if err := WriteVerdictMarkdown(&b, verdict); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"each at the output rate it kept (round-robin's runs as they were): 40 QPS 2.22×.", "kvrouter's hit rate against the most any placement could serve from cache: 40 QPS 0.880 of 0.900."} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}

	old, err := ComputeVerdict([]*Report{build(false)}, nil, VerdictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sp := old.SharedPrefix[0]; sp.BalancedRatio != 0 || sp.HitCeiling != 0 {
		t.Errorf("runs without the figures: %+v, want no balanced ratio and no ceiling", sp)
	}
	b.Reset()
	if err := WriteVerdictMarkdown(&b, old); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "finished together") || strings.Contains(b.String(), "serve from cache") {
		t.Errorf("runs without the figures still get the sentences:\n%s", b.String())
	}
}
