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
	"github.com/kvrouter/kvrouter/internal/router/admission"
	"github.com/kvrouter/kvrouter/internal/router/disagg"
	"github.com/kvrouter/kvrouter/internal/router/policy"
)

// kvrouterPDThreshold is kvrouter-pd-threshold's pinned split point in uncached prompt tokens:
// about where a prefill's stall on the decoding streams (tens of milliseconds on an 8B model)
// starts to exceed a transfer over RDMA and the extra hop.
const kvrouterPDThreshold = 1024

// kvrouterPDFactories returns kvrouter's P/D policies: the shipping router's split decision
// (internal/router/disagg) over the shipping policy, driven the way the router's proxy drives
// them: a whole option over the engines whole requests may use, a prefill option among the
// prefill pool, a decode engine among the decode pool by what it lacks, its queue and its decode
// speed, then disagg's Decide.
func kvrouterPDFactories(o Options) []Factory {
	mk := func(name, source string, cfg disagg.Config, wholeOnAny bool) Factory {
		agg := kvrouterFactory(name, "Auto", o.KVRouter, !o.NoAdmission)
		return Factory{
			Name: name, Source: source, NeedsEvents: true,
			New: func(e Env) Policy {
				c := cfg
				c.BlockSize = e.BlockSize
				return &kvrouterPD{kvrouter: agg.New(e).(*kvrouter), cfg: c, est: disagg.NewEstimator(),
					wholeOnAny: wholeOnAny, plans: map[int]*pdPlan{}, prefill: map[int]*prefillLeg{}}
			},
		}
	}
	return []Factory{
		mk("kvrouter-pd", "internal/router/disagg Auto, whole on any engine", disagg.Config{Mode: disagg.Auto}, true),
		mk("kvrouter-pd-always", "internal/router/disagg Always, whole on decode engines", disagg.Config{Mode: disagg.Always}, false),
		mk("kvrouter-pd-threshold", "internal/router/disagg Threshold 1024, whole on any engine",
			disagg.Config{Mode: disagg.Threshold, ThresholdTokens: kvrouterPDThreshold}, true),
	}
}

// kvrouterPD is the aggregated kvrouter adapter (its view of load and cache, its policy and its
// accounting) plus the split decision.
type kvrouterPD struct {
	*kvrouter
	cfg disagg.Config
	est *disagg.Estimator
	// wholeOnAny lets whole requests run on prefill-pool engines too (the router's default,
	// --pd-whole-on any); false keeps them on the decode pool as the peers do.
	wholeOnAny bool
	plans      map[int]*pdPlan
	prefill    map[int]*prefillLeg // prefill legs in flight, by request
	split      int
	whole      int
	fallbacks  int
	engines    []disagg.Engine // scratch
}

// prefillLeg is a prefill leg in flight and the engine it was sent to.
type prefillLeg struct {
	*kvrDispatch
	ep string
}

// pdPlan is what PlanPD decided for one request, kept until it finishes.
type pdPlan struct {
	split bool
	whole policy.Decision // the whole option (what a whole request is dispatched on)
	pre   policy.Decision // the prefill leg
	// decode engine, the blocks it was predicted to pull and its own share of the first token
	decodeEp  string
	blocks    int
	firstStep float64
	// prefillSecs is the prefill leg's time, which the request's first token includes.
	prefillSecs float64
	// decodeWhole is the decode engine serving the request whole, should the prefill leg fail.
	decodeWhole policy.Decision
	failed      bool
}

// Stats adds the split counts and the learned transfer line to kvrouter's decision counts.
func (p *kvrouterPD) Stats() map[string]float64 {
	out := map[string]float64{}
	for k, v := range p.reasons {
		out[k] = v
	}
	out["pd_split"], out["pd_whole"], out["pd_fallbacks"] = float64(p.split), float64(p.whole), float64(p.fallbacks)
	if n := p.split + p.whole; n > 0 {
		out["pd_split_share"] = float64(p.split) / float64(n)
	}
	lat, per := p.est.Line()
	out["pd_transfer_latency_s"], out["pd_transfer_s_per_block"] = lat, per
	out["pd_transfer_observations"] = float64(p.est.Observations())
	return out
}

// PlanPD follows the proxy (decideRequest, route): early admission over every engine, the plan,
// then admission on the plan's whole option among the engines a whole request may use. A plan
// refused there is shed, split or not; a whole option admission moves to a fallback is served
// there, and a split plan keeps its legs (the moved option is what its decode leg falls back to).
func (p *kvrouterPD) PlanPD(r *Request, eps []Endpoint) PDPlan {
	view := p.view(r, eps)
	if p.admit != nil {
		if a := p.admit.CheckEarly(p.pol, admission.Interactive, view, p.at()); !a.Admit {
			p.recordShed(a, "admission_shed_early_")
			return PDPlan{Prefill: -1, Decode: -1, Shed: true}
		}
	}
	p.engines = p.engines[:0]
	for i, e := range eps {
		p.engines = append(p.engines, disagg.Engine{Endpoint: view[i], Prefill: e.Role == RolePrefill, Waiting: e.Waiting})
	}
	// The planner the router's proxy calls, over the same view: it only evaluates, so the
	// policy's state advances for the placement made, not for every option priced.
	d := p.cfg.Plan(disagg.PlanInput{Policy: p.pol, Estimator: p.est, Request: p.request(r), Engines: p.engines,
		WholeOnAny: p.wholeOnAny, Now: p.now()})
	d.Commit(p.pol)
	if p.admit != nil {
		whole := view
		if !p.wholeOnAny {
			whole = append([]policy.Endpoint(nil), view...)
			for i := range whole {
				whole[i].Ready = whole[i].Ready && eps[i].Role != RolePrefill
			}
		}
		if a := p.admit.CheckRouted(p.pol, admission.Interactive, whole, &d.Whole, len(r.Tokens), r.Adapter, p.at()); !a.Admit {
			p.recordShed(a, "admission_shed_")
			return PDPlan{Prefill: -1, Decode: -1, Shed: true}
		}
	}
	if d.Verdict.Reason != "aggregated" {
		p.reasons["pd_reason_"+d.Verdict.Reason]++
	}
	plan := &pdPlan{split: d.Split, whole: d.Whole, pre: d.Prefill, decodeEp: d.Decode, blocks: d.TransferBlocks,
		firstStep: d.DecodeFirstStep, decodeWhole: d.DecodeWhole}
	p.plans[r.ID] = plan
	if !d.Split {
		p.countReason(d.Whole)
		p.whole++
		return PDPlan{Prefill: -1, Decode: max(indexOf(eps, d.Whole.Endpoint), 0)}
	}
	p.countReason(d.Prefill)
	p.split++
	return PDPlan{Prefill: indexOf(eps, d.Prefill.Endpoint), Decode: indexOf(eps, d.Decode)}
}

func indexOf(eps []Endpoint, name string) int {
	for i, e := range eps {
		if e.Name == name {
			return i
		}
	}
	return -1
}

func (p *kvrouterPD) PrefillDispatched(r *Request, ep string) {
	d := policy.Decision{Endpoint: ep, UncachedTokens: len(r.Tokens), PrefillWork: len(r.Tokens)}
	if plan := p.plans[r.ID]; plan != nil && plan.pre.Endpoint == ep {
		d = plan.pre
	}
	// The prefill leg generates one token: that is all it adds to the engine's decode work.
	p.prefill[r.ID] = &prefillLeg{kvrDispatch: p.dispatch(r, ep, d, 1, !d.AdapterCold), ep: ep}
}

func (p *kvrouterPD) PrefillDone(r *Request, ep string, seconds float64, ok bool) {
	leg := p.prefill[r.ID]
	if leg == nil {
		return
	}
	delete(p.prefill, r.ID)
	leg.ticket.FirstToken()
	p.settle(leg.kvrDispatch, ep)
	if ok && leg.work >= 0 {
		// The prefill leg's answer is its first token: the same measurement of prefill speed.
		p.pol.ObserveTTFT(ep, leg.work, seconds)
	}
	leg.ticket.Done()
	if plan := p.plans[r.ID]; plan != nil {
		plan.prefillSecs, plan.failed = seconds, !ok
	}
	if !ok {
		p.fallbacks++
	}
}

func (p *kvrouterPD) Dispatched(r *Request, ep string) {
	plan := p.plans[r.ID]
	switch {
	case plan == nil:
		p.kvrouter.Dispatched(r, ep)
	case plan.split && r.PrefilledOn != "" && !plan.failed:
		// The decode leg computes one token; its first token measures the transfer, not prefill
		// speed, so it does not feed the engine's TTFT model (it feeds the estimator instead).
		d := policy.Decision{Endpoint: ep, UncachedTokens: 1, PrefillWork: 1}
		p.pending[r.ID] = p.dispatch(r, ep, d, r.MaxTokens, false)
	case plan.split && plan.decodeWhole.Endpoint == ep:
		p.pending[r.ID] = p.dispatch(r, ep, plan.decodeWhole, r.MaxTokens, true)
	case plan.whole.Endpoint == ep:
		p.pending[r.ID] = p.dispatch(r, ep, plan.whole, r.MaxTokens, !plan.whole.AdapterCold)
	default:
		p.pending[r.ID] = p.dispatch(r, ep, policy.Decision{Endpoint: ep, UncachedTokens: len(r.Tokens), PrefillWork: len(r.Tokens)}, r.MaxTokens, true)
	}
}

func (p *kvrouterPD) FirstToken(r *Request, ep string, ttft float64) {
	if plan := p.plans[r.ID]; plan != nil && plan.split && r.PrefilledOn != "" && !plan.failed && ep == plan.decodeEp {
		if d := p.pending[r.ID]; d != nil && d.firstAt == 0 {
			// ttft runs from the request's arrival: the prefill leg, the transfer, then the
			// decode engine's own first step.
			p.est.ObserveTransfer(plan.blocks, ttft-plan.prefillSecs-plan.firstStep)
		}
	}
	p.kvrouter.FirstToken(r, ep, ttft)
}

func (p *kvrouterPD) Finished(r *Request, ep string) {
	p.kvrouter.Finished(r, ep)
	delete(p.plans, r.ID)
	if leg := p.prefill[r.ID]; leg != nil { // a prefill leg the harness never closed
		leg.ticket.Done()
		p.settle(leg.kvrDispatch, leg.ep)
		delete(p.prefill, r.ID)
	}
}
