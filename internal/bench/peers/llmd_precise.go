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
// Speculative indexing is off (its default), so a burst of siblings sees nothing until the
// engine's events arrive.
type llmdPrecise struct {
	nop
	rng   *rand.Rand
	ix    *kvindex.Index
	block int
}

func newLLMDPrecise(e Env) Policy { return &llmdPrecise{rng: e.Rand, ix: e.Events, block: e.BlockSize} }

func (p *llmdPrecise) Pick(r *Request, eps []Endpoint) int {
	total := len(r.Tokens) / p.block
	m := gpuMatches(p.ix, r.Tokens)
	q, kv := queueScores(eps), kvScores(eps)
	s := make([]float64, len(eps))
	for i, e := range eps {
		var ratio float64
		if total > 0 {
			ratio = float64(m[e.Name]) / float64(total)
		}
		s[i] = 2*ratio + kv[i] + q[i]
	}
	return argmaxRandom(s, p.rng)
}
