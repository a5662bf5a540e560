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
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/kvstream"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/routerapi"
)

// Handler returns the router's public HTTP handler: inference, the model list and the kubelet's
// probes. What describes the fleet (metrics, /v1/status, /v1/autoscale) is on AdminHandler only,
// so that a Gateway or Service that exposes this port to clients exposes nothing else.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.handleInference(kindCompletion))
	mux.HandleFunc("POST /v1/chat/completions", s.handleInference(kindChat))
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /ready", s.handleReady)
	for _, p := range []string{"/v1/completions", "/v1/chat/completions"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", r.Method+" is not allowed; use POST", "")
		})
	}
	mux.HandleFunc("/", noRoute)
	return s.requireKey(mux)
}

// AdminHandler returns the handler of the router's admin listener: /metrics (metricsHandler,
// when not nil), /v1/status (the operator's status poller), /v1/autoscale (KEDA), and the probes
// again so that the admin port can be checked on its own. It asks for no client key: those
// readers carry none, and the admin port is meant to be reachable only by them (the rendered
// NetworkPolicy). Nothing on it carries prompts or outputs.
func (s *Server) AdminHandler(metricsHandler http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.handleStatus)
	mux.HandleFunc("GET /v1/autoscale", s.handleAutoscale)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /ready", s.handleReady)
	if metricsHandler != nil {
		mux.Handle("GET /metrics", metricsHandler)
	}
	mux.HandleFunc("/", noRoute)
	return mux
}

func noRoute(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path), "")
}

func (s *Server) readyCount() int {
	t := s.tbl.Load()
	streaks := make([]int, len(t.names))
	s.tracker.Loads(t.names, make([]policy.Load, len(t.names)), streaks)
	now := s.now()
	n := 0
	for i := range t.routes {
		if ok, _ := s.readiness(&t.routes[i], streaks[i], now); ok {
			n++
		}
	}
	return n
}

func (s *Server) handleReady(w http.ResponseWriter, _ *http.Request) {
	if ok, why := s.Ready(); !ok {
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// handleModels passes the listing through from a ready engine (with the Authorization proxied
// requests carry, see auth.go), so clients see exactly what the engines serve.
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	t := s.tbl.Load()
	now := s.now()
	for i := range t.routes {
		rt := &t.routes[i]
		if ok, _ := s.readiness(rt, 0, now); !ok {
			continue
		}
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, rt.ep.URL+"/v1/models", nil)
		if err != nil {
			continue
		}
		copyHeaders(req.Header, r.Header)
		s.cfg.Auth.setUpstream(req.Header, r.Header.Get("Authorization"))
		resp, err := s.client.Do(req)
		if err != nil {
			s.markDown(rt.ep.Name)
			continue
		}
		copyHeaders(w.Header(), resp.Header)
		w.Header().Set(EndpointHeader, rt.name)
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		resp.Body.Close()
		return
	}
	if s.cfg.Model != "" {
		// No engine to ask: at least say what this router serves.
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []map[string]any{
			{"id": s.cfg.Model, "object": "model", "owned_by": "kvrouter"}}})
		return
	}
	w.Header().Set("Retry-After", fmt.Sprint(s.cfg.RetryAfter))
	writeError(w, http.StatusServiceUnavailable, "server_error", "no engine is ready", "")
}

// Status builds the /v1/status document.
func (s *Server) Status() routerapi.Status {
	t := s.tbl.Load()
	now := s.now()
	pcfg := s.policy.Config()
	st := routerapi.Status{Policy: string(pcfg.Kind), BlockSize: pcfg.BlockSize, Model: s.cfg.Model,
		Endpoints: make([]routerapi.Endpoint, 0, len(t.routes)), Degradations: []routerapi.Degradation{}}

	var sources map[string][]kvstream.SourceStatus
	if s.streams != nil {
		sources = map[string][]kvstream.SourceStatus{}
		for _, ss := range s.streams.Status() {
			sources[ss.Source.Endpoint] = append(sources[ss.Source.Endpoint], ss)
		}
	}
	var winHits, winQueries float64
	eventsBad := []string{}
	for i := range t.routes {
		rt := &t.routes[i]
		ls := s.tracker.Stats(rt.name)
		ready, why := s.readiness(rt, ls.FailStreak, now)
		e := routerapi.Endpoint{Name: rt.name, URL: rt.ep.URL, Rank: rt.rank, Ready: ready, NotReadyReason: why, Role: rt.ep.Role,
			InFlight: ls.InFlight, QueuedPrefillTokens: ls.QueuedPrefillTokens, TokensInFlight: ls.TokensInFlight}
		if ready {
			st.ReadyEndpoints++
		}
		if l := ls.LoRA; l.Reported || l.Err != "" || len(ls.LoadedAdapters) > 0 {
			e.LoRA = &routerapi.LoRAState{Slots: l.MaxLoRAs, Running: l.Running, Waiting: l.Waiting,
				Loaded: ls.LoadedAdapters, Error: l.Err}
		}
		if o := s.outliers.info(rt.name); o.ejections > 0 {
			e.Ejections = o.ejections
			if o.ejected {
				e.Suspect = &routerapi.Suspect{Reason: o.reason, Since: o.since, ProbeAfter: o.until}
			}
		}
		if ls.Scraped {
			m := ls.Metrics
			e.Engine = &routerapi.EngineMetrics{Running: m.Running, Waiting: m.Waiting, KVUsage: m.KVUsage,
				HitRate: ls.HitRate, HitRateValid: ls.HitRateOK, PrefixCacheQueries: m.PrefixQueries,
				PrefixCacheHits: m.PrefixHits, Preemptions: m.Preemptions, PreemptionsPerMinute: ls.PreemptionsPerMinute,
				BlockSize: m.BlockSize, HashAlgo: m.HashAlgo, ScrapedAt: ls.ScrapedAt, ScrapeError: ls.ScrapeError}
			// A DP engine's ranks share one page: count the pod once in the fleet totals.
			if rt.rank == 0 {
				winHits += ls.WindowHits
				winQueries += ls.WindowQueries
				st.Fleet.PreemptionsPerMinute += ls.PreemptionsPerMinute
				st.Fleet.Waiting += m.Waiting
				st.Fleet.Running += m.Running
			}
		}
		s.policyMu.Lock()
		if m := s.policy.Model(rt.name); m != nil {
			a, b := m.Params()
			e.TTFTModel = &routerapi.TTFTModel{InterceptSeconds: a, SecondsPerToken: b,
				Observations: m.Observations(), Calibrated: m.Calibrated()}
		}
		if m := s.policy.DecodeModel(rt.name); m != nil {
			e.ITLModel = itlModel(m)
		}
		s.policyMu.Unlock()
		if rt.ep.KVEvents != "" && sources != nil {
			for _, ss := range sources[rt.ep.Name] {
				if ss.Source.Rank != rt.rank {
					continue
				}
				e.Events = &routerapi.EventHealth{Connected: ss.Connected, Stale: ss.Stale, StaleReason: ss.Reason,
					LagSeconds: ss.Lag.Seconds(), Batches: ss.Batches, Gaps: ss.Gaps, Replays: ss.Replays,
					ReplayFailures: ss.ReplayFailures, Restarts: ss.Restarts, DecodeErrors: ss.DecodeErrors,
					Partial: ss.Partial}
				// Idle engines publish nothing, so silence is not a fault; a lost connection
				// or entries lost to an unrepaired gap are.
				if ready && (!ss.Connected || ss.Stale || ss.Partial) {
					eventsBad = append(eventsBad, rt.name)
				}
			}
		}
		st.Endpoints = append(st.Endpoints, e)
	}
	if winQueries > 0 {
		st.Fleet.HitRate, st.Fleet.HitRateValid = winHits/winQueries, true
	}
	s.policyMu.Lock()
	if m := s.policy.FleetDecodeModel(); m.Observations() > 0 {
		st.Fleet.ITLModel = itlModel(m)
	}
	s.policyMu.Unlock()

	c := &s.counters
	st.Router = routerapi.RouterStats{Requests: c.requests.Load(), PromptTokens: c.promptTokens.Load(),
		CachedPromptTokens: c.cachedTokens.Load(), TokenizeFailures: c.tokFailures.Load(),
		Retries: c.retries.Load(), Rejected: c.rejected.Load(), Decisions: map[string]uint64{}}
	if st.Router.PromptTokens > 0 {
		st.Router.RoutedHitRate = float64(st.Router.CachedPromptTokens) / float64(st.Router.PromptTokens)
	}
	if prompt, cached, span, ok := s.routed.since(s.routedNow()); ok {
		st.Router.Window = &routerapi.RoutedWindow{Seconds: span.Seconds(), PromptTokens: prompt, CachedPromptTokens: cached}
		if prompt > 0 {
			st.Router.Window.RoutedHitRate = float64(cached) / float64(prompt)
		}
	}
	c.decMu.Lock()
	for k, v := range c.decisions {
		st.Router.Decisions[k] = v
	}
	c.decMu.Unlock()

	s.degMu.Lock()
	// The tokenizer counts as degraded while its latest call failed, or one failed in the last
	// minute.
	if !s.tokFailSince.IsZero() || (!s.tokLastFail.IsZero() && now.Sub(s.tokLastFail) < time.Minute) {
		since := s.tokFailSince
		if since.IsZero() {
			since = s.tokLastFail
		}
		st.Degradations = append(st.Degradations, routerapi.Degradation{Type: "TokenizerUnavailable",
			Message: "requests are routed by load alone while /tokenize fails: " + s.tokLastErr, Since: since})
	}
	s.degMu.Unlock()
	s.tokenizerStatus(&st)
	if len(eventsBad) > 0 {
		st.Degradations = append(st.Degradations, routerapi.Degradation{Type: "EventsDegraded",
			Message: fmt.Sprintf("KV events not current from %d endpoint(s), e.g. %s", len(eventsBad), eventsBad[0])})
	}
	if st.ReadyEndpoints == 0 {
		st.Degradations = append(st.Degradations, routerapi.Degradation{Type: "NoReadyEndpoint",
			Message: fmt.Sprintf("none of %d endpoint(s) is ready", len(t.routes))})
	}
	if s.index != nil {
		is := s.index.Stats()
		st.Index = &routerapi.IndexStats{Keys: is.Keys, Entries: is.Entries, Sources: is.Sources,
			Predicted: is.Predicted, Evictions: is.Evictions}
	}
	st.Admission = s.admissionStatus(t)
	st.RouterQueue = s.queueStatus()
	st.Disaggregation = s.disaggregationStatus(t)
	return st
}

func (s *Server) handleStatus(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, s.Status())
}

// Autoscale builds the /v1/autoscale document.
func (s *Server) Autoscale() routerapi.Autoscale { return s.AutoscalePool("") }

// AutoscalePool builds the /v1/autoscale document of one pool of a disaggregated fleet (role
// prefill or decode; an engine without a role counts as decode), or of the whole fleet (role
// empty). Shed requests are the fleet's in every view: a shed request needed both pools.
func (s *Server) AutoscalePool(role string) routerapi.Autoscale {
	t := s.tbl.Load()
	now := s.now()
	var a routerapi.Autoscale
	for i := range t.routes {
		rt := &t.routes[i]
		if role != "" && (rt.ep.Role == discovery.RolePrefill) != (role == discovery.RolePrefill) {
			continue
		}
		ls := s.tracker.Stats(rt.name)
		if ok, _ := s.readiness(rt, ls.FailStreak, now); ok {
			a.Endpoints++
		}
		a.TokensInFlight += ls.TokensInFlight
		if ls.Scraped && rt.rank == 0 {
			a.WaitingRequests += int(ls.Metrics.Waiting)
		}
	}
	a.ShedRequests = s.recentShed()
	// Requests held in the router queue wait for the fleet as much as those in the engines'.
	a.WaitingRequests += a.ShedRequests + s.queued()
	return a
}

func (s *Server) handleAutoscale(w http.ResponseWriter, r *http.Request) {
	role := r.URL.Query().Get("role")
	if role != "" && !discovery.KnownRole(role) {
		writeError(w, http.StatusBadRequest, invalidRequest,
			fmt.Sprintf("role %q: want %s or %s", role, discovery.RolePrefill, discovery.RoleDecode), "role")
		return
	}
	writeJSON(w, s.AutoscalePool(role))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func itlModel(m *policy.LatencyModel) *routerapi.ITLModel {
	a, b := m.Params()
	return &routerapi.ITLModel{InterceptSeconds: a, SecondsPerStream: b,
		Observations: m.Observations(), Calibrated: m.Calibrated()}
}
