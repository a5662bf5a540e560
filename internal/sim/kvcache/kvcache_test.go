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

package kvcache

import (
	"encoding/binary"
	"testing"

	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/kvevent"
)

func hashN(n uint64) blockhash.Hash {
	h, _ := blockhash.FromBytes(binary.BigEndian.AppendUint64(nil, n))
	return h
}

func TestLookupHitsAndLRUEviction(t *testing.T) {
	c := New(4, 2, true)
	a, ok := c.Allocate(2)
	if !ok || c.NumFree() != 2 {
		t.Fatalf("allocate: %v free=%d", ok, c.NumFree())
	}
	c.Store(a, []blockhash.Hash{hashN(1), hashN(2)}, blockhash.Hash{}, []uint32{1, 2, 3, 4}, "", nil)
	ev := c.DrainEvents()
	if len(ev) != 1 || ev[0].Kind != kvevent.BlockStored || len(ev[0].Hashes) != 2 || ev[0].BlockSize != 2 || ev[0].Medium != "GPU" {
		t.Fatalf("store events %+v", ev)
	}
	if c.Usage() != 0.5 {
		t.Fatalf("usage %v", c.Usage())
	}

	// Freed blocks keep their hash: a later lookup still hits.
	c.Free([]BlockID{a[1], a[0]})
	if c.NumFree() != 4 || c.NumCached() != 2 {
		t.Fatalf("free=%d cached=%d", c.NumFree(), c.NumCached())
	}
	hits := c.Lookup([]blockhash.Hash{hashN(1), hashN(2), hashN(3)})
	if len(hits) != 2 || hits[0] != a[0] {
		t.Fatalf("hits %v", hits)
	}
	if c.NumEvictable(hits) != 2 {
		t.Fatal("free cached blocks must count as evictable")
	}
	if got := c.Lookup([]blockhash.Hash{hashN(2)}); len(got) != 1 {
		t.Fatal("lookup of a later block alone should hit (chaining is the caller's job)")
	}
	if got := c.Lookup([]blockhash.Hash{hashN(9), hashN(1)}); len(got) != 0 {
		t.Fatal("a miss must end the run")
	}

	// The two never-used blocks are reused first, then the cached ones in LRU order: a[1] was
	// freed before a[0] (tail-first), so it is evicted first.
	if _, ok := c.Allocate(2); !ok || len(c.DrainEvents()) != 0 {
		t.Fatal("allocating uncached blocks must not evict")
	}
	if _, ok := c.Allocate(1); !ok {
		t.Fatal("allocate")
	}
	ev = c.DrainEvents()
	if len(ev) != 1 || ev[0].Kind != kvevent.BlockRemoved || ev[0].Hashes[0] != hashN(2) {
		t.Fatalf("eviction events %+v", ev)
	}
	if len(c.Lookup([]blockhash.Hash{hashN(1)})) != 1 || len(c.Lookup([]blockhash.Hash{hashN(2)})) != 0 {
		t.Fatal("wrong block evicted")
	}
	if _, ok := c.Allocate(2); ok {
		t.Fatal("allocated more blocks than free")
	}
}

func TestTouchProtectsFromEviction(t *testing.T) {
	c := New(2, 1, true)
	a, _ := c.Allocate(1)
	c.Store(a, []blockhash.Hash{hashN(7)}, blockhash.Hash{}, []uint32{7}, "", nil)
	c.Free(a)
	c.Touch(c.Lookup([]blockhash.Hash{hashN(7)}))
	if c.NumFree() != 1 {
		t.Fatalf("free=%d after touch", c.NumFree())
	}
	b, _ := c.Allocate(1)
	if b[0] == a[0] {
		t.Fatal("a referenced block was reallocated")
	}
	c.Free(a)
	c.Free(a) // double free is ignored
	if c.NumFree() != 1 {
		t.Fatalf("free=%d after double free", c.NumFree())
	}
}

func TestDuplicatesAreReportedAndEvictedSeparately(t *testing.T) {
	c := New(2, 1, true)
	a, _ := c.Allocate(1)
	b, _ := c.Allocate(1)
	c.Store(a, []blockhash.Hash{hashN(5)}, blockhash.Hash{}, []uint32{5}, "", nil)
	c.Store(b, []blockhash.Hash{hashN(5)}, blockhash.Hash{}, []uint32{5}, "", nil)
	if n := len(c.DrainEvents()); n != 2 || c.NumCached() != 2 {
		t.Fatalf("%d stores, %d cached", n, c.NumCached())
	}
	c.Free(a)
	c.Free(b)
	c.Allocate(1)
	if len(c.Lookup([]blockhash.Hash{hashN(5)})) != 1 {
		t.Fatal("the surviving duplicate must still hit")
	}
	c.Allocate(1)
	ev := c.DrainEvents()
	if len(ev) != 2 || ev[0].Kind != kvevent.BlockRemoved || ev[1].Kind != kvevent.BlockRemoved {
		t.Fatalf("events %+v", ev)
	}
}

func TestResetRefusesWhileInUse(t *testing.T) {
	c := New(2, 1, true)
	a, _ := c.Allocate(1)
	c.Store(a, []blockhash.Hash{hashN(1)}, blockhash.Hash{}, []uint32{1}, "", nil)
	c.DrainEvents()
	if c.Reset() {
		t.Fatal("reset while a block is referenced")
	}
	c.Free(a)
	if !c.Reset() || c.NumCached() != 0 {
		t.Fatal("reset failed")
	}
	if ev := c.DrainEvents(); len(ev) != 1 || ev[0].Kind != kvevent.AllBlocksCleared {
		t.Fatalf("events %+v", ev)
	}
	quiet := New(1, 1, false)
	b, _ := quiet.Allocate(1)
	quiet.Store(b, []blockhash.Hash{hashN(1)}, blockhash.Hash{}, []uint32{1}, "", nil)
	if quiet.HasEvents() {
		t.Fatal("events recorded with emit off")
	}
}
