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

package tokenizer

import "math/bits"

// wordTable maps whole words (raw bytes) to the single id BPE gives them. It is built once and only
// read, so lookups take no lock, and it is laid out for the hot path: open addressing over one
// slice, the first eight bytes of each key inline in its slot (so most words compare without
// touching the key arena, one cache miss per lookup), the rest of the key in a shared arena.
type wordTable struct {
	mask  uint64
	slots []wordSlot
	arena string
}

type wordSlot struct {
	head uint64 // the key's first eight bytes, little-endian, zero-padded
	off  uint32 // where the key's bytes after the eighth start in arena
	n    uint32 // key length; 0 marks an empty slot (keys are never empty)
	id   uint32
}

func newWordTable(words map[string]uint32) *wordTable {
	size := 1 << bits.Len(uint(len(words)*8/5+1))
	t := &wordTable{mask: uint64(size - 1), slots: make([]wordSlot, size)}
	var arena []byte
	for w, id := range words {
		if w == "" {
			continue
		}
		s := wordSlot{head: head8(w), n: uint32(len(w)), id: id, off: uint32(len(arena))}
		if len(w) > 8 {
			arena = append(arena, w[8:]...)
		}
		i := hashWord(w) & t.mask
		for t.slots[i].n != 0 {
			i = (i + 1) & t.mask
		}
		t.slots[i] = s
	}
	t.arena = string(arena)
	return t
}

func (t *wordTable) get(w string) (uint32, bool) {
	if t == nil || w == "" {
		return 0, false
	}
	h := head8(w)
	n := uint32(len(w))
	for i := hashWord(w) & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.n == 0 {
			return 0, false
		}
		if s.n == n && s.head == h && (n <= 8 || t.arena[s.off:s.off+n-8] == w[8:]) {
			return s.id, true
		}
	}
}

func head8(w string) uint64 {
	if len(w) >= 8 {
		return le64(w)
	}
	var h uint64
	for i := len(w) - 1; i >= 0; i-- {
		h = h<<8 | uint64(w[i])
	}
	return h
}

// hashWord is a multiply-xorshift hash; the table is fixed at load, so no seed is needed against
// collision floods (an absent key only walks the chains the vocabulary already has).
func hashWord(w string) uint64 {
	h := uint64(len(w)) * 0x9E3779B97F4A7C15
	for len(w) >= 8 {
		h = (h ^ le64(w)) * 0xBF58476D1CE4E5B9
		h ^= h >> 31
		w = w[8:]
	}
	if len(w) > 0 {
		h = (h ^ head8(w)) * 0x94D049BB133111EB
		h ^= h >> 29
	}
	h *= 0xBF58476D1CE4E5B9
	return h ^ h>>32
}

// le64 reads w's first eight bytes; the compiler turns it into one load.
func le64(w string) uint64 {
	_ = w[7]
	return uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
}
