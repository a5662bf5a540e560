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

package peers

import (
	"math/rand/v2"

	"github.com/kvrouter/kvrouter/internal/router/kvindex"
)

// llmdPrecise is llm-d's precise prefix routing (docs/peer-policies.md §1.3): the
// prefix-cache-scorer fed by a KV-event index (contiguous GPU match from block 0, ratio
// matchBlocks/totalBlocks over the request's full blocks), with the weights of llm-d-router's
// shipped precise config (deploy/config/epp-precise-prefix-cache-config.yaml): prefix 2, KV
// utilisation 1, queue 1.
//
// Options (llmdPreciseOptions): speculative indexing, default off, so that by default a burst of
// siblings sees nothing until the engine's events arrive; and the indexer's own block size, which
// need not be the engine's because the EPP recomputes block keys from the token ids (16 by
// default, 64 in the shipped config).
type llmdPrecise struct {
	rng   *rand.Rand
	ix    *kvindex.Index
	now   func() float64
	block int // the engine's
	// idxBlock is the indexer's block in tokens: a match of m engine blocks is
	// floor(m·block/idxBlock) indexer blocks, out of floor(L/idxBlock).
	idxBlock int
	spec     *ttlIndex // nil: speculative indexing off
	last     map[int][]kvindex.Key
}

// llmdPreciseOptions are the documented options of the precise producer (§1.3).
type llmdPreciseOptions struct {
	specTTL  float64 // speculative indexing TTL in seconds (0: off; llm-d's default TTL is 2 s)
	idxBlock int     // indexer blockSizeTokens (0: the engine's block size)
}

func newLLMDPrecise(e Env) Policy { return newLLMDPreciseWith(e, llmdPreciseOptions{}) }

func newLLMDPreciseWith(e Env, o llmdPreciseOptions) *llmdPrecise {
	p := &llmdPrecise{rng: e.Rand, ix: e.Events, now: e.Now, block: e.BlockSize, idxBlock: o.idxBlock, last: map[int][]kvindex.Key{}}
	if p.idxBlock <= 0 {
		p.idxBlock = e.BlockSize
	}
	if o.specTTL > 0 {
		p.spec = newTTLIndex(o.specTTL)
	}
	return p
}

func (p *llmdPrecise) Pick(r *Request, eps []Endpoint) int {
	total := len(r.Tokens) / p.idxBlock
	m := gpuMatches(p.ix, r.Tokens)
	if p.spec != nil {
		// A pod's match runs over blocks it holds or was speculatively given (contiguous).
		keys := kvindex.RequestKeys(nil, r.Tokens, p.block, kvindex.KeyParams{})
		p.last[r.ID] = keys
		now := p.now()
		for _, e := range eps {
			m[e.Name] = p.spec.match(e.Name, keys, m[e.Name], now)
		}
	}
	q, kv := queueScores(eps), kvScores(eps)
	s := make([]float64, len(eps))
	for i, e := range eps {
		var ratio float64
		if total > 0 {
			ratio = float64(m[e.Name]*p.block/p.idxBlock) / float64(total)
		}
		s[i] = 2*ratio + kv[i] + q[i]
	}
	return argmaxRandom(s, p.rng)
}

// Dispatched seeds the speculative entries for the chosen pod (PreRequest, right after the
// routing decision).
func (p *llmdPrecise) Dispatched(r *Request, ep string) {
	if keys, ok := p.last[r.ID]; ok {
		p.spec.record(ep, keys, p.now())
		delete(p.last, r.ID)
	}
}

func (p *llmdPrecise) FirstToken(*Request, string, float64) {}
func (p *llmdPrecise) Finished(*Request, string)            {}
