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
// (ISL − cached at routing, held until the first token); decode blocks are the unique full blocks
// of the router's active requests on w plus this request's full blocks not already among them
// (Dynamo's active-sequence tracker keys blocks by the sequence hashes of full blocks only, so a
// trailing partial block is never counted). decay is 1 unless the credit-decay knob d > 0 (§2.4):
// 1/(1 + d·excess prefill backlog in request-sizes).
//
// With a predicted TTL (--router-predicted-ttl-secs, §2.5) a side index records every routing
// decision's blocks for the chosen worker for that many seconds, and a worker's overlap is the
// larger of what the events index and the side index say.
type dynamo struct {
	rng     *rand.Rand
	ix      *kvindex.Index
	now     func() float64
	block   int
	decay   float64
	side    *ttlIndex // nil: predicted TTL off
	prefill map[string]int
	blocks  map[string]map[kvindex.Key]int // active blocks per worker, refcounted
	pending map[int]dynReq
}

type dynReq struct {
	keys     []kvindex.Key
	uncached map[string]int
	charged  int
	prefill  bool
}

// dynamoOptions are the documented router options the variants turn on (§2.4, §2.5).
type dynamoOptions struct {
	decay        float64 // --router-kv-overlap-score-credit-decay
	predictedTTL float64 // --router-predicted-ttl-secs (0: off)
}

func newDynamo(e Env, decay float64) Policy { return newDynamoWith(e, dynamoOptions{decay: decay}) }

func newDynamoWith(e Env, o dynamoOptions) *dynamo {
	p := &dynamo{rng: e.Rand, ix: e.Events, now: e.Now, block: e.BlockSize, decay: o.decay,
		prefill: map[string]int{}, blocks: map[string]map[kvindex.Key]int{}, pending: map[int]dynReq{}}
	if o.predictedTTL > 0 {
		p.side = newTTLIndex(o.predictedTTL)
	}
	return p
}

func (p *dynamo) Pick(r *Request, eps []Endpoint) int {
	L := len(r.Tokens)
	keys := kvindex.RequestKeys(nil, r.Tokens, p.block, kvindex.KeyParams{})
	over := gpuMatches(p.ix, r.Tokens)
	if p.side != nil {
		now := p.now()
		for _, e := range eps {
			over[e.Name] = max(over[e.Name], p.side.match(e.Name, keys, 0, now))
		}
	}
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
		cost[i] = -(adj + float64(p.decodeBlocks(e.Name, keys))) // argmaxRandom on the negated cost
		unc[e.Name] = max(0, L-over[e.Name]*p.block)
	}
	p.pending[r.ID] = dynReq{keys: keys, uncached: unc}
	return argmaxRandom(cost, p.rng)
}

// decodeBlocks is the decode term of w's cost: its active full blocks plus those of keys it does
// not already hold active.
func (p *dynamo) decodeBlocks(w string, keys []kvindex.Key) int {
	active := p.blocks[w]
	n := len(active)
	for _, k := range keys {
		if active[k] == 0 {
			n++
		}
	}
	return n
}

// Dispatched charges the worker and, with a predicted TTL, records the decision in the side
// index (Dynamo does so once the worker is chosen, before any event can arrive).
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
	if p.side != nil {
		p.side.record(ep, d.keys, p.now())
	}
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
}

// dynamoMaxBatchedTokens is the max_num_batched_tokens the workers report to the router queue:
// vLLM's default, which the simulated engines use too.
const dynamoMaxBatchedTokens = 8192

// prefillBusy reports that every eligible worker has more active prefill tokens than threshold ×
// max_num_batched_tokens: the condition under which Dynamo's router queue holds a request
// (--router-queue-threshold, §2.5).
func (p *dynamo) prefillBusy(eps []Endpoint, threshold float64) bool {
	for _, e := range eps {
		if float64(p.prefill[e.Name]) <= threshold*dynamoMaxBatchedTokens {
			return false
		}
	}
	return len(eps) > 0
}

// newDynamoQueued is the dynamo policy behind Dynamo's router queue: FCFS (the default
// --router-queue-policy), released when some worker's active prefill drops to the threshold,
// then routed by the usual cost. Dynamo's queue has no wait bound by default.
func newDynamoQueued(e Env, o dynamoOptions, threshold float64) Policy {
	d := newDynamoWith(e, o)
	return newGatedQueue(d, e.Now, func(eps []Endpoint) bool { return d.prefillBusy(eps, threshold) }, 0, 0, "router_queue")
}
