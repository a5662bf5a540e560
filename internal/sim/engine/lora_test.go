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

package engine

import (
	"slices"
	"testing"
)

func TestLoRABatchHoldsAtMostMaxLoRAsAdapters(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.MaxLoRAs = 2; c.LoRALoadTime = 0.5 })
	reqs := []*Request{
		{ID: "a1", Prompt: tokens(1, 40), MaxTokens: 20, LoRA: "a"},
		{ID: "b1", Prompt: tokens(100, 40), MaxTokens: 20, LoRA: "b"},
		{ID: "c1", Prompt: tokens(200, 40), MaxTokens: 5, LoRA: "c"},
		{ID: "base", Prompt: tokens(300, 40), MaxTokens: 5},
		{ID: "a2", Prompt: tokens(400, 40), MaxTokens: 5, LoRA: "a"},
	}
	for _, r := range reqs {
		if err := e.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	first := e.Step()
	// c1 has no slot: it is skipped, and the base request and a2 behind it are admitted.
	got := map[string]bool{}
	for _, tok := range first.Tokens {
		got[tok.Req.ID] = true
	}
	if !got["a1"] || !got["b1"] || !got["base"] || !got["a2"] || got["c1"] {
		t.Fatalf("first step ran %v, want a1, b1, base, a2 and not c1", got)
	}
	if first.LoRALoads != 2 {
		t.Fatalf("first step loaded %d adapters, want 2", first.LoRALoads)
	}
	running, waiting, resident := e.LoRAs()
	if !slices.Equal(running, []string{"a", "b"}) || !slices.Equal(waiting, []string{"c"}) || len(resident) != 2 {
		t.Fatalf("running %v waiting %v resident %v", running, waiting, resident)
	}
	steps := append([]StepResult{first}, runAll(t, e)...)
	loads := 0
	for _, s := range steps {
		loads += s.LoRALoads
		if s.LoRALoads > 0 && s.Duration < 0.5*float64(s.LoRALoads) {
			t.Fatalf("a step that loaded %d adapters took %v s, want at least the load time", s.LoRALoads, s.Duration)
		}
	}
	// c waits for a or b to leave the batch (a2 finishes after 5 tokens but a1 holds "a"; b1 runs
	// 20), then evicts the least recently used adapter that the batch no longer uses.
	if loads != 3 || e.Stats().LoRALoads != 3 {
		t.Fatalf("%d adapter loads (stats %d), want 3", loads, e.Stats().LoRALoads)
	}
	c1 := reqs[2]
	if c1.ScheduledAt < reqs[0].FinishedAt && c1.ScheduledAt < reqs[1].FinishedAt {
		t.Fatalf("c1 started at %v before any slot freed (a1 done %v, b1 done %v)", c1.ScheduledAt, reqs[0].FinishedAt, reqs[1].FinishedAt)
	}
	if len(c1.Output) != 5 {
		t.Fatalf("c1 produced %d tokens, want 5", len(c1.Output))
	}
}

func TestLoRAResidentAdapterIsNotReloaded(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.MaxLoRAs = 1; c.LoRALoadTime = 0.02 })
	for i := range 3 {
		r := &Request{ID: string(rune('x' + i)), Prompt: tokens(1000*i, 40), MaxTokens: 3, LoRA: "only"}
		if err := e.Submit(r); err != nil {
			t.Fatal(err)
		}
		runAll(t, e)
	}
	if n := e.Stats().LoRALoads; n != 1 {
		t.Fatalf("adapter loaded %d times, want once (it stays resident)", n)
	}
}

func TestLoRADisabledLeavesBatchUnbounded(t *testing.T) {
	e := newEngine(t, nil)
	for i, l := range []string{"a", "b", "c"} {
		if err := e.Submit(&Request{ID: l, Prompt: tokens(100*i, 40), MaxTokens: 2, LoRA: l}); err != nil {
			t.Fatal(err)
		}
	}
	if s := e.Step(); s.Sequences != 3 || s.LoRALoads != 0 {
		t.Fatalf("step ran %d sequences with %d loads, want 3 and 0", s.Sequences, s.LoRALoads)
	}
}

func TestLoRAConfigRejectsNegative(t *testing.T) {
	seed := "0"
	base := newEngine(t, nil).Config()
	base.HashSeed = &seed
	for _, mut := range []func(*Config){func(c *Config) { c.MaxLoRAs = -1 }, func(c *Config) { c.LoRALoadTime = -1 }} {
		c := base
		mut(&c)
		if _, err := New(c); err == nil {
			t.Fatalf("config %+v accepted", c)
		}
	}
}
