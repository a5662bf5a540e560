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
	"sync/atomic"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
)

// The node store holds one node per content key. It is laid out by hand (struct of arrays in
// fixed-size chunks, a 4-byte-slot hash table, residency as per-node source bitsets) because
// the index must hold millions of (block, endpoint) entries in well under 64 bytes each and
// answer a 6,250-block lookup against 100 endpoints in a fraction of a millisecond: a map entry
// per (block, endpoint) alone would spend most of the memory budget, and per-entry lists make
// lookups walk every (block, endpoint) instead of ANDing 64 endpoints at a time.
//
// Per node: its key (0 = free slot), a GPU bitset of W words (bit = source id), an optional
// "ext" record with the CPU and storage bitsets (most blocks never leave the GPU), and a 16-bit
// generation that source records carry so a record to an evicted node is recognised as stale.
// CLOCK reference bits (a second-chance approximation of LRU that lookups can set with one
// atomic OR under the read lock) drive eviction when MaxKeys is reached.

const (
	chunkShift = 12
	chunkSize  = 1 << chunkShift
	chunkMask  = chunkSize - 1
)

// record packs a source's view of one engine hash into 64 bits, the value of source.recs:
// node index (32) | node generation (16) | GPU refs (8) | CPU refs (4) | storage refs (4).
// Refcounts saturate: a block stored more than 255 (GPU) or 15 times stays until its source is
// cleared.
type record uint64

var (
	refShift = [kvevents.NumMedia]uint{48, 56, 60}
	refMax   = [kvevents.NumMedia]uint64{0xff, 0xf, 0xf}
)

func packRecord(node uint32, gen uint16) record {
	return record(uint64(node) | uint64(gen)<<32)
}
func (r record) node() uint32 { return uint32(r) }
func (r record) gen() uint16  { return uint16(r >> 32) }
func (r record) refs(m kvevents.Medium) uint64 {
	return uint64(r) >> refShift[m] & refMax[m]
}
func (r record) withRefs(m kvevents.Medium, v uint64) record {
	return record(uint64(r)&^(refMax[m]<<refShift[m]) | v<<refShift[m])
}
func (r record) anyRefs() bool { return uint64(r)>>48 != 0 }

type source struct {
	id   SourceID
	sid  uint16
	recs map[uint64]record // engine hash → record
}

func (ix *Index) nodeKey(n uint32) uint64 { return ix.keys[n>>chunkShift][n&chunkMask] }
func (ix *Index) nodeGen(n uint32) uint16 { return ix.gens[n>>chunkShift][n&chunkMask] }

func (ix *Index) gpuWords(n uint32) []uint64 {
	off := int(n&chunkMask) * ix.w
	return ix.gpu[n>>chunkShift][off : off+ix.w : off+ix.w]
}

// mediumWords returns node n's bitset for medium m, or nil if it has none.
func (ix *Index) mediumWords(n uint32, m kvevents.Medium) []uint64 {
	if m == kvevents.MediumGPU {
		return ix.gpuWords(n)
	}
	e := ix.exts[n>>chunkShift][n&chunkMask]
	if e == 0 {
		return nil
	}
	e--
	off := int(e&chunkMask)*2*ix.w + int(m-1)*ix.w
	return ix.extBits[e>>chunkShift][off : off+ix.w : off+ix.w]
}

// valid reports whether a record still points at a live node (not evicted since).
func (ix *Index) valid(r record) bool {
	n := r.node()
	return int(n) < ix.nodeCap && ix.nodeGen(n) == r.gen() && ix.nodeKey(n) != 0
}

func (ix *Index) touch(n uint32) {
	w := &ix.clock[n>>6]
	bit := uint64(1) << (n & 63)
	if atomic.LoadUint64(w)&bit == 0 {
		atomic.OrUint64(w, bit)
	}
}

// --- hash table: key → node, open addressing with linear probing; slots hold node+1 ---

func (ix *Index) find(k uint64) (uint32, bool) {
	if len(ix.table) == 0 {
		return 0, false
	}
	mask := uint64(len(ix.table) - 1)
	for i := k & mask; ; i = (i + 1) & mask {
		s := ix.table[i]
		if s == 0 {
			return 0, false
		}
		if ix.nodeKey(s-1) == k {
			return s - 1, true
		}
	}
}

func (ix *Index) tableInsert(k uint64, n uint32) {
	if (ix.tableN+1)*4 > len(ix.table)*3 {
		ix.tableGrow()
	}
	mask := uint64(len(ix.table) - 1)
	i := k & mask
	for ix.table[i] != 0 {
		i = (i + 1) & mask
	}
	ix.table[i] = n + 1
	ix.tableN++
}

func (ix *Index) tableGrow() {
	old := ix.table
	size := 1024
	if len(old) > 0 {
		size = 2 * len(old)
	}
	ix.table = make([]uint32, size)
	mask := uint64(size - 1)
	for _, s := range old {
		if s == 0 {
			continue
		}
		i := ix.nodeKey(s-1) & mask
		for ix.table[i] != 0 {
			i = (i + 1) & mask
		}
		ix.table[i] = s
	}
}

// tableDelete removes k with backward-shift deletion (no tombstones, so probes stay short).
func (ix *Index) tableDelete(k uint64) {
	mask := uint64(len(ix.table) - 1)
	i := k & mask
	for {
		s := ix.table[i]
		if s == 0 {
			return
		}
		if ix.nodeKey(s-1) == k {
			break
		}
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; ix.table[j] != 0; j = (j + 1) & mask {
		home := ix.nodeKey(ix.table[j]-1) & mask
		if (j-home)&mask >= (j-i)&mask {
			ix.table[i] = ix.table[j]
			i = j
		}
	}
	ix.table[i] = 0
	ix.tableN--
}

// --- node allocation and eviction ---

func (ix *Index) findOrCreate(k uint64) uint32 {
	if n, ok := ix.find(k); ok {
		return n
	}
	if ix.nodes >= ix.cfg.MaxKeys {
		ix.evictOne()
	}
	var n uint32
	if len(ix.free) > 0 {
		n = ix.free[len(ix.free)-1]
		ix.free = ix.free[:len(ix.free)-1]
	} else {
		if ix.nodeCap&chunkMask == 0 {
			ix.keys = append(ix.keys, make([]uint64, chunkSize))
			ix.gens = append(ix.gens, make([]uint16, chunkSize))
			ix.exts = append(ix.exts, make([]uint32, chunkSize))
			ix.gpu = append(ix.gpu, make([]uint64, chunkSize*ix.w))
			ix.clock = append(ix.clock, make([]uint64, chunkSize/64)...)
		}
		n = uint32(ix.nodeCap)
		ix.nodeCap++
	}
	ix.keys[n>>chunkShift][n&chunkMask] = k
	ix.nodes++
	ix.tableInsert(k, n)
	// No reference bit yet: a key earns it by a lookup or a repeated store, so a stream of
	// one-off stores cannot push out the keys routing actually uses.
	return n
}

// freeNode releases node n: its bitsets must already be empty or are dropped with it. Records
// still naming it become stale through the generation bump.
func (ix *Index) freeNode(n uint32) {
	ix.tableDelete(ix.nodeKey(n))
	clear(ix.gpuWords(n))
	ix.freeExt(n)
	ix.keys[n>>chunkShift][n&chunkMask] = 0
	ix.gens[n>>chunkShift][n&chunkMask]++
	atomic.AndUint64(&ix.clock[n>>6], ^(uint64(1) << (n & 63)))
	ix.free = append(ix.free, n)
	ix.nodes--
}

// evictOne evicts one key by CLOCK: sweep, clearing reference bits, until a node without one.
func (ix *Index) evictOne() {
	for tries := 0; tries <= 2*ix.nodeCap; tries++ {
		if ix.hand >= ix.nodeCap {
			ix.hand = 0
		}
		n := uint32(ix.hand)
		ix.hand++
		if ix.nodeKey(n) == 0 {
			continue
		}
		w := &ix.clock[n>>6]
		bit := uint64(1) << (n & 63)
		if atomic.LoadUint64(w)&bit != 0 {
			atomic.AndUint64(w, ^bit)
			continue
		}
		ix.freeNode(n)
		ix.metrics.evictions.Inc()
		ix.evictions++
		return
	}
}

func (ix *Index) nodeEmpty(n uint32) bool {
	for _, w := range ix.gpuWords(n) {
		if w != 0 {
			return false
		}
	}
	return ix.exts[n>>chunkShift][n&chunkMask] == 0
}

func (ix *Index) setBit(n uint32, m kvevents.Medium, sid uint16) {
	ws := ix.mediumWords(n, m)
	if ws == nil {
		ix.allocExt(n)
		ws = ix.mediumWords(n, m)
	}
	ws[sid>>6] |= 1 << (sid & 63)
}

// clearBit clears source sid's residency of node n on medium m and frees the node's ext record
// when its last CPU/storage bit goes.
func (ix *Index) clearBit(n uint32, m kvevents.Medium, sid uint16) {
	ws := ix.mediumWords(n, m)
	if ws == nil {
		return
	}
	ws[sid>>6] &^= 1 << (sid & 63)
	if m == kvevents.MediumGPU {
		return
	}
	e := ix.exts[n>>chunkShift][n&chunkMask] - 1
	off := int(e&chunkMask) * 2 * ix.w
	for _, w := range ix.extBits[e>>chunkShift][off : off+2*ix.w] {
		if w != 0 {
			return
		}
	}
	ix.freeExt(n)
}

func (ix *Index) allocExt(n uint32) {
	var e uint32
	if len(ix.extFree) > 0 {
		e = ix.extFree[len(ix.extFree)-1]
		ix.extFree = ix.extFree[:len(ix.extFree)-1]
	} else {
		if ix.extCap&chunkMask == 0 {
			ix.extBits = append(ix.extBits, make([]uint64, chunkSize*2*ix.w))
		}
		e = uint32(ix.extCap)
		ix.extCap++
	}
	ix.exts[n>>chunkShift][n&chunkMask] = e + 1
}

func (ix *Index) freeExt(n uint32) {
	e := ix.exts[n>>chunkShift][n&chunkMask]
	if e == 0 {
		return
	}
	e--
	off := int(e&chunkMask) * 2 * ix.w
	clear(ix.extBits[e>>chunkShift][off : off+2*ix.w])
	ix.exts[n>>chunkShift][n&chunkMask] = 0
	ix.extFree = append(ix.extFree, e)
}

// growWords widens every bitset to w words (more than 64*old sources). Rare: sources are
// recycled, so this happens when the fleet first exceeds a multiple of 64 sources.
func (ix *Index) growWords(w int) {
	old := ix.w
	for c, chunk := range ix.gpu {
		nc := make([]uint64, chunkSize*w)
		for i := 0; i < chunkSize; i++ {
			copy(nc[i*w:i*w+old], chunk[i*old:(i+1)*old])
		}
		ix.gpu[c] = nc
	}
	for c, chunk := range ix.extBits {
		nc := make([]uint64, chunkSize*2*w)
		for i := 0; i < chunkSize; i++ {
			copy(nc[2*i*w:2*i*w+old], chunk[2*i*old:2*i*old+old])
			copy(nc[2*i*w+w:2*i*w+w+old], chunk[2*i*old+old:2*(i+1)*old])
		}
		ix.extBits[c] = nc
	}
	ix.w = w
}
