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

package kvindex_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvevents/kveventstest"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/kvindex/kvindextest"
)

const bs = 4

func toks(n int, base uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

func apply(t testing.TB, ix *kvindex.Index, src kvindex.SourceID, events ...any) kvindex.ApplyStats {
	t.Helper()
	var d kvevents.Decoder
	var b kvevents.Batch
	if err := d.Decode(kveventstest.Batch(1, src.Rank, true, events...), &b); err != nil {
		t.Fatal(err)
	}
	return ix.Apply(src, &b)
}

func ptr(v uint64) *uint64 { return &v }

func matchOf(ms []kvindex.EndpointMatch, src kvindex.SourceID) kvindex.EndpointMatch {
	for _, m := range ms {
		if m.Source == src {
			return m
		}
	}
	return kvindex.EndpointMatch{Source: src}
}

var (
	srcA = kvindex.SourceID{Endpoint: "a"}
	srcB = kvindex.SourceID{Endpoint: "b"}
)

func TestLookupFollowsEventsByContent(t *testing.T) {
	ix := kvindex.New(kvindex.Config{BlockSize: bs})
	prompt := toks(5*bs+2, 100) // 5 full blocks and a partial one
	// a holds blocks 0-2 in two events (the second resolves its parent by engine hash);
	// b holds blocks 0-1 under entirely different engine hashes.
	apply(t, ix, srcA, kveventstest.Stored{Hashes: []uint64{1, 2}, Tokens: prompt[:2*bs], BlockSize: bs})
	apply(t, ix, srcA, kveventstest.Stored{Hashes: []uint64{3}, Parent: ptr(2), Tokens: prompt[2*bs : 3*bs], BlockSize: bs})
	apply(t, ix, srcB, kveventstest.Stored{Hashes: []uint64{901, 902}, Tokens: prompt[:2*bs], BlockSize: bs})
	// a also holds block 4 (a hole at 3): it must not count.
	apply(t, ix, srcA, kveventstest.Stored{Hashes: []uint64{99}, Parent: ptr(3), Tokens: prompt[4*bs : 5*bs], BlockSize: bs})

	ms := ix.Lookup(prompt, kvindex.LookupOptions{})
	if a := matchOf(ms, srcA); a.Blocks[kvevents.MediumGPU] != 3 || a.AnyBlocks != 3 || a.PredictedBlocks != 3 {
		t.Fatalf("a: %+v", a)
	}
	if b := matchOf(ms, srcB); b.Blocks[kvevents.MediumGPU] != 2 {
		t.Fatalf("b: %+v", b)
	}
	if ix.Tokens(3) != 3*bs {
		t.Fatal("Tokens")
	}
	// Another prompt sharing only block 0.
	other := append(append([]uint32{}, prompt[:bs]...), toks(bs, 7)...)
	if a := matchOf(ix.Lookup(other, kvindex.LookupOptions{}), srcA); a.AnyBlocks != 1 {
		t.Fatalf("other prompt: %+v", a)
	}
	// The same tokens under a LoRA adapter or a salt are different content.
	if ms := ix.Lookup(prompt, kvindex.LookupOptions{KeyParams: kvindex.KeyParams{LoRAName: "x"}}); len(ms) != 0 {
		t.Fatalf("LoRA lookup matched base-model blocks: %+v", ms)
	}
	if ms := ix.Lookup(prompt, kvindex.LookupOptions{KeyParams: kvindex.KeyParams{CacheSalt: "s"}}); len(ms) != 0 {
		t.Fatalf("salted lookup matched unsalted blocks: %+v", ms)
	}
	if a := matchOf(ix.Lookup(prompt, kvindex.LookupOptions{MaxBlocks: 2}), srcA); a.AnyBlocks != 2 {
		t.Fatalf("MaxBlocks: %+v", a)
	}
	keys := kvindex.RequestKeys(nil, prompt, bs, kvindex.KeyParams{})
	if len(keys) != 5 {
		t.Fatalf("%d keys for 5 full blocks", len(keys))
	}
	if a := matchOf(ix.LookupKeys(keys), srcA); a.AnyBlocks != 3 {
		t.Fatalf("LookupKeys: %+v", a)
	}
}

func TestLoRAAndSaltMatchEngineExtraKeys(t *testing.T) {
	ix := kvindex.New(kvindex.Config{BlockSize: bs})
	prompt := toks(2*bs, 1)
	// vLLM: LoRA name in every block's extra keys, the salt in the first block's.
	apply(t, ix, srcA, kveventstest.Stored{Hashes: []uint64{1, 2}, Tokens: prompt, BlockSize: bs, LoRAName: "ad",
		ExtraKeys: [][]string{{"ad", "salt"}, {"ad"}}})
	p := kvindex.KeyParams{LoRAName: "ad", CacheSalt: "salt"}
	if a := matchOf(ix.Lookup(prompt, kvindex.LookupOptions{KeyParams: p}), srcA); a.AnyBlocks != 2 {
		t.Fatalf("%+v", a)
	}
	p.CacheSalt = "other"
	if ms := ix.Lookup(prompt, kvindex.LookupOptions{KeyParams: p}); len(ms) != 0 {
		t.Fatalf("wrong salt matched: %+v", ms)
	}
}

func TestRefcountsMediaAndRemoval(t *testing.T) {
	ix := kvindex.New(kvindex.Config{BlockSize: bs})
	prompt := toks(2*bs, 1)
	stored := kveventstest.Stored{Hashes: []uint64{1, 2}, Tokens: prompt, BlockSize: bs}
	apply(t, ix, srcA, stored)
	apply(t, ix, srcA, stored)                                                     // duplicate store: vLLM does this
	apply(t, ix, srcA, kveventstest.Stored{Hashes: []uint64{1, 2}, Medium: "CPU"}) // hash-only tier copy
	look := func() kvindex.EndpointMatch { return matchOf(ix.Lookup(prompt, kvindex.LookupOptions{}), srcA) }
	if m := look(); m.Blocks != [3]int{2, 2, 0} {
		t.Fatalf("after stores: %+v", m)
	}
	apply(t, ix, srcA, kveventstest.Removed{Hashes: []uint64{1}, Medium: "GPU"})
	if m := look(); m.Blocks[kvevents.MediumGPU] != 2 {
		t.Fatalf("one of two copies removed, GPU must still hold: %+v", m)
	}
	apply(t, ix, srcA, kveventstest.Removed{Hashes: []uint64{1}, Medium: "GPU"})
	if m := look(); m.Blocks != [3]int{0, 2, 0} || m.AnyBlocks != 2 {
		t.Fatalf("GPU copy gone, CPU stays: %+v", m)
	}
	st := apply(t, ix, srcA, kveventstest.Removed{Hashes: []uint64{1, 2, 77}, Medium: "CPU"})
	if st.BlocksRemoved != 2 || st.Skipped != 1 {
		t.Fatalf("stats %+v", st)
	}
	if m := look(); m.Blocks != [3]int{0, 0, 0} || m.AnyBlocks != 0 {
		t.Fatalf("block 0 gone: %+v", m)
	}
	apply(t, ix, srcA, kveventstest.Removed{Hashes: []uint64{2, 2}, Medium: "GPU"})
	if s := ix.Stats(); s.Keys != 0 || s.Entries != 0 {
		t.Fatalf("index not empty: %+v", s)
	}
}

func TestSkipsWhatCannotBePlaced(t *testing.T) {
	ix := kvindex.New(kvindex.Config{BlockSize: bs})
	st := apply(t, ix, srcA,
		kveventstest.Stored{Hashes: []uint64{5}, Parent: ptr(4), Tokens: toks(bs, 0), BlockSize: bs}, // unknown parent
		kveventstest.Stored{Hashes: []uint64{6}, Tokens: toks(8, 0), BlockSize: 8},                   // other block size
		kveventstest.Stored{Hashes: []uint64{7}, Medium: "CPU"})                                      // unknown hash
	if st.Skipped != 3 || st.BlocksStored != 0 || ix.Stats().Keys != 0 {
		t.Fatalf("%+v %+v", st, ix.Stats())
	}
}

func TestClearAndRemoveEndpoint(t *testing.T) {
	ix := kvindex.New(kvindex.Config{BlockSize: bs})
	prompt := toks(bs, 1)
	r1 := kvindex.SourceID{Endpoint: "a", Rank: 1}
	for _, s := range []kvindex.SourceID{srcA, r1, srcB} {
		apply(t, ix, s, kveventstest.Stored{Hashes: []uint64{1}, Tokens: prompt, BlockSize: bs})
	}
	apply(t, ix, srcB, kveventstest.Cleared{})
	if ms := ix.Lookup(prompt, kvindex.LookupOptions{}); len(ms) != 2 {
		t.Fatalf("after AllBlocksCleared on b: %+v", ms)
	}
	ix.RemoveEndpoint("a")
	if ms := ix.Lookup(prompt, kvindex.LookupOptions{}); len(ms) != 0 {
		t.Fatalf("after RemoveEndpoint: %+v", ms)
	}
	if s := ix.Stats(); s.Keys != 0 || s.Entries != 0 || s.Sources != 1 {
		t.Fatalf("%+v", s)
	}
}

func TestPredictions(t *testing.T) {
	now := time.Unix(1000, 0)
	ix := kvindex.New(kvindex.Config{BlockSize: bs, PredictTTL: time.Second, Now: func() time.Time { return now }})
	prompt := toks(3*bs, 1)
	apply(t, ix, srcA, kveventstest.Stored{Hashes: []uint64{1}, Tokens: prompt[:bs], BlockSize: bs})
	ix.Predict(srcA, prompt, kvindex.KeyParams{})
	ix.Predict(srcB, prompt[:2*bs], kvindex.KeyParams{})
	ms := ix.Lookup(prompt, kvindex.LookupOptions{})
	if a := matchOf(ms, srcA); a.Blocks[kvevents.MediumGPU] != 1 || a.PredictedBlocks != 3 {
		t.Fatalf("a: %+v", a)
	}
	if b := matchOf(ms, srcB); b.AnyBlocks != 0 || b.PredictedBlocks != 2 {
		t.Fatalf("b: %+v", b)
	}
	// Events confirm block 1 of a, then the engine evicts it: the prediction must not mask it.
	apply(t, ix, srcA, kveventstest.Stored{Hashes: []uint64{2}, Parent: ptr(1), Tokens: prompt[bs : 2*bs], BlockSize: bs})
	apply(t, ix, srcA, kveventstest.Removed{Hashes: []uint64{2}})
	if a := matchOf(ix.Lookup(prompt, kvindex.LookupOptions{}), srcA); a.PredictedBlocks != 1 {
		t.Fatalf("confirmed-then-removed block still predicted: %+v", a)
	}
	now = now.Add(2 * time.Second)
	if b := matchOf(ix.Lookup(prompt, kvindex.LookupOptions{}), srcB); b.PredictedBlocks != 0 {
		t.Fatalf("expired prediction: %+v", b)
	}
}

// A request still queued in its engine keeps its prediction past PredictTTL; once it has started
// (settled), the unconfirmed rest expires like any prediction. A second request's plain
// prediction of the same blocks does not cut the first one's hold short.
func TestPendingPredictions(t *testing.T) {
	now := time.Unix(1000, 0)
	ix := kvindex.New(kvindex.Config{BlockSize: bs, PredictTTL: time.Second, PredictHold: time.Minute, Now: func() time.Time { return now }})
	prompt := toks(3*bs, 1)
	keys := kvindex.RequestKeys(nil, prompt, bs, kvindex.KeyParams{})
	ix.PredictPendingKeys(srcA, keys)
	ix.PredictKeys(srcA, keys[:1])
	ix.PredictKeys(srcB, keys)
	now = now.Add(30 * time.Second)
	ms := ix.Lookup(prompt, kvindex.LookupOptions{})
	if a := matchOf(ms, srcA); a.PredictedBlocks != 3 {
		t.Fatalf("pending prediction expired while its request waits: %+v", a)
	}
	if b := matchOf(ms, srcB); b.PredictedBlocks != 0 {
		t.Fatalf("plain prediction outlived PredictTTL: %+v", b)
	}
	// The request starts; the engine confirms its first block only.
	apply(t, ix, srcA, kveventstest.Stored{Hashes: []uint64{1}, Tokens: prompt[:bs], BlockSize: bs})
	ix.SettleKeys(srcA, keys)
	if a := matchOf(ix.Lookup(prompt, kvindex.LookupOptions{}), srcA); a.PredictedBlocks != 3 {
		t.Fatalf("settled prediction dropped before PredictTTL: %+v", a)
	}
	now = now.Add(2 * time.Second)
	if a := matchOf(ix.Lookup(prompt, kvindex.LookupOptions{}), srcA); a.Blocks[kvevents.MediumGPU] != 1 || a.PredictedBlocks != 1 {
		t.Fatalf("settled prediction outlived PredictTTL: %+v", a)
	}
	// Without a settle, the hold is still bounded.
	ix.PredictPendingKeys(srcB, keys)
	now = now.Add(2 * time.Minute)
	if b := matchOf(ix.Lookup(prompt, kvindex.LookupOptions{}), srcB); b.PredictedBlocks != 0 {
		t.Fatalf("pending prediction outlived PredictHold: %+v", b)
	}
}

func TestEvictionCap(t *testing.T) {
	ix := kvindex.New(kvindex.Config{BlockSize: bs, MaxKeys: 100})
	hot := toks(bs, 5000)
	apply(t, ix, srcA, kveventstest.Stored{Hashes: []uint64{1}, Tokens: hot, BlockSize: bs})
	for i := 0; i < 50; i++ {
		for j := 0; j < 10; j++ {
			ix.Lookup(hot, kvindex.LookupOptions{}) // keep it recently used
		}
		var hs []uint64
		for j := 0; j < 10; j++ {
			hs = append(hs, uint64(1000+i*10+j))
		}
		apply(t, ix, srcA, kveventstest.Stored{Hashes: hs, Tokens: toks(10*bs, uint32(i*10000)), BlockSize: bs})
	}
	s := ix.Stats()
	if s.Keys > 100 || s.Evictions < 400 {
		t.Fatalf("%+v", s)
	}
	if a := matchOf(ix.Lookup(hot, kvindex.LookupOptions{}), srcA); a.AnyBlocks != 1 {
		t.Fatalf("hot key evicted: %+v", a)
	}
	// Removing evicted blocks is harmless.
	apply(t, ix, srcA, kveventstest.Removed{Hashes: []uint64{1000, 1001}})
}

// TestManySources crosses the 64-source bitset word boundary twice and recycles ids.
func TestManySources(t *testing.T) {
	ix := kvindex.New(kvindex.Config{BlockSize: bs})
	prompt := toks(4*bs, 1)
	for i := 0; i < 150; i++ {
		src := kvindex.SourceID{Endpoint: fmt.Sprint("e", i)}
		n := 1 + i%4
		apply(t, ix, src, kveventstest.Stored{Hashes: []uint64{1, 2, 3, 4}[:n], Tokens: prompt[:n*bs], BlockSize: bs},
			kveventstest.Stored{Hashes: []uint64{1}, Medium: "CPU"})
	}
	check := func() {
		t.Helper()
		ms := ix.Lookup(prompt, kvindex.LookupOptions{})
		for _, m := range ms {
			var i int
			fmt.Sscanf(m.Source.Endpoint, "e%d", &i)
			if m.Blocks[kvevents.MediumGPU] != 1+i%4 || m.Blocks[kvevents.MediumCPU] != 1 {
				t.Fatalf("%+v", m)
			}
		}
	}
	check()
	for i := 0; i < 150; i += 3 {
		ix.RemoveEndpoint(fmt.Sprint("e", i))
	}
	if n := len(ix.Lookup(prompt, kvindex.LookupOptions{})); n != 100 {
		t.Fatalf("%d matches after removing 50 of 150", n)
	}
	for i := 150; i < 200; i++ { // reuse freed ids
		src := kvindex.SourceID{Endpoint: fmt.Sprint("e", i)}
		apply(t, ix, src, kveventstest.Stored{Hashes: []uint64{1, 2, 3, 4}[:1+i%4], Tokens: prompt[:(1+i%4)*bs], BlockSize: bs},
			kveventstest.Stored{Hashes: []uint64{1}, Medium: "CPU"})
	}
	check()
}

// TestExactness replays toy engines' event streams (stores, duplicates, LRU evictions, CPU tier,
// clears, restarts) into the index and compares it with the engines' real cache content.
func TestExactness(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	const nEng = 3
	ix := kvindex.New(kvindex.Config{BlockSize: bs})
	engines := make([]*kvindextest.Engine, nEng)
	for i := range engines {
		engines[i] = kvindextest.NewEngine(rnd, bs, 40, i%2 == 0)
	}
	next := kvindextest.Prompts(rnd, bs)
	var d kvevents.Decoder
	var b kvevents.Batch
	for step := 0; step < 3000; step++ {
		i := rnd.IntN(nEng)
		e, src := engines[i], kvindex.SourceID{Endpoint: fmt.Sprint("e", i)}
		switch x := rnd.IntN(100); {
		case x < 2:
			e.Restart()
			ix.ClearSource(src) // what the subscriber does when the sequence goes back
			continue
		case x < 3:
			e.Clear()
		case x < 10:
			e.Offload(3)
		default:
			e.Serve(next(), rnd.IntN(10) == 0)
		}
		if _, p, ok := e.Flush(float64(step)); ok {
			if err := d.Decode(p, &b); err != nil {
				t.Fatal(err)
			}
			if st := ix.Apply(src, &b); st.Skipped != 0 {
				t.Fatalf("step %d: %d blocks skipped", step, st.Skipped)
			}
		}
		if step%100 == 99 {
			for j, e := range engines {
				compare(t, ix, kvindex.SourceID{Endpoint: fmt.Sprint("e", j)}, e)
			}
		}
	}
}

func compare(t *testing.T, ix *kvindex.Index, src kvindex.SourceID, e *kvindextest.Engine) {
	t.Helper()
	want := e.Content()
	got := ix.SourceBlocks(src)
	if len(got) != len(want) {
		t.Fatalf("%v: index holds %d keys, engine %d", src, len(got), len(want))
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("%v: key %x: index %v, engine %v", src, k, got[k], w)
		}
	}
}

// TestConcurrentLookupsAndIngestion is for the race detector.
func TestConcurrentLookupsAndIngestion(t *testing.T) {
	ix := kvindex.New(kvindex.Config{BlockSize: bs, MaxKeys: 500})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 9))
			e := kvindextest.NewEngine(rnd, bs, 100, true)
			next := kvindextest.Prompts(rnd, bs)
			var d kvevents.Decoder
			var b kvevents.Batch
			src := kvindex.SourceID{Endpoint: fmt.Sprint("w", w)}
			for i := 0; i < 300; i++ {
				e.Serve(next(), false)
				if _, p, ok := e.Flush(0); ok && d.Decode(p, &b) == nil {
					ix.Apply(src, &b)
				}
				if i%100 == 50 {
					ix.RemoveEndpoint(src.Endpoint)
				}
			}
		}(w)
	}
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(r), 7))
			next := kvindextest.Prompts(rnd, bs)
			for {
				select {
				case <-stop:
					return
				default:
				}
				req := next()
				ix.Lookup(req.Tokens, kvindex.LookupOptions{KeyParams: req.KeyParams})
				ix.Predict(kvindex.SourceID{Endpoint: "w0"}, req.Tokens, req.KeyParams)
				_ = ix.Stats()
			}
		}(r)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
}

// TestLookupMatchesNaive checks Lookup against a direct computation from SourceBlocks on long
// prompts (many 32-block windows), 70 sources (two bitset words), holes, CPU copies and
// predictions.
func TestLookupMatchesNaive(t *testing.T) {
	for round := 0; round < 40; round++ {
		lookupMatchesNaive(t, uint64(round), []int{0, 40, 400, 4000}[round%4], round%3 == 0)
	}
}

// full makes every source hold the whole prompt on GPU, a third of them also a CPU copy of its
// first 40 blocks (long GPU runs, CPU matches running across windows).
func lookupMatchesNaive(t *testing.T, seed uint64, holeEvery int, full bool) {
	rnd := rand.New(rand.NewPCG(5, seed))
	const nBlocks, nSrc = 200, 70
	now := time.Unix(100, 0)
	ix := kvindex.New(kvindex.Config{BlockSize: bs, Now: func() time.Time { return now }})
	prompt := toks(nBlocks*bs, 3)
	keys := kvindex.RequestKeys(nil, prompt, bs, kvindex.KeyParams{})
	predicted := map[kvindex.SourceID]int{}
	for s := 0; s < nSrc; s++ {
		src := kvindex.SourceID{Endpoint: fmt.Sprint("s", s), Rank: s % 2}
		held := rnd.IntN(nBlocks + 1)
		if s%7 == 0 || full {
			held = nBlocks
		}
		st := kveventstest.Stored{BlockSize: bs, Tokens: prompt[:held*bs]}
		for j := 0; j < held; j++ {
			st.Hashes = append(st.Hashes, uint64(s*1000+j+1))
		}
		if held > 0 {
			apply(t, ix, src, st)
		}
		var ev []any
		if full && s%3 == 0 {
			cpu := kveventstest.Stored{Medium: "CPU"}
			for j := 0; j < 40; j++ {
				cpu.Hashes = append(cpu.Hashes, uint64(s*1000+j+1))
			}
			ev = append(ev, cpu)
		}
		for j := 0; j < held && holeEvery > 0; j++ {
			switch rnd.IntN(holeEvery) {
			case 0: // a hole on GPU (the block stays on CPU)
				ev = append(ev, kveventstest.Stored{Hashes: []uint64{uint64(s*1000 + j + 1)}, Medium: "CPU"},
					kveventstest.Removed{Hashes: []uint64{uint64(s*1000 + j + 1)}, Medium: "GPU"})
			case 1:
				ev = append(ev, kveventstest.Stored{Hashes: []uint64{uint64(s*1000 + j + 1)}, Medium: "STORAGE"})
			}
		}
		if len(ev) > 0 {
			apply(t, ix, src, ev...)
		}
		if s%5 == int(seed%5) {
			p := rnd.IntN(nBlocks + 1)
			ix.PredictKeys(src, keys[:p])
			predicted[src] = p
		}
	}
	got := map[kvindex.SourceID]kvindex.EndpointMatch{}
	for _, m := range ix.Lookup(prompt, kvindex.LookupOptions{}) {
		got[m.Source] = m
	}
	for s := 0; s < nSrc; s++ {
		src := kvindex.SourceID{Endpoint: fmt.Sprint("s", s), Rank: s % 2}
		blocks := ix.SourceBlocks(src)
		var want kvindex.EndpointMatch
		want.Source = src
		prefix := func(ok func(k kvindex.Key) bool) int {
			n := 0
			for n < len(keys) && ok(keys[n]) {
				n++
			}
			return n
		}
		for m := 0; m < 3; m++ {
			want.Blocks[m] = prefix(func(k kvindex.Key) bool { return blocks[k][m] })
		}
		want.AnyBlocks = prefix(func(k kvindex.Key) bool { b := blocks[k]; return b[0] || b[1] || b[2] })
		p := predicted[src]
		want.PredictedBlocks = 0
		for want.PredictedBlocks < len(keys) && (blocks[keys[want.PredictedBlocks]][0] || want.PredictedBlocks < p) {
			want.PredictedBlocks++
		}
		g, ok := got[src]
		if !ok {
			g.Source = src
		}
		if g != want {
			t.Fatalf("source %v: lookup %+v, want %+v", src, g, want)
		}
	}
}
