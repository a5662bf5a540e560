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
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// simulateDemo runs `kvbench simulate` on the demo workload at 100 req/s into out with extra
// flags, and returns its report.json.
func simulateDemo(t *testing.T, out string, flags ...string) []byte {
	t.Helper()
	args := append(flags, "--rates", "100", "--quiet", "--out", out, filepath.Join("..", "..", "bench", "workloads", "demo.yaml"))
	if err := runSimulate(args, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "demo", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The CLI path end to end: a small simulation writes report.json and report.html with one entry
// per policy, and `compare` merges two reports.
func TestSimulateWritesReports(t *testing.T) {
	out := t.TempDir()
	b := simulateDemo(t, out, "--policies", "kvrouter,round-robin", "--requests", "60")
	var r struct {
		Workload string `json:"workload"`
		Policies []struct {
			Policy    string `json:"policy"`
			Completed int    `json:"completed"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Workload != "demo" || len(r.Policies) != 2 || r.Policies[0].Policy != "kvrouter" || r.Policies[1].Completed != 60 {
		t.Fatalf("unexpected report %+v", r)
	}
	if _, err := os.Stat(filepath.Join(out, "demo", "report.html")); err != nil {
		t.Fatal(err)
	}
	rep := filepath.Join(out, "demo", "report.json")
	if err := runCompare([]string{"--out", filepath.Join(out, "cmp"), rep, rep}); err != nil {
		t.Fatal(err)
	}
	if err := runSimulate([]string{"--policies", "nope", "x.yaml"}, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("an unknown policy must be an error")
	}
}

// --seeds reports, per policy and rate, the mean over that many seeds with the throughput's spread.
func TestSimulateSeedsReportsMeans(t *testing.T) {
	out := t.TempDir()
	b := simulateDemo(t, out, "--policies", "kvrouter", "--requests", "40", "--seeds", "3")
	var r struct {
		Seed     uint64   `json:"seed"`
		Seeds    []uint64 `json:"seeds"`
		Policies []struct {
			Output float64            `json:"output_throughput_tok_s"`
			Extra  map[string]float64 `json:"extra"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Seeds) != 3 || r.Seeds[0] != r.Seed || r.Seeds[2] != r.Seed+2 || len(r.Policies) != 1 {
		t.Fatalf("seeds %v (seed %d), %d policies", r.Seeds, r.Seed, len(r.Policies))
	}
	p := r.Policies[0]
	if p.Extra["seeds"] != 3 || !(p.Extra["output_tok_s_min"] <= p.Output && p.Output <= p.Extra["output_tok_s_max"]) ||
		p.Extra["output_tok_s_min"] == p.Extra["output_tok_s_max"] {
		t.Fatalf("mean %.0f outside or without a spread: %v", p.Output, p.Extra)
	}
	if err := runSimulate([]string{"--seeds", "0", "--quiet", "--out", out, filepath.Join("..", "..", "bench", "workloads", "demo.yaml")},
		slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("--seeds 0 must be an error")
	}
}
