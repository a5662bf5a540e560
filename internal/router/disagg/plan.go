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

package disagg

import "github.com/kvrouter/kvrouter/internal/router/policy"

// Engine is one engine as the planner sees it: the policy's view of it (name, readiness, load,
// what it holds of the prompt) and its pool.
type Engine struct {
	policy.Endpoint
	// Prefill is true for an engine of the prefill pool (role label prefill); any other engine
	// (decode, or no role) is of the decode pool.
	Prefill bool
	// Waiting is the requests the engine itself reports waiting (vLLM's num_requests_waiting,
	// from the scrape). Read with its KV usage (see decodeFull): it counts every request not
	// yet scheduled, whatever it waits for.
	Waiting int
}

// waitingFullKV is the KV-cache usage (scraped, 0..1) from which requests waiting on a decode
// engine are taken to wait for memory. vLLM's waiting count is not a memory signal alone: it
// includes requests waiting for a step's token budget and, on a decode engine, every decode
// leg whose KV cache is still being pulled (WAITING_FOR_REMOTE_KVS), so a decode pool busy
// with transfers always has some. Counted below this usage, it marked the decode pool full on
// kvbench's pd-mixed-bursts whenever a burst's legs were in flight (the cache under 80 % each
// time), and long prompts were served whole beside the chat streams: goodput 2.5–3.3 % lower
// at 16 and 24 req/s (docs/benchmarks.md, issue 18).
const waitingFullKV = 0.8

// decodeFull is true when e is a decode-pool engine out of room: its KV cache past the
// policy's pressure mark, or requests waiting while it is past waitingFullKV. A decode leg
// sent there would queue for memory, which no latency line predicts.
func decodeFull(e *Engine, pressure float64) bool {
	return !e.Prefill && (e.Load.KVUsage >= pressure || (e.Waiting > 0 && e.Load.KVUsage >= waitingFullKV))
}

// PlanInput is what the router (its proxy or endpoint picker) and kvbench's simulated router
// hand the planner for one request.
type PlanInput struct {
	// Policy prices and picks engines (Evaluate only: the planner commits nothing).
	Policy *policy.Policy
	// Estimator is the learned transfer line (nil: Auto cannot price a split, it serves whole).
	Estimator *Estimator
	// Request is the request as the policy takes it; PromptTokens and MaxTokens matter here.
	Request policy.Request
	// Engines are the fleet's engines, in a stable order (as for policy.Pick).
	Engines []Engine
	// WholeOnAny lets whole requests run on prefill-pool engines too (--pd-whole-on any);
	// false keeps them on the decode pool. Always mode keeps them on the decode pool regardless.
	WholeOnAny bool
	// Now is the caller's clock in seconds (any origin, increasing; 0: no clock). With it the
	// estimator learns how busy each prefill engine is with the prefill legs committed to it,
	// and a whole request placed on one is charged the stalls those legs will cause it.
	Now float64
}

// Plan is the planner's answer for one request. Nothing is committed to the policy: the caller
// dispatches, then calls Commit once.
type Plan struct {
	// Split says the request runs as a prefill leg on Prefill.Endpoint and a decode leg on
	// Decode; otherwise it runs whole on Whole.Endpoint (empty when no engine can take it:
	// Whole.Reason says why).
	Split bool
	// Verdict is the decision and what it weighed (Reason "aggregated" when the fleet lacks a
	// pool, "no-decode" when no decode engine can take a leg).
	Verdict Verdict
	// Whole is the whole option: the policy's evaluation among the engines whole requests may use.
	Whole policy.Decision
	// Prefill is the prefill leg's decision (split only).
	Prefill policy.Decision
	// Decode is the decode leg's engine (split only). DecodeWhole is that engine serving the
	// request whole, for when the prefill leg fails (its UncachedTokens are what it computes).
	Decode      string
	DecodeWhole policy.Decision
	// TransferBlocks is the blocks the decode engine was predicted to pull and DecodeFirstStep
	// its own predicted share of the decode leg's first token: feed
	// Estimator.ObserveTransfer(TransferBlocks, decodeTTFT - prefillSeconds - DecodeFirstStep)
	// once the decode leg's first token arrives.
	TransferBlocks  int
	DecodeFirstStep float64

	// What Commit records in the estimator: the prefill leg's compute, at now.
	est        *Estimator
	now        float64
	legSeconds float64
}

// Commit records the plan's placement in the policy: the prefill leg's engine for a split
// request (that is where the prompt's prefix is computed), the whole engine otherwise. Call it
// once per request, after dispatching.
func (p Plan) Commit(pol *policy.Policy) {
	if p.Split {
		pol.Commit(p.Prefill)
		if p.est != nil {
			p.est.notePrefillLeg(p.Prefill.Endpoint, p.now, p.legSeconds)
		}
		return
	}
	pol.Commit(p.Whole)
}

// Plan prices one request's options and decides: the whole option (policy over the engines
// whole requests may use), the prefill option (policy over the prefill pool), the decode engine
// (PickDecode over the decode pool by what each lacks of the prompt, its first step and its
// decode speed), then Decide. With no engine in one of the pools the fleet is aggregated and the
// plan is the policy's whole decision.
func (c Config) Plan(in PlanInput) Plan {
	pol, req := in.Policy, in.Request
	hasPrefill, hasDecode := false, false
	for i := range in.Engines {
		if in.Engines[i].Ready {
			hasPrefill = hasPrefill || in.Engines[i].Prefill
			hasDecode = hasDecode || !in.Engines[i].Prefill
		}
	}
	pools := hasPrefill && hasDecode
	view := func(keep func(*Engine) bool) []policy.Endpoint {
		out := make([]policy.Endpoint, 0, len(in.Engines))
		for i := range in.Engines {
			if keep(&in.Engines[i]) {
				out = append(out, in.Engines[i].Endpoint)
			}
		}
		return out
	}
	wholeOn := func(*Engine) bool { return true }
	if pools && (!in.WholeOnAny || c.Mode == Always) {
		wholeOn = func(e *Engine) bool { return !e.Prefill }
	}
	plan := Plan{Whole: pol.Evaluate(req, view(wholeOn)), est: in.Estimator, now: in.Now}
	if pools && in.Estimator != nil && c.Mode == Auto {
		plan.Whole = c.awayFromLegs(in, plan.Whole, view)
	}
	switch {
	case !pools:
		plan.Verdict.Reason = "aggregated"
		return plan
	case plan.Whole.Endpoint == "":
		plan.Verdict.Reason = "invalid"
		return plan
	case c.Mode == Never:
		plan.Verdict.Reason = "never"
		return plan
	}
	plan.Prefill = pol.Evaluate(req, view(func(e *Engine) bool { return e.Prefill }))

	block := max(c.BlockSize, 1)
	prompt := req.PromptTokens
	out := req.MaxTokens
	if out <= 0 {
		out = pol.Config().DefaultMaxTokens
	}
	movable := max(0, prompt-1) / block // full blocks; the last prompt token is recomputed
	var opts []DecodeOption
	var decs []*Engine
	for i := range in.Engines {
		e := &in.Engines[i]
		if e.Prefill || !e.Ready {
			continue
		}
		l := e.Load
		held := min(e.Cached.Total(), prompt) / block
		first, _ := pol.PredictTTFT(e.Name, l.QueuedPrefillTokens+l.RemotePrefillTokens+1)
		streams := l.InFlight + l.RemoteInFlight
		itl, _ := pol.PredictITL(e.Name, float64(streams+1))
		opts = append(opts, DecodeOption{LackingBlocks: max(0, movable-held), FirstStep: first, ITL: itl,
			Streams: streams, Full: decodeFull(e, pol.Config().KVPressure)})
		decs = append(decs, e)
	}
	est := in.Estimator
	if est == nil {
		est = NewEstimator() // priced on the priors; Decide still refuses Auto without one
	}
	pick := PickDecode(est, opts, out)
	if plan.Prefill.Endpoint == "" || pick < 0 {
		plan.Verdict.Reason = "no-decode"
		return plan
	}
	dec, de := opts[pick], decs[pick]
	plan.Decode, plan.TransferBlocks, plan.DecodeFirstStep = de.Name, dec.LackingBlocks, dec.FirstStep
	dl := de.Load
	held := min(de.Cached.Total(), prompt)
	plan.DecodeWhole = policy.Decision{Endpoint: de.Name, Reason: plan.Whole.Reason, Shape: plan.Whole.Shape,
		CachedTokens: held, UncachedTokens: prompt - held,
		PrefillWork: dl.QueuedPrefillTokens + dl.RemotePrefillTokens + prompt - held}

	var wl, pl policy.Load
	for i := range in.Engines {
		switch in.Engines[i].Name {
		case plan.Whole.Endpoint:
			wl = in.Engines[i].Load
		case plan.Prefill.Endpoint:
			pl = in.Engines[i].Load
		}
	}
	if plan.Whole.Endpoint == plan.Prefill.Endpoint {
		pl = wl
	}
	wholeITL, _ := pol.PredictITL(plan.Whole.Endpoint, float64(wl.InFlight+wl.RemoteInFlight+1))
	k := Costs{
		WholeTTFT: plan.Whole.PredictedTTFT, WholeUncached: plan.Whole.UncachedTokens, WholeDecodes: Decoding(wl),
		PrefillTTFT: plan.Prefill.PredictedTTFT, TransferBlocks: dec.LackingBlocks, DecodeStep: dec.FirstStep,
		PrefillUncached: plan.Prefill.UncachedTokens, PrefillDecodes: Decoding(pl),
		OutputTokens: out, WholeITL: wholeITL, SplitITL: dec.ITL,
		WholeITLPerStream: itlSlope(pol, plan.Whole.Endpoint), SplitITLPerStream: itlSlope(pol, de.Name),
		SplitDecodes: Decoding(dl), DecodeFull: dec.Full,
	}
	if in.Estimator != nil {
		k.PrefillDuty = in.Estimator.PrefillDuty(plan.Prefill.Endpoint, in.Now)
	}
	// The pure prefill time of tokens on the whole engine: its TTFT line without the intercept.
	base, _ := pol.PredictTTFT(plan.Whole.Endpoint, 0)
	plan.Verdict = c.Decide(in.Estimator, k, func(tokens int) float64 {
		t, _ := pol.PredictTTFT(plan.Whole.Endpoint, tokens)
		return t - base
	})
	plan.Split = plan.Verdict.Split
	if plan.Verdict.Reason == "decode-full" && in.WholeOnAny && wholeFull(in.Engines, plan.Whole.Endpoint, pol.Config().KVPressure) {
		// The decode pool is out of room: a whole request there would queue for memory as
		// the decode leg would. The prefill engine serves it whole instead.
		plan.Whole = plan.Prefill
	}
	if plan.Split {
		pb, _ := pol.PredictTTFT(plan.Prefill.Endpoint, 0)
		pt, _ := pol.PredictTTFT(plan.Prefill.Endpoint, plan.Prefill.UncachedTokens)
		plan.legSeconds = pt - pb
	}
	return plan
}

// minDuty is the prefill duty below which legs are too rare to move a whole request for.
const minDuty = busyDuty

// awayFromLegs moves a whole request off a prefill-pool engine that is busy with prefill legs.
// Every leg the router sends there while the request decodes stalls it for the leg's compute:
// over its decode it loses about the engine's prefill duty times the decode time. That is
// priced like any stall (the stall weight, the visibility share) against the policy's best
// engine of the decode pool, which runs no legs. Without legs (a workload where nothing
// splits), whole requests keep the whole fleet.
func (c Config) awayFromLegs(in PlanInput, whole policy.Decision, view func(func(*Engine) bool) []policy.Endpoint) policy.Decision {
	var on *Engine
	for i := range in.Engines {
		if in.Engines[i].Name == whole.Endpoint {
			on = &in.Engines[i]
		}
	}
	if on == nil || !on.Prefill {
		return whole
	}
	duty := in.Estimator.PrefillDuty(on.Name, in.Now)
	if duty < minDuty {
		return whole
	}
	alt := in.Policy.Evaluate(in.Request, view(func(e *Engine) bool { return !e.Prefill }))
	if alt.Endpoint == "" {
		return whole
	}
	out := in.Request.MaxTokens
	if out <= 0 {
		out = in.Policy.Config().DefaultMaxTokens
	}
	l := on.Load
	itl, ok := in.Policy.PredictITL(on.Name, float64(l.InFlight+l.RemoteInFlight+1))
	if !ok || !(itl > 0) {
		return whole
	}
	w := c.StallWeight
	if w <= 0 {
		w = DefaultStallWeight
	}
	lost := duty * float64(max(out-1, 1)) * itl
	charge := w * lost * min(1, duty/visibleShare)
	if whole.PredictedTTFT+charge > alt.PredictedTTFT {
		return alt
	}
	return whole
}

// wholeFull is true when the named engine is a decode-pool engine out of room (see
// DecodeOption.Full).
func wholeFull(engines []Engine, name string, pressure float64) bool {
	for i := range engines {
		if e := &engines[i]; e.Name == name {
			return decodeFull(e, pressure)
		}
	}
	return false
}

// Decoding is the streams past their first token on an engine: the ones a prefill there stalls.
func Decoding(l policy.Load) int {
	return max(0, l.InFlight+l.RemoteInFlight-l.QueuedRequests-l.RemoteQueuedRequests)
}

// itlSlope is an engine's predicted inter-token latency added per stream (0 while no decode
// model is calibrated).
func itlSlope(pol *policy.Policy, ep string) float64 {
	a, ok := pol.PredictITL(ep, 0)
	b, _ := pol.PredictITL(ep, 1)
	if !ok {
		return 0
	}
	return max(b-a, 0)
}
