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
	"os"
	"path/filepath"
	"testing"
)

type harnessReport struct {
	Policies []struct {
		Completed int                `json:"completed"`
		Extra     map[string]float64 `json:"extra"`
	} `json:"policies"`
}

func runHarness(t *testing.T, flags ...string) (harness, harnessReport) {
	t.Helper()
	out := t.TempDir()
	var r harnessReport
	if err := json.Unmarshal(simulateDemo(t, out, append([]string{"--policies", "kvrouter", "--requests", "40"}, flags...)...), &r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "demo", "harness.json"))
	if err != nil {
		t.Fatal(err)
	}
	var h struct{ Harness harness }
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	return h.Harness, r
}

func TestHarnessSwitches(t *testing.T) {
	h, r := runHarness(t)
	x := r.Policies[0].Extra
	if !h.EOS || h.StepNoise <= 0 || h.EventJitter <= 0 || h.EventLoss <= 0 || h.Flattering ||
		x["harness_eos"] != 1 || x["harness_step_noise_cv"] != h.StepNoise {
		t.Fatalf("the default is the honest harness: %+v, extra %v", h, x)
	}
	if _, ok := x["events_batches_lost"]; !ok {
		t.Fatalf("an honest kvrouter run must report its event losses: %v", x)
	}
	h, r = runHarness(t, "--flattering")
	x = r.Policies[0].Extra
	if h.EOS || h.StepNoise != 0 || h.EventJitter != 0 || h.EventLoss != 0 || !h.Flattering || x["harness_eos"] != 0 {
		t.Fatalf("--flattering must turn every switch off: %+v", h)
	}
	if _, ok := x["events_batches_lost"]; ok || r.Policies[0].Completed != 40 {
		t.Fatalf("the flattering harness has no event path figures: %v", x)
	}
	h, _ = runHarness(t, "--flattering", "--eos", "--event-loss", "0.01")
	if !h.EOS || h.EventLoss != 0.01 || h.StepNoise != 0 || h.EventJitter != 0 {
		t.Fatalf("switches given with --flattering must apply: %+v", h)
	}
	if err := runSimulate([]string{"--event-loss", "1", "x.yaml"}, nil); err == nil {
		t.Fatal("an event loss of 1 must be refused")
	}
}
