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

// peerPDFactories returns the peers' P/D policies (docs/peer-policies.md §9), each at the
// configuration its project documents for disaggregated serving.
func peerPDFactories() []Factory {
	return []Factory{
		{Name: "dynamo-pd", Family: FamilyDynamo, Source: "§9.1 PrefillRouter: KV cost over prefill, overlap-free cost over decode", NeedsEvents: true, New: newDynamoPD},
		{Name: "llmd-pd", Family: FamilyLLMD, Source: "§9.2 pd-disaggregation guide: always split, affinity + token-load / active-request", New: newLLMDPD},
		{Name: "prodstack-pd", Family: FamilyProductionStack, Source: "§9.3 disaggregated_prefill_orchestrated: round-robin both pools", New: newProdstackPD},
	}
}

// pdPools returns the indices of the prefill-role and of the decode-role endpoints.
func pdPools(eps []Endpoint) (prefill, decode []int) {
	for i, e := range eps {
		switch e.Role {
		case RolePrefill:
			prefill = append(prefill, i)
		case RoleDecode:
			decode = append(decode, i)
		}
	}
	return prefill, decode
}

func subset(eps []Endpoint, idx []int) []Endpoint {
	out := make([]Endpoint, len(idx))
	for k, i := range idx {
		out[k] = eps[i]
	}
	return out
}

// pdPair is a peer's P/D router built from two of its aggregated policies: one picks among the
// prefill pool, the other among the decode pool, and every request is split, as the peers do
// when both pools exist (none of them decides per request by default). whole serves a fleet
// without both pools, the way the peer routes when it finds no prefill workers. Each request's
// decode-side callbacks go to the instance that picked its engine.
type pdPair struct {
	prefill, decode, whole Policy
	route                  map[int]Policy
	// lateDecode: the peer routes the decode request only once the prefill leg has answered
	// (RepickDecode), not when the request arrives.
	lateDecode bool
}

// DecodeAfterPrefill is a P/D policy that picks the decode engine when the prefill leg answers,
// as Dynamo's PrefillRouter routes the decode request only then. The harness calls RepickDecode
// at that moment with the endpoints as they are then; a result < 0 keeps the planned engine.
type DecodeAfterPrefill interface {
	RepickDecode(r *Request, eps []Endpoint) int
}

// RepickDecode picks the decode engine anew for a peer that routes the decode leg after the
// prefill leg; -1 for the others (their plan stands).
func (p *pdPair) RepickDecode(r *Request, eps []Endpoint) int {
	_, dec := pdPools(eps)
	if !p.lateDecode || len(dec) == 0 {
		return -1
	}
	return dec[p.decode.Pick(r, subset(eps, dec))]
}

func newPDPair(prefill, decode, whole Policy) *pdPair {
	return &pdPair{prefill: prefill, decode: decode, whole: whole, route: map[int]Policy{}}
}

func (p *pdPair) Pick(r *Request, eps []Endpoint) int {
	p.route[r.ID] = p.whole
	return p.whole.Pick(r, eps)
}

func (p *pdPair) PlanPD(r *Request, eps []Endpoint) PDPlan {
	pre, dec := pdPools(eps)
	if len(pre) == 0 || len(dec) == 0 {
		return PDPlan{Prefill: -1, Decode: p.Pick(r, eps)}
	}
	plan := PDPlan{Prefill: pre[p.prefill.Pick(r, subset(eps, pre))]}
	plan.Decode = dec[p.decode.Pick(r, subset(eps, dec))]
	p.route[r.ID] = p.decode
	return plan
}

func (p *pdPair) PrefillDispatched(r *Request, ep string) { p.prefill.Dispatched(r, ep) }

// PrefillDone ends the prefill leg's life on its engine: its answer is the leg's first token.
func (p *pdPair) PrefillDone(r *Request, ep string, seconds float64, ok bool) {
	if ok {
		p.prefill.FirstToken(r, ep, seconds)
	}
	p.prefill.Finished(r, ep)
}

func (p *pdPair) instance(r *Request) Policy {
	if pol, ok := p.route[r.ID]; ok {
		return pol
	}
	return p.whole
}

func (p *pdPair) Dispatched(r *Request, ep string) { p.instance(r).Dispatched(r, ep) }
func (p *pdPair) FirstToken(r *Request, ep string, ttft float64) {
	p.instance(r).FirstToken(r, ep, ttft)
}
func (p *pdPair) Finished(r *Request, ep string) {
	p.instance(r).Finished(r, ep)
	delete(p.route, r.ID)
}

var _ PDPolicy = (*pdPair)(nil)
