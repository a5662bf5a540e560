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
	"flag"
	"os"
	"path/filepath"
)

// harness is the honest-simulation switches of one kvbench simulate invocation. They are
// recorded twice: in every run's extra figures (harness_*), and as harness.json beside
// report.json, so that a reader of either knows which simulator produced the figures.
type harness struct {
	EOS         bool    `json:"eos"`
	StepNoise   float64 `json:"step_noise_cv"`
	EventLagS   float64 `json:"event_lag_s"`
	EventJitter float64 `json:"event_jitter_s"`
	EventLoss   float64 `json:"event_loss"`
	ReplayDelay float64 `json:"replay_delay_s"`
	Flattering  bool    `json:"flattering"`
}

// flatter turns the switches the command line did not set explicitly off when on is true (the
// old harness), so that -flattering -eos measures EOS alone.
func (h *harness) flatter(fs *flag.FlagSet, on bool) {
	h.Flattering = on
	if !on {
		return
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["eos"] {
		h.EOS = false
	}
	if !set["step-noise"] {
		h.StepNoise = 0
	}
	if !set["event-jitter"] {
		h.EventJitter = 0
	}
	if !set["event-loss"] {
		h.EventLoss = 0
	}
}

func (h *harness) record(extra map[string]float64) {
	eos := 0.0
	if h.EOS {
		eos = 1
	}
	extra["harness_eos"] = eos
	extra["harness_step_noise_cv"] = h.StepNoise
	extra["harness_event_jitter_s"] = h.EventJitter
	extra["harness_event_loss"] = h.EventLoss
	extra["harness_replay_delay_s"] = h.ReplayDelay
}

func (h *harness) write(dir string, lag float64) error {
	h.EventLagS = lag
	b, err := json.MarshalIndent(map[string]any{"harness": h}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "harness.json"), append(b, '\n'), 0o644)
}
