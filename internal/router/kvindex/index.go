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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
)

// Index is the exact prefix index. Create it with New; it implements prometheus.Collector.
type Index struct {
	blockSize int
	cfg       Config
	baseRoot  chain // chain root of the base model, computed once

	mu sync.RWMutex // guards everything below; lookups take it shared
	// node store, see store.go
	keys      [][]uint64
	gens      [][]uint16
	hold      [][]uint64
	clock     []uint64
	nodeCap   int
	nodes     int
	free      []uint32
	hand      int
	table     []uint32
	tableN    int
	nodeBits  uint32 // low bits of a table slot that hold node+1
	nodeMask  uint32
	w         int // words per spilled bitset: ceil(source ids / 64)
	spill     [][]uint64
	spillCap  int
	spills    int
	spillFree []uint32
	// compactions counts node store compactions (tests).
	compactions int

	srcs    []*source // by source id; nil = free id
	srcIDs  map[SourceID]uint16
	entries int // records over all sources

	evictions uint64
	pred      predictions
	// predScratch holds PredictKeys' filtered keys between calls (under mu).
	predScratch []Key
	metrics     *metrics
}

// applySlice bounds how many blocks one Apply handles per write-lock hold, so a burst (a replay
// of thousands of events) never keeps lookups waiting for more than a few microseconds.
const applySlice = 512

// maxSources is the number of distinct source ids (16-bit ids in records and bitsets).
const maxSources = 1 << 16

// New returns an empty index.
func New(cfg Config) *Index {
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 16
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = 4 << 20
	}
	cfg.MaxKeys = int(min(uint64(cfg.MaxKeys), 1<<32-1)) // node indices are 32-bit
	if cfg.PredictTTL <= 0 {
		cfg.PredictTTL = 2 * time.Second
	}
	if cfg.PredictHold <= 0 {
		cfg.PredictHold = 10 * time.Minute
	}
	cfg.PredictHold = max(cfg.PredictHold, cfg.PredictTTL)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ix := &Index{
		blockSize: cfg.BlockSize,
		cfg:       cfg,
		baseRoot:  newChain(""),
		w:         1,
		srcIDs:    make(map[SourceID]uint16),
		metrics:   newMetrics(),
	}
	ix.nodeBits = uint32(min(32, bits.Len(uint(cfg.MaxKeys))))
	ix.nodeMask = uint32(1<<ix.nodeBits - 1)
	ix.metrics.ix = ix
	return ix
}

// BlockSize returns the block size the index keys by.
func (ix *Index) BlockSize() int { return ix.blockSize }

func (ix *Index) root(lora string) chain {
	if lora == "" {
		return ix.baseRoot
	}
	return newChain(lora)
}

// sourceFor returns the source for id, creating it. Callers hold the write lock. It returns nil
// when all 65,536 source ids are taken.
func (ix *Index) sourceFor(id SourceID) *source {
	if sid, ok := ix.srcIDs[id]; ok {
		return ix.srcs[sid]
	}
	sid := -1
	for i, s := range ix.srcs {
		if s == nil {
			sid = i
			break
		}
	}
	if sid < 0 {
		if len(ix.srcs) >= maxSources {
			return nil
		}
		sid = len(ix.srcs)
		ix.srcs = append(ix.srcs, nil)
	}
	if need := sid/64 + 1; need > ix.w {
		ix.growWords(need)
	}
	s := &source{id: id, sid: uint16(sid)}
	ix.srcs[sid] = s
	ix.srcIDs[id] = uint16(sid)
	return s
}

// Apply ingests one decoded event batch from src. It needs no ZMQ: kvbench feeds simulated
// engines' batches here directly. Events the index cannot place are skipped and counted.
func (ix *Index) Apply(src SourceID, b *kvevents.Batch) ApplyStats {
	var st ApplyStats
	ix.mu.Lock()
	defer ix.mu.Unlock()
	s := ix.sourceFor(src)
	if s == nil {
		for i := range b.Events {
			st.Skipped += len(b.Events[i].BlockHashes)
		}
		ix.metrics.skipped.WithLabelValues("too_many_sources").Add(float64(st.Skipped))
		return st
	}
	done := 0
	for i := range b.Events {
		ev := &b.Events[i]
		switch ev.Kind {
		case kvevents.KindBlockStored:
			ix.applyStored(s, ev, &st)
		case kvevents.KindBlockRemoved:
			m := ev.Medium
			for _, h := range ev.BlockHashes {
				if ix.remove(s, h, m) {
					st.BlocksRemoved++
				} else {
					st.Skipped++
					ix.metrics.skipped.WithLabelValues("unknown_hash").Inc()
				}
			}
		case kvevents.KindAllBlocksCleared:
			ix.clearSource(s)
			st.Cleared = true
		}
		done += len(ev.BlockHashes) + 1
		if done >= applySlice && i+1 < len(b.Events) {
			// Let waiting lookups in; the source may be cleared or removed meanwhile, so look
			// it up again.
			ix.mu.Unlock()
			done = 0
			ix.mu.Lock()
			if s = ix.sourceFor(src); s == nil {
				return st
			}
		}
	}
	ix.metrics.stored.Add(float64(st.BlocksStored))
	ix.metrics.removed.Add(float64(st.BlocksRemoved))
	if st.BlocksRemoved > 0 || st.Cleared {
		ix.maybeCompact()
	}
	return st
}

func (ix *Index) skip(st *ApplyStats, n int, reason string) {
	st.Skipped += n
	ix.metrics.skipped.WithLabelValues(reason).Add(float64(n))
}

func (ix *Index) applyStored(s *source, ev *kvevents.Event, st *ApplyStats) {
	n := len(ev.BlockHashes)
	if ev.SpecKind == kvevents.SpecOther {
		ix.skip(st, n, "attention_kind")
		return
	}
	if ev.BlockSize == 0 || len(ev.TokenIDs) == 0 {
		// Hash-only tier event (e.g. CPU offload): the block is known by its engine hash.
		for _, h := range ev.BlockHashes {
			r, ok := s.recs.get(h)
			if !ok || !ix.valid(r) {
				ix.skip(st, 1, "unknown_hash")
				continue
			}
			ix.store(s, h, Key(ix.nodeKey(r.node())), ev.Medium)
			st.BlocksStored++
		}
		return
	}
	bs := ev.BlockSize
	if bs != ix.blockSize || len(ev.TokenIDs) != n*bs {
		ix.skip(st, n, "block_size")
		return
	}
	var c chain
	if ev.HasParent {
		r, ok := s.recs.get(ev.ParentHash)
		if !ok || !ix.valid(r) {
			ix.skip(st, n, "unknown_parent")
			return
		}
		c = resume(Key(ix.nodeKey(r.node())))
	} else {
		c = ix.root(ev.LoRAName)
	}
	for i, h := range ev.BlockHashes {
		var extra uint64
		if ev.ExtraKeys != nil {
			extra = kvevents.ExtraKeysDigest(ev.ExtraKeys[i], ev.LoRAName)
		}
		k := c.next(ev.TokenIDs[i*bs:(i+1)*bs], extra)
		ix.store(s, h, k, ev.Medium)
		st.BlocksStored++
	}
}

// store adds one reference of (s, engine hash h) → key k on medium m.
func (ix *Index) store(s *source, h uint64, k Key, m kvevents.Medium) {
	t := &s.recs
	i := t.find(h)
	if i >= 0 {
		r := t.slots[i].r
		if ix.valid(r) {
			n := r.node()
			if ix.nodeKey(n) == uint64(k) {
				c := r.refs(m)
				if c == 0 {
					ix.setBit(n, m, s.sid)
				}
				if c < refMax[m] {
					t.slots[i].r = r.withRefs(m, c+1)
				}
				ix.touch(n)
				ix.confirm(s.sid, k, m)
				return
			}
			// The engine reused the hash for other content (a different seed or algorithm after
			// a restart we missed): the old residency is gone.
			ix.release(s, r)
		}
		// The slot is reused: findOrCreate below touches no source table, so i stays valid.
	}
	n := ix.findOrCreate(uint64(k))
	ix.setBit(n, m, s.sid)
	r := packRecord(n, ix.nodeGen(n)).withRefs(m, 1)
	if i >= 0 {
		t.slots[i].r = r
	} else {
		t.insert(h, r)
		ix.entries++
	}
	ix.confirm(s.sid, k, m)
}

// remove drops one reference of (s, h) on medium m; false if the source does not hold it.
func (ix *Index) remove(s *source, h uint64, m kvevents.Medium) bool {
	t := &s.recs
	i := t.find(h)
	if i < 0 {
		return false
	}
	r := t.slots[i].r
	if !ix.valid(r) {
		t.delAt(i) // its node was evicted by the MaxKeys cap
		ix.entries--
		return false
	}
	c := r.refs(m)
	if c == 0 {
		return false
	}
	n := r.node()
	if c < refMax[m] { // a saturated count is unknown: keep it until the source is cleared
		r = r.withRefs(m, c-1)
	}
	if r.refs(m) == 0 {
		ix.clearBit(n, m, s.sid)
	}
	if !r.anyRefs() {
		t.delAt(i)
		ix.entries--
		if ix.nodeEmpty(n) {
			ix.freeNode(n)
		}
		return true
	}
	t.slots[i].r = r
	return true
}

// release drops every residency of record r (a valid one) from its node; the caller updates
// the source's table.
func (ix *Index) release(s *source, r record) {
	n := r.node()
	for m := kvevents.Medium(0); m < kvevents.NumMedia; m++ {
		if r.refs(m) > 0 {
			ix.clearBit(n, m, s.sid)
		}
	}
	if ix.nodeEmpty(n) {
		ix.freeNode(n)
	}
}

func (ix *Index) clearSource(s *source) {
	for _, sl := range s.recs.slots {
		if sl.r != 0 && ix.valid(sl.r) {
			ix.release(s, sl.r)
		}
	}
	ix.entries -= s.recs.n
	s.recs = recTable{} // gives the table's memory back
	ix.pred.dropSource(s.sid)
}

// ClearSource drops every entry and prediction of one source (engine restart, AllBlocksCleared,
// an event gap replay could not cover). The source keeps its id and keeps receiving events.
func (ix *Index) ClearSource(src SourceID) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if sid, ok := ix.srcIDs[src]; ok {
		ix.clearSource(ix.srcs[sid])
		ix.maybeCompact()
	}
}

// RemoveEndpoint drops every entry and prediction of all ranks of an endpoint at once (the pod
// went away) and forgets its sources.
func (ix *Index) RemoveEndpoint(endpoint string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for id, sid := range ix.srcIDs {
		if id.Endpoint != endpoint {
			continue
		}
		ix.clearSource(ix.srcs[sid])
		ix.srcs[sid] = nil
		delete(ix.srcIDs, id)
	}
	ix.maybeCompact()
}

// Stats returns a snapshot of the index's size and counters.
func (ix *Index) Stats() Stats {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return Stats{
		Keys:      ix.nodes,
		Entries:   ix.entries,
		Sources:   len(ix.srcIDs),
		Predicted: ix.pred.count(),
		Evictions: ix.evictions,
	}
}

// SourceBlocks returns what the index holds for one source: content key → per-medium residency.
// O(entries of the source); meant for tests, debugging and consistency checks.
func (ix *Index) SourceBlocks(src SourceID) map[Key][kvevents.NumMedia]bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make(map[Key][kvevents.NumMedia]bool)
	sid, ok := ix.srcIDs[src]
	if !ok {
		return out
	}
	for _, sl := range ix.srcs[sid].recs.slots {
		r := sl.r
		if r == 0 || !ix.valid(r) {
			continue
		}
		k := Key(ix.nodeKey(r.node()))
		v := out[k]
		for m := kvevents.Medium(0); m < kvevents.NumMedia; m++ {
			v[m] = v[m] || r.refs(m) > 0
		}
		out[k] = v
	}
	return out
}

// SourceHashes returns the engine block hashes the index holds for one source on medium m,
// sorted: what the index believes the engine has stored there and not removed. Unlike content
// keys these are the engine's own names for its blocks, so they can be compared with what the
// engine reports holding (vllm-sim's GET /sim/cache). O(entries of the source); for debugging
// and consistency checks.
func (ix *Index) SourceHashes(src SourceID, m kvevents.Medium) []uint64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	sid, ok := ix.srcIDs[src]
	if !ok {
		return []uint64{}
	}
	out := make([]uint64, 0, ix.srcs[sid].recs.n)
	for _, sl := range ix.srcs[sid].recs.slots {
		if sl.r != 0 && ix.valid(sl.r) && sl.r.refs(m) > 0 {
			out = append(out, sl.h)
		}
	}
	slices.Sort(out)
	return out
}

// Sources lists the sources the index keeps state for (entries or predictions, or only an id
// reserved by earlier ones), sorted.
func (ix *Index) Sources() []SourceID {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]SourceID, 0, len(ix.srcIDs))
	for id := range ix.srcIDs {
		out = append(out, id)
	}
	slices.SortFunc(out, func(a, b SourceID) int {
		if c := strings.Compare(a.Endpoint, b.Endpoint); c != 0 {
			return c
		}
		return a.Rank - b.Rank
	})
	return out
}
