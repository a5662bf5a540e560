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
	"time"

	"github.com/kvrouter/kvrouter/internal/router/admission"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/router/policyinput"
	"github.com/kvrouter/kvrouter/internal/router/queue"
)

// kvrouter drives the shipping router's code, not a copy: internal/router/policy decides, internal/
// kvindex (fed by the engines' KV events, with predictions recorded at dispatch) says what each
// engine holds, and internal/router/loadsignal keeps the router-local load accounting. Only the glue
// between them (a few lines the router also has) lives here.
type kvrouter struct {
	pol     *policy.Policy
	ix      *kvindex.Index
	load    *loadsignal.Tracker
	block   int
	pending map[int]*kvrDispatch
	names   []string
	loads   []policy.Load
	eps     []policy.Endpoint
	last    policy.Decision
	reasons map[string]float64
	seq     uint64
	now     func() float64
	// loraAt is when the engines' adapters were last read from the scrape; lora is the
	// scratch for FillLoRA.
	loraAt float64
	lora   []policy.LoRAState
	// q is the router queue (internal/router/queue), as the proxy runs it: a request waits
	// there while policy.ShouldHold says no engine will start it soon, and behind any request
	// already waiting (FIFO). nil unless Options.KVRouter.HoldAfter is set: like the router,
	// whose queue is off until --queue-capacity is given, kvrouter runs without one by default
	// (docs/router.md#router-queue says why). shed are requests turned away at arrival because
	// q was full, handed back by the next Release.
	q    *queue.Queue[*Request]
	shed []*Request
	// admit is the router's admission control with the router binary's defaults (a 10 s TTFT
	// bound held at 70 %, queue caps of one batch per engine), which the router runs unless
	// started with --admission=false: a request no engine could start in time is shed with a
	// fast 429 (ep -1 from Release; PDPlan.Shed in the P/D adapter) instead of joining an
	// engine's queue. nil when off (Options.NoAdmission).
	admit *admission.Controller
}

// The router queue's bounds in simulation: the proxy's default wait (queue.DefaultMaxWait) and a
// capacity no simulated run reaches, as a deployment sizes it to its clients, so that the
// simulated router queues and sheds as the live one does.
const kvrQueueCapacity = 1 << 16

// routerScrapeInterval is the router's default --scrape-interval: kvrouter sees the engines'
// adapters (vllm:lora_requests_info) that often, not at the harness's faster scrape.
const routerScrapeInterval = 1.0

// Stats reports how often each decision reason and request shape came up, which is what explains
// a kvrouter result (e.g. how often the prefix holder was judged saturated).
func (p *kvrouter) Stats() map[string]float64 {
	p.reasons["policy_reuse_share"] = p.pol.Reuse()
	return p.reasons
}

type kvrDispatch struct {
	ticket *loadsignal.Ticket
	work   int
	keys   []kvindex.Key // predicted for the endpoint until settled
	// first token: when, and the endpoint's streams then (for the decode model)
	firstAt      float64
	firstStreams int
}

func kvrouterFactory(name, kind string, tune policy.Config, admit bool) Factory {
	source := "internal/router/policy " + kind
	if admit {
		source += " + admission control (the router's default)"
	}
	return Factory{
		Name: name, Source: source, NeedsEvents: true,
		New: func(e Env) Policy {
			cfg := tune
			cfg.Kind, cfg.BlockSize = policy.Kind(kind), e.BlockSize
			var ac *admission.Controller
			if admit {
				ac = admission.New(admission.Config{TailHeadroom: admission.RouterTailHeadroom}, simEpoch)
				if cfg.TargetTTFT == 0 {
					// As the router (proxy.New): a holder predicted past the bound releases the
					// request to a faster engine rather than have it shed.
					cfg.TargetTTFT = ac.Config().TTFTBound.Seconds()
				}
			}
			p := &kvrouter{
				pol: policy.New(cfg),
				ix:  e.Events, load: loadsignal.NewTracker(), block: e.BlockSize,
				pending: map[int]*kvrDispatch{}, reasons: map[string]float64{}, now: e.Now, admit: ac,
			}
			p.load.SetClock(p.at) // prefill queues timed in virtual time, as the router times them in real time
			if tune.HoldAfter > 0 {
				p.q = queue.New[*Request](queue.Config{Capacity: kvrQueueCapacity, MaxWait: queue.DefaultMaxWait})
			}
			return p
		},
	}
}

// kvrouterQueueFactory is kvrouter as the router runs with --queue-capacity set: the router
// queue on, holding requests past DefaultHoldAfter (unless tune sets another HoldAfter).
func kvrouterQueueFactory(tune policy.Config, admit bool) Factory {
	if tune.HoldAfter <= 0 {
		tune.HoldAfter = policy.DefaultHoldAfter
	}
	f := kvrouterFactory("kvrouter-queue", "Auto", tune, admit)
	f.Source += " + router queue (--queue-capacity)"
	return f
}

// simEpoch is the wall-clock time of the simulation's time 0, for the admission controller's
// clock.
var simEpoch = time.Unix(0, 0)

// at is the simulation's now on admission's clock.
func (p *kvrouter) at() time.Time { return simEpoch.Add(time.Duration(p.now() * float64(time.Second))) }

// Pick follows the proxy's order (decideRequest): early admission on the queues alone, the
// router queue, then the policy and admission on its choice.
func (p *kvrouter) Pick(r *Request, eps []Endpoint) int {
	view := p.view(r, eps)
	if p.admit != nil && len(eps) > 0 {
		if d := p.admit.CheckEarly(p.pol, admission.Interactive, view, p.at()); !d.Admit {
			p.recordShed(d, "admission_shed_early_")
			return p.refuse(r)
		}
	}
	if p.q != nil && len(eps) > 0 && (p.q.Len() > 0 || p.pol.ShouldHold(view)) {
		// Behind the requests already waiting, or no engine will start it soon: it waits in
		// the router (as the proxy's router queue), or is shed when the queue is full.
		if !p.q.Push(r, p.now()) {
			p.shed = append(p.shed, r)
			p.reasons["router_queue_shed"]++
		}
		p.reasons["router_queue_held"]++
		p.reasons["router_queue_max"] = max(p.reasons["router_queue_max"], float64(p.q.Len()))
		return Hold
	}
	p.last = p.pick(r, view)
	if !p.admitted(r, view) {
		return p.refuse(r)
	}
	return max(indexOf(eps, p.last.Endpoint), 0) // -1: no decision (cannot happen with ready endpoints)
}

// admitted applies admission to p.last, the policy's decision for r among view, which it may
// move to a fallback (admission.Controller.CheckRouted); false when r is shed, recorded.
func (p *kvrouter) admitted(r *Request, view []policy.Endpoint) bool {
	if p.admit == nil {
		return true
	}
	d := p.admit.CheckRouted(p.pol, admission.Interactive, view, &p.last, len(r.Tokens), r.Adapter, p.at())
	if !d.Admit {
		p.recordShed(d, "admission_shed_")
	}
	return d.Admit
}

// recordShed counts a request admission turned away, in the controller (its shed rate) and in the
// decision reasons under prefix.
func (p *kvrouter) recordShed(d admission.Decision, prefix string) {
	p.admit.Shed(d, admission.Interactive, p.at())
	p.reasons[prefix+string(d.Reason)]++
}

// refuse hands r back as shed at the next Release (the client's fast 429).
func (p *kvrouter) refuse(r *Request) int {
	p.shed = append(p.shed, r)
	return Hold
}

// Release implements Queuer: first the requests refused (by admission control, a full queue or
// the queue's MaxWait: shed, ep -1), then the oldest waiting request once ShouldHold no longer
// holds, to the engine the policy picks for it now (its cache affinity judged on the load of
// this moment), if admission control takes it there. This is what the proxy's router queue
// does (internal/router/proxy/queue.go: kick); waiting further for the picked engine itself to
// be able to start it (policy.CanStart) did better on shared-prefix in session runs, but the
// proxy does not do it, and the simulation must not credit kvrouter with what it does not ship.
func (p *kvrouter) Release(eps []Endpoint) (*Request, int, bool) {
	if n := len(p.shed); n > 0 {
		r := p.shed[0]
		p.shed = p.shed[1:]
		return r, -1, true
	}
	if p.q == nil || p.q.Len() == 0 || len(eps) == 0 {
		return nil, 0, false
	}
	if exp := p.q.Expire(p.now()); len(exp) > 0 {
		p.shed = append(p.shed, exp...)
		p.reasons["router_queue_shed"] += float64(len(exp))
		return p.Release(eps)
	}
	r, _, _ := p.q.Head()
	view := p.view(r, eps)
	if p.pol.ShouldHold(view) {
		return nil, 0, false
	}
	d := p.pol.Evaluate(p.request(r), view)
	if indexOf(eps, d.Endpoint) < 0 {
		return nil, 0, false
	}
	p.pol.Commit(d)
	p.countReason(d)
	p.last = d
	p.q.Pop()
	if !p.admitted(r, view) {
		return r, -1, true
	}
	return r, indexOf(eps, p.last.Endpoint), true // admission may have moved it
}

// Queued implements Queuer.
func (p *kvrouter) Queued() int {
	if p.q == nil {
		return len(p.shed)
	}
	return p.q.Len() + len(p.shed)
}

var _ Queuer = (*kvrouter)(nil)

// view builds the policy's view of eps for r (load from the tracker, what the index says each
// holds of the prompt), in eps' order. It is reused until the next call.
func (p *kvrouter) view(r *Request, eps []Endpoint) []policy.Endpoint {
	p.names = p.names[:0]
	for _, e := range eps {
		p.names = append(p.names, e.Name)
	}
	p.loads = append(p.loads[:0], make([]policy.Load, len(eps))...)
	p.load.Loads(p.names, p.loads, nil)
	p.recordLoRA(eps)
	if r.Adapter != "" {
		p.lora = append(p.lora[:0], make([]policy.LoRAState, len(eps))...)
		p.load.FillLoRA(p.names, r.Adapter, p.lora)
		for i := range p.loads {
			p.loads[i].LoRA = p.lora[i]
		}
	}
	cached := map[string]policy.Cached{}
	if p.ix != nil {
		// The same conversion the router does (internal/router/policyinput), so simulation tests
		// exactly what ships.
		for _, m := range p.ix.Lookup(r.Tokens, kvindex.LookupOptions{KeyParams: kvindex.KeyParams{LoRAName: r.Adapter}}) {
			if c := policyinput.Cached(m, p.block); c.Total() > cached[m.Source.Endpoint].Total() {
				cached[m.Source.Endpoint] = c
			}
		}
	}
	p.eps = p.eps[:0]
	for i, e := range eps {
		l := p.loads[i]
		l.KVUsage, l.Running = e.KVUsage, e.Running
		p.eps = append(p.eps, policy.Endpoint{Name: e.Name, Ready: true, Load: l, Cached: cached[e.Name]})
	}
	return p.eps
}

// pick runs the policy over eps (a view, or part of one) and counts the decision's reason.
func (p *kvrouter) pick(r *Request, eps []policy.Endpoint) policy.Decision {
	d := p.pol.Pick(p.request(r), eps)
	p.countReason(d)
	return d
}

// request is r as the policy takes it, with a fresh tie-break (one per routing decision).
func (p *kvrouter) request(r *Request) policy.Request {
	p.seq++
	return policy.Request{
		PromptTokens: len(r.Tokens), Tokenized: true, MaxTokens: r.MaxTokens, SessionKey: r.Session,
		TieBreak: policyinput.TieBreak(r.Tokens, p.seq), LoRA: r.Adapter,
	}
}

func (p *kvrouter) countReason(d policy.Decision) {
	p.reasons["reason_"+string(d.Reason)+"_"+string(d.Shape)]++
}

// recordLoRA hands the tracker the engines' scraped adapters, at the router's scrape interval.
func (p *kvrouter) recordLoRA(eps []Endpoint) {
	if len(eps) == 0 || eps[0].MaxLoRAs == 0 || (p.loraAt > 0 && p.now()-p.loraAt < routerScrapeInterval) {
		return
	}
	p.loraAt = max(p.now(), 1e-9)
	for _, e := range eps {
		p.load.RecordLoRA(e.Name, loadsignal.LoRAInfo{Reported: e.MaxLoRAs > 0, Running: e.RunningLoRAs,
			Waiting: e.WaitingLoRAs, MaxLoRAs: e.MaxLoRAs})
	}
}

func (p *kvrouter) Dispatched(r *Request, ep string) {
	d := p.last
	if d.Endpoint != ep {
		// The harness overrode the choice (it never does); account without a decision.
		d = policy.Decision{Endpoint: ep, UncachedTokens: len(r.Tokens), PrefillWork: len(r.Tokens)}
	}
	p.pending[r.ID] = p.dispatch(r, ep, d, r.MaxTokens, !d.AdapterCold)
}

// dispatch records a request (or one leg of it) sent to ep on decision d, out tokens expected
// from it: the load ticket and the prefix the index predicts there. timeTTFT says whether its
// first token measures ep's prefill speed (the TTFT model's x is d.PrefillWork).
func (p *kvrouter) dispatch(r *Request, ep string, d policy.Decision, out int, timeTTFT bool) *kvrDispatch {
	var keys []kvindex.Key
	if p.ix != nil {
		// As the router does: predicted until the request starts, then settled.
		keys = kvindex.RequestKeys(nil, r.Tokens, p.block, kvindex.KeyParams{LoRAName: r.Adapter})
		p.ix.PredictPendingKeys(kvindex.SourceID{Endpoint: ep}, keys)
	}
	work := d.PrefillWork
	if !timeTTFT {
		work = -1 // e.g. as the router: an adapter's slot wait and load are not prefill speed
	}
	return &kvrDispatch{ticket: p.load.DispatchAdapter(ep, r.Adapter, d.UncachedTokens, len(r.Tokens)+out), work: work, keys: keys}
}

// settle ends a dispatched request's pending prediction (first token or end, whichever first).
func (p *kvrouter) settle(d *kvrDispatch, ep string) {
	if d.keys != nil {
		p.ix.SettleKeys(kvindex.SourceID{Endpoint: ep}, d.keys)
		d.keys = nil
	}
}

func (p *kvrouter) FirstToken(r *Request, ep string, ttft float64) {
	if d := p.pending[r.ID]; d != nil {
		d.ticket.FirstToken()
		p.settle(d, ep)
		if d.work >= 0 {
			p.pol.ObserveTTFT(ep, d.work, ttft)
		}
		if d.firstAt == 0 { // a preempted request's recomputed first token does not restart its stream
			d.firstAt, d.firstStreams = p.now(), p.streams(ep)
		}
	}
}

// streams is the endpoint's requests in flight as the router counts them.
func (p *kvrouter) streams(ep string) int {
	var l [1]policy.Load
	p.load.Loads([]string{ep}, l[:], nil)
	return l[0].InFlight + l[0].RemoteInFlight
}

func (p *kvrouter) Finished(r *Request, ep string) {
	if d := p.pending[r.ID]; d != nil {
		if r.Output > 1 && d.firstAt > 0 {
			// The router times streams the same way: the mean gap between tokens, against the
			// endpoint's streams averaged over the stream's first and last token.
			itl := (p.now() - d.firstAt) / float64(r.Output-1)
			p.pol.ObserveITL(ep, float64(d.firstStreams+p.streams(ep))/2, itl)
		}
		// As the router: the output length against the cap it was sent with.
		p.pol.ObserveOutput(r.MaxTokens, r.Output)
		d.ticket.Done()
		p.settle(d, ep)
		delete(p.pending, r.ID)
		if p.admit != nil {
			// As the proxy: the request has left its engine, which drains the queues.
			p.admit.Completed(ep, p.at())
		}
	}
}
