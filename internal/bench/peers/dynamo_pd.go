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

import "github.com/kvrouter/kvrouter/internal/router/kvindex"

// dynamo-pd is Dynamo's disaggregated serving as its frontend's PrefillRouter drives it
// (ai-dynamo/dynamo lib/llm/src/kv_router/prefill_router.rs at commit
// 007ddea7b6f7e80cd4790764ded62ac2b714158e; docs/peer-policies.md §9.1):
//   - the prefill worker is the KV router's pick over the prefill pool: the §2.2 linear cost with
//     the overlap from KV events (overlap weight 1);
//   - the decode worker is the KV router's pick over the decode pool with the override the
//     PrefillRouter sets on the decode request: overlap_score_weight 0 (no cache credit) and
//     assume_kv_reuse false (the request's blocks are counted as new blocks even where another
//     active request holds the same prefix);
//   - every request is split while prefill workers exist; a failed prefill leg falls back to a
//     decode-only request (enforce_disagg off, the default). That PrefillRouter has no
//     conditional disaggregation: the prefill-length and queue thresholds of Dynamo's early
//     disaggregated router are gone from it.
//
// Without a prefill pool Dynamo routes as its aggregated KV router (the dynamo policy).
//
// The PrefillRouter waits for the prefill answer before it routes the decode request (vLLM
// workers advertise no bootstrap endpoint), so the decode pick is made then (RepickDecode), on the
// decode pool's state after the prefill, not at the request's arrival.
func newDynamoPD(e Env) Policy {
	p := newPDPair(newDynamo(e, 0), &dynamoDecode{dynamo: newDynamo(e, 0).(*dynamo)}, newDynamo(e, 0))
	p.lateDecode = true
	return p
}

// dynamoDecode is the KV router's cost with overlap weight 0, no assumed KV reuse and no
// prefill-token tracking (the decode override also sets track_prefill_tokens false: a decode
// worker runs no prefill of its own, so its queue of prefill tokens says nothing):
//
//	cost(w) = L/B + active_blocks(w) + floor(L/B)
//
// where L/B is the same on every worker and so decides nothing.
// Its bookkeeping (prefill tokens until the first token, active full blocks until the end) is the
// dynamo policy's, fed with per-request block keys so that no two requests share a block, which
// is what the random hashes of assume_kv_reuse false amount to.
type dynamoDecode struct {
	*dynamo
}

// dynamoDecodeKeyShift leaves room for the blocks of a 16M-token prompt per request index.
const dynamoDecodeKeyShift = 18

func (p *dynamoDecode) Pick(r *Request, eps []Endpoint) int {
	L := len(r.Tokens)
	full := L / p.block
	keys := make([]kvindex.Key, full)
	for b := range keys {
		keys[b] = kvindex.Key(uint64(r.ID)<<dynamoDecodeKeyShift | uint64(b))
	}
	unc := map[string]int{}
	cost := make([]float64, len(eps))
	for i, e := range eps {
		active := float64(len(p.blocks[e.Name]))
		cost[i] = -(float64(L)/float64(p.block) + active + float64(full))
		unc[e.Name] = 0 // nothing charged as prefill load
	}
	p.pending[r.ID] = dynReq{keys: keys, uncached: unc}
	return argmaxRandom(cost, p.rng)
}
