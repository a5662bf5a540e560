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

// Package blockhash computes vLLM's prefix-cache block hash chain, so that the hashes the simulator
// publishes in KV events are the ones a real vLLM would publish for the same tokens, algorithm and
// PYTHONHASHSEED (see docs/vllm-contract.md §3).
//
// A block's hash is hash_fn(CBOR([parent digest, [token ids], extra keys or null])) with canonical
// CBOR; the first block's parent is NONE_HASH = hash_fn(CBOR(PYTHONHASHSEED)) or 32 random bytes
// when the variable is unset. Only the CBOR algorithms are reproducible outside Python: the pickle
// based "sha256" and "xxhash" algorithms are mapped to their CBOR twins (see Canonical).
package blockhash

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"

	"github.com/zeebo/xxh3"
)

// Algorithm names, as vLLM spells them in --prefix-caching-hash-algo.
const (
	SHA256CBOR = "sha256_cbor"
	XXHashCBOR = "xxhash_cbor"
	SHA256     = "sha256"
	XXHash     = "xxhash"
)

// Canonical returns the algorithm the simulator really uses for name and whether it had to
// substitute one: vLLM's pickle-based algorithms cannot be reproduced outside CPython, so they are
// served by the CBOR variant with the same digest.
func Canonical(name string) (algo string, substituted bool, err error) {
	switch name {
	case SHA256CBOR, XXHashCBOR:
		return name, false, nil
	case SHA256, "":
		return SHA256CBOR, name != "", nil
	case XXHash:
		return XXHashCBOR, true, nil
	default:
		return "", false, fmt.Errorf("unknown prefix caching hash algorithm %q (want sha256_cbor, xxhash_cbor, sha256 or xxhash)", name)
	}
}

// Hash is one block digest: 32 bytes for SHA-256, 16 for xxh3-128. The zero value means "no hash".
type Hash struct {
	d [32]byte
	n uint8
}

// Bytes returns a copy of the digest.
func (h Hash) Bytes() []byte { return append([]byte(nil), h.d[:h.n]...) }

// Uint64 is the form vLLM puts on the wire by default (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1):
// the digest read as a big-endian integer, truncated to its low 64 bits.
func (h Hash) Uint64() uint64 {
	if h.n < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(h.d[h.n-8 : h.n])
}

// IsZero reports whether h holds no digest.
func (h Hash) IsZero() bool { return h.n == 0 }

// String renders the digest in hex (for logs and tests; digests are not user data).
func (h Hash) String() string { return fmt.Sprintf("%x", h.d[:h.n]) }

// Hasher computes chained block hashes. It keeps a scratch buffer, so one Hasher must not be used
// by two goroutines at once (each engine owns one).
type Hasher struct {
	algo string
	none Hash
	buf  []byte
}

// New returns a Hasher for algo (a name accepted by Canonical). seed is the PYTHONHASHSEED string;
// nil means unset, which makes NONE_HASH random like vLLM does, so hashes differ per process.
func New(algo string, seed *string) (*Hasher, error) {
	canon, _, err := Canonical(algo)
	if err != nil {
		return nil, err
	}
	h := &Hasher{algo: canon, buf: make([]byte, 0, 256)}
	if seed == nil {
		var r [32]byte
		if _, err := rand.Read(r[:]); err != nil {
			return nil, fmt.Errorf("seeding NONE_HASH: %w", err)
		}
		h.none = Hash{d: r, n: 32}
	} else {
		h.buf = appendText(h.buf[:0], *seed)
		h.none = h.digest(h.buf)
	}
	return h, nil
}

// NewFromEnv is New with the seed taken from the PYTHONHASHSEED environment variable.
func NewFromEnv(algo string) (*Hasher, error) {
	if v, ok := os.LookupEnv("PYTHONHASHSEED"); ok {
		return New(algo, &v)
	}
	return New(algo, nil)
}

// Algorithm returns the CBOR algorithm in use.
func (h *Hasher) Algorithm() string { return h.algo }

// NoneHash returns the chain seed.
func (h *Hasher) NoneHash() Hash { return h.none }

// Block hashes one full block. A zero parent means "first block" (NONE_HASH). extra holds the
// block's extra keys in vLLM's order (LoRA name, then cache_salt on the first block); nil or empty
// is encoded as CBOR null, as vLLM passes None when a block has no extra keys.
func (h *Hasher) Block(parent Hash, tokens []uint32, extra []string) Hash {
	if parent.IsZero() {
		parent = h.none
	}
	// Hand-written canonical CBOR for this one fixed shape: it runs for every block of every
	// request, and a reflective encoder costs several allocations per block. The tests check it
	// byte for byte against fxamacker/cbor's canonical mode.
	b := h.buf[:0]
	b = append(b, 0x83)
	b = appendHead(b, 2, uint64(parent.n))
	b = append(b, parent.d[:parent.n]...)
	b = appendHead(b, 4, uint64(len(tokens)))
	for _, t := range tokens {
		b = appendHead(b, 0, uint64(t))
	}
	if len(extra) == 0 {
		b = append(b, 0xf6)
	} else {
		b = appendHead(b, 4, uint64(len(extra)))
		for _, k := range extra {
			b = appendText(b, k)
		}
	}
	h.buf = b
	return h.digest(b)
}

// Chain hashes every full block of tokens, starting after parent (zero for the start of a prompt).
// extraFor returns the extra keys of block i (relative to tokens), or nil.
func (h *Hasher) Chain(parent Hash, tokens []uint32, blockSize int, extraFor func(i int) []string) []Hash {
	if blockSize <= 0 {
		return nil
	}
	n := len(tokens) / blockSize
	out := make([]Hash, 0, n)
	for i := 0; i < n; i++ {
		var extra []string
		if extraFor != nil {
			extra = extraFor(i)
		}
		parent = h.Block(parent, tokens[i*blockSize:(i+1)*blockSize], extra)
		out = append(out, parent)
	}
	return out
}

// ExtraKeys builds the extra keys vLLM mixes into block blockIndex (counted from the start of the
// request) of a request with the given LoRA adapter and cache_salt: the LoRA name on every block,
// the salt on the first block only. Multimodal keys are not modelled. Returns nil when empty.
func ExtraKeys(lora, cacheSalt string, blockIndex int) []string {
	var keys []string
	if lora != "" {
		keys = append(keys, lora)
	}
	if cacheSalt != "" && blockIndex == 0 {
		keys = append(keys, cacheSalt)
	}
	return keys
}

func (h *Hasher) digest(b []byte) Hash {
	var out Hash
	switch h.algo {
	case XXHashCBOR:
		// Python's xxhash.xxh3_128_digest is the big-endian 128-bit value: high word first.
		v := xxh3.Hash128(b)
		binary.BigEndian.PutUint64(out.d[0:8], v.Hi)
		binary.BigEndian.PutUint64(out.d[8:16], v.Lo)
		out.n = 16
	default:
		out.d = sha256.Sum256(b)
		out.n = 32
	}
	return out
}

// appendHead writes a CBOR head in its shortest form (which is what canonical CBOR requires).
func appendHead(b []byte, major byte, v uint64) []byte {
	m := major << 5
	switch {
	case v < 24:
		return append(b, m|byte(v))
	case v <= 0xff:
		return append(b, m|24, byte(v))
	case v <= 0xffff:
		return append(b, m|25, byte(v>>8), byte(v))
	case v <= 0xffffffff:
		return append(b, m|26, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		b = append(b, m|27)
		return binary.BigEndian.AppendUint64(b, v)
	}
}

func appendText(b []byte, s string) []byte {
	b = appendHead(b, 3, uint64(len(s)))
	return append(b, s...)
}

// FromBytes wraps a digest of 8 to 32 bytes (for tests and decoders); longer input is rejected.
func FromBytes(b []byte) (Hash, error) {
	if len(b) < 8 || len(b) > 32 {
		return Hash{}, fmt.Errorf("block hash must have 8 to 32 bytes, got %d", len(b))
	}
	var h Hash
	copy(h.d[:], b)
	h.n = uint8(len(b))
	return h, nil
}
