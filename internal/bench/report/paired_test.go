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
	"math"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
)

// seeded is a report of one workload whose runs are (policy, rate, seed, goodput, ttft p90).
func seeded(workload string, runs ...SeedRun) *Report {
	return &Report{Workload: workload, Mode: "simulate", Rate: 10, Runs: runs}
}

func run(policy string, rate float64, seed uint64, goodput, ttft float64) SeedRun {
	return SeedRun{Seed: seed, Result: metrics.Result{Policy: policy, Rate: rate, Goodput: goodput, TTFTP90: ttft, ITLP90: 0.02}}
}

func TestComparePairedRatiosSeedBySeed(t *testing.T) {
	// The seeds differ far more than the change does: seed 1 is fast, seed 3 slow. Paired, the
	// change is 10 % faster on two seeds and 5 % slower on one, whatever the seeds' spread.
	before := []*Report{seeded("w",
		run("kvrouter", 10, 1, 100, 1.0), run("kvrouter", 10, 2, 200, 2.0), run("kvrouter", 10, 3, 300, 4.0),
		run("round-robin", 10, 1, 50, 9), // another policy: not compared
		run("kvrouter", 20, 1, 100, 1.0), // no after run at 20: left out
	)}
	after := []*Report{seeded("w",
		run("kvrouter", 10, 1, 100, 0.9), run("kvrouter", 10, 2, 210, 1.8), run("kvrouter", 10, 3, 300, 4.2),
		run("kvrouter", 10, 4, 999, 0.1), // a seed before lacks: left out
		run("round-robin", 10, 1, 500, 1),
	)}
	p, err := ComparePaired(before, after, "kvrouter")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rows) != 1 {
		t.Fatalf("rows: %+v", p.Rows)
	}
	r := p.Rows[0]
	if r.Workload != "w" || r.Rate != 10 || r.Seeds != 3 {
		t.Fatalf("row: %+v", r)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if tt := r.TTFTP90; !near(tt.Median, 0.9) || !near(tt.Min, 0.9) || !near(tt.Max, 1.05) || tt.Better != 2 || tt.Worse != 1 {
		t.Errorf("TTFT p90: %+v", tt)
	}
	// Goodput: 1.0, 1.05, 1.0: one seed better, none worse (equal is neither).
	if g := r.Goodput; !near(g.Median, 1) || !near(g.Max, 1.05) || g.Better != 1 || g.Worse != 0 {
		t.Errorf("goodput: %+v", g)
	}
	var md bytes.Buffer
	if err := WritePairedMarkdown(&md, p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| w | 10 | 3 | 1.000 [1.00–1.05] +1/−0 | 0.900 [0.90–1.05] +2/−1 |") {
		t.Errorf("markdown:\n%s", md.String())
	}
}

func TestComparePairedRefusesRunsWithNothingInCommon(t *testing.T) {
	before := []*Report{seeded("w", run("kvrouter", 10, 1, 100, 1))}
	after := []*Report{seeded("w", run("kvrouter", 10, 2, 100, 1))}
	if _, err := ComparePaired(before, after, "kvrouter"); err == nil {
		t.Fatal("no seed in common: want an error")
	}
	if _, err := ComparePaired(before, before, "dynamo"); err == nil {
		t.Fatal("no run of the policy: want an error")
	}
}
