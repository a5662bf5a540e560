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
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
)

func sample() *Report {
	mk := func(p string, rate, tput, ttft, hit float64) metrics.Result {
		return metrics.Result{Policy: p, Rate: rate, OutputThroughput: tput, Goodput: tput / 2, TTFTP90: ttft, HitRate: hit, Requests: 10, Completed: 10}
	}
	sweep := []metrics.Result{mk("kvrouter", 1, 100, 0.2, 0.9), mk("round-robin", 1, 90, 0.4, 0.2), mk("kvrouter", 2, 200, 0.3, 0.9), mk("round-robin", 2, 120, 30, 0.2)}
	return &Report{Workload: "w<x>", Mode: "simulate", Rate: 2, SLO: metrics.SLO{TTFT: 1, ITL: 0.1}, Policies: sweep[2:], Sweep: sweep}
}

func TestReportJSONFieldNames(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFiles(dir, sample()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc["workload"] != "w<x>" {
		t.Fatalf("workload = %v", doc["workload"])
	}
	pol := doc["policies"].([]any)[0].(map[string]any)
	for _, f := range []string{"policy", "output_throughput_tok_s", "goodput_tok_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s",
		"itl_p50_s", "e2e_p50_s", "e2e_p99_s", "hit_rate", "preemptions", "imbalance_cov"} {
		if _, ok := pol[f]; !ok {
			t.Errorf("report.json policy entry lacks %q", f)
		}
	}
}

func TestHTMLIsSelfContained(t *testing.T) {
	var b bytes.Buffer
	if err := WriteHTML(&b, sample()); err != nil {
		t.Fatal(err)
	}
	h := b.String()
	for _, bad := range []string{"<script", "<link", "src=\"http", "href=\"http"} {
		if strings.Contains(h, bad) {
			t.Errorf("report.html must not load anything (%q found)", bad)
		}
	}
	if strings.Count(h, "<svg") != 3 || strings.Count(h, "<polyline") != 2 {
		t.Errorf("want 3 charts and one curve per policy")
	}
	if strings.Contains(h, "w<x>") {
		t.Error("the workload name must be escaped")
	}
}

func TestTable(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, sample()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "round-robin") || !strings.Contains(b.String(), "90.0%") {
		t.Fatalf("table:\n%s", b.String())
	}
}
