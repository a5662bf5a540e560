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
	"slices"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
)

// Compaction gives back the node and spill stores' memory after occupancy falls (a replay burst
// or a fleet scale-down): freed node slots are otherwise only reused, never returned, so the
// stores would stay at their peak for good. It runs under the write lock, once live nodes are
// below a quarter of the slots, and costs one pass over the nodes and the source tables: the
// 1/4 threshold with a 1/2-full target means it runs at most once per (peak/4) removals, so its
// cost per removal is constant. BenchmarkCompactPause measures the pause.

// compactMinSlots keeps small stores (under 64K nodes: 1.1 MiB) from compacting at all: the
// pass is not worth it there. A variable so that tests can compact small indexes.
var compactMinSlots = 16 * chunkSize

func (ix *Index) maybeCompact() {
	if ix.nodeCap > compactMinSlots && 4*ix.nodes < ix.nodeCap {
		ix.compactNodes()
	}
	if ix.spillCap > compactMinSlots && 4*ix.spills < ix.spillCap {
		ix.compactSpill()
	}
	// A free list is as long as the store was high; keep its array no larger than needed.
	if c := cap(ix.free); c > 1024 && 4*len(ix.free) < c {
		ix.free = append([]uint32(nil), ix.free...)
	}
	if c := cap(ix.spillFree); c > 1024 && 4*len(ix.spillFree) < c {
		ix.spillFree = append([]uint32(nil), ix.spillFree...)
	}
}

// chunksFor is the chunks that hold n slots; none for none, so an emptied store is given back
// whole.
func chunksFor(n int) int { return (n + chunkMask) >> chunkShift }

// compactNodes moves live nodes above the new capacity into free slots below it, rewrites the
// records that name them, drops stale records (their nodes were evicted: past the new capacity
// their generations would be lost), and truncates the chunks.
func (ix *Index) compactNodes() {
	newCap := chunksFor(2*ix.nodes) << chunkShift
	if newCap >= ix.nodeCap {
		return
	}
	ix.compactions++
	// remap[n-newCap] is node n's new index.
	remap := make([]uint32, ix.nodeCap-newCap)
	free := ix.free[:0]
	next := 0 // next candidate free slot below newCap
	for n := newCap; n < ix.nodeCap; n++ {
		src := uint32(n)
		if ix.nodeKey(src) == 0 {
			continue
		}
		for ix.nodeKey(uint32(next)) != 0 {
			next++
		}
		dst := uint32(next)
		next++
		ix.keys[dst>>chunkShift][dst&chunkMask] = ix.nodeKey(src)
		ix.tableRename(ix.nodeKey(src), dst)
		*ix.holdWord(dst) = *ix.holdWord(src)
		// The slot's generation moves on, so records that named the slot's previous node stay
		// stale.
		ix.gens[dst>>chunkShift][dst&chunkMask]++
		if atomic.LoadUint64(&ix.clock[src>>6])&(1<<(src&63)) != 0 {
			ix.clock[dst>>6] |= 1 << (dst & 63)
		} else {
			ix.clock[dst>>6] &^= 1 << (dst & 63)
		}
		remap[n-newCap] = dst
	}
	for n := next; n < newCap; n++ {
		if ix.nodeKey(uint32(n)) == 0 {
			free = append(free, uint32(n))
		}
	}
	// Pop order: lowest slots first.
	for i, j := 0, len(free)-1; i < j; i, j = i+1, j-1 {
		free[i], free[j] = free[j], free[i]
	}
	ix.free = free
	for _, s := range ix.srcs {
		if s == nil {
			continue
		}
		t := &s.recs
		stale := 0
		for i := range t.slots {
			r := t.slots[i].r
			if r == 0 {
				continue
			}
			if !ix.valid(r) {
				stale++
				continue
			}
			if n := r.node(); int(n) >= newCap {
				dst := remap[int(n)-newCap]
				t.slots[i].r = packRecord(dst, ix.nodeGen(dst)) | r&^record(1<<48-1)
			}
		}
		if stale > 0 {
			ix.dropStale(t, newCap)
			ix.entries -= stale
		}
	}
	nc := newCap >> chunkShift
	clear(ix.keys[nc:])
	clear(ix.gens[nc:])
	clear(ix.hold[nc:])
	ix.keys, ix.gens, ix.hold = ix.keys[:nc:nc], ix.gens[:nc:nc], ix.hold[:nc:nc]
	ix.clock = slices.Clone(ix.clock[:newCap/64])
	ix.nodeCap = newCap
	ix.hand = 0
}

// tableRename points k's table slot at node n.
func (ix *Index) tableRename(k uint64, n uint32) {
	size := len(ix.table)
	for i := homeSlot(k, size); ; {
		if s := ix.table[i]; s != 0 && ix.slotKey(s) == k {
			ix.table[i] = s&^ix.nodeMask | (n + 1)
			return
		}
		if i++; i == size {
			i = 0
		}
	}
}

// dropStale rebuilds t without its stale records. Records already rewritten to moved nodes are
// valid against the compacted store; stale ones may name slots past newCap.
func (ix *Index) dropStale(t *recTable, newCap int) {
	old := t.slots
	kept := 0
	for _, sl := range old {
		if sl.r != 0 && int(sl.r.node()) < newCap && ix.valid(sl.r) {
			kept++
		}
	}
	t.slots = make([]recSlot, fitSlots(kept))
	t.n = kept
	for _, sl := range old {
		if sl.r != 0 && int(sl.r.node()) < newCap && ix.valid(sl.r) {
			t.place(sl.h, sl.r)
		}
	}
}

// compactSpill moves spilled bitsets above the new capacity into free slots below it.
func (ix *Index) compactSpill() {
	newCap := chunksFor(2*ix.spills) << chunkShift
	if newCap >= ix.spillCap {
		return
	}
	stride := int(kvevents.NumMedia) * ix.w
	used := make([]bool, newCap)
	type move struct {
		node uint32
		from uint32
	}
	var moves []move
	for n := 0; n < ix.nodeCap; n++ {
		h := *ix.holdWord(uint32(n))
		if h&holdSpill == 0 {
			continue
		}
		if e := uint32(h); int(e) < newCap {
			used[e] = true
		} else {
			moves = append(moves, move{uint32(n), e})
		}
	}
	next := 0
	for _, mv := range moves {
		for used[next] {
			next++
		}
		used[next] = true
		to := uint32(next)
		copy(ix.spill[to>>chunkShift][int(to&chunkMask)*stride:][:stride],
			ix.spill[mv.from>>chunkShift][int(mv.from&chunkMask)*stride:][:stride])
		hp := ix.holdWord(mv.node)
		*hp = *hp&^(1<<32-1) | uint64(to)
	}
	free := ix.spillFree[:0]
	for e := newCap - 1; e >= 0; e-- {
		if !used[e] {
			free = append(free, uint32(e))
		}
	}
	ix.spillFree = free
	nc := newCap >> chunkShift
	clear(ix.spill[nc:])
	ix.spill = ix.spill[:nc:nc]
	ix.spillCap = newCap
}

// retainedBytes is the memory the structure holds, from its capacities (not the heap): tests
// use it to check that memory comes back, deterministically.
func (ix *Index) retainedBytes() int {
	b := len(ix.keys)*chunkSize*(8+2+8) + 8*cap(ix.clock) + 4*cap(ix.free) + 4*len(ix.table)
	b += 8*len(ix.spill)*chunkSize*int(kvevents.NumMedia)*ix.w + 4*cap(ix.spillFree)
	for _, s := range ix.srcs {
		if s != nil {
			b += 16 * len(s.recs.slots)
		}
	}
	return b + 24*len(ix.pred.slots)
}
