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

// Package kveventstest builds vLLM KV-event payloads for tests and benchmarks: the msgpack
// shapes msgspec produces in both encodings (docs/vllm-contract.md §1.4), written by hand so widths
// are exactly what an engine would send.
package kveventstest

import (
	"encoding/binary"
	"math"
)

// Stored describes a BlockStored event.
type Stored struct {
	Hashes    []uint64
	Parent    *uint64
	Tokens    []uint32
	BlockSize int
	Medium    string // "" encodes nil
	LoRAName  string // "" encodes nil
	// ExtraKeys, if non-nil, has one entry per block; a nil entry encodes nil, otherwise the
	// strings form the tuple.
	ExtraKeys [][]string
}

// Removed describes a BlockRemoved event.
type Removed struct {
	Hashes []uint64
	Medium string
}

// Cleared is an AllBlocksCleared event.
type Cleared struct{}

// Batch encodes [ts, events, rank] with events in map form (vLLM >= 0.24) or array form.
func Batch(ts float64, rank int, mapForm bool, events ...any) []byte {
	var e enc
	e.arr(3)
	e.f64(ts)
	e.arr(len(events))
	for _, ev := range events {
		switch v := ev.(type) {
		case Stored:
			e.stored(v, mapForm)
		case Removed:
			e.removed(v, mapForm)
		case Cleared:
			if mapForm {
				e.mapHdr(1)
				e.str("type")
			} else {
				e.arr(1)
			}
			e.str("AllBlocksCleared")
		}
	}
	e.uint(uint64(rank))
	return e.b
}

type enc struct{ b []byte }

func (e *enc) arr(n int) {
	switch {
	case n < 16:
		e.b = append(e.b, 0x90|byte(n))
	case n < 1<<16:
		e.b = append(e.b, 0xdc, byte(n>>8), byte(n))
	default:
		e.b = append(e.b, 0xdd)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(n))
	}
}

func (e *enc) mapHdr(n int) {
	if n < 16 {
		e.b = append(e.b, 0x80|byte(n))
		return
	}
	e.b = append(e.b, 0xde, byte(n>>8), byte(n))
}

func (e *enc) str(s string) {
	switch {
	case len(s) < 32:
		e.b = append(e.b, 0xa0|byte(len(s)))
	case len(s) < 256:
		e.b = append(e.b, 0xd9, byte(len(s)))
	default:
		e.b = append(e.b, 0xda, byte(len(s)>>8), byte(len(s)))
	}
	e.b = append(e.b, s...)
}

func (e *enc) nil() { e.b = append(e.b, 0xc0) }

func (e *enc) f64(f float64) {
	e.b = append(e.b, 0xcb)
	e.b = binary.BigEndian.AppendUint64(e.b, math.Float64bits(f))
}

// uint writes the smallest unsigned encoding, as msgspec does.
func (e *enc) uint(v uint64) {
	switch {
	case v < 128:
		e.b = append(e.b, byte(v))
	case v < 1<<8:
		e.b = append(e.b, 0xcc, byte(v))
	case v < 1<<16:
		e.b = append(e.b, 0xcd, byte(v>>8), byte(v))
	case v < 1<<32:
		e.b = append(e.b, 0xce)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(v))
	default:
		e.b = append(e.b, 0xcf)
		e.b = binary.BigEndian.AppendUint64(e.b, v)
	}
}

func (e *enc) strOrNil(s string) {
	if s == "" {
		e.nil()
	} else {
		e.str(s)
	}
}

func (e *enc) hashes(hs []uint64) {
	e.arr(len(hs))
	for _, h := range hs {
		e.uint(h)
	}
}

func (e *enc) stored(s Stored, mapForm bool) {
	if mapForm {
		n := 9 // type + 8 fields
		if s.ExtraKeys != nil {
			n++
		}
		e.mapHdr(n)
		e.str("type")
		e.str("BlockStored")
		e.str("block_hashes")
	} else {
		e.arr(12)
		e.str("BlockStored")
	}
	e.hashes(s.Hashes)
	if mapForm {
		e.str("parent_block_hash")
	}
	if s.Parent != nil {
		e.uint(*s.Parent)
	} else {
		e.nil()
	}
	if mapForm {
		e.str("token_ids")
	}
	e.arr(len(s.Tokens))
	for _, t := range s.Tokens {
		e.uint(uint64(t))
	}
	if mapForm {
		e.str("block_size")
	}
	e.uint(uint64(s.BlockSize))
	if mapForm {
		e.str("lora_id")
	}
	e.nil()
	if mapForm {
		e.str("medium")
	}
	e.strOrNil(s.Medium)
	if mapForm {
		e.str("lora_name")
	}
	e.strOrNil(s.LoRAName)
	if mapForm {
		if s.ExtraKeys != nil {
			e.str("extra_keys")
			e.extra(s.ExtraKeys)
		}
		e.str("group_idx")
		e.uint(0)
		return
	}
	if s.ExtraKeys != nil {
		e.extra(s.ExtraKeys)
	} else {
		e.nil()
	}
	e.uint(0)               // group_idx
	e.str("full_attention") // kv_cache_spec_kind
	e.nil()                 // sliding window
}

func (e *enc) extra(x [][]string) {
	e.arr(len(x))
	for _, t := range x {
		if t == nil {
			e.nil()
			continue
		}
		e.arr(len(t))
		for _, s := range t {
			e.str(s)
		}
	}
}

func (e *enc) removed(r Removed, mapForm bool) {
	if mapForm {
		e.mapHdr(4)
		e.str("type")
		e.str("BlockRemoved")
		e.str("block_hashes")
		e.hashes(r.Hashes)
		e.str("medium")
		e.strOrNil(r.Medium)
		e.str("group_idx")
		e.uint(0)
		return
	}
	e.arr(4)
	e.str("BlockRemoved")
	e.hashes(r.Hashes)
	e.strOrNil(r.Medium)
	e.uint(0)
}
