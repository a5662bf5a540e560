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
	"math/bits"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
)

// The node store holds one node per content key. It is laid out by hand (struct of arrays in
// fixed-size chunks, 4-byte-slot hash tables, holders packed into one word per node) because
// the index must hold millions of (block, endpoint) entries in a few dozen bytes each and
// answer a 6,250-block lookup against 100 endpoints in a fraction of a millisecond: a map entry
// per (block, endpoint) alone would spend most of the memory budget, and per-entry pointers
// would make the garbage collector scan millions of objects. Nothing here holds a pointer.
//
// Per node: its key (0 = free slot), a 16-bit generation that source records carry so a record
// to an evicted node is recognised as stale, and a holder word. Most blocks have one to three
// holders whatever the fleet size, so the holder word lists up to three (source id, media
// mask) pairs inline; a fourth holder spills the node to per-medium bitsets (one bit per source
// id) in a side store, and the node comes back inline when it is down to two holders (the gap
// keeps a block that flaps between three and four holders from copying back and forth). A
// bitset per node as wide as the fleet (the earlier layout) cost 16 B per block at 100
// endpoints and 128 B at 1,000 even for blocks one endpoint holds.
// CLOCK reference bits (a second-chance approximation of LRU that lookups can set with one
// atomic OR under the read lock) drive eviction when MaxKeys is reached.
//
// Memory is given back when occupancy falls: hash tables shrink when a quarter full or less,
// and the node and spill stores are compacted (see compact.go) when live nodes fall below a
// quarter of the slots ever allocated, since a replay burst must not pin its peak for good.

const (
	chunkShift = 12
	chunkSize  = 1 << chunkShift
	chunkMask  = chunkSize - 1
)

// record packs a source's view of one engine hash into 64 bits:
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
	recs recTable // engine hash → record
}

// --- hash tables ---
//
// Both tables use linear probing with backward-shift deletion (no tombstones) over a slot
// count that need not be a power of two: the home slot is the high half of hash × size, so a
// table grows by half (at 75% full) instead of doubling, and shrinks to half full when it falls
// to a fifth full. Doubling tables spend between 1.33 and 2.67 slots per entry depending on
// where the growth happens to sit, which is what made the old per-entry figure depend on the
// entry count; growing by half keeps it between 1.33 and 2, by a quarter (source tables)
// between 1.33 and 1.67. (At 80% full the probe runs a deletion walks made single-source
// ingestion 20-30% slower.)

const (
	minTableSlots = 16
	growNum       = 3 // the content table grows by growNum/growDen
	growDen       = 2
	// Source tables grow by a quarter: they hold every (block, endpoint) entry, so their slack
	// is most of the index's; the extra rehashing happens while a source fills, not in the
	// steady state where blocks come and go.
	recGrowNum = 5
	recGrowDen = 4
)

func homeSlot(x uint64, size int) int {
	hi, _ := bits.Mul64(x, uint64(size))
	return int(hi)
}

// cyclicDist is how far slot b lies after slot a, wrapping at size (no division: deletions
// evaluate it for every slot of a probe run).
func cyclicDist(a, b, size int) int {
	if d := b - a; d >= 0 {
		return d
	}
	return b - a + size
}

func full(n, size int) bool   { return 4*n > 3*size }
func sparse(n, size int) bool { return size > minTableSlots && 5*n < size }

// fitSlots is the slot count that holds n entries half full.
func fitSlots(n int) int { return max(minTableSlots, 2*n) }

// mixHash spreads engine hashes, which need not be random (tests and some engines number
// their blocks), before they pick a home slot.
func mixHash(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}

// recSlot is a slot of a source's table; r == 0 marks it empty (a held record always counts
// at least one reference).
type recSlot struct {
	h uint64
	r record
}

// recTable maps a source's engine hashes to records: 16 bytes a slot, no per-entry
// allocation, unlike the Go map it replaces, which also never gave memory back.
type recTable struct {
	slots []recSlot
	n     int
}

func (t *recTable) home(h uint64) int { return homeSlot(mixHash(h), len(t.slots)) }

// find returns the slot holding h, or -1.
func (t *recTable) find(h uint64) int {
	if t.n == 0 {
		return -1
	}
	size := len(t.slots)
	for i := t.home(h); ; {
		s := &t.slots[i]
		if s.r == 0 {
			return -1
		}
		if s.h == h {
			return i
		}
		if i++; i == size {
			i = 0
		}
	}
}

func (t *recTable) get(h uint64) (record, bool) {
	if i := t.find(h); i >= 0 {
		return t.slots[i].r, true
	}
	return 0, false
}

// insert adds h, which must not be in the table, with record r != 0.
func (t *recTable) insert(h uint64, r record) {
	if full(t.n+1, len(t.slots)) {
		t.resize(max(minTableSlots, len(t.slots)*recGrowNum/recGrowDen))
	}
	t.place(h, r)
	t.n++
}

func (t *recTable) place(h uint64, r record) {
	size := len(t.slots)
	i := t.home(h)
	for t.slots[i].r != 0 {
		if i++; i == size {
			i = 0
		}
	}
	t.slots[i] = recSlot{h, r}
}

// delAt empties slot i and may shrink the table (slot indices are then invalid).
func (t *recTable) delAt(i int) {
	size := len(t.slots)
	for j := i + 1; ; j++ {
		if j == size {
			j = 0
		}
		s := t.slots[j]
		if s.r == 0 {
			break
		}
		// s may move back to i unless its home lies cyclically in (i, j].
		if cyclicDist(t.home(s.h), j, size) >= cyclicDist(i, j, size) {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = recSlot{}
	t.n--
	if sparse(t.n, size) {
		t.resize(fitSlots(t.n))
	}
}

func (t *recTable) resize(size int) {
	old := t.slots
	if t.n == 0 {
		size = min(size, minTableSlots)
	}
	t.slots = make([]recSlot, size)
	for _, s := range old {
		if s.r != 0 {
			t.place(s.h, s.r)
		}
	}
}

func (ix *Index) nodeKey(n uint32) uint64 { return ix.keys[n>>chunkShift][n&chunkMask] }
func (ix *Index) nodeGen(n uint32) uint16 { return ix.gens[n>>chunkShift][n&chunkMask] }

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

// --- content table: key → node ---
//
// A slot holds node+1 in its low ix.nodeBits bits (enough for MaxKeys nodes) and, in the bits
// left over, a tag from the key's low bits. A probe that meets another key's slot is then
// rejected without loading that node's key (a cache miss into the key chunks) except once in
// 2^tagBits: with the table up to 75% full a lookup meets about 1.5 other keys per probe, and
// those loads were what made a lookup slower than with the half-empty doubling table.

func (ix *Index) slotTag(k uint64) uint32  { return uint32(k) << ix.nodeBits }
func (ix *Index) slotNode(s uint32) uint32 { return s&ix.nodeMask - 1 }
func (ix *Index) slotKey(s uint32) uint64  { return ix.nodeKey(ix.slotNode(s)) }

func (ix *Index) find(k uint64) (uint32, bool) {
	size := len(ix.table)
	if size == 0 {
		return 0, false
	}
	tag, tagMask := ix.slotTag(k), ^ix.nodeMask
	for i := homeSlot(k, size); ; {
		s := ix.table[i]
		if s == 0 {
			return 0, false
		}
		if s&tagMask == tag && ix.slotKey(s) == k {
			return ix.slotNode(s), true
		}
		if i++; i == size {
			i = 0
		}
	}
}

func (ix *Index) tableInsert(k uint64, n uint32) {
	if full(ix.tableN+1, len(ix.table)) {
		ix.tableResize(max(minTableSlots, len(ix.table)*growNum/growDen))
	}
	ix.tablePlace(k, n+1|ix.slotTag(k))
	ix.tableN++
}

func (ix *Index) tablePlace(k uint64, s uint32) {
	size := len(ix.table)
	i := homeSlot(k, size)
	for ix.table[i] != 0 {
		if i++; i == size {
			i = 0
		}
	}
	ix.table[i] = s
}

func (ix *Index) tableResize(size int) {
	old := ix.table
	ix.table = make([]uint32, size)
	for _, s := range old {
		if s != 0 {
			ix.tablePlace(ix.slotKey(s), s)
		}
	}
}

// tableDelete removes k (backward-shift deletion, as recTable.delAt).
func (ix *Index) tableDelete(k uint64) {
	size := len(ix.table)
	if size == 0 {
		return
	}
	tag, tagMask := ix.slotTag(k), ^ix.nodeMask
	i := homeSlot(k, size)
	for {
		s := ix.table[i]
		if s == 0 {
			return
		}
		if s&tagMask == tag && ix.slotKey(s) == k {
			break
		}
		if i++; i == size {
			i = 0
		}
	}
	for j := i + 1; ; j++ {
		if j == size {
			j = 0
		}
		s := ix.table[j]
		if s == 0 {
			break
		}
		if cyclicDist(homeSlot(ix.slotKey(s), size), j, size) >= cyclicDist(i, j, size) {
			ix.table[i] = s
			i = j
		}
	}
	ix.table[i] = 0
	ix.tableN--
	if sparse(ix.tableN, size) {
		ix.tableResize(fitSlots(ix.tableN))
	}
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
			ix.hold = append(ix.hold, make([]uint64, chunkSize))
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

// freeNode releases node n: its holders must already be gone or are dropped with it. Records
// still naming it become stale through the generation bump.
func (ix *Index) freeNode(n uint32) {
	ix.tableDelete(ix.nodeKey(n))
	hp := &ix.hold[n>>chunkShift][n&chunkMask]
	if *hp&holdSpill != 0 {
		ix.freeSpill(uint32(*hp))
	}
	*hp = 0
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

// --- holders ---
//
// Holder word, inline form (bit 63 clear): bits 0-1 count the holders (0-3); holder i takes the
// 19 bits from 2+19i: source id (16) | media mask (3, bit m = resident on medium m). Unused
// holder bits are zero, so a node without holders has a zero word. Spilled form (bit 63 set):
// the low 32 bits index the spill store, which keeps NumMedia bitsets of ix.w words per node,
// and bit 62 says whether the CPU or storage bitset has a bit set, so the lookup's probe reads
// only the GPU bitset.

const (
	holdSpill  = uint64(1) << 63
	holdExt    = uint64(1) << 62 // spilled: some source holds the node off GPU
	inlineMax  = 3
	unspillMax = 2
	entBits    = 19
	entMask    = 1<<entBits - 1
)

func holdCount(h uint64) int { return int(h & 3) }

func holdEnt(h uint64, i int) (sid uint16, mask uint64) {
	e := h >> (2 + entBits*i)
	return uint16(e), e >> 16 & 7
}

func holdWithEnt(h uint64, i int, sid uint16, mask uint64) uint64 {
	sh := uint(2 + entBits*i)
	return h&^(entMask<<sh) | (uint64(sid)|mask<<16)<<sh
}

func (ix *Index) holdWord(n uint32) *uint64 { return &ix.hold[n>>chunkShift][n&chunkMask] }

// spillStride is the bitsets per spilled node, GPU first (lookup.go reads it in place).
const spillStride = int(kvevents.NumMedia)

func (ix *Index) spillWords(e uint32, m kvevents.Medium) []uint64 {
	stride := spillStride * ix.w
	off := int(e&chunkMask)*stride + int(m)*ix.w
	return ix.spill[e>>chunkShift][off : off+ix.w : off+ix.w]
}

func (ix *Index) allocSpill() uint32 {
	var e uint32
	if len(ix.spillFree) > 0 {
		e = ix.spillFree[len(ix.spillFree)-1]
		ix.spillFree = ix.spillFree[:len(ix.spillFree)-1]
	} else {
		if ix.spillCap&chunkMask == 0 {
			ix.spill = append(ix.spill, make([]uint64, chunkSize*int(kvevents.NumMedia)*ix.w))
		}
		e = uint32(ix.spillCap)
		ix.spillCap++
	}
	ix.spills++
	return e
}

func (ix *Index) freeSpill(e uint32) {
	stride := int(kvevents.NumMedia) * ix.w
	off := int(e&chunkMask) * stride
	clear(ix.spill[e>>chunkShift][off : off+stride])
	ix.spillFree = append(ix.spillFree, e)
	ix.spills--
}

func (ix *Index) nodeEmpty(n uint32) bool { return *ix.holdWord(n) == 0 }

// setBit records that source sid holds node n on medium m.
func (ix *Index) setBit(n uint32, m kvevents.Medium, sid uint16) {
	hp := ix.holdWord(n)
	h := *hp
	if h&holdSpill != 0 {
		ix.spillWords(uint32(h), m)[sid>>6] |= 1 << (sid & 63)
		if m != kvevents.MediumGPU {
			*hp = h | holdExt
		}
		return
	}
	c := holdCount(h)
	for i := 0; i < c; i++ {
		if s, mask := holdEnt(h, i); s == sid {
			*hp = holdWithEnt(h, i, sid, mask|1<<m)
			return
		}
	}
	if c < inlineMax {
		*hp = holdWithEnt(h, c, sid, 1<<m)&^3 | uint64(c+1)
		return
	}
	e := ix.allocSpill()
	nh := holdSpill | uint64(e)
	if m != kvevents.MediumGPU {
		nh |= holdExt
	}
	for i := 0; i < c; i++ {
		s, mask := holdEnt(h, i)
		if mask&^1 != 0 {
			nh |= holdExt
		}
		for mm := kvevents.Medium(0); mm < kvevents.NumMedia; mm++ {
			if mask&(1<<mm) != 0 {
				ix.spillWords(e, mm)[s>>6] |= 1 << (s & 63)
			}
		}
	}
	ix.spillWords(e, m)[sid>>6] |= 1 << (sid & 63)
	*hp = nh
}

// clearBit clears source sid's residency of node n on medium m.
func (ix *Index) clearBit(n uint32, m kvevents.Medium, sid uint16) {
	hp := ix.holdWord(n)
	h := *hp
	if h&holdSpill != 0 {
		e := uint32(h)
		ix.spillWords(e, m)[sid>>6] &^= 1 << (sid & 63)
		if m != kvevents.MediumGPU && h&holdExt != 0 && !ix.spillExt(e) {
			*hp = h &^ holdExt
		}
		ix.maybeUnspill(hp, e)
		return
	}
	c := holdCount(h)
	for i := 0; i < c; i++ {
		s, mask := holdEnt(h, i)
		if s != sid {
			continue
		}
		if mask &^= 1 << m; mask != 0 {
			*hp = holdWithEnt(h, i, sid, mask)
			return
		}
		// Drop holder i: the last one takes its place.
		ls, lmask := holdEnt(h, c-1)
		h = holdWithEnt(h, i, ls, lmask)
		h = h&^(entMask<<uint(2+entBits*(c-1)))&^3 | uint64(c-1)
		*hp = h
		return
	}
}

// maybeUnspill brings spilled node back inline once it has at most unspillMax holders.
func (ix *Index) maybeUnspill(hp *uint64, e uint32) {
	var ws [kvevents.NumMedia][]uint64
	for m := range ws {
		ws[m] = ix.spillWords(e, kvevents.Medium(m))
	}
	holders := 0
	for wi := 0; wi < ix.w; wi++ {
		holders += bits.OnesCount64(ws[0][wi] | ws[1][wi] | ws[2][wi])
		if holders > unspillMax {
			return
		}
	}
	var h uint64
	c := 0
	for wi := 0; wi < ix.w; wi++ {
		for u := ws[0][wi] | ws[1][wi] | ws[2][wi]; u != 0; u &= u - 1 {
			b := bits.TrailingZeros64(u)
			var mask uint64
			for m := range ws {
				mask |= ws[m][wi] >> b & 1 << m
			}
			h = holdWithEnt(h, c, uint16(wi*64+b), mask)
			c++
		}
	}
	ix.freeSpill(e)
	*hp = h | uint64(c)
}

// spillExt reports whether spilled bitsets e have a CPU or storage bit.
func (ix *Index) spillExt(e uint32) bool {
	for m := kvevents.MediumGPU + 1; m < kvevents.NumMedia; m++ {
		for _, x := range ix.spillWords(e, m) {
			if x != 0 {
				return true
			}
		}
	}
	return false
}

// holds reports whether source sid holds node n on medium m.
func (ix *Index) holds(n uint32, m kvevents.Medium, sid uint16) bool {
	h := *ix.holdWord(n)
	if h&holdSpill != 0 {
		return ix.spillWords(uint32(h), m)[sid>>6]>>(sid&63)&1 != 0
	}
	for i := 0; i < holdCount(h); i++ {
		if s, mask := holdEnt(h, i); s == sid {
			return mask>>m&1 != 0
		}
	}
	return false
}

// holderWords writes node n's holders on medium m into dst (ix.w words).
func (ix *Index) holderWords(n uint32, m kvevents.Medium, dst []uint64) {
	h := *ix.holdWord(n)
	if h&holdSpill != 0 {
		copy(dst, ix.spillWords(uint32(h), m))
		return
	}
	clear(dst)
	for i := 0; i < holdCount(h); i++ {
		if s, mask := holdEnt(h, i); mask>>m&1 != 0 {
			dst[s>>6] |= 1 << (s & 63)
		}
	}
}

// gpuHolders is holderWords for the GPU plus whether any source holds n on another medium:
// the lookup's per-block probe, in one read of the holder word.
func (ix *Index) gpuHolders(n uint32, dst []uint64) (ext bool) {
	h := *ix.holdWord(n)
	if h&holdSpill != 0 {
		copy(dst, ix.spillWords(uint32(h), kvevents.MediumGPU))
		return h&holdExt != 0
	}
	clear(dst)
	for i := 0; i < holdCount(h); i++ {
		s, mask := holdEnt(h, i)
		dst[s>>6] |= (mask & 1) << (s & 63)
		ext = ext || mask&^1 != 0
	}
	return ext
}

// growWords widens every spill bitset to w words (more than 64*old sources). Rare: sources are
// recycled, so this happens when the fleet first exceeds a multiple of 64 sources.
func (ix *Index) growWords(w int) {
	old := ix.w
	const nm = int(kvevents.NumMedia)
	for c, chunk := range ix.spill {
		nc := make([]uint64, chunkSize*nm*w)
		for i := 0; i < chunkSize; i++ {
			for m := 0; m < nm; m++ {
				copy(nc[(i*nm+m)*w:], chunk[(i*nm+m)*old:(i*nm+m+1)*old])
			}
		}
		ix.spill[c] = nc
	}
	ix.w = w
}
