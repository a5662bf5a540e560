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
	"crypto/rand"
	"encoding/binary"
	"math/bits"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
)

// Content keys chain block by block: key_i = H(key_{i-1}, tokens_i, extra_i), with key_{-1} =
// H(seed, LoRA name). Keys never leave the process (the router computes them for requests and
// the index for events, in the same process), so the hash needs no stability across versions or
// machines, only speed and good mixing.
//
// The block hash is hand-written rather than xxhash because it is the largest cost of a long
// lookup (6,250 blocks for a 100K-token prompt): it consumes the token ids as 64-bit words
// directly, wyhash-style (128-bit multiply, fold halves), one multiply per 4 tokens in two independent
// lanes, with no byte
// conversion. Collisions at 64 bits are ~n²/2^65 (2e-7 at 2.5M keys); the per-process random
// seed keeps anyone from crafting prompts that collide with another tenant's keys offline.
var seed = func() [4]uint64 {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms; fixed constants still hash well.
		copy(b[:], "kvrouter kvindex fallback seed!!")
	}
	var s [4]uint64
	for i := range s {
		s[i] = binary.LittleEndian.Uint64(b[8*i:]) | 1
	}
	return s
}()

const (
	p0 = 0xa0761d6478bd642f
	p1 = 0xe7037ed1a0b428db
	p2 = 0x8ebc6af09c88c6e3
	p3 = 0x589965cc75374cc3
)

func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

type chain struct{ prev uint64 }

func newChain(lora string) chain {
	h := mum(seed[0]^p0, uint64(len(lora))^p1)
	b := []byte(lora)
	for len(b) >= 8 {
		h = mum(binary.LittleEndian.Uint64(b)^p2, h^seed[1])
		b = b[8:]
	}
	var tail [8]byte
	copy(tail[:], b)
	h = mum(binary.LittleEndian.Uint64(tail[:])^p3, h^seed[2])
	return chain{prev: h}
}

// resume continues a chain after a known key (an event's resolved parent).
func resume(parent Key) chain { return chain{prev: uint64(parent)} }

func (c *chain) next(tokens []uint32, extra uint64) Key {
	// Two independent lanes of 4 tokens each, and the parent key enters only the final mix:
	// the token lanes of the next block do not wait for this block's key, so consecutive
	// blocks hash in parallel and the chain costs one multiply per block.
	h, h2 := seed[3], seed[1]
	n := len(tokens)
	i := 0
	for ; i+8 <= n; i += 8 {
		t := tokens[i : i+8 : i+8]
		h = mum(uint64(t[0])|uint64(t[1])<<32^p0, uint64(t[2])|uint64(t[3])<<32^h)
		h2 = mum(uint64(t[4])|uint64(t[5])<<32^p1, uint64(t[6])|uint64(t[7])<<32^h2)
	}
	for ; i < n; i++ {
		h = mum(uint64(tokens[i])^p1, h^p2)
	}
	k := mum(h^c.prev^p3, h2^extra^uint64(n)^seed[0])
	if k == 0 { // 0 marks a free node slot
		k = 1
	}
	c.prev = k
	return Key(k)
}

func saltDigest(s string) uint64 { return kvevents.SaltDigest(s) }
