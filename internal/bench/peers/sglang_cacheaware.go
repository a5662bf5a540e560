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
	"sort"
)

// sglang is SGLang's cache_aware policy with the CLI defaults users get (docs/peer-policies.md
// §3.2, §3.3): cache_threshold 0.3, balance_abs_threshold 64, balance_rel_threshold 1.5, eviction
// every 60 s down to 2^26 characters per tenant. Load is the router's in-flight count.
//
// The character radix tree is kept at 16-token (64-character) granularity as chained hashes; a
// match therefore counts whole 16-token steps, which loses at most 15 tokens of a match and does
// not change which tenant wins.
type sglang struct {
	rng       *rand.Rand
	now       func() float64
	nodes     map[uint64]map[string]float64 // chain hash -> tenant -> last access
	size      map[string]int                // tokens per tenant
	lastEvict float64
}

const (
	sglangGranule      = 16
	sglangThreshold    = 0.3
	sglangAbs          = 64
	sglangRel          = 1.5
	sglangEvictEvery   = 60.0
	sglangBudgetTokens = (1 << 26) / 4
)

func newSGLang(e Env) Policy {
	return &sglang{rng: e.Rand, now: e.Now, nodes: map[uint64]map[string]float64{}, size: map[string]int{}}
}

func (p *sglang) Pick(r *Request, eps []Endpoint) int {
	p.evict()
	maxL, minL := eps[0].InFlight, eps[0].InFlight
	for _, e := range eps {
		maxL, minL = max(maxL, e.InFlight), min(minL, e.InFlight)
	}
	if maxL-minL > sglangAbs && float64(maxL) > sglangRel*float64(minL) {
		// Shortest queue; ties to the first in iteration order, as SGLang does.
		best := 0
		for i, e := range eps {
			if e.InFlight < eps[best].InFlight {
				best = i
			}
		}
		return best
	}
	hashes := ChainHashes(r.Tokens, sglangGranule, true, 0)
	depth := 0
	for depth < len(hashes) && len(p.nodes[hashes[depth]]) > 0 {
		depth++
	}
	matched := min(depth*sglangGranule, len(r.Tokens))
	if depth > 0 && len(r.Tokens) > 0 && float64(matched)/float64(len(r.Tokens)) > sglangThreshold {
		// The first tenant in the deepest node's map order: arbitrary among holders.
		node := p.nodes[hashes[depth-1]]
		names := make([]string, 0, len(node))
		for t := range node {
			names = append(names, t)
		}
		sort.Strings(names)
		tenant := names[p.rng.IntN(len(names))]
		for i, e := range eps {
			if e.Name == tenant {
				return i
			}
		}
		return 0 // tenant gone: first healthy worker
	}
	// Smallest tenant: fewest characters in the tree (workers never inserted count 0).
	best := 0
	for i, e := range eps {
		if p.size[e.Name] < p.size[eps[best].Name] {
			best = i
		}
	}
	return best
}

func (p *sglang) Dispatched(r *Request, ep string) {
	now := p.now()
	hs := ChainHashes(r.Tokens, sglangGranule, true, 0)
	for i, h := range hs {
		n := p.nodes[h]
		if n == nil {
			n = map[string]float64{}
			p.nodes[h] = n
		}
		if _, ok := n[ep]; !ok {
			p.size[ep] += min(sglangGranule, len(r.Tokens)-i*sglangGranule)
		}
		n[ep] = now
	}
}

func (p *sglang) FirstToken(*Request, string, float64) {}
func (p *sglang) Finished(*Request, string)            {}

// evict runs the periodic eviction: tenants over budget lose their least recently used nodes.
func (p *sglang) evict() {
	now := p.now()
	if now-p.lastEvict < sglangEvictEvery {
		return
	}
	p.lastEvict = now
	for tenant, sz := range p.size {
		if sz <= sglangBudgetTokens {
			continue
		}
		type ent struct {
			h  uint64
			at float64
		}
		var es []ent
		for h, n := range p.nodes {
			if at, ok := n[tenant]; ok {
				es = append(es, ent{h, at})
			}
		}
		sort.Slice(es, func(a, b int) bool { return es[a].at < es[b].at })
		for _, e := range es {
			if p.size[tenant] <= sglangBudgetTokens {
				break
			}
			delete(p.nodes[e.h], tenant)
			if len(p.nodes[e.h]) == 0 {
				delete(p.nodes, e.h)
			}
			p.size[tenant] -= sglangGranule
		}
	}
}
