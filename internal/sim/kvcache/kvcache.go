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

// Package kvcache is the simulator's paged KV cache: a fixed pool of blocks with reference counts,
// a prefix cache keyed by vLLM block hashes, and an LRU queue of free blocks that keep their hash
// until reused, mirroring vLLM v1's BlockPool. It records the KV events vLLM would emit.
//
// The cache is not safe for concurrent use; the engine that owns it serialises access.
package kvcache

import (
	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/kvevent"
)

// BlockID names one physical block.
type BlockID int32

const none BlockID = -1

type block struct {
	ref        int32
	hash       blockhash.Hash // zero when the block is not in the prefix cache
	prev, next BlockID        // free-queue links
	free       bool
}

// Cache is a pool of numBlocks blocks of blockSize tokens.
type Cache struct {
	blockSize int
	blocks    []block
	head      BlockID // least recently freed: next to be reused (and evicted)
	tail      BlockID
	numFree   int
	// cached maps a hash to every block holding it. vLLM does not de-duplicate: two requests that
	// compute the same block at the same time both cache it, and both are reported.
	cached    map[blockhash.Hash][]BlockID
	numCached int

	emit   bool
	events []kvevent.Event
}

// New returns a cache with every block free. With emit false no events are recorded.
func New(numBlocks, blockSize int, emit bool) *Cache {
	c := &Cache{
		blockSize: blockSize,
		blocks:    make([]block, numBlocks),
		head:      none,
		tail:      none,
		cached:    make(map[blockhash.Hash][]BlockID),
		emit:      emit,
	}
	for i := range c.blocks {
		c.blocks[i].prev, c.blocks[i].next = none, none
		c.pushTail(BlockID(i))
	}
	return c
}

// BlockSize is the number of tokens per block.
func (c *Cache) BlockSize() int { return c.blockSize }

// NumBlocks is the pool size.
func (c *Cache) NumBlocks() int { return len(c.blocks) }

// NumFree counts blocks with no reference (cached or not).
func (c *Cache) NumFree() int { return c.numFree }

// Usage is the fraction of blocks referenced by requests (vllm:kv_cache_usage_perc).
func (c *Cache) Usage() float64 {
	if len(c.blocks) == 0 {
		return 0
	}
	return float64(len(c.blocks)-c.numFree) / float64(len(c.blocks))
}

// NumCached counts blocks that currently hold a hash.
func (c *Cache) NumCached() int {
	return c.numCached
}

// Lookup returns the longest run of cached blocks matching hashes from the start, without taking
// references. The caller caps hashes (vLLM never reuses the block holding a prompt's last token).
func (c *Cache) Lookup(hashes []blockhash.Hash) []BlockID {
	var out []BlockID
	for _, h := range hashes {
		ids, ok := c.cached[h]
		if !ok {
			break
		}
		out = append(out, ids[0])
	}
	return out
}

// NumEvictable counts the blocks in ids that are free, i.e. that taking a reference on them
// removes from the free pool.
func (c *Cache) NumEvictable(ids []BlockID) int {
	n := 0
	for _, id := range ids {
		if c.blocks[id].ref == 0 {
			n++
		}
	}
	return n
}

// Touch takes a reference on each block (a prefix-cache hit).
func (c *Cache) Touch(ids []BlockID) {
	for _, id := range ids {
		b := &c.blocks[id]
		if b.ref == 0 {
			c.unlink(id)
		}
		b.ref++
	}
}

// Allocate takes n blocks from the head of the free queue, evicting any hash they held.
// It returns false (and takes nothing) when fewer than n blocks are free.
func (c *Cache) Allocate(n int) ([]BlockID, bool) {
	if n > c.numFree {
		return nil, false
	}
	out := make([]BlockID, 0, n)
	for range n {
		id := c.head
		c.unlink(id)
		c.evict(id)
		c.blocks[id].ref = 1
		out = append(out, id)
	}
	return out, true
}

// Free drops one reference from each block. Blocks reaching zero join the tail of the free queue
// in the order given; callers pass a request's blocks last-first (as vLLM does) so that the end of
// a sequence is evicted before its shared prefix.
func (c *Cache) Free(ids []BlockID) {
	for _, id := range ids {
		b := &c.blocks[id]
		if b.ref <= 0 {
			continue // never free twice; a bug elsewhere must not corrupt the queue
		}
		b.ref--
		if b.ref == 0 {
			c.pushTail(id)
		}
	}
}

// Store puts full blocks into the prefix cache and records one BlockStored event for the run.
// parent is the hash of the block before ids[0] (zero at the start of the sequence); tokens holds
// blockSize tokens per block; extra[i] are block i's extra keys.
func (c *Cache) Store(ids []BlockID, hashes []blockhash.Hash, parent blockhash.Hash, tokens []uint32, lora string, extra [][]string) {
	if len(ids) == 0 {
		return
	}
	for i, id := range ids {
		b := &c.blocks[id]
		if !b.hash.IsZero() {
			continue
		}
		b.hash = hashes[i]
		c.cached[b.hash] = append(c.cached[b.hash], id)
		c.numCached++
	}
	c.Announce(hashes, parent, tokens, lora, extra)
}

// Announce records a BlockStored event without changing any block: vLLM's "full" report mode
// re-announces the blocks a request hit.
func (c *Cache) Announce(hashes []blockhash.Hash, parent blockhash.Hash, tokens []uint32, lora string, extra [][]string) {
	if !c.emit || len(hashes) == 0 {
		return
	}
	c.events = append(c.events, kvevent.Event{
		Kind:      kvevent.BlockStored,
		Hashes:    append([]blockhash.Hash(nil), hashes...),
		Parent:    parent,
		Tokens:    append([]uint32(nil), tokens...),
		BlockSize: c.blockSize,
		LoRAName:  lora,
		ExtraKeys: extra,
		Medium:    kvevent.MediumGPU,
	})
}

// Reset drops every cached hash, as vLLM's reset_prefix_cache does. Like vLLM it refuses (returns
// false) while any block is in use, since running requests still point at cached blocks.
func (c *Cache) Reset() bool {
	if c.numFree != len(c.blocks) {
		return false
	}
	for i := range c.blocks {
		c.blocks[i].hash = blockhash.Hash{}
	}
	clear(c.cached)
	c.numCached = 0
	if c.emit {
		c.events = append(c.events, kvevent.Event{Kind: kvevent.AllBlocksCleared})
	}
	return true
}

// DrainEvents returns the events recorded since the last call.
func (c *Cache) DrainEvents() []kvevent.Event {
	ev := c.events
	c.events = nil
	return ev
}

func (c *Cache) evict(id BlockID) {
	b := &c.blocks[id]
	if b.hash.IsZero() {
		return
	}
	ids := c.cached[b.hash]
	for i, other := range ids {
		if other == id {
			ids = append(ids[:i], ids[i+1:]...)
			break
		}
	}
	if len(ids) == 0 {
		delete(c.cached, b.hash)
	} else {
		c.cached[b.hash] = ids
	}
	if c.emit {
		// vLLM emits one BlockRemoved per evicted block, at the moment the block is reused.
		c.events = append(c.events, kvevent.Event{Kind: kvevent.BlockRemoved, Hashes: []blockhash.Hash{b.hash}, Medium: kvevent.MediumGPU})
	}
	b.hash = blockhash.Hash{}
	c.numCached--
}

func (c *Cache) pushTail(id BlockID) {
	b := &c.blocks[id]
	b.free = true
	b.prev, b.next = c.tail, none
	if c.tail != none {
		c.blocks[c.tail].next = id
	} else {
		c.head = id
	}
	c.tail = id
	c.numFree++
}

func (c *Cache) unlink(id BlockID) {
	b := &c.blocks[id]
	if !b.free {
		return
	}
	if b.prev != none {
		c.blocks[b.prev].next = b.next
	} else {
		c.head = b.next
	}
	if b.next != none {
		c.blocks[b.next].prev = b.prev
	} else {
		c.tail = b.prev
	}
	b.prev, b.next, b.free = none, none, false
	c.numFree--
}

// CachedHashes returns the distinct hashes in the prefix cache, in no particular order: what
// the engine would report as stored and not yet removed (for consistency checks).
func (c *Cache) CachedHashes() []blockhash.Hash {
	out := make([]blockhash.Hash, 0, len(c.cached))
	for h := range c.cached {
		out = append(out, h)
	}
	return out
}

// HasEvents reports whether events are waiting to be drained.
func (c *Cache) HasEvents() bool { return len(c.events) > 0 }
