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
	"testing"

	"github.com/kvrouter/kvrouter/internal/router/policy"
)

func newKVRouterPD(t *testing.T, name string) *kvrouterPD {
	t.Helper()
	for _, f := range kvrouterPDFactories(Options{}) {
		if f.Name == name {
			return f.New(env()).(*kvrouterPD)
		}
	}
	t.Fatalf("no P/D policy %q", name)
	return nil
}

// pdFleet is two prefill engines (a, b) and two decode engines (c, d).
func pdFleet() []Endpoint {
	e := eps(4)
	e[0].Role, e[1].Role, e[2].Role, e[3].Role = RolePrefill, RolePrefill, RoleDecode, RoleDecode
	return e
}

// serve runs one request through the harness's sequence of calls; decodeTTFT prices the decode
// leg's share of the first token (transfer and decode step) from the plan, and the first token is
// reported from the request's arrival, as the harness does. It leaves the request decoding.
func serve(p *kvrouterPD, r *Request, e []Endpoint, decodeTTFT func(plan *pdPlan) float64) PDPlan {
	plan := p.PlanPD(r, e)
	if plan.Aggregated() {
		p.Dispatched(r, e[plan.Decode].Name)
		p.FirstToken(r, e[plan.Decode].Name, 0.05)
		return plan
	}
	p.PrefillDispatched(r, e[plan.Prefill].Name)
	prefill := 0.05 + 1e-4*float64(len(r.Tokens))
	p.PrefillDone(r, e[plan.Prefill].Name, prefill, true)
	r.PrefilledOn = e[plan.Prefill].Name
	p.Dispatched(r, e[plan.Decode].Name)
	p.FirstToken(r, e[plan.Decode].Name, prefill+decodeTTFT(p.plans[r.ID]))
	return plan
}

func loadOf(p *kvrouterPD, ep string) policy.Load {
	var l [1]policy.Load
	p.load.Loads([]string{ep}, l[:], nil)
	return l[0]
}

// Without a prefill pool, every P/D variant is the aggregated kvrouter: same picks, no split.
func TestKVRouterPDOnAggregatedFleetIsKVRouter(t *testing.T) {
	for _, name := range []string{"kvrouter-pd", "kvrouter-pd-always", "kvrouter-pd-threshold"} {
		pd, agg := newKVRouterPD(t, name), newKVRouter(t)
		e := eps(4)
		for k := range 40 {
			r := &Request{ID: k, Tokens: toks(uint32(k%7), 200+50*k), MaxTokens: 20}
			plan := pd.PlanPD(r, e)
			want := agg.Pick(r, e)
			if !plan.Aggregated() || plan.Decode != want {
				t.Fatalf("%s: request %d planned %+v, aggregated kvrouter picked %d", name, k, plan, want)
			}
			pd.Dispatched(r, e[plan.Decode].Name)
			agg.Dispatched(r, e[want].Name)
		}
		if s := pd.Stats(); s["pd_split"] != 0 || s["pd_whole"] != 40 {
			t.Fatalf("%s: stats %v", name, s)
		}
	}
}

func TestKVRouterPDAlwaysSplitsAcrossThePools(t *testing.T) {
	p := newKVRouterPD(t, "kvrouter-pd-always")
	e := pdFleet()
	for k := range 20 {
		r := &Request{ID: k, Tokens: toks(uint32(k), 64+32*k), MaxTokens: 10}
		plan := serve(p, r, e, func(*pdPlan) float64 { return 0.06 })
		if plan.Aggregated() || e[plan.Prefill].Role != RolePrefill || e[plan.Decode].Role != RoleDecode {
			t.Fatalf("request %d: plan %+v over %v", k, plan, e)
		}
	}
	if s := p.Stats(); s["pd_split"] != 20 || s["pd_split_share"] != 1 {
		t.Fatalf("stats %v", s)
	}
}

// Auto splits a long uncached prompt when every engine has streams to stall, and keeps a short
// one whole; the threshold variant splits by length alone.
func TestKVRouterPDAutoSplitsLongPromptsOverBusyDecodes(t *testing.T) {
	p := newKVRouterPD(t, "kvrouter-pd")
	e := pdFleet()
	// Streams decoding on the decode pool; the prefill pool busy prefilling (not decoding).
	for i, ep := range e {
		for k := range 4 {
			r := &Request{ID: 10*i + k, Tokens: toks(uint32(1000+10*i+k), 500), MaxTokens: 500}
			leg := p.dispatch(r, ep.Name, policy.Decision{Endpoint: ep.Name, UncachedTokens: 500, PrefillWork: 500}, 500, false)
			if ep.Role == RoleDecode {
				leg.ticket.FirstToken()
			}
		}
	}
	long := serve(p, &Request{ID: 100, Tokens: toks(7, 8000), MaxTokens: 50}, e, func(*pdPlan) float64 { return 0.06 })
	short := serve(p, &Request{ID: 101, Tokens: toks(8, 100), MaxTokens: 50}, e, func(*pdPlan) float64 { return 0.06 })
	if long.Aggregated() || !short.Aggregated() {
		t.Fatalf("long prompt %+v (want split), short prompt %+v (want whole)", long, short)
	}
	if p.Stats()["pd_reason_split"] != 1 || p.Stats()["pd_reason_short"] != 1 {
		t.Fatalf("stats %v", p.Stats())
	}
	// With an idle fleet there is no stall to save: the long prompt stays whole.
	idle := newKVRouterPD(t, "kvrouter-pd")
	if plan := idle.PlanPD(&Request{ID: 1, Tokens: toks(9, 8000), MaxTokens: 50}, e); !plan.Aggregated() {
		t.Fatalf("idle fleet: long prompt split %+v", plan)
	}
	th := newKVRouterPD(t, "kvrouter-pd-threshold")
	if a, b := th.PlanPD(&Request{ID: 1, Tokens: toks(9, 8000)}, e), th.PlanPD(&Request{ID: 2, Tokens: toks(10, 500)}, e); a.Aggregated() || !b.Aggregated() {
		t.Fatalf("threshold: 8000 tokens %+v, 500 tokens %+v", a, b)
	}
}

// Each leg is accounted on its own engine, and the transfer line is learned from the decode
// legs' first tokens.
func TestKVRouterPDLegsAndTransferLine(t *testing.T) {
	p := newKVRouterPD(t, "kvrouter-pd-always")
	e := pdFleet()
	r := &Request{ID: 1, Tokens: toks(1, 3200), MaxTokens: 10}
	plan := p.PlanPD(r, e)
	pre, dec := e[plan.Prefill].Name, e[plan.Decode].Name
	p.PrefillDispatched(r, pre)
	if l := loadOf(p, pre); l.InFlight != 1 || l.QueuedPrefillTokens != 3200 {
		t.Fatalf("prefill leg on %s: %+v", pre, l)
	}
	p.PrefillDone(r, pre, 0.4, true)
	if l := loadOf(p, pre); l.InFlight != 0 || l.QueuedPrefillTokens != 0 {
		t.Fatalf("prefill leg done on %s: %+v", pre, l)
	}
	if m := p.pol.Model(pre); m == nil || m.Observations() != 1 {
		t.Fatalf("the prefill leg's time did not feed %s's TTFT model", pre)
	}
	r.PrefilledOn = pre
	p.Dispatched(r, dec)
	if l := loadOf(p, dec); l.InFlight != 1 || l.QueuedPrefillTokens != 1 {
		t.Fatalf("decode leg on %s: %+v", dec, l)
	}
	p.FirstToken(r, dec, 0.3)
	if m := p.pol.Model(dec); m != nil && m.Observations() > 0 {
		t.Fatalf("the decode leg's first token fed %s's TTFT model", dec)
	}
	r.Output = 10
	p.Finished(r, dec)
	if l := loadOf(p, dec); l.InFlight != 0 {
		t.Fatalf("decode leg finished on %s: %+v", dec, l)
	}

	// A link of 3 ms plus 1 ms a block, measured through the decode legs.
	const latency, perBlock = 0.003, 0.001
	for k := 2; k < 80; k++ {
		r := &Request{ID: k, Tokens: toks(uint32(k), 64+(k*53)%4000), MaxTokens: 10}
		serve(p, r, e, func(plan *pdPlan) float64 { return plan.firstStep + latency + perBlock*float64(plan.blocks) })
		r.Output = 10
		p.Finished(r, e[3].Name)
		p.Finished(r, e[2].Name)
	}
	s := p.Stats()
	if math.Abs(s["pd_transfer_s_per_block"]-perBlock)/perBlock > 0.05 || s["pd_transfer_observations"] != 79 {
		t.Fatalf("learned %v s/block over %v transfers, want %v", s["pd_transfer_s_per_block"], s["pd_transfer_observations"], perBlock)
	}
}

// A failed prefill leg is served whole on the planned decode engine, and its first token is
// prefill speed again, not a transfer.
func TestKVRouterPDPrefillFailure(t *testing.T) {
	p := newKVRouterPD(t, "kvrouter-pd-always")
	e := pdFleet()
	r := &Request{ID: 1, Tokens: toks(1, 1600), MaxTokens: 10}
	plan := p.PlanPD(r, e)
	p.PrefillDispatched(r, e[plan.Prefill].Name)
	p.PrefillDone(r, e[plan.Prefill].Name, 0, false)
	dec := e[plan.Decode].Name
	p.Dispatched(r, dec)
	if l := loadOf(p, dec); l.QueuedPrefillTokens != 1600 {
		t.Fatalf("whole fallback on %s: %+v", dec, l)
	}
	p.FirstToken(r, dec, 0.2)
	if p.est.Observations() != 0 || p.pol.Model(dec) == nil {
		t.Fatalf("fallback measured as a transfer (%d) or not as prefill", p.est.Observations())
	}
	if p.Stats()["pd_fallbacks"] != 1 {
		t.Fatalf("stats %v", p.Stats())
	}
}

// As the router: the P/D variants run behind admission control too, and a request no engine
// would start in time is shed (PDPlan.Shed) rather than planned.
func TestKVRouterPDAdmissionSheds(t *testing.T) {
	for _, off := range []bool{false, true} {
		var p *kvrouterPD
		for _, f := range kvrouterPDFactories(Options{NoAdmission: off}) {
			if f.Name == "kvrouter-pd" {
				p = f.New(env()).(*kvrouterPD)
			}
		}
		e := pdFleet()
		for _, ep := range e { // 1 ms a token everywhere, calibrated
			for i := range 10 {
				p.pol.ObserveTTFT(ep.Name, 1000*(i%4+1), float64(i%4+1))
			}
		}
		// 15,000 tokens of prefill queued on every engine, past 70 % of the 10 s bound.
		for k, ep := range e {
			for i := range 3 {
				q := &Request{ID: 1000 + 10*k + i, Tokens: toks(uint32(1000+10*k+i), 5000), MaxTokens: 10}
				p.last = p.pol.Pick(p.request(q), p.view(q, e))
				p.kvrouter.Dispatched(q, ep.Name)
			}
		}
		plan := p.PlanPD(&Request{ID: 1, Tokens: toks(1, 64), MaxTokens: 10}, e)
		if plan.Shed == off {
			t.Fatalf("admission off=%v: plan %+v", off, plan)
		}
	}
}
