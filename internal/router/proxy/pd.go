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

package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/router/disagg"
	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/routerapi"
)

// Disaggregated prefill/decode (docs/router.md, "Disaggregated prefill/decode"): in a fleet
// with a prefill pool, each request is either served whole on one engine, as in any fleet, or
// split in two legs driven with vLLM's KV connector protocol: a prefill leg on a prefill-role
// engine (max_tokens 1, kv_transfer_params asking for a remote decode) whose answer says where
// its KV blocks wait, then the client's own request on a decode engine, carrying those
// kv_transfer_params, which pulls the blocks and streams the answer the client sees.

// PrefillEndpointHeader names the engine that ran a split request's prefill leg.
const PrefillEndpointHeader = "X-Kvrouter-Prefill-Endpoint"

// PrefillerHeader carries the prefill engine's host:port to a decode engine's sidecar (llm-d's
// routing-sidecar protocol): the EPP sets it on a split request, the sidecar reads it.
const PrefillerHeader = "x-prefiller-host-port"

// Where whole requests may run in a split fleet (Config.PD.WholeOn).
const (
	WholeOnAny    = "any"
	WholeOnDecode = "decode"
)

// PDConfig configures disaggregation.
type PDConfig struct {
	// Mode and ThresholdTokens of the decision (BlockSize is the policy's). Empty mode: Auto.
	Mode            disagg.Mode
	ThresholdTokens int
	// WholeOn is WholeOnAny (default: whole requests may run on prefill engines too, so a split
	// fleet is never worse than an aggregated one of the same engines) or WholeOnDecode.
	WholeOn string
}

// The legs a fallback is counted against.
const (
	legPrefill = "prefill"
	legDecode  = "decode"
)

// maxPrefillAnswer bounds the prefill leg's answer, one token and its kv_transfer_params.
const maxPrefillAnswer = 4 << 20

// recentWindow is how many decisions the split share on /v1/status is taken over.
const recentWindow = 512

// pdState is what disaggregation learns and counts. The estimator is guarded by the server's
// policyMu, as the policy's own models are: the decision reads both at once.
type pdState struct {
	cfg disagg.Config
	est *disagg.Estimator
	// epoch is the origin of the planner's clock (disagg.PlanInput.Now), set at the first plan
	// a second before it so that the clock is positive from the start; guarded by policyMu.
	epoch time.Time

	split, whole            atomic.Uint64
	fallPrefill, fallDecode atomic.Uint64

	mu     sync.Mutex
	recent [recentWindow]bool
	n, at  int

	requests   *prometheus.CounterVec
	fallbacks  *prometheus.CounterVec
	prefillLeg prometheus.Histogram
	transfer   prometheus.Histogram
}

func newPDState(cfg Config, reg prometheus.Registerer) *pdState {
	mode := cfg.PD.Mode
	if mode == "" {
		mode = disagg.Auto
	}
	p := &pdState{cfg: disagg.Config{Mode: mode, ThresholdTokens: cfg.PD.ThresholdTokens}, est: disagg.NewEstimator(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_pd_requests_total",
			Help: "Requests of a fleet with a prefill pool, by path: split (a prefill leg, then a decode leg on another engine) or whole (one engine)."},
			[]string{"path"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_pd_fallbacks_total",
			Help: "Split requests served whole after a leg failed, by leg (prefill: its leg failed or returned no kv_transfer_params; decode: the decode engine failed before its first byte)."},
			[]string{"leg"}),
		prefillLeg: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvrouter_pd_prefill_leg_duration_seconds",
			Help:    "Time from sending a prefill leg to its complete answer.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2.5, 14)}),
		transfer: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvrouter_pd_transfer_seconds",
			Help:    "The KV transfer time the decision learns from: a streamed decode leg's time to first token less the decode engine's predicted first step.",
			Buckets: prometheus.ExponentialBuckets(1e-4, 2.5, 14)}),
	}
	for _, l := range []string{"split", "whole"} {
		p.requests.WithLabelValues(l)
	}
	for _, l := range []string{legPrefill, legDecode} {
		p.fallbacks.WithLabelValues(l)
	}
	if reg != nil {
		reg.MustRegister(p.requests, p.fallbacks, p.prefillLeg, p.transfer)
	}
	return p
}

// counted records a decision of a request in a split fleet.
func (p *pdState) counted(split bool) {
	if split {
		p.split.Add(1)
		p.requests.WithLabelValues("split").Inc()
	} else {
		p.whole.Add(1)
		p.requests.WithLabelValues("whole").Inc()
	}
	p.mu.Lock()
	p.recent[p.at] = split
	p.at = (p.at + 1) % recentWindow
	p.n = min(p.n+1, recentWindow)
	p.mu.Unlock()
}

// fellBack counts a split request served whole after leg failed.
func (p *pdState) fellBack(leg string) {
	if leg == legPrefill {
		p.fallPrefill.Add(1)
	} else {
		p.fallDecode.Add(1)
	}
	p.fallbacks.WithLabelValues(leg).Inc()
}

// share is the split share of the recent decisions.
func (p *pdState) share() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return 0
	}
	k := 0
	for i := 0; i < p.n; i++ {
		if p.recent[i] {
			k++
		}
	}
	return float64(k) / float64(p.n)
}

// decodeEligible reports whether a route may run a decode leg: any but a prefill-role engine
// (an engine without a role in a split fleet decodes, as a decode engine does).
func decodeEligible(r *route) bool { return r.ep.Role != discovery.RolePrefill }

// pdFleet reports whether requests may be split now: a ready prefill engine and a ready engine
// eligible for decode. Without them everything is as in an aggregated fleet.
func (s *Server) pdFleet(t *table, eps []policy.Endpoint) bool {
	prefill, decode := false, false
	for i := range t.routes {
		if !eps[i].Ready {
			continue
		}
		if t.routes[i].ep.Role == discovery.RolePrefill {
			prefill = true
		} else {
			decode = true
		}
	}
	return prefill && decode
}

// masked is a copy of eps where the routes keep does not allow are not ready.
func masked(t *table, eps []policy.Endpoint, keep func(*route) bool) []policy.Endpoint {
	out := append([]policy.Endpoint(nil), eps...)
	for i := range t.routes {
		if !keep(&t.routes[i]) {
			out[i].Ready = false
		}
	}
	return out
}

// wholeEndpoints are the engines a whole request may run on, as the planner weighs them
// (disagg.Config.Plan): every engine, or the decode pool with --pd-whole-on decode or in Always
// mode.
func (s *Server) wholeEndpoints(t *table, eps []policy.Endpoint) []policy.Endpoint {
	if s.cfg.PD.WholeOn != WholeOnDecode && s.pd.cfg.Mode != disagg.Always {
		return eps
	}
	return masked(t, eps, decodeEligible)
}

// splitPlan is a request's two legs, and the whole option to fall back on.
type splitPlan struct {
	prefill policy.Decision
	whole   policy.Decision
	// blocks is what the decode engine lacks of the prompt and pulls; firstStep its own
	// predicted share of the decode leg's first token (its queued prefill and the one
	// recomputed token), which the first token takes on top of the transfer.
	blocks    int
	firstStep float64
}

// planPD decides a request of a split fleet with the planner kvbench's kvrouter-pd is measured
// with (disagg.Config.Plan): the whole option, the prefill and decode engines of the split one,
// and the verdict. The options are evaluated without side effects and only the placement chosen
// is committed, so the policy's state (the round-robin cursor, the record of placed prefixes)
// advances once per request, as in an aggregated fleet. eps carry the index's matches, in t's
// order. transfer is the predicted KV transfer of the split's decode leg.
func (s *Server) planPD(t *table, eps []policy.Endpoint, req policy.Request) (plan disagg.Plan, transfer float64) {
	engines := make([]disagg.Engine, len(eps))
	for i := range eps {
		r := &t.routes[i]
		engines[i] = disagg.Engine{Endpoint: eps[i], Prefill: r.ep.Role == discovery.RolePrefill}
		if eps[i].Ready && !engines[i].Prefill {
			// The engine's own waiting queue (scraped); the planner reads it with the engine's
			// KV usage, since vLLM counts decode legs still pulling their cache as waiting.
			engines[i].Waiting = int(s.tracker.Stats(r.name).Metrics.Waiting)
		}
	}
	cfg := s.pd.cfg
	cfg.BlockSize = s.blockSize()
	now := s.now()
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	if s.pd.epoch.IsZero() {
		s.pd.epoch = now.Add(-time.Second)
	}
	// Now is what kvbench's kvrouter-pd passes too: without it the prefill engines' duty is never
	// learned, so the short-prefill gate never lifts and whole requests are never steered off
	// prefill engines busy with legs (Sub uses the monotonic clock).
	plan = cfg.Plan(disagg.PlanInput{Policy: s.policy, Estimator: s.pd.est, Request: req, Engines: engines,
		WholeOnAny: s.cfg.PD.WholeOn != WholeOnDecode, Now: now.Sub(s.pd.epoch).Seconds()})
	plan.Commit(s.policy)
	if s.log.V(2).Enabled() {
		s.log.V(2).Info("disaggregation decided", "split", plan.Split, "reason", plan.Verdict.Reason,
			"whole", plan.Whole.Endpoint, "prefill", plan.Prefill.Endpoint, "decode", plan.Decode,
			"wholeCost", plan.Verdict.WholeCost, "splitCost", plan.Verdict.SplitCost, "transferBlocks", plan.TransferBlocks)
	}
	if plan.Split {
		transfer = s.pd.est.TransferSeconds(plan.TransferBlocks)
	}
	return plan, transfer
}

// splitRouting turns rt, whose decision is the plan's whole option as admission left it, into
// the plan's split: rt.decision becomes the decode leg's, with the whole option and its
// fallbacks as the decode leg's fallbacks.
func (s *Server) splitRouting(t *table, eps []policy.Endpoint, plan disagg.Plan, transfer float64, rt *routing) {
	whole := rt.decision
	i, ok := t.byName[plan.Decode]
	if _, pok := t.byName[plan.Prefill.Endpoint]; !ok || !pok {
		return // cannot happen: the plan came from this table
	}
	dd := plan.DecodeWhole
	// A decode leg that fails before its first byte is retried whole: on the whole option
	// first, then its fallbacks, then (when whole requests keep to the decode pool) the
	// prefill engine, which has just computed the prompt: the last resort is never none.
	order := make([]string, 0, len(whole.Fallbacks)+2)
	order = append(append(append(order, whole.Endpoint), whole.Fallbacks...), plan.Prefill.Endpoint)
	fb := make([]string, 0, len(order))
	for _, n := range order {
		if n != dd.Endpoint && !slices.Contains(fb, n) {
			fb = append(fb, n)
		}
	}
	dd.Fallbacks = fb
	// The decode engine pulls the prompt's KV rather than computing it: what it prefills is the
	// last prompt token. Charging it the uncached prompt would count the prefill in both pools
	// (and scale the decode pool on the prefill pool's work) until its first token. Its first
	// token measures the transfer, not its prefill speed: no work figure for the TTFT model.
	dd.UncachedTokens = min(dd.UncachedTokens, 1)
	dd.PrefillWork = -1
	dd.AdapterCold = rt.req.LoRA != "" && !eps[i].Load.LoRA.Resident
	// Its first token waits for the pull: the TTFB watchdog must allow for it, or a long
	// transfer to an otherwise idle decode engine would eject it as hung.
	dd.PredictedTTFT = max(plan.DecodeFirstStep, 0) + transfer
	rt.split = &splitPlan{prefill: plan.Prefill, whole: whole, blocks: plan.TransferBlocks, firstStep: plan.DecodeFirstStep}
	rt.decision = dd
}

// prefillBody is the prefill leg's body: the client's, answered whole with one token, asking
// the engine to keep the KV blocks for a remote decode.
func prefillBody(body []byte) ([]byte, error) {
	return rewriteBody(body, func(m map[string]json.RawMessage) error {
		m["stream"] = json.RawMessage("false")
		m["max_tokens"] = json.RawMessage("1")
		if _, ok := m["max_completion_tokens"]; ok {
			m["max_completion_tokens"] = json.RawMessage("1")
		}
		delete(m, "stream_options")
		// A floor on the output above the one token asked for would have the engine refuse the
		// leg (vLLM: min_tokens must not exceed max_tokens), and the client a valid request.
		delete(m, "min_tokens")
		m[kvTransferParams] = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,` +
			`"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)
		return nil
	})
}

// kvTransferParams is the request member that drives an engine's KV connector.
const kvTransferParams = "kv_transfer_params"

// withoutTransferParams is a client's body without its kv_transfer_params. Only the router
// drives the connector: a client's own would have an engine hold a request's KV blocks for a
// remote decode that never comes (vLLM frees them after its transfer timeout, minutes later),
// or pull blocks from any host it names.
func withoutTransferParams(body []byte) ([]byte, error) {
	return rewriteBody(body, func(m map[string]json.RawMessage) error {
		delete(m, kvTransferParams)
		return nil
	})
}

// decodeBody is the decode leg's body: the client's, carrying the prefill's kv_transfer_params.
func decodeBody(body []byte, params json.RawMessage) ([]byte, error) {
	return rewriteBody(body, func(m map[string]json.RawMessage) error {
		m[kvTransferParams] = params
		return nil
	})
}

// transferParams reads the kv_transfer_params of a prefill leg's answer. An answer without
// them, or with ones that name no engine to pull from, cannot be decoded elsewhere.
func transferParams(answer []byte) (json.RawMessage, error) {
	var a struct {
		Params json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(answer, &a); err != nil {
		return nil, fmt.Errorf("the prefill answer is not JSON: %v", err)
	}
	if len(a.Params) == 0 || string(a.Params) == "null" {
		return nil, errors.New("the prefill answer has no kv_transfer_params")
	}
	var p struct {
		DoRemotePrefill bool            `json:"do_remote_prefill"`
		EngineID        *string         `json:"remote_engine_id"`
		BlockIDs        json.RawMessage `json:"remote_block_ids"`
	}
	if err := json.Unmarshal(a.Params, &p); err != nil {
		return nil, fmt.Errorf("the prefill answer's kv_transfer_params is not an object: %v", err)
	}
	switch {
	case !p.DoRemotePrefill:
		return nil, errors.New("the prefill answer's kv_transfer_params does not ask for a remote prefill")
	case p.EngineID == nil || *p.EngineID == "":
		return nil, errors.New("the prefill answer's kv_transfer_params names no remote_engine_id")
	case len(p.BlockIDs) == 0 || p.BlockIDs[0] != '[':
		return nil, errors.New("the prefill answer's kv_transfer_params has no remote_block_ids list")
	}
	return a.Params, nil
}

// prefillTarget is where a prefill leg goes: an engine of the table (route set, accounted and
// watched like any attempt) or, in sidecar mode, an address the EPP named (base URL only).
type prefillTarget struct {
	rt       *route
	c        *charge
	base     string
	deadline time.Duration
}

// legOutcome is how a prefill leg ended. params is set on success; gone: the client left.
type legOutcome struct {
	params json.RawMessage
	gone   bool
	err    error
}

// prefillLeg sends a prefill leg and reads its answer.
func (x *exchange) prefillLeg(pt prefillTarget, body []byte) legOutcome {
	s := x.s
	ctx, cancel := context.WithCancelCause(x.r.Context())
	defer cancel(nil)
	name := pt.base
	if pt.rt != nil {
		name = pt.rt.name
	}
	var wd *watchdog
	if pt.c != nil {
		pt.c.sent = s.now()
		wd = s.watch(pt.c.h, name, pt.c.sent, pt.deadline, cancel)
		defer wd.stop()
	} else {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, pt.deadline)
		defer stop()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, pt.base+x.path, bytes.NewReader(body))
	if err != nil {
		return legOutcome{err: err}
	}
	copyHeaders(req.Header, x.r.Header)
	req.Header.Del(PrefillerHeader)
	s.cfg.Auth.setUpstream(req.Header, x.r.Header.Get("Authorization"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Del("Accept")
	// The answer is read here, not relayed: it must come as plain JSON, whatever the client
	// accepts (an explicit Accept-Encoding turns off the transport's own decompression).
	req.Header.Del("Accept-Encoding")
	if pt.rt != nil && pt.rt.ranks > 1 {
		req.Header.Set(dpRankHeader, strconv.Itoa(pt.rt.rank))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		switch {
		case x.r.Context().Err() != nil:
			return legOutcome{gone: true}
		case wd != nil && gaveUp(ctx):
			s.metrics.upstreamErrors.WithLabelValues(name, "unresponsive").Inc()
		case isDialError(err):
			s.metrics.upstreamErrors.WithLabelValues(name, "connect").Inc()
			if pt.rt != nil {
				s.markDown(pt.rt.ep.Name)
			}
		default:
			s.metrics.upstreamErrors.WithLabelValues(name, "response").Inc()
			if pt.c != nil {
				s.outliers.failure(pt.c.h, "prefill leg failed")
			}
		}
		return legOutcome{err: err}
	}
	defer resp.Body.Close()
	if wd != nil {
		wd.reading(s.now())
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxPrefillAnswer))
	if wd != nil {
		wd.read()
	}
	if err != nil {
		if x.r.Context().Err() != nil {
			return legOutcome{gone: true}
		}
		return legOutcome{err: fmt.Errorf("reading the prefill answer: %w", err)}
	}
	if pt.c != nil {
		pt.c.respond(resp.StatusCode)
		pt.c.received(answer, s.now())
		pt.c.finished()
	}
	if resp.StatusCode != http.StatusOK {
		// A refusal (400, 413, 422) falls back too: the leg's body is the router's, not the
		// client's (max_tokens 1, kv_transfer_params), so the refusal may be of what the router
		// changed; a request that is really bad gets the same answer from the whole attempt.
		return legOutcome{err: fmt.Errorf("the prefill engine answered %d", resp.StatusCode)}
	}
	params, err := transferParams(answer)
	if err != nil {
		return legOutcome{err: err}
	}
	return legOutcome{params: params}
}

// runSplit serves a split request: the prefill leg, then the decode leg through the usual
// forwarding (run). A prefill leg that fails in any way, a refusal included, is not the
// client's problem: the request is served whole instead.
func (x *exchange) runSplit(t *table, rt routing) {
	s := x.s
	sp := rt.split
	i, ok := t.byName[sp.prefill.Endpoint]
	if !ok { // cannot happen: the plan came from this table
		x.run(t, sp.whole)
		return
	}
	pr := &t.routes[i]
	c := s.newCharge(pr, s.tracker.DispatchAdapter(pr.name, x.lora, sp.prefill.UncachedTokens, x.promptTokens+1),
		s.predict(pr, i, x.keys, x.gpuHeld), -1, false)
	deadline := s.ttfbDeadline(pr.name, sp.prefill.PredictedTTFT, false, 1, s.endpointStreams(pr.name))
	out := x.runPrefill(prefillTarget{rt: pr, c: c, base: pr.ep.URL, deadline: deadline}, sp.prefill)
	if out == nil {
		return
	}
	if out.fallback {
		x.run(t, wholeAfter(sp.whole, t, pr.ep.Name, x.promptTokens))
		return
	}
	blocks, step := sp.blocks, sp.firstStep
	x.onFirst = func(ttft time.Duration) {
		// The decode leg is sent once the prefill leg answered: its first token is the
		// transfer and the decode engine's own first step.
		transfer := max(0, ttft.Seconds()-step)
		s.pd.transfer.Observe(transfer)
		s.policyMu.Lock()
		s.pd.est.ObserveTransfer(blocks, transfer)
		s.policyMu.Unlock()
	}
	x.prefillEndpoint = pr.name
	x.run(t, rt.decision)
}

// prefillResult is what runPrefill leaves to its caller: the decode leg is ready to run
// (x.body carries the params), or the request falls back to whole.
type prefillResult struct{ fallback bool }

// runPrefill runs the prefill leg to pt and prepares the decode leg on x, or asks for the whole
// fallback (nil: the client left).
func (x *exchange) runPrefill(pt prefillTarget, d policy.Decision) *prefillResult {
	s := x.s
	name := pt.base
	if pt.rt != nil {
		name = pt.rt.name
	}
	clientBody := x.body
	body, err := prefillBody(clientBody)
	if err != nil {
		if pt.c != nil {
			pt.c.release()
		}
		s.pd.fellBack(legPrefill)
		return &prefillResult{fallback: true}
	}
	start := s.now()
	out := x.prefillLeg(pt, body)
	if pt.c != nil {
		pt.c.release()
	}
	switch {
	case out.gone:
		s.metrics.requests.WithLabelValues(name, "499").Inc()
		return nil
	case out.err != nil:
		s.pd.fellBack(legPrefill)
		s.log.Info("prefill leg failed; serving the request whole", "prefill", name, "error", out.err.Error())
		return &prefillResult{fallback: true}
	}
	took := s.now().Sub(start)
	s.pd.prefillLeg.Observe(took.Seconds())
	if pt.rt != nil && ttftWork(d) >= 0 {
		// A one-token answer is its prefill: the prefill engine's TTFT model learns from it.
		s.policyMu.Lock()
		s.policy.ObserveTTFT(pt.rt.name, ttftWork(d), took.Seconds())
		s.policyMu.Unlock()
	}
	dbody, err := decodeBody(clientBody, out.params)
	if err != nil {
		s.pd.fellBack(legPrefill)
		return &prefillResult{fallback: true}
	}
	x.body, x.retryBody, x.untimed = dbody, clientBody, true
	return &prefillResult{}
}

// wholeAfter is the whole option once the prefill engine failed: the policy's whole pick,
// unless that is the failed engine, then its next fallback elsewhere, charged the whole prompt.
func wholeAfter(whole policy.Decision, t *table, failedEngine string, promptTokens int) policy.Decision {
	on := func(n string) string {
		if i, ok := t.byName[n]; ok {
			return t.routes[i].ep.Name
		}
		return ""
	}
	if on(whole.Endpoint) != failedEngine {
		return whole
	}
	var rest []string
	next := ""
	for _, f := range whole.Fallbacks {
		if next == "" && on(f) != failedEngine {
			next = f
			continue
		}
		rest = append(rest, f)
	}
	if next == "" {
		return whole // the prefill engine is all there is: it may still serve it whole
	}
	return policy.Decision{Endpoint: next, Fallbacks: rest, Reason: whole.Reason, Shape: whole.Shape,
		UncachedTokens: promptTokens, PrefillWork: -1, AdapterCold: whole.AdapterCold}
}

// disaggregationStatus is /v1/status's disaggregation section, nil in a fleet without a prefill
// pool.
func (s *Server) disaggregationStatus(t *table) *routerapi.Disaggregation {
	has := false
	for i := range t.routes {
		if t.routes[i].ep.Role == discovery.RolePrefill {
			has = true
			break
		}
	}
	if !has {
		return nil
	}
	p := s.pd
	d := &routerapi.Disaggregation{Mode: string(p.cfg.Mode), ThresholdTokens: p.cfg.ThresholdTokens,
		SplitRequests: p.split.Load(), WholeRequests: p.whole.Load(), SplitShare: p.share(),
		Fallbacks: p.fallPrefill.Load(), Pools: map[string]routerapi.Pool{}}
	s.policyMu.Lock()
	// The line as fitted (what kvbench reports too), not differences of predictions, which the
	// floor at zero would bend.
	d.TransferLatencySeconds, d.TransferSecondsPerBlock = p.est.Line()
	s.policyMu.Unlock()
	now := s.now()
	for i := range t.routes {
		r := &t.routes[i]
		role := r.ep.Role
		if role == "" {
			role = discovery.RoleDecode
		}
		pool := d.Pools[role]
		pool.Engines++
		ls := s.tracker.Stats(r.name)
		if ok, _ := s.readiness(r, ls.FailStreak, now); ok {
			pool.ReadyEngines++
		}
		pool.InFlight += ls.InFlight
		pool.QueuedPrefillTokens += ls.QueuedPrefillTokens
		d.Pools[role] = pool
	}
	return d
}
