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
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
	"github.com/kvrouter/kvrouter/internal/bench/peers"
	"github.com/kvrouter/kvrouter/internal/bench/report"
	"github.com/kvrouter/kvrouter/internal/bench/simulate"
	"github.com/kvrouter/kvrouter/internal/bench/workload"
	"github.com/kvrouter/kvrouter/internal/router/policy"
)

func runSimulate(args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	wl := fs.String("workload", "", "workload YAML file(s), comma-separated")
	pols := fs.String("policies", "", "policies to run, comma-separated (default: all; see `kvbench policies`)")
	rates := fs.String("rates", "", "override the workload's rates (comma-separated)")
	requests := fs.Int("requests", 0, "override load.requests (cap per run)")
	duration := fs.Float64("duration", 0, "override load.duration (seconds of arrivals per run)")
	seed := fs.Uint64("seed", 0, "override the workload's seed")
	seeds := fs.Int("seeds", 1, "run every policy and rate with this many seeds (the workload's, then +1, +2, ...) and report the means")
	traces := tracesFlag(fs)
	out := fs.String("out", "out/bench", "output directory (one subdirectory per workload)")
	lag := fs.Float64("event-lag", 0.005, "KV event delay from engine to router index, seconds")
	quiet := fs.Bool("quiet", false, "do not print tables")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the whole run to this file (to find where simulation time goes)")
	var h harness
	fs.BoolVar(&h.EOS, "eos", true, "draw each request's true output length independently of its max_tokens (the cap); off: every request runs to max_tokens")
	fs.Float64Var(&h.StepNoise, "step-noise", simulate.DefaultStepNoise, "coefficient of variation of each engine step's duration (0: deterministic steps)")
	fs.Float64Var(&h.EventJitter, "event-jitter", simulate.DefaultEventJitter, "mean extra delay of a KV event batch on top of --event-lag, seconds (exponential)")
	fs.Float64Var(&h.EventLoss, "event-loss", simulate.DefaultEventLoss, "probability that a KV event batch is lost (detected at the next batch, repaired by replay)")
	fs.Float64Var(&h.ReplayDelay, "replay-delay", simulate.DefaultReplayDelay, "time from detecting a lost event batch to its replay being applied, seconds")
	flattering := fs.Bool("flattering", false, "the old harness: turn off --eos, --step-noise, --event-jitter and --event-loss (those given explicitly still apply)")
	var tune policy.Config
	fs.Float64Var(&tune.SaturationFactor, "kvrouter-saturation-factor", 0, "override kvrouter's SaturationFactor (0: default)")
	fs.IntVar(&tune.DecodeSlack, "kvrouter-decode-slack", 0, "override kvrouter's DecodeSlack (0: default)")
	fs.Float64Var(&tune.PrefillRatio, "kvrouter-prefill-ratio", 0, "override kvrouter's PrefillRatio (0: default)")
	fs.Float64Var(&tune.TargetTTFT, "kvrouter-target-ttft", 0, "set kvrouter's TargetTTFT in seconds (0: the admission TTFT bound, 10 s, as the router sets it; off with --kvrouter-admission=false)")
	admit := fs.Bool("kvrouter-admission", true, "run kvrouter's aggregated variants with the router's admission control at its defaults (shed with a fast 429 what no engine could start within the TTFT bound); off: the router's --admission=false")
	fs.Float64Var(&tune.LoadBound, "kvrouter-load-bound", 0, "override kvrouter's LoadBound (0: default)")
	fs.Float64Var(&tune.KVPressure, "kvrouter-kv-pressure", 0, "override kvrouter's KVPressure (0: default)")
	fs.Float64Var(&tune.MinPrefixShare, "kvrouter-min-prefix-share", 0, "override kvrouter's MinPrefixShare (0: default)")
	fs.Float64Var(&tune.PlacementLoadBound, "kvrouter-placement-load-bound", 0, "override kvrouter's PlacementLoadBound (0: default)")
	fs.Float64Var(&tune.TieTolerance, "kvrouter-tie-tolerance", 0, "override kvrouter's TieTolerance (0: default)")
	fs.Float64Var(&tune.PlacementTTFTSlack, "kvrouter-placement-ttft-slack", 0, "override kvrouter's PlacementTTFTSlack in seconds (0: default, negative: off)")
	fs.Float64Var(&tune.ReleaseQueueSlack, "kvrouter-release-queue-slack", 0, "override kvrouter's ReleaseQueueSlack in seconds (0: default, negative: off)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	h.flatter(fs, *flattering)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if h.StepNoise < 0 || h.EventJitter < 0 || h.ReplayDelay < 0 || h.EventLoss < 0 || h.EventLoss >= 1 {
		return errors.New("simulate: --step-noise, --event-jitter and --replay-delay must not be negative, --event-loss must be within [0, 1)")
	}
	files := append(splitList(*wl), fs.Args()...)
	if len(files) == 0 {
		return errors.New("simulate: name at least one workload (--workload FILE or FILE arguments)")
	}
	factories, err := peers.SelectWith(splitList(*pols), peers.Options{KVRouter: tune, NoAdmission: !*admit})
	if err != nil {
		return err
	}
	for _, path := range files {
		spec, err := workload.LoadFile(path)
		if err != nil {
			return err
		}
		if *rates != "" {
			if spec.Load.Rates, err = parseFloats(*rates); err != nil {
				return err
			}
			spec.Load.Primary = 0
		}
		if *requests > 0 {
			spec.Load.Requests = *requests
		}
		if *duration > 0 {
			spec.Load.Duration = *duration
		}
		if *seed != 0 {
			spec.Seed = *seed
		}
		rep := &report.Report{
			Workload: spec.Name, Description: spec.Description, Mode: "simulate", Seed: spec.Seed,
			Command: "kvbench " + strings.Join(append([]string{"simulate"}, args...), " "),
			Fleet:   fmt.Sprintf("%d× %s, block %d", spec.Fleet.Engines, spec.Fleet.Profile, spec.Fleet.BlockSize),
			SLO:     metrics.SLO{TTFT: spec.SLO.TTFTSeconds, ITL: spec.SLO.ITLSeconds}, Rate: spec.PrimaryRate(),
		}
		if spec.ScaleUp != nil {
			rep.Fleet += fmt.Sprintf(", +%d at %.0f%% of arrivals", spec.ScaleUp.Add, 100*spec.ScaleUp.AtFraction)
		}
		if d := spec.Fleet.Disaggregation; d != nil {
			rep.Fleet += fmt.Sprintf("; P/D policies split it %d prefill + %d decode over %s, the others run it aggregated", d.Prefill, d.Decode, d.Transport)
		}
		for _, f := range factories {
			rep.SetFamily(f.Name, f.FamilyName())
		}
		if *seeds < 1 {
			return errors.New("simulate: --seeds must be at least 1")
		}
		if *seeds > 1 {
			for i := range *seeds {
				rep.Seeds = append(rep.Seeds, spec.Seed+uint64(i))
			}
		}
		maxPrompt := spec.Fleet.MaxModelLen
		for _, rate := range spec.Load.Rates {
			runs := make([][]metrics.Result, len(factories))
			for i := range *seeds {
				// Each seed draws its own requests (arrivals, groups, lengths) and its own
				// policy randomness: overloaded runs are chaotic enough that one seed's
				// ranking of close policies is partly luck.
				sp := *spec
				sp.Seed = spec.Seed + uint64(i)
				reqs, err := workload.Generate(&sp, rate, workload.Options{TracesDir: tracesDir(fs, *traces, path), MaxPromptTokens: maxPrompt, EOS: h.EOS})
				if err != nil {
					return err
				}
				for j, f := range factories {
					res, err := simulate.Run(simulate.Config{Spec: &sp, Rate: rate, Requests: reqs, Policy: f, Seed: sp.Seed, EventLag: *lag,
						StepNoise: h.StepNoise, EventJitter: h.EventJitter, EventLoss: h.EventLoss, ReplayDelay: h.ReplayDelay})
					if err != nil {
						return fmt.Errorf("%s/%s@%g: %w", spec.Name, f.Name, rate, err)
					}
					log.Info("run done", "workload", spec.Name, "policy", f.Name, "rate", rate, "seed", sp.Seed, "requests", res.Requests,
						"out_tok_s", int(res.OutputThroughput), "hit", fmt.Sprintf("%.3f", res.HitRate), "wall_s", fmt.Sprintf("%.1f", res.Extra["sim_wall_s"]))
					h.record(res.Extra)
					runs[j] = append(runs[j], res)
					if *seeds > 1 {
						rep.Runs = append(rep.Runs, report.SeedRun{Seed: sp.Seed, Result: res})
					}
				}
			}
			for j := range factories {
				res := metrics.Mean(runs[j])
				rep.Sweep = append(rep.Sweep, res)
				if rate == rep.Rate {
					rep.Policies = append(rep.Policies, res)
				}
			}
		}
		if !*quiet {
			if err := report.WriteTable(os.Stdout, rep); err != nil {
				return err
			}
			fmt.Println()
		}
		if err := report.WriteFiles(filepath.Join(*out, spec.Name), rep); err != nil {
			return err
		}
		if err := h.write(filepath.Join(*out, spec.Name), *lag); err != nil {
			return err
		}
	}
	return nil
}

func listPolicies() error {
	for _, f := range peers.All() {
		fmt.Printf("%-22s %s\n", f.Name, f.Source)
	}
	fmt.Println("\nP/D policies (by name only; they split fleets with fleet.disaggregation):")
	for _, f := range peers.PDAll(peers.Options{}) {
		fmt.Printf("%-22s %s\n", f.Name, f.Source)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, p := range splitList(s) {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || !(v > 0) {
			return nil, fmt.Errorf("bad rate %q", p)
		}
		out = append(out, v)
	}
	return out, nil
}
