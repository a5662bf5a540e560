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

// oracle is the hit-rate upper bound: it knows exactly what every engine holds at this instant
// (an index fed with no event lag) and also which prefixes are queued or running there (they will
// be cached by the time a new request's prefill runs), and sends each request to the longest such
// prefix; ties and cold requests go to the fewest in-flight requests. It ignores load beyond
// that, so it bounds hit rate, not latency.
//
// oracleBounded adds the bounded-load rule of consistent hashing with bounded loads: an endpoint
// with more than ceil((1+ε)·(m+1)/n) requests in flight (m in flight over n endpoints, ε = 0.25)
// is not a candidate. It is the hit-rate reference for traces with a universal prefix (Mooncake's
// block 0 is in every request), where the unbounded oracle sends everything to one engine.
type oracle struct {
	eps     float64 // bounded-load slack; 0 = unbounded
	rng     *rand.Rand
	ix      *kvindex.Index
	block   int
	queued  map[string]map[kvindex.Key]int
	pending map[int][]kvindex.Key
}

func newOracle(e Env) Policy { return newOracleEps(e, 0) }

func newOracleBounded(e Env) Policy { return newOracleEps(e, 0.25) }

func newOracleEps(e Env, eps float64) *oracle {
	return &oracle{eps: eps, rng: e.Rand, ix: e.Exact, block: e.BlockSize, queued: map[string]map[kvindex.Key]int{}, pending: map[int][]kvindex.Key{}}
}

func (p *oracle) Pick(r *Request, eps []Endpoint) int {
	m := gpuMatches(p.ix, r.Tokens)
	keys := kvindex.RequestKeys(nil, r.Tokens, p.block, kvindex.KeyParams{})
	p.pending[r.ID] = keys
	s := make([]float64, len(eps))
	limit := math.Inf(1)
	if p.eps > 0 {
		m := 0
		for _, e := range eps {
			m += e.InFlight
		}
		limit = math.Ceil((1 + p.eps) * float64(m+1) / float64(len(eps)))
	}
	for i, e := range eps {
		if float64(e.InFlight+1) > limit {
			s[i] = math.Inf(-1)
			continue
		}
		q := p.queued[e.Name]
		n := 0
		for n < len(keys) && q[keys[n]] > 0 {
			n++
		}
		// Match dominates; in-flight count only breaks ties (it is < 1e6 blocks apart).
		s[i] = float64(max(m[e.Name], n))*1e6 - float64(e.InFlight)
	}
	return argmaxRandom(s, p.rng)
}

func (p *oracle) Dispatched(r *Request, ep string) {
	q := p.queued[ep]
	if q == nil {
		q = map[kvindex.Key]int{}
		p.queued[ep] = q
	}
	for _, k := range p.pending[r.ID] {
		q[k]++
	}
}

func (p *oracle) FirstToken(*Request, string, float64) {}

func (p *oracle) Finished(r *Request, ep string) {
	q := p.queued[ep]
	for _, k := range p.pending[r.ID] {
		if q[k]--; q[k] <= 0 {
			delete(q, k)
		}
	}
	delete(p.pending, r.ID)
}
