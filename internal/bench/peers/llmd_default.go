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

// llmdDefault is the llm-d EPP's default profile with no config file (docs/peer-policies.md §1.1):
// queue-scorer 2 + kv-cache-utilization-scorer 2 + prefix-cache-scorer 3 (pure match ratio) over
// the approximate prefix producer (§1.2: 64-token blocks, match cap 131,072 tokens), max-score
// picker with random ties. Queue and KV usage come from the 50 ms scrape.
type llmdDefault struct {
	nop
	rng    *rand.Rand
	prefix *approxProducer
	last   map[int][]uint64
}

func newLLMDDefault(e Env) Policy {
	return &llmdDefault{rng: e.Rand, prefix: newApproxProducer(e.BlockSize, 131072), last: map[int][]uint64{}}
}

func (p *llmdDefault) Pick(r *Request, eps []Endpoint) int {
	hs := p.prefix.hashes(r.Tokens)
	p.last[r.ID] = hs
	ratio, _ := p.prefix.ratios(eps, hs)
	q, kv := queueScores(eps), kvScores(eps)
	s := make([]float64, len(eps))
	for i := range eps {
		s[i] = 2*q[i] + 2*kv[i] + 3*ratio[i]
	}
	return argmaxRandom(s, p.rng)
}

// Dispatched is PreRequest: the request's hashes go to the chosen pod's LRU at once.
func (p *llmdDefault) Dispatched(r *Request, ep string) {
	p.prefix.record(ep, p.last[r.ID])
	delete(p.last, r.ID)
}
