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

import "math/rand/v2"

// prodstackPrefix is production-stack's prefixaware router (docs/peer-policies.md §4): a trie of
// 128-character chunks (32 of kvbench's 4-character tokens; the last partial chunk included),
// each node holding the endpoints that inserted through it. The match narrows the candidate set
// node by node and stops when a node is missing or nobody is left; the pick is uniform among the
// survivors (all endpoints for a cold prompt). The prompt is inserted for the chosen endpoint at
// once, and nothing is ever evicted. min match length 0: no QPS fallback.
type prodstackPrefix struct {
	nop
	rng   *rand.Rand
	nodes map[uint64]map[string]struct{}
}

const prodstackChunkTokens = 128 / 4

func newProdstackPrefix(e Env) Policy {
	return &prodstackPrefix{rng: e.Rand, nodes: map[uint64]map[string]struct{}{}}
}

func (p *prodstackPrefix) Pick(r *Request, eps []Endpoint) int {
	alive := make([]bool, len(eps))
	for i := range alive {
		alive[i] = true
	}
	for _, h := range ChainHashes(r.Tokens, prodstackChunkTokens, true, 0) {
		node := p.nodes[h]
		if node == nil {
			break
		}
		next := make([]bool, len(eps))
		any := false
		for i, e := range eps {
			if _, ok := node[e.Name]; ok && alive[i] {
				next[i], any = true, true
			}
		}
		if !any {
			break
		}
		alive = next
	}
	var cands []int
	for i, a := range alive {
		if a {
			cands = append(cands, i)
		}
	}
	return cands[p.rng.IntN(len(cands))]
}

func (p *prodstackPrefix) Dispatched(r *Request, ep string) {
	for _, h := range ChainHashes(r.Tokens, prodstackChunkTokens, true, 0) {
		n := p.nodes[h]
		if n == nil {
			n = map[string]struct{}{}
			p.nodes[h] = n
		}
		n[ep] = struct{}{}
	}
}
