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

// Roles of an engine in a disaggregated fleet, as Endpoint.Role carries them. Every engine runs
// vLLM's connector in both directions (kv_role kv_both), so any engine can serve a whole request;
// the role is the pool the operator put it in, which P/D policies use to split the work.
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// PDPlan is a P/D policy's answer for one request. Prefill < 0: the request is served whole
// (aggregated) on Decode. Otherwise it is prefilled on Prefill (max_tokens 1, the KV cache kept for
// the transfer), then decoded on Decode after the KV transfer. Both are indices into the
// endpoints passed to PlanPD.
type PDPlan struct {
	Prefill, Decode int
	// Shed: the router turned the request away (a fast 429 from admission control); the
	// harness fails it without sending it anywhere.
	Shed bool
}

// Aggregated reports whether the plan serves the request whole on one engine.
func (p PDPlan) Aggregated() bool { return p.Prefill < 0 }

// PDPolicy routes on a fleet split into a prefill and a decode pool. The harness reports the
// decode leg (or the whole request, when aggregated) through Policy's Dispatched, FirstToken and
// Finished, with Request.PrefilledOn naming the prefill engine when there was one; the prefill leg
// is reported through the two methods below.
type PDPolicy interface {
	Policy
	// PlanPD plans one request over eps, which carry their Role.
	PlanPD(r *Request, eps []Endpoint) PDPlan
	// PrefillDispatched is called when the prefill leg is sent to ep.
	PrefillDispatched(r *Request, ep string)
	// PrefillDone is called when the prefill leg's answer arrives (seconds after it was sent);
	// ok is false when it failed, in which case the harness serves the request aggregated.
	PrefillDone(r *Request, ep string, seconds float64, ok bool)
}

// PDAll returns every P/D policy, kvrouter's first. A P/D policy on a workload without a prefill
// pool, or an aggregated policy on one with a pool, runs on the same engines unsplit.
func PDAll(o Options) []Factory {
	return append(inFamilies(FamilyKVRouter, kvrouterPDFactories(o)), peerPDFactories()...)
}
