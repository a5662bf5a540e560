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

// Package kvpublish puts the simulator's KV events on the wire exactly as vLLM's ZmqEventPublisher
// does: msgpack event batches (tagged-map or legacy tagged-array events), a ZMQ PUB socket with
// frames [topic, 8-byte big-endian sequence, payload], and a ROUTER socket that replays buffered
// batches (docs/vllm-contract.md §1-§2).
package kvpublish

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/kvevent"
)

// Encoding selects the event layout.
type Encoding uint8

// Event layouts: Map is vLLM >= 0.24 (tagged maps), Array is vLLM <= 0.23 (tagged arrays).
const (
	Map Encoding = iota
	Array
)

// ParseEncoding reads the --kv-events-encoding flag value.
func ParseEncoding(s string) (Encoding, error) {
	switch s {
	case "map", "":
		return Map, nil
	case "array":
		return Array, nil
	}
	return 0, fmt.Errorf("unknown KV event encoding %q (want map or array)", s)
}

func (e Encoding) String() string {
	if e == Array {
		return "array"
	}
	return "map"
}

// Encoder turns batches into msgpack payloads following msgspec's rules for vLLM's structs.
// It is hand-written rather than reflective because it runs for every scheduler step of every
// simulated engine; the tests decode its output with an independent msgpack library and compare it
// byte for byte with the design note's vectors.
type Encoder struct {
	Encoding Encoding
	// IntHashes writes block hashes as unsigned ints (low 64 bits of the digest), vLLM's default;
	// false writes the raw digest as bin (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
	IntHashes bool
}

// Append appends the payload of b to dst.
func (enc Encoder) Append(dst []byte, b kvevent.Batch) []byte {
	dst = append(dst, 0x93) // [ts, events, data_parallel_rank]
	dst = append(dst, 0xcb)
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(b.TS))
	dst = appendArrayLen(dst, len(b.Events))
	for i := range b.Events {
		dst = enc.appendEvent(dst, &b.Events[i])
	}
	return appendInt(dst, int64(b.DPRank))
}

func (enc Encoder) appendEvent(dst []byte, ev *kvevent.Event) []byte {
	medium := ev.Medium
	if medium == "" {
		medium = kvevent.MediumGPU
	}
	switch ev.Kind {
	case kvevent.BlockStored:
		if enc.Encoding == Array {
			// tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
			// lora_name, extra_keys, group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window:
			// array_like structs write every field, defaults included.
			dst = append(dst, 0x9c)
			dst = appendStr(dst, "BlockStored")
			dst = enc.appendHashes(dst, ev.Hashes)
			dst = enc.appendParent(dst, ev.Parent)
			dst = appendTokens(dst, ev.Tokens)
			dst = appendInt(dst, int64(ev.BlockSize))
			dst = append(dst, 0xc0)
			dst = appendStr(dst, medium)
			dst = appendOptStr(dst, ev.LoRAName)
			dst = appendExtraKeys(dst, ev.ExtraKeys, len(ev.Hashes))
			dst = append(dst, 0x00)
			dst = appendStr(dst, "full_attention")
			return append(dst, 0xc0)
		}
		// Map form: required fields always, defaulted ones only when set; the sliding window
		// (None for full attention) is omitted, hence 11 entries.
		dst = append(dst, 0x8b)
		dst = appendStr(dst, "type")
		dst = appendStr(dst, "BlockStored")
		dst = appendStr(dst, "block_hashes")
		dst = enc.appendHashes(dst, ev.Hashes)
		dst = appendStr(dst, "parent_block_hash")
		dst = enc.appendParent(dst, ev.Parent)
		dst = appendStr(dst, "token_ids")
		dst = appendTokens(dst, ev.Tokens)
		dst = appendStr(dst, "block_size")
		dst = appendInt(dst, int64(ev.BlockSize))
		dst = appendStr(dst, "lora_id")
		dst = append(dst, 0xc0)
		dst = appendStr(dst, "medium")
		dst = appendStr(dst, medium)
		dst = appendStr(dst, "lora_name")
		dst = appendOptStr(dst, ev.LoRAName)
		dst = appendStr(dst, "extra_keys")
		dst = appendExtraKeys(dst, ev.ExtraKeys, len(ev.Hashes))
		dst = appendStr(dst, "group_idx")
		dst = append(dst, 0x00)
		dst = appendStr(dst, "kv_cache_spec_kind")
		return appendStr(dst, "full_attention")
	case kvevent.BlockRemoved:
		if enc.Encoding == Array {
			dst = append(dst, 0x94)
			dst = appendStr(dst, "BlockRemoved")
			dst = enc.appendHashes(dst, ev.Hashes)
			dst = appendStr(dst, medium)
			return append(dst, 0x00)
		}
		dst = append(dst, 0x84)
		dst = appendStr(dst, "type")
		dst = appendStr(dst, "BlockRemoved")
		dst = appendStr(dst, "block_hashes")
		dst = enc.appendHashes(dst, ev.Hashes)
		dst = appendStr(dst, "medium")
		dst = appendStr(dst, medium)
		dst = appendStr(dst, "group_idx")
		return append(dst, 0x00)
	default: // AllBlocksCleared
		if enc.Encoding == Array {
			dst = append(dst, 0x91)
			return appendStr(dst, "AllBlocksCleared")
		}
		dst = append(dst, 0x81)
		dst = appendStr(dst, "type")
		return appendStr(dst, "AllBlocksCleared")
	}
}

func (enc Encoder) appendHashes(dst []byte, hs []blockhash.Hash) []byte {
	dst = appendArrayLen(dst, len(hs))
	for _, h := range hs {
		dst = enc.appendHash(dst, h)
	}
	return dst
}

func (enc Encoder) appendParent(dst []byte, h blockhash.Hash) []byte {
	if h.IsZero() {
		return append(dst, 0xc0)
	}
	return enc.appendHash(dst, h)
}

func (enc Encoder) appendHash(dst []byte, h blockhash.Hash) []byte {
	if enc.IntHashes {
		return appendUint(dst, h.Uint64())
	}
	b := h.Bytes()
	dst = append(dst, 0xc4, byte(len(b)))
	return append(dst, b...)
}

func appendTokens(dst []byte, toks []uint32) []byte {
	dst = appendArrayLen(dst, len(toks))
	for _, t := range toks {
		dst = appendUint(dst, uint64(t))
	}
	return dst
}

// appendExtraKeys writes one entry per block: nil or an array of strings. vLLM's GPU pool always
// sends the list, so a missing list is written as n nils.
func appendExtraKeys(dst []byte, keys [][]string, n int) []byte {
	dst = appendArrayLen(dst, n)
	for i := 0; i < n; i++ {
		if i >= len(keys) || len(keys[i]) == 0 {
			dst = append(dst, 0xc0)
			continue
		}
		dst = appendArrayLen(dst, len(keys[i]))
		for _, k := range keys[i] {
			dst = appendStr(dst, k)
		}
	}
	return dst
}

func appendOptStr(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, 0xc0)
	}
	return appendStr(dst, s)
}

func appendStr(dst []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		dst = append(dst, 0xa0|byte(n))
	case n <= math.MaxUint8:
		dst = append(dst, 0xd9, byte(n))
	case n <= math.MaxUint16:
		dst = append(dst, 0xda, byte(n>>8), byte(n))
	default:
		dst = append(dst, 0xdb)
		dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	}
	return append(dst, s...)
}

func appendArrayLen(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return append(dst, 0xdc, byte(n>>8), byte(n))
	default:
		dst = append(dst, 0xdd)
		return binary.BigEndian.AppendUint32(dst, uint32(n))
	}
}

func appendUint(dst []byte, v uint64) []byte {
	switch {
	case v < 128:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return append(dst, 0xcd, byte(v>>8), byte(v))
	case v <= math.MaxUint32:
		dst = append(dst, 0xce)
		return binary.BigEndian.AppendUint32(dst, uint32(v))
	default:
		dst = append(dst, 0xcf)
		return binary.BigEndian.AppendUint64(dst, v)
	}
}

func appendInt(dst []byte, v int64) []byte {
	if v >= 0 {
		return appendUint(dst, uint64(v))
	}
	switch {
	case v >= -32:
		return append(dst, byte(v))
	case v >= math.MinInt8:
		return append(dst, 0xd0, byte(v))
	case v >= math.MinInt16:
		return append(dst, 0xd1, byte(v>>8), byte(v))
	case v >= math.MinInt32:
		dst = append(dst, 0xd2)
		return binary.BigEndian.AppendUint32(dst, uint32(v))
	default:
		dst = append(dst, 0xd3)
		return binary.BigEndian.AppendUint64(dst, uint64(v))
	}
}
