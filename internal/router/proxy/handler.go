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
	"net/http"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/admission"
	"github.com/kvrouter/kvrouter/internal/router/disagg"
	"github.com/kvrouter/kvrouter/internal/router/jsonscan"
	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/router/policyinput"
	"github.com/kvrouter/kvrouter/internal/router/tokenize"
)

// EndpointHeader names the engine that served a response.
const EndpointHeader = "X-Kvrouter-Endpoint"

// dpRankHeader asks a data-parallel vLLM server for a specific rank.
const dpRankHeader = "X-Data-Parallel-Rank"

type apiKind int

const (
	kindCompletion apiKind = iota
	kindChat
)

// handleInference serves /v1/completions and /v1/chat/completions: it reads the request,
// decides where it goes (decideRequest), and forwards it there. A step that refuses the request
// returns the apiError the client is answered with.
func (s *Server) handleInference(kind apiKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.counters.requests.Add(1)
		body, err := s.receiveBody(w, r)
		if err != nil {
			s.refuse(w, err)
			return
		}
		t := s.tbl.Load()
		req, rt, err := s.decideRequest(t, incoming{ctx: r.Context(), header: r.Header, kind: kind, body: body, mayWait: true})
		if err != nil {
			s.refuse(w, err)
			return
		}
		x := s.newExchange(w, r, &req, rt)
		if rt.split != nil {
			x.runSplit(t, rt)
		} else {
			x.run(t, rt.decision)
		}
		if s.admit != nil {
			// The request has left its engine: what drains the queues, and so prices a
			// Retry-After.
			s.admit.Completed(rt.decision.Endpoint, s.now())
		}
	}
}

// incoming is an inference request as a front end received it, body read.
type incoming struct {
	ctx    context.Context // the client's: cancels the /tokenize call when it leaves
	header http.Header
	kind   apiKind
	body   []byte
	// eligible, when not nil, says which routes the request may go to (the gateway's subset
	// hint in EPP mode); the others are not ready as far as the policy and admission see.
	eligible func(*route) bool
	// mayWait lets the request wait in the router queue (queue.go). The EPP's requests do not:
	// the gateway bounds each decision by its ext_proc message timeout.
	mayWait bool
}

// decideRequest runs every step from a received body to a decision, for both front ends alike
// (the HTTP proxy forwards the request where it says, the EPP tells Envoy): parse, priority,
// early admission, tokens, a wait in the router queue if the request may and must wait, then
// the index lookup, the policy and admission on its choice.
func (s *Server) decideRequest(t *table, in incoming) (inference, routing, error) {
	req, err := s.parseRequest(in.ctx, in.header, in.kind, in.body)
	if err != nil {
		return req, routing{}, err
	}
	pri, err := s.priority(in.header)
	if err != nil {
		return req, routing{}, err
	}
	if err := s.admitEarly(t, pri, in.eligible); err != nil {
		return req, routing{}, err
	}
	var tokens []uint32
	tokenized := false
	if in.eligible == nil || anyEligible(t, in.eligible) {
		// A request the gateway allowed no known engine for is answered 503 below without
		// costing a /tokenize call.
		tokens, tokenized = s.tokens(in.ctx, t, in.kind, &req)
	}
	var done func(failed bool)
	if in.mayWait {
		if done, err = s.rq.wait(in.ctx, t, pri, in.eligible); err != nil {
			return req, routing{}, err
		}
	}
	rt, err := s.route(t, in.header, &req, tokens, tokenized, pri, in.eligible)
	if done != nil {
		done(err != nil)
	}
	return req, rt, err
}

// anyEligible reports whether eligible allows some route of t.
func anyEligible(t *table, eligible func(*route) bool) bool {
	for i := range t.routes {
		if eligible(&t.routes[i]) {
			return true
		}
	}
	return false
}

// routing is a request as the policy saw it, and the policy's answer.
type routing struct {
	// split, when not nil, serves the request in two legs (pd.go): decision is then the decode
	// leg's.
	split    *splitPlan
	req      policy.Request
	keys     []kvindex.Key // the prompt's content keys (nil: not tokenized, or no index)
	decision policy.Decision
	gpuHeld  []int // per route: leading blocks of keys it held on GPU at the lookup
}

// route has the policy pick an engine for the request among the eligible routes (nil: all).
// When none can take it, the answer is a 503 the client may retry; when admission control sheds
// it there, a 429.
func (s *Server) route(t *table, header http.Header, req *inference, tokens []uint32, tokenized bool, pri admission.Priority, eligible func(*route) bool) (routing, error) {
	rt := routing{req: s.policyRequest(header, req, tokens, tokenized)}
	start := s.now()
	if tokenized && s.index != nil {
		// Computed once, for the lookup and for the prediction after dispatch.
		params := kvindex.KeyParams{LoRAName: req.lora, CacheSalt: req.CacheSalt}
		rt.keys = kvindex.RequestKeys(make([]kvindex.Key, 0, len(tokens)/s.blockSize()), tokens, s.blockSize(), params)
	}
	eps := s.snapshot(t, eligible)
	pd := s.pdFleet(t, eps)
	all := eps
	var plan disagg.Plan
	var transfer float64
	if !pd {
		rt.decision, rt.gpuHeld = s.pick(t, eps, rt.req, rt.keys)
	} else {
		// The index is read once for the whole option and the two legs' (pd.go).
		rt.gpuHeld = s.fillCached(t, eps, rt.req, rt.keys)
		plan, transfer = s.planPD(t, eps, rt.req)
		rt.decision = plan.Whole
		eps = s.wholeEndpoints(t, eps)
	}
	s.metrics.decisionSeconds.Observe(s.now().Sub(start).Seconds())
	s.countDecision(rt.decision)
	// Admission bounds the whole option, split or not: it refuses a request the fleet cannot
	// take in time, and may move the whole option (the decode leg's first fallback).
	if err := s.admitRouted(eps, &rt.decision, rt.req.PromptTokens, rt.req.LoRA, pri); err != nil {
		return rt, err
	}
	if pd && rt.decision.Endpoint != "" {
		if plan.Split {
			s.splitRouting(t, all, plan, transfer, &rt)
		}
		s.pd.counted(rt.split != nil)
	}
	if rt.decision.Endpoint == "" {
		s.counters.rejected.Add(1)
		msg := "no engine is ready"
		if rt.decision.Reason == policy.ReasonAdmissionFull {
			msg = "every engine is at its admission limit"
		}
		return rt, s.unavailable(msg)
	}
	if tokenized {
		s.counters.promptTokens.Add(uint64(len(tokens)))
		s.counters.cachedTokens.Add(uint64(rt.decision.CachedTokens))
	}
	return rt, nil
}

// unavailable is the 503 of a request no engine can take now.
func (s *Server) unavailable(msg string) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, typ: serverError, msg: msg,
		header: http.Header{"Retry-After": {strconv.Itoa(s.cfg.RetryAfter)}}}
}

// policyRequest is what the policy weighs of a request.
func (s *Server) policyRequest(header http.Header, req *inference, tokens []uint32, tokenized bool) policy.Request {
	promptTokens := len(tokens)
	if !tokenized {
		// Not a guess at the token count for the index (that is what tokenization is for);
		// only a size for the load accounting: ~4 bytes per token of the body.
		promptTokens = len(req.body) / 4
	}
	preq := policy.Request{PromptTokens: promptTokens, Tokenized: tokenized, MaxTokens: req.maxTokens(),
		TieBreak: policyinput.TieBreak(tokens, s.counters.requests.Load()), LoRA: req.lora}
	if s.cfg.SessionHeader != "" {
		preq.SessionKey = header.Get(s.cfg.SessionHeader)
	}
	return preq
}

// outputTokens is the output a request is priced at: its limit, or the policy's default.
func (s *Server) outputTokens(preq policy.Request) int {
	if preq.MaxTokens > 0 {
		return preq.MaxTokens
	}
	return s.policy.Config().DefaultMaxTokens
}

// newExchange prepares the request's way through the engine the policy chose.
func (s *Server) newExchange(w http.ResponseWriter, r *http.Request, req *inference, rt routing) *exchange {
	out := s.outputTokens(rt.req)
	return &exchange{s: s, w: w, r: r, body: req.body, path: r.URL.Path, stream: req.Stream, keys: rt.keys,
		gpuHeld: rt.gpuHeld, workTokens: rt.req.PromptTokens + out, promptTokens: rt.req.PromptTokens, maxTokens: out,
		capTokens: rt.req.MaxTokens, lora: rt.req.LoRA}
}

// tokens finds the request's exact token ids: in process when the router's own tokenizer is in
// use and can handle the request (localtokens.go), else from an engine's /tokenize. A failure (or
// no engine to ask) is counted and reported as a degradation; the request is then routed by load
// alone.
func (s *Server) tokens(ctx context.Context, t *table, kind apiKind, req *inference) ([]uint32, bool) {
	if kind == kindCompletion {
		// A prompt that is already token ids needs no tokenizer.
		if ids, ok := promptIDs(req.Prompt); ok {
			return ids, true
		}
	}
	if toks, ok := s.localTokenize(kind, req); ok {
		return toks, true
	}
	engine, base, skipped := s.tokenizeEngine(t)
	if base == "" {
		if skipped {
			// Routed blind for the tokenizers' sake: a tokenize failure like any other.
			s.tokenizeFailed(errTokenizeSkipped, false)
		}
		return nil, false
	}
	start := s.now()
	defer s.outliers.tokenizeStarted(engine, start)()
	var toks []uint32
	var err error
	if kind == kindCompletion {
		cr := tokenize.CompletionRequest{Model: req.Model, AddSpecialTokens: req.AddSpecialTokens, Authorization: req.authorization}
		if raw := bytes.TrimSpace(req.Prompt); len(raw) > 0 && raw[0] == '"' {
			cr.RawPrompt = raw // already validated by the request's decode: pass it through
		} else if text, ok := promptText(req.Prompt); ok {
			cr.Prompt = text
		} else {
			s.tokenizeFailed(fmt.Errorf("prompt is neither a string, a list of strings, nor token ids"), false)
			return nil, false
		}
		toks, err = s.tok.Completion(ctx, base, cr)
	} else {
		toks, err = s.tok.Chat(ctx, base, tokenize.ChatRequest{Model: req.Model, Messages: req.Messages,
			AddGenerationPrompt: req.AddGenerationPrompt, ContinueFinalMessage: req.ContinueFinalMessage,
			AddSpecialTokens: req.AddSpecialTokens, ChatTemplate: req.ChatTemplate,
			ChatTemplateKwargs: req.ChatTemplateKwargs, Tools: req.Tools, Authorization: req.authorization})
	}
	s.metrics.tokenizeSeconds.Observe(s.now().Sub(start).Seconds())
	if err != nil {
		s.tokenizeFailed(err, true)
		return nil, false
	}
	s.tokenizeOK()
	return toks, true
}

// tokenizeEngine picks an engine to tokenize on, rotating so the work spreads: one that is ready
// (neither failing its scrapes nor ejected as unresponsive) and whose /tokenize has not just
// timed out, preferring one without a call that has been in flight for long. A /tokenize that
// hangs costs its request the whole tokenize timeout, so when no engine qualifies the request is
// routed by load at once rather than made to wait. It returns the engine's name and URL, and
// whether a ready engine was skipped for its /tokenize.
func (s *Server) tokenizeEngine(t *table) (name, url string, skipped bool) {
	n := len(t.routes)
	if n == 0 {
		return "", "", false
	}
	now := s.now()
	// Tokenizing takes milliseconds, and any engine can do it: a call in flight for much longer
	// says little for sure, but enough to prefer another engine.
	slow := max(s.cfg.TokenizeTimeout/40, 50*time.Millisecond)
	first := int(s.tokRR.Add(1) % uint64(n))
	for i := 0; i < n; i++ {
		r := &t.routes[(first+i)%n]
		if ok, _ := s.readiness(r, s.tracker.Stats(r.name).FailStreak, now); !ok {
			continue
		}
		if s.outliers.tokenizeSkips(r.ep.Name) {
			skipped = true
			continue
		}
		if s.outliers.tokenizeSlow(r.ep.Name, now, slow) {
			if url == "" {
				name, url = r.ep.Name, r.ep.URL // only if every other engine is as slow
			}
			continue
		}
		return r.ep.Name, r.ep.URL, false
	}
	return name, url, skipped
}

// errTokenizeSkipped is the tokenize failure of a request no engine could tokenize because each
// ready one's /tokenize had just timed out.
var errTokenizeSkipped = errors.New("every ready engine's /tokenize timed out moments ago")

func (s *Server) tokenizeFailed(err error, engine bool) {
	s.counters.tokFailures.Add(1)
	s.metrics.tokenizeFailures.Inc()
	s.degMu.Lock()
	now := s.now()
	if s.tokFailSince.IsZero() {
		s.tokFailSince = now
	}
	s.tokLastErr = err.Error()
	s.tokLastFail = now
	s.degMu.Unlock()
	if engine {
		s.log.V(1).Info("tokenize failed; routing by load", "error", err.Error())
	}
}

func (s *Server) tokenizeOK() {
	s.degMu.Lock()
	s.tokFailSince = time.Time{}
	s.degMu.Unlock()
}

// decide builds the policy's snapshot and picks an endpoint. keys are the prompt's content keys
// (kvindex.RequestKeys), nil when it was not tokenized. gpuHeld[i] is the leading blocks of the
// prompt route i holds on GPU (confirmed), nil without keys.
func (s *Server) decide(t *table, req policy.Request, keys []kvindex.Key) (d policy.Decision, gpuHeld []int) {
	return s.pick(t, s.endpoints(t), req, keys)
}

// snapshot is endpoints with the routes eligible does not allow (nil: all are) marked not ready,
// so that the policy and admission control alike see them as unavailable.
func (s *Server) snapshot(t *table, eligible func(*route) bool) []policy.Endpoint {
	eps := s.endpoints(t)
	if eligible != nil {
		for i := range t.routes {
			if !eligible(&t.routes[i]) {
				eps[i].Ready = false
			}
		}
	}
	return eps
}

// endpoints is the policy's snapshot of every route's readiness and load, in t's order.
func (s *Server) endpoints(t *table) []policy.Endpoint {
	n := len(t.routes)
	eps := make([]policy.Endpoint, n)
	loads := make([]policy.Load, n)
	streaks := make([]int, n)
	s.tracker.Loads(t.names, loads, streaks)
	now := s.now()
	for i := range t.routes {
		ready, _ := s.readiness(&t.routes[i], streaks[i], now)
		eps[i] = policy.Endpoint{Name: t.routes[i].name, Ready: ready, Load: loads[i]}
	}
	return eps
}

// pick adds to eps (endpoints' snapshot) what the index holds of the request and has the policy
// pick; see decide.
func (s *Server) pick(t *table, eps []policy.Endpoint, req policy.Request, keys []kvindex.Key) (d policy.Decision, gpuHeld []int) {
	gpuHeld = s.fillCached(t, eps, req, keys)
	return s.pickFilled(req, eps), gpuHeld
}

// fillCached adds to eps what the index holds of the request, and each route's LoRA state for
// its adapter; it returns gpuHeld (see decide).
func (s *Server) fillCached(t *table, eps []policy.Endpoint, req policy.Request, keys []kvindex.Key) (gpuHeld []int) {
	n := len(t.routes)
	if req.Tokenized && s.index != nil && len(keys) > 0 {
		bs := s.blockSize()
		gpuHeld = make([]int, n)
		for _, m := range s.index.AppendLookupKeys(make([]kvindex.EndpointMatch, 0, n), keys) {
			i, ok := t.bySrc[m.Source]
			if !ok {
				continue
			}
			eps[i].Cached = policyinput.Cached(m, bs)
			gpuHeld[i] = m.Blocks[kvevents.MediumGPU]
		}
	}
	if req.LoRA != "" {
		lora := make([]policy.LoRAState, n)
		s.tracker.FillLoRA(t.names, req.LoRA, lora)
		for i := range eps {
			eps[i].Load.LoRA = lora[i]
		}
	}
	return gpuHeld
}

// pickFilled has the policy pick among eps, filled by fillCached.
func (s *Server) pickFilled(req policy.Request, eps []policy.Endpoint) policy.Decision {
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	return s.policy.Pick(req, eps)
}

// blockSize is the engines' block size, which the policy and the index share.
func (s *Server) blockSize() int { return s.policy.Config().BlockSize }

func (s *Server) countDecision(d policy.Decision) {
	s.counters.decMu.Lock()
	s.counters.decisions[string(d.Reason)]++
	s.counters.decMu.Unlock()
	s.metrics.decided(string(d.Reason), string(d.Shape)).Inc()
}

// promptIDs reads a completion prompt given as token ids ([1,2,3] or [[1,2,3], ...]: the first).
func promptIDs(raw json.RawMessage) ([]uint32, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	s := jsonscan.New(raw)
	if ids, ok := s.Uint32s(); ok && s.AtEnd() && len(ids) > 0 {
		return ids, true
	}
	var batch [][]uint32
	if err := json.Unmarshal(raw, &batch); err == nil && len(batch) > 0 && len(batch[0]) > 0 {
		return batch[0], true
	}
	return nil, false
}

// promptText reads a completion prompt given as text ("..." or ["...", ...]: the first; a batch
// is routed as a whole by its first prompt).
func promptText(raw json.RawMessage) (string, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true
	}
	var batch []string
	if err := json.Unmarshal(raw, &batch); err == nil && len(batch) > 0 {
		return batch[0], true
	}
	return "", false
}
