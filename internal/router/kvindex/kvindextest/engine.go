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

// Package kvindextest models an engine's prefix cache closely enough to check the index
// against it: a GPU block pool with LRU eviction of unreferenced blocks, duplicate stores, a
// CPU offload tier announced by hash-only events, restarts, LoRA and cache_salt requests. It
// emits the event batches vLLM would, in either encoding, and keeps a replay buffer.
package kvindextest

import (
	"math/rand/v2"

	"github.com/kvrouter/kvrouter/internal/router/kvevents/kveventstest"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
)

// Request is one prompt with its key attributes.
type Request struct {
	Tokens []uint32
	kvindex.KeyParams
}

type block struct {
	key    kvindex.Key // what the index should compute (the engine itself never needs it)
	copies int         // duplicate GPU stores not yet removed
	cpu    bool
	lru    uint64
}

// Engine is a toy engine. Not safe for concurrent use.
type Engine struct {
	BlockSize int
	GPUBlocks int // capacity in blocks (copies count)
	MapForm   bool
	Rank      int

	rnd     *rand.Rand
	seed    uint64 // per-process hash seed: engine hashes differ across restarts and engines
	blocks  map[uint64]*block
	used    int
	clock   uint64
	seq     uint64
	pending []any
	inUse   map[uint64]bool // blocks of the request being served: never evicted under it
	// Buffer holds the last ReplayLen published payloads by sequence number.
	Buffer    map[uint64][]byte
	ReplayLen int
}

// NewEngine returns an empty engine.
func NewEngine(rnd *rand.Rand, blockSize, gpuBlocks int, mapForm bool) *Engine {
	e := &Engine{BlockSize: blockSize, GPUBlocks: gpuBlocks, MapForm: mapForm, rnd: rnd,
		ReplayLen: 64, Buffer: map[uint64][]byte{}}
	e.Restart()
	return e
}

// Restart empties the cache and starts a new process: sequence 0, new hash seed, no event.
func (e *Engine) Restart() {
	e.seed = e.rnd.Uint64()
	e.blocks = map[uint64]*block{}
	e.used = 0
	e.seq = 0
	e.pending = nil
	e.Buffer = map[uint64][]byte{}
}

func (e *Engine) engineHash(parent uint64, toks []uint32, extra string) uint64 {
	h := parent ^ e.seed ^ 0x9e3779b97f4a7c15
	for _, t := range toks {
		h = (h ^ uint64(t)) * 0x100000001b3
	}
	for _, c := range []byte(extra) {
		h = (h ^ uint64(c)) * 0x100000001b3
	}
	return h
}

// Serve runs one request's prefill: cached prefix blocks are reused, the rest stored (evicting
// unreferenced LRU blocks when full). With dup, the first new block is stored twice, as vLLM
// does when two requests compute the same block concurrently.
func (e *Engine) Serve(r Request, dup bool) {
	keys := kvindex.RequestKeys(nil, r.Tokens, e.BlockSize, r.KeyParams)
	e.inUse = map[uint64]bool{}
	defer func() { e.inUse = nil }()
	var parent uint64
	hasParent := false
	var st *kveventstest.Stored
	flush := func() {
		if st != nil {
			e.pending = append(e.pending, *st)
			st = nil
		}
	}
	for i, k := range keys {
		toks := r.Tokens[i*e.BlockSize : (i+1)*e.BlockSize]
		var extra []string
		if r.LoRAName != "" {
			extra = append(extra, r.LoRAName)
		}
		if i == 0 && r.CacheSalt != "" {
			extra = append(extra, r.CacheSalt)
		}
		h := e.engineHash(parent, toks, r.LoRAName+"|"+join(extra))
		e.clock++
		if b, ok := e.blocks[h]; ok && b.copies > 0 && !(dup && st == nil && e.rnd.IntN(2) == 0) {
			b.lru = e.clock
			flush()
		} else {
			if !e.allocate() {
				break
			}
			b := e.blocks[h]
			if b == nil {
				b = &block{key: k}
				e.blocks[h] = b
			}
			b.copies++
			b.lru = e.clock
			if st == nil {
				st = &kveventstest.Stored{BlockSize: e.BlockSize, Medium: "GPU", LoRAName: r.LoRAName}
				if hasParent {
					p := parent
					st.Parent = &p
				}
				st.ExtraKeys = [][]string{}
			}
			st.Hashes = append(st.Hashes, h)
			st.Tokens = append(st.Tokens, toks...)
			st.ExtraKeys = append(st.ExtraKeys, extra)
		}
		e.inUse[h] = true
		parent, hasParent = h, true
	}
	flush()
}

func join(ss []string) string {
	out := ""
	for _, s := range ss {
		out += s + ","
	}
	return out
}

// allocate frees a GPU slot if needed by evicting the least recently used copy.
func (e *Engine) allocate() bool {
	for e.used >= e.GPUBlocks {
		var victim uint64
		var vb *block
		for h, b := range e.blocks {
			if b.copies > 0 && !e.inUse[h] && (vb == nil || b.lru < vb.lru || (b.lru == vb.lru && h < victim)) {
				victim, vb = h, b
			}
		}
		if vb == nil {
			return false
		}
		vb.copies--
		e.used--
		e.pending = append(e.pending, kveventstest.Removed{Hashes: []uint64{victim}, Medium: "GPU"})
		if vb.copies == 0 && !vb.cpu {
			delete(e.blocks, victim)
		}
	}
	e.used++
	return true
}

// Offload copies n random GPU blocks to the CPU tier (a hash-only event) and drops n random
// CPU blocks.
func (e *Engine) Offload(n int) {
	var add, drop []uint64
	for h, b := range e.blocks {
		if n == 0 {
			break
		}
		switch {
		case b.copies > 0 && !b.cpu && e.rnd.IntN(3) == 0:
			b.cpu = true
			add = append(add, h)
			n--
		case b.cpu && e.rnd.IntN(3) == 0:
			b.cpu = false
			drop = append(drop, h)
			if b.copies == 0 {
				delete(e.blocks, h)
			}
			n--
		}
	}
	if len(add) > 0 {
		e.pending = append(e.pending, kveventstest.Stored{Hashes: add, Medium: "CPU"})
	}
	if len(drop) > 0 {
		e.pending = append(e.pending, kveventstest.Removed{Hashes: drop, Medium: "CPU"})
	}
}

// Clear drops the whole cache and announces it (reset_prefix_cache).
func (e *Engine) Clear() {
	e.blocks = map[uint64]*block{}
	e.used = 0
	e.pending = append(e.pending, kveventstest.Cleared{})
}

// Flush publishes the pending events as one batch and returns its sequence number and payload
// (ok false when there was nothing to publish).
func (e *Engine) Flush(ts float64) (seq uint64, payload []byte, ok bool) {
	if len(e.pending) == 0 {
		return 0, nil, false
	}
	payload = kveventstest.Batch(ts, e.Rank, e.MapForm, e.pending...)
	e.pending = nil
	seq = e.seq
	e.seq++
	e.Buffer[seq] = payload
	delete(e.Buffer, seq-uint64(e.ReplayLen))
	return seq, payload, true
}

// Content returns what the engine holds: content key → per-medium residency (GPU, CPU).
func (e *Engine) Content() map[kvindex.Key][3]bool {
	out := map[kvindex.Key][3]bool{}
	for _, b := range e.blocks {
		v := out[b.key]
		v[0] = v[0] || b.copies > 0
		v[1] = v[1] || b.cpu
		out[b.key] = v
	}
	return out
}

// Prompts returns a generator of requests sharing a few system prompts, with random tails,
// sometimes under a LoRA adapter or a cache salt.
func Prompts(rnd *rand.Rand, blockSize int) func() Request {
	systems := make([][]uint32, 4)
	for i := range systems {
		systems[i] = randTokens(rnd, blockSize*(2+rnd.IntN(6)))
	}
	return func() Request {
		var r Request
		r.Tokens = append(r.Tokens, systems[rnd.IntN(len(systems))]...)
		r.Tokens = append(r.Tokens, randTokens(rnd, rnd.IntN(6*blockSize))...)
		switch rnd.IntN(8) {
		case 0:
			r.LoRAName = "adapter-a"
		case 1:
			r.CacheSalt = "tenant-1"
		}
		return r
	}
}

func randTokens(rnd *rand.Rand, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(rnd.IntN(4)) // a tiny vocabulary makes shared prefixes and duplicates common
	}
	return out
}
