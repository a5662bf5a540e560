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
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench/live"
	"github.com/kvrouter/kvrouter/internal/bench/metrics"
	"github.com/kvrouter/kvrouter/internal/bench/report"
	"github.com/kvrouter/kvrouter/internal/bench/workload"
)

func runLive(args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("live", flag.ContinueOnError)
	target := fs.String("target", "", "base URL of the router or engine (loopback only), e.g. http://127.0.0.1:8080")
	wl := fs.String("workload", "", "workload YAML file")
	label := fs.String("label", "target", "name of what is measured (the policy column of the report)")
	model := fs.String("model", "", "model name to send (default: the target's first /v1/models entry)")
	rate := fs.Float64("rate", 0, "request rate (default: the workload's primary rate)")
	requests := fs.Int("requests", 0, "cap on requests (default: the workload's load.requests)")
	duration := fs.Float64("duration", 0, "seconds of arrivals (default: the workload's load.duration)")
	maxWall := fs.Duration("max-wall", 5*time.Minute, "hard wall-clock bound of the run")
	timeScale := fs.Float64("time-scale", 1, "the vllm-sim target's --time-scale (figures are reported in simulated seconds)")
	epHeader := fs.String("endpoint-header", "X-Kvrouter-Endpoint", "response header naming the serving engine, if the target sets one")
	traces := tracesFlag(fs)
	out := fs.String("out", "out/live", "output directory for report.json and report.html")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *target == "" || *wl == "" {
		return errors.New("live: --target and --workload are required")
	}
	if err := live.CheckLoopback(*target); err != nil {
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
	log.Info("live run", "target", *target, "label", *label, "requests", len(reqs), "rate", r)
	res, err := live.Run(ctx, live.Config{
		Target: *target, Model: *model, Requests: reqs, MaxDuration: *maxWall, TimeScale: *timeScale,
		EndpointHeader: *epHeader, SLO: slo, Log: log,
	})
	if err != nil {
		return err
	}
	res.Policy, res.Rate = *label, r
	rep := &report.Report{
		Workload: spec.Name, Description: spec.Description, Mode: "live", Seed: spec.Seed,
		Command: "kvbench " + strings.Join(append([]string{"live"}, args...), " "),
		Fleet:   "live target " + *target, SLO: slo, Rate: r,
		Policies: []metrics.Result{res}, Sweep: []metrics.Result{res},
	}
	if err := report.WriteTable(os.Stdout, rep); err != nil {
		return err
	}
	return report.WriteFiles(*out, rep)
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
			m.Policies, m.Sweep, m.Command = nil, nil, ""
			merged = &m
		} else if r.Workload != merged.Workload {
			return fmt.Errorf("%s: workload %q differs from %q", path, r.Workload, merged.Workload)
		}
		merged.Policies = append(merged.Policies, r.Policies...)
		merged.Sweep = append(merged.Sweep, r.Sweep...)
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
