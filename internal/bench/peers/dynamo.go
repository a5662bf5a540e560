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
	"math"
	"math/rand/v2"

	"github.com/kvrouter/kvrouter/internal/router/kvindex"
)

// dynamo is NVIDIA Dynamo's KV router with its default linear cost (docs/peer-policies.md §2.2):
//
//	cost(w) = max(0, (active_prefill_tokens(w) + L)/B − c·decay(w)·overlap(w)) + decode_blocks(w)
//
// with c = 1, s = 1, a = 0, temperature 0 (argmin, random ties). overlap is the contiguous GPU
// prefix from the KV-event index (full blocks only); active prefill tokens are the router's own
// (ISL − cached at routing, held until the first token); decode blocks are the unique blocks of
// the router's active requests on w plus this request's blocks not already among them. decay is
// 1 unless the credit-decay knob d > 0 (§2.4): 1/(1 + d·excess prefill backlog in request-sizes).
type dynamo struct {
	rng     *rand.Rand
	ix      *kvindex.Index
	block   int
	decay   float64
	prefill map[string]int
	blocks  map[string]map[kvindex.Key]int // active blocks per worker, refcounted
	partial map[string]int                 // active partial blocks per worker
	pending map[int]dynReq
}

type dynReq struct {
	keys     []kvindex.Key
	partial  int
	uncached map[string]int
	charged  int
	prefill  bool
}

func newDynamo(e Env, decay float64) Policy {
	return &dynamo{rng: e.Rand, ix: e.Events, block: e.BlockSize, decay: decay,
		prefill: map[string]int{}, blocks: map[string]map[kvindex.Key]int{}, partial: map[string]int{}, pending: map[int]dynReq{}}
}

func (p *dynamo) Pick(r *Request, eps []Endpoint) int {
	L := len(r.Tokens)
	keys := kvindex.RequestKeys(nil, r.Tokens, p.block, kvindex.KeyParams{})
	part := 0
	if L%p.block != 0 {
		part = 1
	}
	over := gpuMatches(p.ix, r.Tokens)
	minPrefill := math.MaxInt
	for _, e := range eps {
		minPrefill = min(minPrefill, p.prefill[e.Name])
	}
	reqBlocks := math.Ceil(float64(L) / float64(p.block))
	unc := map[string]int{}
	cost := make([]float64, len(eps))
	for i, e := range eps {
		ov := float64(over[e.Name])
		dec := 1.0
		if p.decay > 0 && reqBlocks > 0 {
			dec = 1 / (1 + p.decay*(float64(p.prefill[e.Name]-minPrefill)/float64(p.block))/reqBlocks)
		}
		adj := math.Max(float64(p.prefill[e.Name]+L)/float64(p.block)-dec*ov, 0)
		active := p.blocks[e.Name]
		newBlocks := part
		for _, k := range keys {
			if active[k] == 0 {
				newBlocks++
			}
		}
		decode := float64(len(active) + p.partial[e.Name] + newBlocks)
		cost[i] = -(adj + decode) // argmaxRandom on the negated cost
		unc[e.Name] = max(0, L-over[e.Name]*p.block)
	}
	p.pending[r.ID] = dynReq{keys: keys, partial: part, uncached: unc}
	return argmaxRandom(cost, p.rng)
}

func (p *dynamo) Dispatched(r *Request, ep string) {
	d := p.pending[r.ID]
	d.charged, d.prefill, d.uncached = d.uncached[ep], true, nil
	p.pending[r.ID] = d
	p.prefill[ep] += d.charged
	m := p.blocks[ep]
	if m == nil {
		m = map[kvindex.Key]int{}
		p.blocks[ep] = m
	}
	for _, k := range d.keys {
		m[k]++
	}
	p.partial[ep] += d.partial
}

func (p *dynamo) FirstToken(r *Request, ep string, _ float64) {
	d, ok := p.pending[r.ID]
	if ok && d.prefill {
		p.prefill[ep] -= d.charged
		d.prefill = false
		p.pending[r.ID] = d
	}
}

func (p *dynamo) Finished(r *Request, ep string) {
	p.FirstToken(r, ep, 0)
	d, ok := p.pending[r.ID]
	if !ok {
		return
	}
	delete(p.pending, r.ID)
	m := p.blocks[ep]
	for _, k := range d.keys {
		if m[k]--; m[k] <= 0 {
			delete(m, k)
		}
	}
	p.partial[ep] -= d.partial
}
