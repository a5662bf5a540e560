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

package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
	"github.com/kvrouter/kvrouter/internal/bench/report"
)

// handReport is a two-seed report of one workload at rates 1 and 2: kvrouter wins at 1 and
// loses its goodput at 2 (the headline), against dynamo's best variant.
func handReport(name string, kvAt2 float64) *report.Report {
	r := &report.Report{Workload: name, Mode: "simulate", Rate: 2, Seeds: []uint64{1, 2}}
	for p, f := range map[string]string{"kvrouter": "kvrouter", "round-robin": "baseline", "dynamo": "dynamo", "dynamo-queue": "dynamo"} {
		r.SetFamily(p, f)
	}
	add := func(p string, rate float64, g1, g2 float64) {
		for i, g := range []float64{g1, g2} {
			r.Runs = append(r.Runs, report.SeedRun{Seed: uint64(i + 1), Result: metrics.Result{Policy: p, Rate: rate, Goodput: g, ITLP90: 0.02, TTFTP90: 1}})
		}
	}
	add("kvrouter", 1, 100, 110)
	add("round-robin", 1, 50, 50)
	add("dynamo", 1, 90, 100)
	add("dynamo-queue", 1, 100, 104)
	add("kvrouter", 2, kvAt2, kvAt2)
	add("round-robin", 2, 50, 50)
	add("dynamo", 2, 150, 150)
	add("dynamo-queue", 2, 140, 160)
	return r
}

func TestVerdictCommand(t *testing.T) {
	dir, before := t.TempDir(), t.TempDir()
	if err := report.WriteFiles(filepath.Join(dir, "hand"), handReport("hand", 140)); err != nil {
		t.Fatal(err)
	}
	if err := report.WriteFiles(filepath.Join(before, "hand"), handReport("hand", 120)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runVerdict([]string{"-json", "-before", before, dir}, &out); err != nil {
		t.Fatal(err)
	}
	var v report.Verdict
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Rows) != 2 {
		t.Fatalf("rows %+v", v.Rows)
	}
	win, lose := v.Rows[0], v.Rows[1]
	// At rate 1 dynamo-queue's median (102) beats dynamo's (95); kvrouter's is 105.
	if win.BestPeer != "dynamo-queue" || win.Goodput.Median != 105 || win.GoodputMark != report.Pass {
		t.Errorf("rate 1: %+v", win)
	}
	// At 2 both have median 150: the tie goes to the first name; 140 < 0.99 × 150.
	if lose.BestPeer != "dynamo" || lose.GoodputMark != report.Fail || lose.Before == nil || lose.Before.Goodput.Median != 120 {
		t.Errorf("rate 2: %+v (before %+v)", lose, lose.Before)
	}
	// The fail at 2 is behind dynamo on both seeds, paired through report.json.
	lost := report.Count{Pass: 1, Fail: 1, FailEverySeed: 1}
	if v.Summary.Goodput != lost || v.BeforeSummary.Goodput != lost || lose.GoodputPaired != 2 {
		t.Errorf("summary %+v before %+v", v.Summary, v.BeforeSummary)
	}

	out.Reset()
	if err := runVerdict([]string{filepath.Join(dir, "hand", "report.json")}, &out); err != nil {
		t.Fatal(err)
	}
	if md := out.String(); !strings.Contains(md, "| hand | **2** | 2 | 140 | dynamo | 150 | 0.933 | ✗ |") || !strings.Contains(md, "- hand at 2: goodput -6.7 % vs dynamo") {
		t.Errorf("markdown:\n%s", md)
	}
	if err := runVerdict(nil, &out); err == nil {
		t.Error("want an error without a run to judge")
	}
}

// kvrouter run again after a change: -over judges it against the full run's peers, and paired
// compares it with the full run's kvrouter seed by seed.
func TestVerdictOverAndPaired(t *testing.T) {
	full, again := t.TempDir(), t.TempDir()
	if err := report.WriteFiles(filepath.Join(full, "hand"), handReport("hand", 140)); err != nil {
		t.Fatal(err)
	}
	kv := &report.Report{Workload: "hand", Mode: "simulate", Rate: 2, Seeds: []uint64{1, 2}}
	kv.SetFamily("kvrouter", "kvrouter")
	for _, rate := range []float64{1, 2} {
		for seed, g := range []float64{150, 155} {
			kv.Runs = append(kv.Runs, report.SeedRun{Seed: uint64(seed + 1), Result: metrics.Result{Policy: "kvrouter", Rate: rate, Goodput: g, ITLP90: 0.02, TTFTP90: 1}})
		}
	}
	if err := report.WriteFiles(filepath.Join(again, "hand"), kv); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runVerdict([]string{"-json", "-over", again, full}, &out); err != nil {
		t.Fatal(err)
	}
	var v report.Verdict
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Rows) != 2 || v.Rows[1].Goodput.Median != 152.5 || v.Rows[1].GoodputMark != report.Pass {
		t.Fatalf("rows with kvrouter run again: %+v", v.Rows)
	}
	if err := runVerdict([]string{"-json", full, again}, &out); err == nil {
		t.Error("kvrouter in both runs without -over: want an error")
	}

	out.Reset()
	if err := runPaired([]string{full, again}, &out); err != nil {
		t.Fatal(err)
	}
	// At 2: 150/140 and 155/140, both better.
	if md := out.String(); !strings.Contains(md, "| hand | 2 | 2 | 1.089 [1.07–1.11] +2/−0 |") {
		t.Errorf("paired:\n%s", md)
	}
	if err := runPaired([]string{full}, &out); err == nil {
		t.Error("one run: want an error")
	}
}

// The matrix's policy sets: kvrouter and round-robin, then peers only.
func TestPoliciesSets(t *testing.T) {
	var out bytes.Buffer
	if err := runPolicies([]string{"-set", "matrix"}, &out); err != nil {
		t.Fatal(err)
	}
	names := strings.Split(strings.TrimSpace(out.String()), ",")
	if names[0] != "kvrouter" || names[1] != "round-robin" || !slices.Contains(names, "dynamo") || !slices.Contains(names, "llmd-precise") {
		t.Fatalf("matrix set %v", names)
	}
	for _, n := range names[2:] {
		if strings.HasPrefix(n, "kvrouter") || strings.HasPrefix(n, "oracle") || n == "random" || n == "round-robin" || strings.HasSuffix(n, "-pd") {
			t.Errorf("%s is not a peer variant of an aggregated fleet", n)
		}
	}
	out.Reset()
	if err := runPolicies([]string{"-set", "pd-matrix"}, &out); err != nil {
		t.Fatal(err)
	}
	if pd := strings.Split(strings.TrimSpace(out.String()), ","); !slices.Contains(pd, "dynamo-pd") || !slices.Contains(pd, "kvrouter-pd") {
		t.Errorf("pd-matrix set %v", pd)
	}
	if err := runPolicies([]string{"-set", "nope"}, &out); err == nil {
		t.Error("want an error for an unknown set")
	}
}

// simulate --seeds 2 records each seed's run and each policy's family, and verdict reads them.
func TestSimulateSeedsFeedVerdict(t *testing.T) {
	out := t.TempDir()
	b := simulateDemo(t, out, "--policies", "kvrouter,round-robin,dynamo", "--requests", "40", "--seeds", "2")
	var rep report.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 6 || rep.Runs[0].Seed == rep.Runs[3].Seed || rep.Families["round-robin"] == "" {
		t.Fatalf("runs %d, families %v", len(rep.Runs), rep.Families)
	}
	var o bytes.Buffer
	if err := runVerdict([]string{"-json", out}, &o); err != nil {
		t.Fatal(err)
	}
	var v report.Verdict
	if err := json.Unmarshal(o.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Rows) != 1 || v.Rows[0].Seeds != 2 || v.Rows[0].BestPeer != "dynamo" || v.Rows[0].Goodput.N != 2 {
		t.Fatalf("verdict %s", o.String())
	}
}
