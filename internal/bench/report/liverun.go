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
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
)

// LiveRun is what a team attaches to a ticket about one `kvbench live` run: where it ran, with
// what, and what it measured. It carries no credential (the target is given without user
// information or query) and no prompt text.
type LiveRun struct {
	Label    string `json:"label"`
	Target   string `json:"target"`
	Model    string `json:"model"`
	Endpoint string `json:"endpoint"`
	// Workload is the workload's name; WorkloadFile and WorkloadSHA256 identify the exact file.
	Workload       string  `json:"workload"`
	WorkloadFile   string  `json:"workload_file"`
	WorkloadSHA256 string  `json:"workload_sha256"`
	Seed           uint64  `json:"seed"`
	Rate           float64 `json:"rate"`
	// Requests is how many requests the run planned; Sent how many reached the server (fewer
	// when the wall bound came first or a conversation stopped at a failed turn).
	Requests  int       `json:"requests"`
	Sent      int       `json:"sent"`
	Start     time.Time `json:"start"`
	WallS     float64   `json:"wall_s"`
	TimeScale float64   `json:"time_scale"`
	Version   string    `json:"kvbench_version"`
	Command   string    `json:"command"`
	// Options lists the request options that change what the server does (ignore_eos, usage
	// reporting, token ids, caps and timeouts), as flag=value.
	Options      []string        `json:"options"`
	Serving      metrics.Serving `json:"serving"`
	HitRate      float64         `json:"hit_rate"`
	TokenSources map[string]int  `json:"output_token_sources"`
	// FinishReasons counts completed requests by finish reason ("length", "stop", ...).
	FinishReasons map[string]int `json:"finish_reasons,omitempty"`
	Errors        []RunError     `json:"errors,omitempty"`
}

// RunError is one kind of failure and how often it happened.
type RunError struct {
	Message      string `json:"message"`
	Count        int    `json:"count"`
	FirstRequest int    `json:"first_request"`
}

// maxErrorKinds bounds the failure list of report.md; report.json's live.json keeps them all.
const maxErrorKinds = 10

// WriteLiveMarkdown writes the run as Markdown.
func WriteLiveMarkdown(w io.Writer, r *LiveRun) error {
	s := &r.Serving
	fmt.Fprintf(w, "# kvbench live: %s\n\n", mdEscape(r.Label))
	fmt.Fprintln(w, "| | |\n|---|---|")
	row := func(k, v string) { fmt.Fprintf(w, "| %s | %s |\n", k, mdEscape(v)) }
	row("target", r.Target)
	row("model", r.Model)
	row("endpoint", r.Endpoint)
	row("workload", fmt.Sprintf("%s (%s, sha256 %s, seed %d)", r.Workload, r.WorkloadFile, r.WorkloadSHA256, r.Seed))
	row("rate", fmt.Sprintf("%g req/s (open loop)", r.Rate))
	sent := fmt.Sprintf("%d sent", r.Sent)
	if r.Sent != r.Requests {
		sent += fmt.Sprintf(" of %d planned", r.Requests)
	}
	row("requests", fmt.Sprintf("%s, %d completed, %d failed", sent, s.Completed, s.Failed))
	row("start", r.Start.UTC().Format(time.RFC3339))
	row("duration", fmt.Sprintf("%.2f s wall", r.WallS))
	if r.TimeScale != 1 && r.TimeScale > 0 {
		row("time scale", fmt.Sprintf("%g (vllm-sim target: figures are simulated seconds)", r.TimeScale))
	}
	row("kvbench", r.Version)
	row("options", strings.Join(r.Options, " "))
	row("output tokens counted from", sources(r.TokenSources))
	row("finish reasons", sources(r.FinishReasons))
	row("command", r.Command)

	fmt.Fprintln(w, "\n## Throughput\n\n| | |\n|---|---:|")
	fmt.Fprintf(w, "| benchmark duration (s) | %.2f |\n", s.DurationS)
	fmt.Fprintf(w, "| total input tokens | %d |\n| total generated tokens | %d |\n", s.InputTokens, s.OutputTokens)
	fmt.Fprintf(w, "| request throughput (req/s) | %.2f |\n", s.RequestThroughput)
	fmt.Fprintf(w, "| output token throughput (tok/s) | %.2f |\n", s.OutputThroughput)
	fmt.Fprintf(w, "| total token throughput (tok/s) | %.2f |\n", s.TotalThroughput)
	fmt.Fprintf(w, "| prefix cache hit rate (server usage) | %.1f%% |\n", 100*r.HitRate)

	fmt.Fprintln(w, "\n## Latency (ms)\n\n| metric | mean | median | p90 | p99 | n |\n|---|---:|---:|---:|---:|---:|")
	for _, m := range []struct {
		name string
		d    metrics.Dist
	}{{"TTFT", s.TTFT}, {"TPOT (excl. 1st token)", s.TPOT}, {"ITL", s.ITL}, {"E2EL", s.E2E}} {
		fmt.Fprintf(w, "| %s | %.2f | %.2f | %.2f | %.2f | %d |\n", m.name, 1000*m.d.Mean, 1000*m.d.Median, 1000*m.d.P90, 1000*m.d.P99, m.d.N)
	}

	fmt.Fprintln(w, "\n## SLOs and goodput")
	if s.SLO.Empty() {
		fmt.Fprintln(w, "\nNo objective given (`--goodput ttft:MS tpot:MS e2el:MS`).")
	} else {
		fmt.Fprintf(w, "\nObjective `%s` (ms, every one must hold): %d of %d completed requests met it; request goodput %.2f req/s.\n",
			s.SLO.String(), s.GoodRequests, s.Completed, s.RequestGoodput)
	}

	fmt.Fprintln(w, "\n## Failures")
	if len(r.Errors) == 0 {
		fmt.Fprintln(w, "\nNone.")
		return nil
	}
	errs := append([]RunError(nil), r.Errors...)
	sort.SliceStable(errs, func(a, b int) bool { return errs[a].Count > errs[b].Count })
	fmt.Fprintln(w, "\n| count | first request | error |\n|---:|---:|---|")
	for i, e := range errs {
		if i == maxErrorKinds {
			fmt.Fprintf(w, "\n%d more kinds of error in live.json.\n", len(errs)-maxErrorKinds)
			break
		}
		fmt.Fprintf(w, "| %d | %d | %s |\n", e.Count, e.FirstRequest, mdEscape(e.Message))
	}
	return nil
}

func sources(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		name := k
		if name == "" {
			name = "none given"
		}
		parts = append(parts, fmt.Sprintf("%s (%d requests)", name, m[k]))
	}
	return strings.Join(parts, ", ")
}

// mdEscape keeps a value inside its table cell.
func mdEscape(s string) string {
	s = strings.NewReplacer("|", `\|`, "\r", " ", "\n", " ").Replace(s)
	return s
}

// WriteLiveFiles writes report.md and live.json (the same facts, for tools) into dir.
func WriteLiveFiles(dir string, r *LiveRun) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	if err := WriteLiveMarkdown(&b, r); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "live.json"), append(j, '\n'), 0o644)
}
