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

package simulate

import (
	"github.com/cespare/xxhash/v2"

	"github.com/kvrouter/kvrouter/internal/bench/peers"
)

// cacheCeiling measures the most of the prompts that any placement could have served from
// cache: the blocks a single prefix cache of unlimited size, shared by the whole fleet, would
// have held when each request arrived. A router's hit rate below it is cache left unused; at it,
// more hits are out of reach and what is left to win is elsewhere (the engines' load, the
// balance of the drain). It is computed apart from the engines, so it is the same for every
// policy on a seed (up to which requests complete), and kvbench reports it beside the hit rate.
//
// The blocks follow the engine's rules: full blocks only, chained so that a block is a hit
// only behind the blocks before it, never the block holding the prompt's last token (it is
// computed to sample), and keyed by the LoRA adapter. The generated blocks of a request whose
// follow-up turns resend its answer count from its finish, as the engine caches them: all but
// the block holding the answer's last token, which was sampled and never computed.
type cacheCeiling struct {
	block int
	seen  map[uint64]struct{}
	hits  []int // per request: the prompt tokens the unlimited cache held at its arrival
}

func newCacheCeiling(blockSize, requests int) *cacheCeiling {
	return &cacheCeiling{block: max(1, blockSize), seen: map[uint64]struct{}{}, hits: make([]int, requests)}
}

// arrive records request i's prompt: what the cache held of it, then its blocks.
func (c *cacheCeiling) arrive(i int, prompt []uint32, adapter string) {
	maxHit := (len(prompt) - 1) / c.block
	hit, counting := 0, true
	for k, h := range c.blocks(prompt, adapter) {
		_, ok := c.seen[h]
		if counting && ok && k < maxHit {
			hit++
		} else {
			counting = false
		}
		c.seen[h] = struct{}{}
	}
	c.hits[i] = hit * c.block
}

// finish records the blocks of a finished request's prompt and answer, which its follow-ups
// will resend.
func (c *cacheCeiling) finish(prompt, output []uint32, adapter string) {
	if len(output) == 0 {
		return
	}
	all := make([]uint32, 0, len(prompt)+len(output))
	all = append(append(all, prompt...), output...)
	for _, h := range c.blocks(all[:len(all)-1], adapter) {
		c.seen[h] = struct{}{}
	}
}

// blocks returns the chained hashes of tokens' full blocks (the peers' prefix hashes), each
// mixed with the adapter: the engine keeps an adapter's blocks apart from the base model's.
func (c *cacheCeiling) blocks(tokens []uint32, adapter string) []uint64 {
	hs := peers.ChainHashes(tokens, c.block, false, 0)
	if adapter != "" {
		salt := xxhash.Sum64String(adapter)
		for k := range hs {
			hs[k] ^= salt
		}
	}
	return hs
}

// rate is the ceiling's hit rate over the requests done says completed, weighted by prompt
// length as kvbench's hit rate is.
func (c *cacheCeiling) rate(prompt func(i int) int, done func(i int) bool) float64 {
	hit, total := 0, 0
	for i, h := range c.hits {
		if !done(i) {
			continue
		}
		hit += min(h, prompt(i))
		total += prompt(i)
	}
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}
