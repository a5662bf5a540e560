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

// Package proxy is the router's data plane: an OpenAI-compatible reverse proxy that tokenizes
// each request on an engine, looks its prefix up in the index, asks the policy for an engine,
// and streams the answer back, plus the router's own endpoints (/health, /ready, /metrics,
// /v1/models, /v1/status, /v1/autoscale).
package proxy

import (
	"context"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/kvstream"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/router/tokenize"
)

// Index is what the proxy needs of the prefix index (*kvindex.Index implements it).
type Index interface {
	// The request path computes a request's content keys once (kvindex.RequestKeys) and uses
	// them for the lookup and for the prediction: hashing a 100K-token prompt twice is waste.
	AppendLookupKeys(dst []kvindex.EndpointMatch, keys []kvindex.Key) []kvindex.EndpointMatch
	// A dispatched request's blocks are predicted on its endpoint until it starts there (its
	// first byte comes back) or ends, then settled: see kvindex.PredictPendingKeys.
	PredictPendingKeys(src kvindex.SourceID, keys []kvindex.Key)
	SettleKeys(src kvindex.SourceID, keys []kvindex.Key)
	RemoveEndpoint(endpoint string)
	Stats() kvindex.Stats
}

// StreamStatus reports event-stream health (*kvstream.Manager implements it).
type StreamStatus interface {
	Status() []kvstream.SourceStatus
}

// Config configures a Server.
type Config struct {
	Policy policy.Config
	// Model is the served model name the router accepts; empty accepts what the engines list
	// on /v1/models. LoRA adapters the engines list are accepted either way.
	Model string
	// SessionHeader names the request header whose value breaks routing ties per session.
	SessionHeader string
	// MaxBodyBytes limits a request body (413 beyond). Default 16 MiB.
	MaxBodyBytes int64
	// BodyReadTimeout bounds reading a request's body (408 beyond), so that slow-body clients
	// cannot hold handlers indefinitely. Default 1 min.
	BodyReadTimeout time.Duration
	// ReportModeFull injects vllm_xargs.kv_cache_report_mode=full into every request, so that
	// engines re-announce prefix hits as events and the index learns about blocks it missed.
	ReportModeFull bool
	// UpstreamHeaderTimeout bounds the wait for an engine's response headers (a non-streaming
	// answer arrives whole, so this covers a full generation). Default 10 min.
	UpstreamHeaderTimeout time.Duration
	// StreamIdleTimeout aborts a response that sends nothing for this long. Default 5 min.
	StreamIdleTimeout time.Duration
	// DialTimeout bounds connecting to an engine (a refused or silent engine is retried on the
	// next-best one). Default 2 s.
	DialTimeout time.Duration
	// RetryAfter is the Retry-After (seconds) of a 503. Default 1.
	RetryAfter int
	// DownFor is how long an engine that refused a connection is kept out of routing before it
	// is tried again. Default 2 s.
	DownFor time.Duration
	// ScrapeFailuresUnready: this many consecutive failed /metrics scrapes make an endpoint
	// unready until one succeeds. Default 3; negative disables.
	ScrapeFailuresUnready int
	// Tokenize timeout and cache budget in tokens (see package tokenize). Defaults 2 s, 4M
	// tokens (16 MiB); negative disables the cache.
	TokenizeTimeout time.Duration
	TokenizeCache   int
	// Auth: the keys clients must present and the key the engines require (see auth.go).
	Auth Auth
}

func (c Config) withDefaults() Config {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 16 << 20
	}
	if c.BodyReadTimeout <= 0 {
		c.BodyReadTimeout = time.Minute
	}
	if c.UpstreamHeaderTimeout <= 0 {
		c.UpstreamHeaderTimeout = 10 * time.Minute
	}
	if c.StreamIdleTimeout <= 0 {
		c.StreamIdleTimeout = 5 * time.Minute
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = 1
	}
	if c.DownFor <= 0 {
		c.DownFor = 2 * time.Second
	}
	if c.ScrapeFailuresUnready == 0 {
		c.ScrapeFailuresUnready = 3
	}
	if c.TokenizeTimeout <= 0 {
		c.TokenizeTimeout = 2 * time.Second
	}
	if c.TokenizeCache == 0 {
		c.TokenizeCache = 4 << 20
	}
	return c
}

// route is one routable unit: an engine, or one data-parallel rank of an engine.
type route struct {
	name  string // policy name: the endpoint name, or name/dpN for rank N of a DP engine
	ep    discovery.Endpoint
	rank  int
	ranks int
	src   kvindex.SourceID
}

// table is an immutable snapshot of the routes, swapped whole on every discovery update.
type table struct {
	routes []route // sorted by name
	names  []string
	bySrc  map[kvindex.SourceID]int
	byName map[string]int
}

// Server is the router's HTTP data plane.
type Server struct {
	cfg     Config
	log     logr.Logger
	index   Index        // may be nil: route by load only
	streams StreamStatus // may be nil
	tracker *loadsignal.Tracker
	tok     *tokenize.Client
	client  *http.Client

	policyMu sync.Mutex
	policy   *policy.Policy

	tbl atomic.Pointer[table]

	healthMu  sync.Mutex
	downUntil map[string]time.Time

	models *modelCache

	tokRR    atomic.Uint64
	counters counters
	routed   routedWindowSamples
	metrics  *metrics

	degMu        sync.Mutex
	tokFailSince time.Time // start of the current run of tokenizer failures (zero: healthy)
	tokLastErr   string
	tokLastFail  time.Time

	now func() time.Time
}

type counters struct {
	requests, promptTokens, cachedTokens, tokFailures, retries, rejected atomic.Uint64
	decMu                                                                sync.Mutex
	decisions                                                            map[string]uint64
}

// New returns a Server. index and streams may be nil (no KV events: routing by load only).
// reg receives the router's metrics.
func New(cfg Config, log logr.Logger, index Index, streams StreamStatus, tracker *loadsignal.Tracker, reg prometheus.Registerer) *Server {
	cfg = cfg.withDefaults()
	transport := &http.Transport{
		Proxy:                 nil, // engines are reached directly, never through an environment proxy
		DialContext:           (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: cfg.UpstreamHeaderTimeout,
		DisableCompression:    true, // pass bytes through as the engine sent them
		ExpectContinueTimeout: 0,
	}
	s := &Server{
		cfg:       cfg,
		log:       log,
		index:     index,
		streams:   streams,
		tracker:   tracker,
		client:    &http.Client{Transport: transport},
		policy:    policy.New(cfg.Policy),
		downUntil: make(map[string]time.Time),
		now:       time.Now,
	}
	s.counters.decisions = make(map[string]uint64)
	// Tokenize calls are short; they get their own pool so a slow stream never starves them.
	s.tok = tokenize.New(&http.Client{Transport: transport.Clone()}, cfg.TokenizeTimeout, cfg.TokenizeCache)
	s.models = newModelCache(s)
	s.tbl.Store(&table{bySrc: map[kvindex.SourceID]int{}, byName: map[string]int{}})
	s.metrics = newMetrics(s, reg)
	return s
}

// HTTPClient is the pooled client used to reach engines (the scraper shares its pool).
func (s *Server) HTTPClient() *http.Client { return s.client }

// SetEndpoints replaces the endpoint set (from discovery). Removed endpoints' index entries,
// load accounting and latency models are dropped; their in-flight requests finish normally.
func (s *Server) SetEndpoints(eps []discovery.Endpoint) {
	t := &table{bySrc: map[kvindex.SourceID]int{}, byName: map[string]int{}}
	for _, e := range eps {
		n := e.Ranks()
		for r := 0; r < n; r++ {
			name := e.Name
			if n > 1 {
				name = e.Name + "/dp" + strconv.Itoa(r)
			}
			t.routes = append(t.routes, route{name: name, ep: e, rank: r, ranks: n,
				src: kvindex.SourceID{Endpoint: e.Name, Rank: r}})
		}
	}
	sort.Slice(t.routes, func(i, j int) bool { return t.routes[i].name < t.routes[j].name })
	for i, r := range t.routes {
		t.names = append(t.names, r.name)
		t.bySrc[r.src] = i
		t.byName[r.name] = i
	}
	old := s.tbl.Swap(t)
	gone := map[string]bool{}
	for _, r := range old.routes {
		if _, ok := t.byName[r.name]; !ok {
			s.tracker.Remove(r.name)
			s.policyMu.Lock()
			s.policy.Forget(r.name)
			s.policyMu.Unlock()
			gone[r.ep.Name] = true
		}
	}
	for name := range gone {
		stillThere := false
		for _, r := range t.routes {
			if r.ep.Name == name {
				stillThere = true
				break
			}
		}
		if !stillThere && s.index != nil {
			s.index.RemoveEndpoint(name)
		}
	}
	s.log.Info("endpoints updated", "routes", len(t.routes), "removed", len(gone))
	s.models.invalidate()
}

// ScrapeTargets lists every route for the metrics scraper. A DP engine's ranks share one
// /metrics page, so each rank is scraped under its own name from the same URL; the page's
// numbers then describe the whole pod.
func (s *Server) ScrapeTargets() []loadsignal.Target {
	t := s.tbl.Load()
	out := make([]loadsignal.Target, 0, len(t.routes))
	for _, r := range t.routes {
		out = append(out, loadsignal.Target{Name: r.name, URL: r.ep.URL})
	}
	return out
}

// readiness says whether a route takes traffic now, and if not, why.
func (s *Server) readiness(r *route, failStreak int, now time.Time) (bool, string) {
	if !r.ep.Ready {
		return false, "discovery"
	}
	s.healthMu.Lock()
	until, down := s.downUntil[r.ep.Name]
	s.healthMu.Unlock()
	if down && now.Before(until) {
		return false, "connect-failures"
	}
	if s.cfg.ScrapeFailuresUnready > 0 && failStreak >= s.cfg.ScrapeFailuresUnready {
		return false, "scrape-failures"
	}
	return true, ""
}

// markDown keeps an engine that refused a connection out of routing for DownFor.
// streams is an endpoint's requests in flight: this router's and, from the last scrape, others'.
func (s *Server) endpointStreams(endpoint string) int {
	st := s.tracker.Stats(endpoint)
	return st.InFlight + st.RemoteInFlight
}

func (s *Server) markDown(engine string) {
	s.healthMu.Lock()
	s.downUntil[engine] = s.now().Add(s.cfg.DownFor)
	s.healthMu.Unlock()
}

// Run runs the background work of the server (model list refresh, snapshots of the routing
// counters for the windowed predicted hit rate) until ctx is done.
func (s *Server) Run(ctx context.Context) {
	go s.sampleRouted(ctx)
	s.models.run(ctx)
}
