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
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench/live"
	"github.com/kvrouter/kvrouter/internal/bench/metrics"
	"github.com/kvrouter/kvrouter/internal/bench/report"
	"github.com/kvrouter/kvrouter/internal/bench/workload"
)

// goodputFlag collects --goodput objectives (repeatable, "ttft:500 tpot:50" or one per flag).
type goodputFlag struct {
	slo metrics.GoodputSLO
	set bool
}

func (g *goodputFlag) String() string { return g.slo.String() }

func (g *goodputFlag) Set(v string) error {
	g.set = true
	return metrics.ParseGoodput(&g.slo, v)
}

func runLive(args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("live", flag.ContinueOnError)
	target := fs.String("target", "", "base URL of the router, engine or OpenAI-compatible server (http:// or https://), e.g. http://127.0.0.1:8080")
	apiKey := fs.String("api-key", "", "API key sent as \"Authorization: Bearer KEY\" (default: $KVBENCH_API_KEY, not $OPENAI_API_KEY: give --api-key \"$OPENAI_API_KEY\" to send that one); never logged or reported")
	endpoint := fs.String("endpoint", "completions", "API to drive: completions (/v1/completions) or chat (/v1/chat/completions)")
	wl := fs.String("workload", "", "workload YAML file")
	label := fs.String("label", "target", "name of what is measured (the policy column of the report)")
	model := fs.String("model", "", "model name to send (default: the target's first /v1/models entry)")
	rate := fs.Float64("rate", 0, "request rate (default: the workload's primary rate)")
	requests := fs.Int("requests", 0, "cap on requests (default: the workload's load.requests)")
	duration := fs.Float64("duration", 0, "seconds of arrivals (default: the workload's load.duration)")
	maxWall := fs.Duration("max-wall", 5*time.Minute, "hard wall-clock bound of the run; requests still open then fail")
	reqTimeout := fs.Duration("request-timeout", 2*time.Minute, "bound of one request, from sending it to the end of its stream")
	maxInFlight := fs.Int("max-in-flight", 0, "cap on requests awaiting an answer; a request due at the cap waits and is timed from when it is sent (0: no cap)")
	ignoreEOS := fs.Bool("ignore-eos", false, "send ignore_eos (vLLM, SGLang) so that answers run to max_tokens; real servers stop at EOS without it")
	tokenIDs := fs.Bool("return-token-ids", false, "send vLLM's return_token_ids: output is counted from the streamed token ids when the server sends no usage")
	usage := fs.String("usage", "final", "usage reporting to ask for: final (stream_options.include_usage), continuous (vLLM's continuous_usage_stats too) or none")
	var goodput goodputFlag
	fs.Var(&goodput, "goodput", "per-request objectives as vllm bench serve takes them, KEY:MS for ttft, tpot, e2el (repeatable; default: the workload's TTFT and ITL SLO as ttft and tpot)")
	progress := fs.String("progress", "auto", "progress on stderr: auto (bar on a terminal, else lines), bar, lines or none")
	timeScale := fs.Float64("time-scale", 1, "the vllm-sim target's --time-scale (figures are reported in simulated seconds)")
	epHeader := fs.String("endpoint-header", "X-Kvrouter-Endpoint", "response header naming the serving engine, if the target sets one")
	traces := tracesFlag(fs)
	out := fs.String("out", "out/live", "output directory for report.json, report.html, report.md and live.json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *target == "" || *wl == "" {
		return errors.New("live: --target and --workload are required")
	}
	if err := live.CheckTarget(*target); err != nil {
		return err
	}
	ep, err := live.ParseEndpoint(*endpoint)
	if err != nil {
		return err
	}
	um, err := live.ParseUsageMode(*usage)
	if err != nil {
		return err
	}
	pm, err := live.ParseProgressMode(*progress)
	if err != nil {
		return err
	}
	if *maxWall <= 0 || *reqTimeout <= 0 {
		return errors.New("live: --max-wall and --request-timeout must be positive: a run is always bounded")
	}
	if *maxInFlight < 0 {
		return errors.New("live: --max-in-flight must be 0 (no cap) or more")
	}
	key := *apiKey
	if key == "" {
		// A kvbench variable only: $OPENAI_API_KEY, set in many shells for the hosted API, would
		// otherwise reach any server benchmarked, a third party's included.
		key = os.Getenv("KVBENCH_API_KEY")
	}
	wlBytes, err := os.ReadFile(*wl)
	if err != nil {
		return err
	}
	spec, err := workload.LoadFile(*wl)
	if err != nil {
		return err
	}
	r := spec.PrimaryRate()
	if *rate > 0 {
		r = *rate
	}
	if *requests > 0 {
		spec.Load.Requests = *requests
	}
	if *duration > 0 {
		spec.Load.Duration = *duration
	}
	reqs, err := workload.Generate(spec, r, workload.Options{TracesDir: tracesDir(fs, *traces, *wl), MaxPromptTokens: spec.Fleet.MaxModelLen})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	slo := metrics.SLO{TTFT: spec.SLO.TTFTSeconds, ITL: spec.SLO.ITLSeconds}
	if !goodput.set {
		// The workload's ITL objective is on the mean inter-token time of a request, which is
		// vllm bench serve's TPOT.
		goodput.slo = metrics.GoodputSLO{TTFT: spec.SLO.TTFTSeconds, TPOT: spec.SLO.ITLSeconds}
	}
	where := live.Redact(*target)
	command := "kvbench " + strings.Join(append([]string{"live"}, redactArgs(args)...), " ")
	log.Info("live run", "target", where, "endpoint", ep, "label", *label, "requests", len(reqs), "rate", r,
		"api_key", key != "", "ignore_eos", *ignoreEOS)
	outcome, err := live.RunDetailed(ctx, live.Config{
		Target: *target, APIKey: key, Endpoint: ep, Model: *model, Requests: reqs, MaxDuration: *maxWall,
		MaxInFlight: *maxInFlight, RequestTimeout: *reqTimeout, IgnoreEOS: *ignoreEOS, ReturnTokenIDs: *tokenIDs,
		Usage: um, TimeScale: *timeScale, EndpointHeader: *epHeader, SLO: slo, Goodput: goodput.slo, Log: log,
		Progress: live.NewProgress(os.Stderr, pm, isTerminal(os.Stderr), 5*time.Second),
	})
	if outcome == nil {
		return err
	}
	res := outcome.Result
	res.Policy, res.Rate = *label, r
	rep := &report.Report{
		Workload: spec.Name, Description: spec.Description, Mode: "live", Seed: spec.Seed,
		Command: command, Fleet: "live target " + where, SLO: slo, Rate: r,
		Policies: []metrics.Result{res}, Sweep: []metrics.Result{res},
		Requests: []report.RunRequests{report.RequestsOf(*label, outcome.Records)},
	}
	sum := sha256.Sum256(wlBytes)
	run := &report.LiveRun{
		Label: *label, Target: where, Model: outcome.Model, Endpoint: string(ep),
		Workload: spec.Name, WorkloadFile: filepath.Base(*wl), WorkloadSHA256: hex.EncodeToString(sum[:]), Seed: spec.Seed,
		Rate: r, Requests: len(reqs), Sent: outcome.Sent, Start: outcome.Start, WallS: outcome.Wall.Seconds(), TimeScale: *timeScale,
		Version: buildVersion(), Command: command, Serving: outcome.Serving, HitRate: res.HitRate,
		TokenSources: outcome.TokenSources, FinishReasons: outcome.FinishReasons,
		Options: []string{fmt.Sprintf("ignore-eos=%v", *ignoreEOS), "usage=" + string(um), fmt.Sprintf("return-token-ids=%v", *tokenIDs),
			fmt.Sprintf("max-in-flight=%d", *maxInFlight), "request-timeout=" + reqTimeout.String(), "max-wall=" + maxWall.String(),
			fmt.Sprintf("api-key=%v", key != "")},
	}
	for _, e := range outcome.Errors {
		run.Errors = append(run.Errors, report.RunError{Message: e.Message, Count: e.Count, FirstRequest: e.First})
	}
	// The files are written even when every request failed: the failures are what the ticket needs.
	if werr := report.WriteTable(os.Stdout, rep); werr != nil {
		return werr
	}
	if werr := report.WriteFiles(*out, rep); werr != nil {
		return werr
	}
	if werr := report.WriteLiveFiles(*out, run); werr != nil {
		return werr
	}
	log.Info("live run written", "dir", *out, "completed", outcome.Serving.Completed, "failed", outcome.Serving.Failed)
	return err
}

// redactArgs hides the API key and the target's credentials in the command line recorded in
// the reports.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	hideNext := false
	for i, a := range args {
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case hideNext:
			out[i], hideNext = "REDACTED", false
			continue
		case strings.HasPrefix(a, "-") && name == "api-key":
			if hasValue {
				out[i] = a[:strings.Index(a, "=")+1] + "REDACTED"
			} else {
				out[i], hideNext = a, true
			}
			continue
		case strings.HasPrefix(a, "-") && name == "target" && hasValue:
			out[i] = a[:strings.Index(a, "=")+1] + live.Redact(a[strings.Index(a, "=")+1:])
			continue
		case i > 0 && strings.HasPrefix(args[i-1], "-") && strings.TrimLeft(args[i-1], "-") == "target":
			out[i] = live.Redact(a)
			continue
		}
		out[i] = a
	}
	return out
}

// buildVersion names the kvbench build: its module version and VCS revision when the binary
// was built from a checkout.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += " commit " + rev
		if dirty {
			v += " (modified)"
		}
	}
	return v
}

// isTerminal reports whether f is a character device (a terminal), where a redrawn bar works.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// runCompare merges live reports of the same workload (one per policy) into one comparison.
func runCompare(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	out := fs.String("out", "out/compare", "output directory for the merged report")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 1 {
		return errors.New("compare: give at least one report.json")
	}
	var merged *report.Report
	for _, path := range fs.Args() {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var r report.Report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if merged == nil {
			m := r
			m.Policies, m.Sweep, m.Requests, m.Command = nil, nil, nil, ""
			merged = &m
		} else if r.Workload != merged.Workload {
			return fmt.Errorf("%s: workload %q differs from %q", path, r.Workload, merged.Workload)
		}
		merged.Policies = append(merged.Policies, r.Policies...)
		merged.Sweep = append(merged.Sweep, r.Sweep...)
		merged.Requests = append(merged.Requests, r.Requests...)
	}
	if err := report.WriteTable(os.Stdout, merged); err != nil {
		return err
	}
	if len(merged.Policies) >= 2 {
		a, b := merged.Policies[len(merged.Policies)-1], merged.Policies[0]
		if b.OutputThroughput > 0 && b.TTFTP90 > 0 {
			fmt.Printf("\n%s vs %s: output throughput %.2fx, TTFT p90 %.2fx lower, hit rate %.1f%% vs %.1f%%\n",
				a.Policy, b.Policy, a.OutputThroughput/b.OutputThroughput, b.TTFTP90/max(a.TTFTP90, 1e-9), 100*a.HitRate, 100*b.HitRate)
		}
	}
	return report.WriteFiles(filepath.Clean(*out), merged)
}

// runMarkdown prints reports as Markdown tables.
func runMarkdown(args []string) error {
	fs := flag.NewFlagSet("markdown", flag.ContinueOnError)
	sweep := fs.String("sweep", "", "policies whose rate sweep to tabulate, comma-separated")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, path := range fs.Args() {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var r report.Report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := report.WriteMarkdown(os.Stdout, &r, splitList(*sweep)); err != nil {
			return err
		}
	}
	return nil
}
