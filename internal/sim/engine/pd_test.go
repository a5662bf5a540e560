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

	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/kvevent"
)

func removedHashes(steps []StepResult) map[blockhash.Hash]bool {
	out := map[blockhash.Hash]bool{}
	for _, s := range steps {
		for _, ev := range s.Events {
			if ev.Kind == kvevent.BlockRemoved {
				for _, h := range ev.Hashes {
					out[h] = true
				}
			}
		}
	}
	return out
}

func TestHeldBlocksSurviveEvictionUntilReleased(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.NumBlocks = 20 })
	prompt := tokens(1, 100) // 6 full blocks and a partial one
	p := &Request{ID: "prefill", Prompt: prompt, MaxTokens: 1, HoldKV: true}
	if err := e.Submit(p); err != nil {
		t.Fatal(err)
	}
	first := runAll(t, e)
	stored := first[0].Events[0].Hashes
	held := p.BlockIDs()
	if st := e.Stats(); len(p.Output) != 1 || st.HeldRequests != 1 || st.HeldBlocks != 7 || len(held) != 7 || st.FreeBlocks != 13 {
		t.Fatalf("after the prefill: output %d, blocks %v, stats %+v", len(p.Output), held, st)
	}
	if err := e.Submit(&Request{ID: "prefill", Prompt: prompt, MaxTokens: 1}); err == nil {
		t.Fatal("a request reusing the id of a held one was accepted")
	}

	// Two requests that each need every free block: without the hold they would evict the
	// prefill's blocks (least recently freed first).
	for i, id := range []string{"x", "y"} {
		if err := e.Submit(&Request{ID: id, Prompt: tokens(10000*(i+1), 190), MaxTokens: 10}); err != nil {
			t.Fatal(err)
		}
	}
	pressure := runAll(t, e)
	for _, h := range stored {
		if removedHashes(pressure)[h] {
			t.Fatal("a held block was evicted")
		}
	}
	if got := e.CachedPrefixTokens(prompt, "", ""); got != 96 {
		t.Fatalf("cached prefix of the held prompt %d, want 96", got)
	}

	// A request that needs more blocks than the hold leaves free waits until Release.
	big := &Request{ID: "big", Prompt: tokens(50000, 15*16), MaxTokens: 2}
	if err := e.Submit(big); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e.Step()
	}
	if len(big.Output) != 0 || e.Stats().Waiting != 1 {
		t.Fatalf("the big request ran although held blocks leave too little room: %+v", e.Stats())
	}
	if !e.Release("prefill") || e.Release("prefill") {
		t.Fatal("Release must succeed once")
	}
	if st := e.Stats(); st.HeldRequests != 0 || st.HeldBlocks != 0 {
		t.Fatalf("stats after release %+v", st)
	}
	after := runAll(t, e)
	if len(big.Output) != 2 {
		t.Fatal("the big request did not run after the release")
	}
	if !slices.ContainsFunc(stored, func(h blockhash.Hash) bool { return removedHashes(after)[h] }) {
		t.Fatal("released blocks were never reused under pressure")
	}
	if st := e.Stats(); st.FreeBlocks != st.NumBlocks {
		t.Fatalf("blocks leak: %+v", st)
	}
}

func TestRestartDropsHeldBlocks(t *testing.T) {
	e := newEngine(t, nil)
	if err := e.Submit(&Request{ID: "p", Prompt: tokens(1, 64), MaxTokens: 1, HoldKV: true}); err != nil {
		t.Fatal(err)
	}
	runAll(t, e)
	if e.ResetPrefixCache() {
		t.Fatal("prefix cache reset while blocks are held")
	}
	if _, err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.HeldRequests != 0 || st.FreeBlocks != st.NumBlocks || e.Release("p") {
		t.Fatalf("held blocks survived a restart: %+v", st)
	}
}

func TestTransferredRequestComputesOnlyTheLastTokenAndMatchesWhole(t *testing.T) {
	for _, tc := range []struct {
		name        string
		promptLen   int
		localBlocks int // blocks the decode engine already holds
		wantRemote  int // tokens taken from the transfer
	}{
		{"partial last block", 1000, 0, 992},
		{"prompt of whole blocks", 992, 0, 976},
		{"decode side holds a prefix", 1000, 30, 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prompt := tokens(1, tc.promptLen)
			whole := newEngine(t, nil)
			w := &Request{ID: "w", Prompt: prompt, MaxTokens: 8, Seed: 42}
			if err := whole.Submit(w); err != nil {
				t.Fatal(err)
			}
			wsteps := runAll(t, whole)

			d := newEngine(t, nil)
			if tc.localBlocks > 0 {
				if err := d.Submit(&Request{ID: "warm", Prompt: append(tokens(1, tc.localBlocks*16), 9, 9, 9), MaxTokens: 1}); err != nil {
					t.Fatal(err)
				}
				runAll(t, d)
			}
			if got := d.CachedPrefixTokens(prompt, "", ""); got != tc.localBlocks*16 {
				t.Fatalf("decode side caches %d prompt tokens, want %d", got, tc.localBlocks*16)
			}
			r := &Request{ID: "r", Prompt: prompt, MaxTokens: 8, Seed: 42, KVTransferred: tc.promptLen}
			if err := d.Submit(r); err != nil {
				t.Fatal(err)
			}
			before := d.Stats()
			steps := runAll(t, d)
			full := (tc.promptLen - 1) / 16 * 16
			if steps[0].ScheduledTokens != tc.promptLen-full {
				t.Fatalf("first step computed %d tokens, want %d", steps[0].ScheduledTokens, tc.promptLen-full)
			}
			if len(steps) != 8 || steps[0].Duration >= wsteps[0].Duration {
				t.Fatalf("%d steps, first %v s against the whole prefill's %v s", len(steps), steps[0].Duration, wsteps[0].Duration)
			}
			if !slices.Equal(r.Output, w.Output) {
				t.Fatalf("output %v, the whole request's %v", r.Output, w.Output)
			}
			if r.TransferredTokens() != tc.wantRemote || r.CachedTokens() != full {
				t.Fatalf("transferred %d cached %d, want %d and %d", r.TransferredTokens(), r.CachedTokens(), tc.wantRemote, full)
			}
			st := d.Stats()
			if st.TransferredTokens-before.TransferredTokens != uint64(tc.wantRemote) || st.PrefixHits-before.PrefixHits != uint64(tc.localBlocks*16) {
				t.Fatalf("stats %+v", st)
			}
			// The transferred blocks are announced as stored, with the hashes the whole engine
			// computed for the same blocks, chained after the locally held prefix.
			ev := steps[0].Events
			wantHashes := wsteps[0].Events[0].Hashes[tc.localBlocks : full/16]
			if len(ev) == 0 || ev[0].Kind != kvevent.BlockStored || !slices.Equal(ev[0].Hashes, wantHashes) {
				t.Fatalf("first step events %+v, want BlockStored of %d blocks", ev, len(wantHashes))
			}
			if !slices.Equal(ev[0].Tokens, prompt[tc.localBlocks*16:full]) {
				t.Fatal("the stored event carries the wrong tokens")
			}
			if tc.localBlocks > 0 && ev[0].Parent != wsteps[0].Events[0].Hashes[tc.localBlocks-1] {
				t.Fatal("the transferred run is not chained to the cached prefix")
			}
			if got := d.CachedPrefixTokens(prompt, "", ""); got != tc.promptLen/16*16 {
				t.Fatalf("after the request the prefix cache holds %d prompt tokens", got)
			}
		})
	}
}

func TestTransferredTokensNegativeRejected(t *testing.T) {
	e := newEngine(t, nil)
	if err := e.Submit(&Request{ID: "r", Prompt: tokens(1, 10), MaxTokens: 1, KVTransferred: -1}); err == nil {
		t.Fatal("negative KVTransferred accepted")
	}
}
