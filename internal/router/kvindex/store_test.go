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

package kvindex

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
)

// The engine-hash table behaves like a map under random inserts, updates and deletes, stays
// between a fifth and four fifths full, and gives its slots back when emptied.
func TestRecTableMatchesMap(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 1))
	var tb recTable
	model := map[uint64]record{}
	for round := 0; round < 4; round++ {
		// Grow to a few thousand entries, then empty again; structured and random hashes.
		target := 100 << (2 * round)
		for step := 0; step < 6*target; step++ {
			h := uint64(rnd.IntN(2 * target))
			if round%2 == 1 {
				h = rnd.Uint64()%uint64(2*target) | uint64(round)<<40
			}
			growing := step < 3*target
			switch _, ok := model[h]; {
			case !ok && growing:
				r := record(rnd.Uint64() | 1)
				tb.insert(h, r)
				model[h] = r
			case ok && rnd.IntN(3) == 0:
				r := record(rnd.Uint64() | 1)
				tb.slots[tb.find(h)].r = r
				model[h] = r
			case ok && (!growing || rnd.IntN(3) == 0):
				tb.delAt(tb.find(h))
				delete(model, h)
			}
			if tb.n != len(model) || full(tb.n, len(tb.slots)) || sparse(tb.n, len(tb.slots)) && tb.n > 0 {
				t.Fatalf("round %d step %d: %d entries in %d slots, model %d", round, step, tb.n, len(tb.slots), len(model))
			}
		}
		for h := range model {
			tb.delAt(tb.find(h))
			delete(model, h)
		}
		if tb.n != 0 || len(tb.slots) > minTableSlots {
			t.Fatalf("emptied: %d entries in %d slots", tb.n, len(tb.slots))
		}
		for h := 0; h < 4*target; h++ {
			want, ok := model[uint64(h)]
			if got, gok := tb.get(uint64(h)); gok != ok || got != want {
				t.Fatalf("get %d: %v %v, want %v %v", h, got, gok, want, ok)
			}
		}
	}
}

// newTestIndex returns an index with nSrc sources (ids 0..nSrc-1).
func newTestIndex(nSrc int) *Index {
	ix := New(Config{BlockSize: 4})
	for i := 0; i < nSrc; i++ {
		ix.sourceFor(SourceID{Endpoint: fmt.Sprint("e", i)})
	}
	return ix
}

// checkHolders compares node n's holders with the model (sid → media mask) and checks the
// representation: inline up to inlineMax holders, spilled past it, inline again at unspillMax.
func checkHolders(t *testing.T, ix *Index, n uint32, model map[uint16]uint64, wasSpilled bool) {
	t.Helper()
	ws := make([]uint64, ix.w)
	for m := kvevents.Medium(0); m < kvevents.NumMedia; m++ {
		ix.holderWords(n, m, ws)
		want := make([]uint64, ix.w)
		for sid, mask := range model {
			if mask>>m&1 != 0 {
				want[sid>>6] |= 1 << (sid & 63)
			}
			if ix.holds(n, m, sid) != (mask>>m&1 != 0) {
				t.Fatalf("holds(%d, %d, %d) wrong, model %v", n, m, sid, model)
			}
		}
		if !slices.Equal(ws, want) {
			t.Fatalf("node %d medium %d: holders %x, want %x", n, m, ws, want)
		}
	}
	gpu := make([]uint64, ix.w)
	ext := ix.gpuHolders(n, gpu)
	ix.holderWords(n, kvevents.MediumGPU, ws)
	wantExt := false
	for _, mask := range model {
		wantExt = wantExt || mask&^1 != 0
	}
	if !slices.Equal(gpu, ws) || ext != wantExt {
		t.Fatalf("gpuHolders: %x %v, want %x %v", gpu, ext, ws, wantExt)
	}
	spilled := *ix.holdWord(n)&holdSpill != 0
	switch {
	case len(model) > inlineMax && !spilled:
		t.Fatalf("%d holders inline", len(model))
	case len(model) <= unspillMax && spilled:
		t.Fatalf("%d holders still spilled", len(model))
	case len(model) == inlineMax && spilled != wasSpilled:
		t.Fatalf("3 holders: spilled %v, was %v (no hysteresis)", spilled, wasSpilled)
	}
	if ix.nodeEmpty(n) != (len(model) == 0) {
		t.Fatalf("nodeEmpty %v with %d holders", ix.nodeEmpty(n), len(model))
	}
}

// Holders spill to bitsets past three and come back inline at two, across source ids in
// several bitset words, with media set and cleared at random, and survive the bitsets
// widening while spilled.
func TestHoldersMatchModel(t *testing.T) {
	rnd := rand.New(rand.NewPCG(2, 3))
	ix := newTestIndex(130)
	const nNodes = 8
	models := make([]map[uint16]uint64, nNodes)
	spilled := make([]bool, nNodes)
	nodes := make([]uint32, nNodes)
	for i := range nodes {
		nodes[i] = ix.findOrCreate(uint64(i + 1))
		models[i] = map[uint16]uint64{}
	}
	nSrc := 130
	for step := 0; step < 20000; step++ {
		if step == 10000 { // widen the bitsets while nodes are spilled
			for ; nSrc < 200; nSrc++ {
				ix.sourceFor(SourceID{Endpoint: fmt.Sprint("e", nSrc)})
			}
		}
		i := rnd.IntN(nNodes)
		// Node i draws from few sources when i is even (stays near the spill threshold).
		span := nSrc
		if i%2 == 0 {
			span = 6
		}
		sid := uint16(rnd.IntN(span) * (nSrc / span))
		m := kvevents.Medium(rnd.IntN(int(kvevents.NumMedia)))
		if rnd.IntN(2) == 0 {
			ix.setBit(nodes[i], m, sid)
			models[i][sid] |= 1 << m
		} else {
			ix.clearBit(nodes[i], m, sid)
			if models[i][sid] &^= 1 << m; models[i][sid] == 0 {
				delete(models[i], sid)
			}
		}
		checkHolders(t, ix, nodes[i], models[i], spilled[i])
		spilled[i] = *ix.holdWord(nodes[i])&holdSpill != 0
	}
	live := 0
	for _, s := range spilled {
		if s {
			live++
		}
	}
	if ix.spills != live {
		t.Fatalf("%d spill slots held, %d nodes spilled", ix.spills, live)
	}
}

// Through the public API: a block held by 150 endpoints spills, every holder is found with its
// media, and as the holders leave it comes back inline and is finally freed.
func TestHolderSpillThroughApply(t *testing.T) {
	ix := New(Config{BlockSize: 4})
	tokens := []uint32{1, 2, 3, 4}
	key := RequestKeys(nil, tokens, 4, KeyParams{})[0]
	stored := func(h uint64, m kvevents.Medium, toks []uint32) *kvevents.Batch {
		ev := kvevents.Event{Kind: kvevents.KindBlockStored, BlockHashes: []uint64{h}, Medium: m}
		if toks != nil {
			ev.BlockSize, ev.TokenIDs = 4, toks
		}
		return &kvevents.Batch{Events: []kvevents.Event{ev}}
	}
	const nSrc = 150
	src := func(i int) SourceID { return SourceID{Endpoint: fmt.Sprint("e", i)} }
	check := func(n int) {
		t.Helper()
		ms := ix.LookupKeys([]Key{key})
		if len(ms) != n {
			t.Fatalf("%d holders found, want %d", len(ms), n)
		}
		for _, m := range ms {
			var i int
			fmt.Sscanf(m.Source.Endpoint, "e%d", &i)
			if m.Blocks[kvevents.MediumGPU] != 1 || m.Blocks[kvevents.MediumCPU] != i%2 {
				t.Fatalf("%+v", m)
			}
		}
		node, ok := ix.find(uint64(key))
		if n == 0 {
			if ok || ix.Stats().Keys != 0 || ix.spills != 0 {
				t.Fatalf("node left: %v %+v, %d spills", ok, ix.Stats(), ix.spills)
			}
			return
		}
		if sp := *ix.holdWord(node)&holdSpill != 0; sp != (n > inlineMax) && n != inlineMax {
			t.Fatalf("%d holders, spilled %v", n, sp)
		}
	}
	for i := 0; i < nSrc; i++ {
		ix.Apply(src(i), stored(uint64(i+1), kvevents.MediumGPU, tokens))
		if i%2 == 1 {
			ix.Apply(src(i), stored(uint64(i+1), kvevents.MediumCPU, nil))
		}
		check(i + 1)
	}
	for i := nSrc - 1; i >= 0; i-- {
		ix.Apply(src(i), &kvevents.Batch{Events: []kvevents.Event{
			{Kind: kvevents.KindBlockRemoved, BlockHashes: []uint64{uint64(i + 1)}, Medium: kvevents.MediumGPU},
			{Kind: kvevents.KindBlockRemoved, BlockHashes: []uint64{uint64(i + 1)}, Medium: kvevents.MediumCPU},
		}})
		check(i)
	}
}

// modelEntry is one (source, engine hash) record of the reference model.
type modelEntry struct {
	key  Key
	refs [kvevents.NumMedia]int
}

// The index matches a map-based model under random stores (new content, shared content,
// duplicates, hash reuse for other content, hash-only tier copies), removals, clears and
// endpoint removals, with compaction forced on small stores so that it runs many times.
func TestIndexMatchesModel(t *testing.T) {
	defer func(v int) { compactMinSlots = v }(compactMinSlots)
	compactMinSlots = 0
	for seed := uint64(0); seed < 4; seed++ {
		// Even seeds: 400 contents, blocks shared by many sources (spilled holders); odd seeds:
		// 40,000, mostly one holder per block, enough nodes for the node store to compact.
		pool := 400
		if seed%2 == 1 {
			pool = 40000
		}
		indexMatchesModel(t, seed, pool)
	}
}

func indexMatchesModel(t *testing.T, seed uint64, pool int) {
	rnd := rand.New(rand.NewPCG(seed, 99))
	ix := New(Config{BlockSize: 4})
	const nSrc = 70
	model := make([]map[uint64]*modelEntry, nSrc)
	for i := range model {
		model[i] = map[uint64]*modelEntry{}
	}
	src := func(i int) SourceID { return SourceID{Endpoint: fmt.Sprint("e", i%35), Rank: i / 35} }
	// Contents: a pool of blocks, shared by up to all sources when the pool is small.
	content := func(c int) []uint32 { return []uint32{uint32(c), 7, 8, uint32(c * 3)} }
	keyOf := func(c int) Key { return RequestKeys(nil, content(c), 4, KeyParams{})[0] }
	peak := 0
	for step := 0; step < 30000; step++ {
		s := rnd.IntN(nSrc)
		// Early steps mostly store, later ones mostly remove, so the index grows and shrinks.
		storeBias := 7
		if step%10000 > 5000 {
			storeBias = 3
		}
		m := kvevents.Medium(0)
		if rnd.IntN(4) == 0 {
			m = kvevents.Medium(1 + rnd.IntN(2))
		}
		h := uint64(rnd.IntN(600)) + uint64(s)<<20
		switch op := rnd.IntN(10); {
		case op < storeBias && m == kvevents.MediumGPU:
			c := rnd.IntN(pool)
			if heldElsewhere(model[s], h, keyOf(c)) {
				continue
			}
			ix.Apply(src(s), &kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.KindBlockStored,
				BlockHashes: []uint64{h}, BlockSize: 4, TokenIDs: content(c), Medium: m}}})
			e := model[s][h]
			if e == nil || e.key != keyOf(c) {
				e = &modelEntry{key: keyOf(c)}
				model[s][h] = e
			}
			e.refs[m]++
		case op < storeBias: // a tier copy of a block the source holds, by engine hash
			ix.Apply(src(s), &kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.KindBlockStored,
				BlockHashes: []uint64{h}, Medium: m}}})
			if e := model[s][h]; e != nil {
				e.refs[m]++
			}
		case op < 9:
			ix.Apply(src(s), &kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.KindBlockRemoved,
				BlockHashes: []uint64{h}, Medium: m}}})
			if e := model[s][h]; e != nil && e.refs[m] > 0 {
				if e.refs[m]--; e.refs == [kvevents.NumMedia]int{} {
					delete(model[s], h)
				}
			}
		case rnd.IntN(20) == 0:
			ix.ClearSource(src(s))
			clear(model[s])
		case rnd.IntN(40) == 0:
			ix.RemoveEndpoint(src(s).Endpoint)
			clear(model[s%35])
			clear(model[s%35+35])
		}
		peak = max(peak, ix.retainedBytes())
		if step%1500 == 0 || step == 29999 {
			compareWithModel(t, ix, model, src, rnd)
		}
	}
	// Empty it: everything but the sources' ids is given back.
	for i := 0; i < 35; i++ {
		ix.RemoveEndpoint(src(i).Endpoint)
	}
	if st := ix.Stats(); st.Keys != 0 || st.Entries != 0 || ix.spills != 0 {
		t.Fatalf("emptied: %+v, %d spills", st, ix.spills)
	}
	if got := ix.retainedBytes(); got*4 > peak {
		t.Fatalf("retained %d bytes after emptying, peak %d", got, peak)
	}
	if pool > 400 && ix.compactions == 0 {
		t.Fatalf("the node store never compacted (peak %d bytes)", peak)
	}
}

// heldElsewhere reports whether the source holds key k under another hash than h. The index
// keeps one residency bit per (source, key), not a count of the source's hashes for it (as
// before this layout): engines name one content by one hash, so the model does not go there.
func heldElsewhere(src map[uint64]*modelEntry, h uint64, k Key) bool {
	for h2, e := range src {
		if h2 != h && e.key == k {
			return true
		}
	}
	return false
}

func compareWithModel(t *testing.T, ix *Index, model []map[uint64]*modelEntry, src func(int) SourceID, rnd *rand.Rand) {
	t.Helper()
	entries := 0
	keys := map[Key]bool{}
	for s := range model {
		entries += len(model[s])
		want := map[Key][kvevents.NumMedia]bool{}
		for _, e := range model[s] {
			v := want[e.key]
			for m, r := range e.refs {
				v[m] = v[m] || r > 0
			}
			want[e.key] = v
			keys[e.key] = true
		}
		if got := ix.SourceBlocks(src(s)); !maps.Equal(got, want) {
			t.Fatalf("source %d: %d blocks, want %d", s, len(got), len(want))
		}
		for m := kvevents.Medium(0); m < kvevents.NumMedia; m++ {
			var hs []uint64
			for h, e := range model[s] {
				if e.refs[m] > 0 {
					hs = append(hs, h)
				}
			}
			slices.Sort(hs)
			if got := ix.SourceHashes(src(s), m); !slices.Equal(got, append([]uint64{}, hs...)) {
				t.Fatalf("source %d medium %d: hashes %v, want %v", s, m, got, hs)
			}
		}
	}
	if st := ix.Stats(); st.Entries != entries || st.Keys != len(keys) {
		t.Fatalf("stats %+v, model %d entries %d keys", st, entries, len(keys))
	}
	// Keys' holders through the lookup path (a sample: a lookup per key is slow here).
	for k := range keys {
		if rnd.IntN(len(keys)) >= 200 {
			continue
		}
		got := map[SourceID][kvevents.NumMedia]int{}
		for _, m := range ix.LookupKeys([]Key{k}) {
			got[m.Source] = m.Blocks
		}
		want := map[SourceID][kvevents.NumMedia]int{}
		for s := range model {
			var v [kvevents.NumMedia]int
			held := false
			for _, e := range model[s] {
				if e.key != k {
					continue
				}
				for m, r := range e.refs {
					if r > 0 {
						v[m], held = 1, true
					}
				}
			}
			if held {
				want[src(s)] = v
			}
		}
		if !maps.Equal(got, want) {
			t.Fatalf("key %x: lookup %v, want %v", k, got, want)
		}
	}
}

// After a burst is removed, compaction gives the node store's memory back and the index still
// answers for what is left.
func TestCompactionReturnsMemory(t *testing.T) {
	defer func(v int) { compactMinSlots = v }(compactMinSlots)
	compactMinSlots = 4 * chunkSize
	ix := New(Config{BlockSize: 4})
	const nSrc, perSrc = 40, 3000
	srcs := make([]SourceID, nSrc)
	for s := range srcs {
		srcs[s] = SourceID{Endpoint: fmt.Sprint("e", s)}
		ev := kvevents.Event{Kind: kvevents.KindBlockStored, BlockSize: 4}
		for j := 0; j < perSrc; j++ {
			ev.BlockHashes = append(ev.BlockHashes, uint64(j+1))
			ev.TokenIDs = append(ev.TokenIDs, uint32(s), uint32(j), 0, 0)
		}
		ix.Apply(srcs[s], &kvevents.Batch{Events: []kvevents.Event{ev}})
	}
	peak := ix.retainedBytes()
	// Keep every 20th block of each source.
	for s := range srcs {
		ev := kvevents.Event{Kind: kvevents.KindBlockRemoved}
		for j := 0; j < perSrc; j++ {
			if j%20 != 0 {
				ev.BlockHashes = append(ev.BlockHashes, uint64(j+1))
			}
		}
		ix.Apply(srcs[s], &kvevents.Batch{Events: []kvevents.Event{ev}})
	}
	after := ix.retainedBytes()
	if after*5 > peak {
		t.Fatalf("retained %d bytes of a %d-byte peak after removing 95%%", after, peak)
	}
	if ix.nodeCap >= nSrc*perSrc/2 {
		t.Fatalf("node store not compacted: %d slots for %d nodes", ix.nodeCap, ix.nodes)
	}
	for s := range srcs {
		got := ix.SourceBlocks(srcs[s])
		if len(got) != perSrc/20 {
			t.Fatalf("source %d holds %d blocks", s, len(got))
		}
		var toks []uint32
		for j := 0; j < perSrc; j++ {
			toks = append(toks, uint32(s), uint32(j), 0, 0)
		}
		keys := RequestKeys(nil, toks, 4, KeyParams{}) // the event's blocks chain
		for j := 0; j < perSrc; j += 20 {
			k := keys[j]
			if !got[k][kvevents.MediumGPU] {
				t.Fatalf("source %d block %d missing from SourceBlocks", s, j)
			}
			ms := ix.LookupKeys([]Key{k})
			if len(ms) != 1 || ms[0].Source != srcs[s] || ms[0].Blocks[kvevents.MediumGPU] != 1 {
				t.Fatalf("source %d block %d: %+v", s, j, ms)
			}
		}
	}
}

// Records left stale by evictions (the MaxKeys cap) are dropped by compaction, which must not
// let them alias the nodes it moves.
func TestCompactionAfterEvictions(t *testing.T) {
	defer func(v int) { compactMinSlots = v }(compactMinSlots)
	compactMinSlots = 0
	const total, capKeys = 20000, 9000
	ix := New(Config{BlockSize: 4, MaxKeys: capKeys})
	src := SourceID{Endpoint: "a"}
	var toks []uint32
	ev := kvevents.Event{Kind: kvevents.KindBlockStored, BlockSize: 4}
	for j := 0; j < total; j++ {
		ev.BlockHashes = append(ev.BlockHashes, uint64(j+1))
		toks = append(toks, uint32(j), 1, 2, 3)
	}
	ev.TokenIDs = toks
	ix.Apply(src, &kvevents.Batch{Events: []kvevents.Event{ev}})
	keys := RequestKeys(nil, toks, 4, KeyParams{})
	if st := ix.Stats(); st.Keys != capKeys || st.Entries != total {
		t.Fatalf("%+v", st)
	}
	// Remove all but the last 500 blocks by hash, stale ones included.
	rm := kvevents.Event{Kind: kvevents.KindBlockRemoved}
	for j := 0; j < total-500; j++ {
		rm.BlockHashes = append(rm.BlockHashes, uint64(j+1))
	}
	ix.Apply(src, &kvevents.Batch{Events: []kvevents.Event{rm}})
	if ix.compactions == 0 {
		t.Fatal("no compaction")
	}
	hs := ix.SourceHashes(src, kvevents.MediumGPU)
	if st := ix.Stats(); st.Keys != 500 || st.Entries != 500 || len(hs) != 500 {
		t.Fatalf("%+v, %d hashes", st, len(hs))
	}
	for j := total - 500; j < total; j++ {
		ms := ix.LookupKeys(keys[j : j+1])
		if len(ms) != 1 || ms[0].Blocks[kvevents.MediumGPU] != 1 || hs[j-(total-500)] != uint64(j+1) {
			t.Fatalf("block %d: %+v", j, ms)
		}
	}
	// The stored blocks chain: a store continuing the last block resolves its parent.
	next := kvevents.Event{Kind: kvevents.KindBlockStored, BlockSize: 4, HasParent: true,
		ParentHash: total, BlockHashes: []uint64{total + 1}, TokenIDs: []uint32{9, 9, 9, 9}}
	if st := ix.Apply(src, &kvevents.Batch{Events: []kvevents.Event{next}}); st.BlocksStored != 1 {
		t.Fatalf("%+v", st)
	}
}
