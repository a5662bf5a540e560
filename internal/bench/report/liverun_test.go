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
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
)

func TestLiveMarkdown(t *testing.T) {
	recs := []metrics.Record{
		{Arrival: 0, FirstToken: 0.1, Finish: 1.1, PromptTokens: 10, OutputTokens: 11},
		{Arrival: 1, FirstToken: 1.3, Finish: 3.3, PromptTokens: 10, OutputTokens: 21},
		{Arrival: 2, Failed: true},
	}
	slo := metrics.GoodputSLO{TTFT: 0.2}
	run := &LiveRun{Label: "a|b", Target: "https://h:8443", Model: "m", Endpoint: "chat", Workload: "w", WorkloadFile: "w.yaml",
		WorkloadSHA256: "abc", Rate: 2, Requests: 4, Sent: 3, Start: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), WallS: 4, TimeScale: 1,
		Version: "v0 commit 123", Command: "kvbench live", Options: []string{"ignore-eos=false"},
		Serving: metrics.SummarizeServing(recs, nil, 4, slo), TokenSources: map[string]int{"usage": 1, "chunks": 1}}
	for i := range 12 {
		run.Errors = append(run.Errors, RunError{Message: fmt.Sprintf("HTTP 5%02d: boom\nline", i), Count: i + 1, FirstRequest: i})
	}
	var b strings.Builder
	if err := WriteLiveMarkdown(&b, run); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"# kvbench live: a\\|b", "| start | 2026-12-02T10:00:00Z |", "| TTFT | 200.00 | 200.00 |",
		"| TPOT (excl. 1st token) | 100.00 | 100.00 |", "Objective `ttft:200`", "1 of 2 completed requests met it",
		"| request throughput (req/s) | 0.50 |", "chunks (1 requests), usage (1 requests)",
		"| 12 | 11 | HTTP 511: boom line |", "2 more kinds of error",
		// One request was never sent (the wall bound came first): it is not counted as sent.
		"| requests | 3 sent of 4 planned, 2 completed, 1 failed |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in\n%s", want, md)
		}
	}
	if strings.Contains(md, "HTTP 500: boom") {
		t.Error("the least frequent errors beyond the cap must be left to live.json")
	}
	dir := t.TempDir()
	if err := WriteLiveFiles(dir, run); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"report.md", "live.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	run.Serving.SLO, run.Errors = metrics.GoodputSLO{}, nil
	b.Reset()
	_ = WriteLiveMarkdown(&b, run)
	if !strings.Contains(b.String(), "No objective given") || !strings.Contains(b.String(), "None.") {
		t.Fatalf("%s", b.String())
	}
	run.Requests = 3
	b.Reset()
	_ = WriteLiveMarkdown(&b, run)
	if !strings.Contains(b.String(), "| requests | 3 sent, 2 completed, 1 failed |") {
		t.Fatalf("%s", b.String())
	}
}
