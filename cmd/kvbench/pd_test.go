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
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/bench/report"
)

// A P/D workload end to end: the peers' P/D policies split the fleet, the aggregated policy runs
// it whole, and the table shows the split share.
func TestSimulatePDWorkload(t *testing.T) {
	out := t.TempDir()
	args := []string{"--policies", "dynamo-pd,prodstack-pd,round-robin", "--rates", "2", "--requests", "30", "--quiet", "--out", out,
		filepath.Join("..", "..", "bench", "workloads", "pd-long-prompt.yaml")}
	if err := runSimulate(args, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "pd-long-prompt", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r report.Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Policies) != 3 || !strings.Contains(r.Fleet, "2 prefill + 2 decode over rdma") {
		t.Fatalf("report fleet %q with %d policies", r.Fleet, len(r.Policies))
	}
	for _, p := range r.Policies {
		want := 1.0
		if p.Policy == "round-robin" {
			want = 0
		}
		if p.Completed != 30 || p.Extra["pd_split_share"] != want {
			t.Fatalf("%s: %d/30 done, split share %v (want %v)", p.Policy, p.Completed, p.Extra["pd_split_share"], want)
		}
	}
	var tbl bytes.Buffer
	if err := report.WriteTable(&tbl, &r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tbl.String(), "disaggregated prefill/decode") || !strings.Contains(tbl.String(), "100%") {
		t.Fatalf("the table shows no split share:\n%s", tbl.String())
	}
}
