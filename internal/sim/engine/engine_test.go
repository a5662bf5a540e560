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
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/kvevent"
	"github.com/kvrouter/kvrouter/internal/sim/timing"
)

func newEngine(t *testing.T, mutate func(*Config)) *Engine {
	t.Helper()
	seed := "0"
	cfg := Config{Profile: timing.ForModel("llama-8b", 1), BlockSize: 16, HashAlgo: blockhash.SHA256CBOR, HashSeed: &seed, EmitEvents: true}
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func tokens(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

// runAll steps until idle and returns every step.
func runAll(t *testing.T, e *Engine) []StepResult {
	t.Helper()
	var out []StepResult
	for i := 0; e.HasWork(); i++ {
		if i > 100000 {
			t.Fatal("engine never drained")
		}
		out = append(out, e.Step())
	}
	return out
}

func TestSingleRequestLifecycleAndEvents(t *testing.T) {
	e := newEngine(t, nil)
	r := &Request{ID: "a", Prompt: tokens(1, 40), MaxTokens: 10, Seed: 1}
	if err := e.Submit(r); err != nil {
		t.Fatal(err)
	}
	steps := runAll(t, e)
	if len(steps) != 10 {
		t.Fatalf("%d steps, want 10 (one prefill + nine decodes)", len(steps))
	}
	if len(r.Output) != 10 || r.FirstTokenAt != steps[0].Duration || r.FinishedAt != e.Now() {
		t.Fatalf("output %d first %v finished %v now %v", len(r.Output), r.FirstTokenAt, r.FinishedAt, e.Now())
	}
	if !steps[0].Tokens[0].First || !steps[9].Tokens[0].Last || len(steps[9].Finished) != 1 {
		t.Fatal("first/last flags wrong")
	}
	// Prefill of 40 tokens stores 2 full blocks whose hashes are vLLM's chain (V8 vectors for
	// tokens 1..32 with PYTHONHASHSEED=0).
	ev := steps[0].Events
	if len(ev) != 1 || ev[0].Kind != kvevent.BlockStored || len(ev[0].Hashes) != 2 || !ev[0].Parent.IsZero() {
		t.Fatalf("prefill events %+v", ev)
	}
	if ev[0].Hashes[0].Uint64() != 3236607068019569386 || ev[0].Hashes[1].Uint64() != 2758186210834249151 {
		t.Fatalf("hashes %d %d", ev[0].Hashes[0].Uint64(), ev[0].Hashes[1].Uint64())
	}
	if len(ev[0].Tokens) != 32 || len(ev[0].ExtraKeys) != 2 {
		t.Fatal("event tokens/extra keys")
	}
	// Output tokens fill block 3 (tokens 32..47) during decode: 40 prompt + 8 outputs.
	var stored []StepResult
	for _, s := range steps[1:] {
		if len(s.Events) > 0 {
			stored = append(stored, s)
		}
	}
	if len(stored) != 1 || stored[0].Events[0].Parent != ev[0].Hashes[1] || len(stored[0].Events[0].Hashes) != 1 {
		t.Fatalf("decode-filled block not reported once with the right parent: %+v", stored)
	}
	st := e.Stats()
	if st.Running+st.Waiting != 0 || st.KVUsage != 0 || st.PrefixQueries != 40 || st.PrefixHits != 0 || st.GenerationTokens != 10 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPrefixHitsLowerTTFT(t *testing.T) {
	e := newEngine(t, nil)
	shared := tokens(100, 2000)
	ttft := func(id string, suffix int) float64 {
		r := &Request{ID: id, Prompt: append(append([]uint32(nil), shared...), tokens(50000+suffix*100, 50)...), MaxTokens: 2}
		if err := e.Submit(r); err != nil {
			t.Fatal(err)
		}
		runAll(t, e)
		return r.FirstTokenAt - r.Arrival
	}
	cold := ttft("cold", 1)
	warm := ttft("warm", 2)
	if warm >= cold/3 {
		t.Fatalf("TTFT with a 2000-token prefix hit %.4fs, cold %.4fs: hits must cut prefill time", warm, cold)
	}
	if st := e.Stats(); st.PrefixHits != 2000 {
		t.Fatalf("prefix hits %d tokens, want 2000", st.PrefixHits)
	}
	// A full hit still computes the last block's token (vLLM never reuses the block holding the
	// final prompt token).
	r := &Request{ID: "same", Prompt: tokens(100, 2000), MaxTokens: 1}
	e.Submit(r)
	runAll(t, e)
	if r.CachedTokens() != 1984 {
		t.Fatalf("full-prefix request reused %d tokens, want 1984", r.CachedTokens())
	}
}

func TestQueueingAppearsUnderLoad(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.MaxNumSeqs = 4 })
	var reqs []*Request
	for i := range 12 {
		r := &Request{ID: fmt.Sprint(i), Prompt: tokens(i*10000, 500), MaxTokens: 20}
		if err := e.Submit(r); err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	steps := runAll(t, e)
	for _, s := range steps {
		if s.Sequences > 4 {
			t.Fatalf("step ran %d sequences with max-num-seqs 4", s.Sequences)
		}
	}
	if first, last := reqs[0].FirstTokenAt-reqs[0].Arrival, reqs[11].FirstTokenAt-reqs[11].Arrival; last < 2*first {
		t.Fatalf("last request TTFT %.4f vs first %.4f: no queueing", last, first)
	}
}

func TestChunkedPrefillRespectsTokenBudget(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.MaxNumBatchedTokens = 512 })
	r := &Request{ID: "long", Prompt: tokens(1, 2000), MaxTokens: 3}
	e.Submit(r)
	steps := runAll(t, e)
	for i, s := range steps {
		if s.ScheduledTokens > 512 {
			t.Fatalf("step %d scheduled %d tokens", i, s.ScheduledTokens)
		}
	}
	if len(steps) != 4+2 || len(steps[0].Tokens) != 0 || len(steps[3].Tokens) != 1 {
		t.Fatalf("%d steps; prefill should take 4 chunks then sample", len(steps))
	}
}

func TestPreemptionWhenBlocksRunOut(t *testing.T) {
	// 12 blocks of 16 tokens: two requests of 80-token prompts (5 blocks each) fit, but growing to
	// 120 tokens each (8 blocks) does not.
	e := newEngine(t, func(c *Config) { c.NumBlocks = 12 })
	a := &Request{ID: "a", Prompt: tokens(1, 80), MaxTokens: 40}
	b := &Request{ID: "b", Prompt: tokens(5000, 80), MaxTokens: 40}
	e.Submit(a)
	e.Submit(b)
	var preempted []*Request
	for _, s := range runAll(t, e) {
		preempted = append(preempted, s.Preempted...)
	}
	if len(preempted) == 0 || preempted[0] != b {
		t.Fatalf("expected the newer request b to be preempted, got %v", preempted)
	}
	if len(a.Output) != 40 || len(b.Output) != 40 {
		t.Fatalf("outputs %d %d: preempted requests must resume and finish", len(a.Output), len(b.Output))
	}
	if st := e.Stats(); st.Preemptions == 0 || st.FreeBlocks != 12 {
		t.Fatalf("stats %+v", st)
	}
	if b.Preemptions() == 0 {
		t.Fatal("request preemption count not kept")
	}
	// b was readmitted to blocks it had computed itself: like vLLM's num_cached_tokens, what the
	// prefix cache served is counted at the first admission only, where nothing was cached.
	if b.CachedTokens() != 0 {
		t.Fatalf("b reports %d cached prompt tokens, want 0 (its own blocks found again after a preemption are no cache hit)", b.CachedTokens())
	}
}

func TestRejectsImpossibleRequests(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.NumBlocks = 4; c.MaxModelLen = 1000 })
	for _, r := range []*Request{
		{ID: "empty", MaxTokens: 1},
		{ID: "toolong", Prompt: tokens(1, 1000), MaxTokens: 1},
		{ID: "toobig", Prompt: tokens(1, 100), MaxTokens: 1},
		{ID: "nomax", Prompt: tokens(1, 10)},
	} {
		if err := e.Submit(r); err == nil {
			t.Errorf("%s accepted", r.ID)
		}
	}
	ok := &Request{ID: "ok", Prompt: tokens(1, 10), MaxTokens: 1}
	if err := e.Submit(ok); err != nil {
		t.Fatal(err)
	}
	if err := e.Submit(&Request{ID: "ok", Prompt: tokens(1, 10), MaxTokens: 1}); err == nil {
		t.Fatal("duplicate id accepted")
	}
}

func TestFullReportModeReannouncesHits(t *testing.T) {
	e := newEngine(t, nil)
	e.Submit(&Request{ID: "a", Prompt: tokens(1, 64), MaxTokens: 1})
	runAll(t, e)
	r := &Request{ID: "b", Prompt: tokens(1, 70), MaxTokens: 1, ReportFull: true}
	e.Submit(r)
	steps := runAll(t, e)
	ev := steps[0].Events
	if len(ev) < 1 || ev[0].Kind != kvevent.BlockStored || len(ev[0].Hashes) != 4 || !ev[0].Parent.IsZero() || len(ev[0].Tokens) != 64 {
		t.Fatalf("full mode should re-announce the 4 hit blocks from block 0: %+v", ev)
	}
}

func TestAbortResetAndRestart(t *testing.T) {
	e := newEngine(t, nil)
	e.Submit(&Request{ID: "a", Prompt: tokens(1, 64), MaxTokens: 100})
	e.Step()
	if e.ResetPrefixCache() {
		t.Fatal("reset must fail while a request holds blocks")
	}
	if !e.Abort("a") || e.Abort("a") {
		t.Fatal("abort")
	}
	if !e.ResetPrefixCache() {
		t.Fatal("reset failed on an idle engine")
	}
	if !e.HasWork() {
		t.Fatal("the AllBlocksCleared event must be pending")
	}
	if s := e.Step(); len(s.Events) != 1 || s.Events[0].Kind != kvevent.AllBlocksCleared || s.Duration != 0 {
		t.Fatalf("reset step %+v", s)
	}
	e.Submit(&Request{ID: "b", Prompt: tokens(1, 64), MaxTokens: 100})
	e.Step()
	dropped, err := e.Restart()
	if err != nil || len(dropped) != 1 || dropped[0].ID != "b" {
		t.Fatalf("restart dropped %v, %v", dropped, err)
	}
	if st := e.Stats(); st.CachedBlocks != 0 || st.Running != 0 || e.HasWork() {
		t.Fatalf("after restart %+v", st)
	}
}

func TestDeterministicOutput(t *testing.T) {
	out := func() []uint32 {
		e := newEngine(t, nil)
		r := &Request{ID: "x", Prompt: tokens(1, 20), MaxTokens: 8, Seed: 42}
		e.Submit(r)
		runAll(t, e)
		return r.Output
	}
	if a, b := out(), out(); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("same seed, different output")
	}
}

func BenchmarkEngineRequests(b *testing.B) {
	// Requests of 1000 prompt tokens (half shared) and 100 output tokens through one engine,
	// stepping in virtual time: the simulator's own cost per request.
	seed := "0"
	e, _ := New(Config{Profile: timing.ForModel("llama-8b", 1), HashAlgo: blockhash.SHA256CBOR, HashSeed: &seed, EmitEvents: true})
	shared := tokens(1, 500)
	b.ReportAllocs()
	i := 0
	events := 0
	for b.Loop() {
		p := append(append([]uint32(nil), shared...), tokens(1000+i*500, 500)...)
		e.Submit(&Request{ID: fmt.Sprint(i), Prompt: p, MaxTokens: 100})
		i++
		if i%64 == 0 {
			for e.HasWork() {
				events += len(e.Step().Events)
			}
		}
	}
	for e.HasWork() {
		events += len(e.Step().Events)
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
