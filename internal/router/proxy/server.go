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
// and streams the answer back, plus the router's own endpoints: /health, /ready and /v1/models on
// the public handler, /metrics, /v1/status and /v1/autoscale on the admin handler.
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

	"github.com/kvrouter/kvrouter/internal/router/admission"
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
	// ReadyGate, when set, holds /ready at 503 while it answers false, with its reason: the
	// router uses it so that a restarted replica takes no traffic before its index has replayed
	// the engines' buffers (a cold index routes every prompt as if nothing were cached).
	ReadyGate func() (ready bool, reason string)
	// TTFBWatchdogFactor, TTFBWatchdogFloor and TTFBWatchdogCap set the time-to-first-byte
	// watchdog (watchdog.go): a request with no byte from its engine within Factor × the
	// policy's predicted TTFT for it (a whole answer: plus Factor × its expected decode time),
	// but at least Floor and at most Cap, has its engine ejected if that engine sent nothing to
	// anyone meanwhile, and moves to the next-best engine. Defaults 4, 2 s, 1 min; a negative
	// factor turns the watchdog off.
	TTFBWatchdogFactor float64
	TTFBWatchdogFloor  time.Duration
	TTFBWatchdogCap    time.Duration
	// OutlierConsecutiveFailures: this many failures of an engine in a row after it accepted
	// the request (a reset before the answer, a stream cut, a /tokenize timeout) eject it.
	// Default 5; negative: never.
	OutlierConsecutiveFailures int
	// OutlierEjectionBase and OutlierEjectionMax: an ejected engine is kept out for Base,
	// doubled for each ejection that follows within 2 × Max of the last, at most Max, and
	// after that until a probe (GET /health) answers. Defaults 2 s and 1 min. /tokenize skips
	// an engine whose /tokenize timed out on the same terms.
	OutlierEjectionBase time.Duration
	OutlierEjectionMax  time.Duration
	// OutlierProbeInterval is the wait between failed probes (default 500 ms);
	// OutlierProbeTimeout bounds one (default 1 s).
	OutlierProbeInterval time.Duration
	OutlierProbeTimeout  time.Duration
	// Admission bounds the engines' queues: beyond them requests get a fast 429 (see package
	// admission; the zero value is its defaults). DisableAdmission turns it off: every request
	// is forwarded and waits in the engines' queues.
	Admission        admission.Config
	DisableAdmission bool
	// QueueCapacity bounds the router queue (queue.go): the requests that wait in the router,
	// rather than in an engine's queue, while the policy holds them (policy.Config.HoldAfter).
	// 0: no router queue (every request is routed at once). QueueMaxWait is the longest one
	// waits before it is shed (default DefaultQueueMaxWait), at most half the admission TTFT
	// budget (Admission.TTFTBound × TailHeadroom) when admission control is on.
	QueueCapacity int
	QueueMaxWait  time.Duration
	// Tokenizer is TokenizerAuto (default), TokenizerLocal or TokenizerEngine: whether requests
	// are tokenized in process once SetLocalTokenizer hands the router a tokenizer
	// (localtokens.go). TokenizerVerifyFraction of the requests tokenized in process are also
	// tokenized on an engine, off the request path, and compared. Default 0.01; negative: none.
	Tokenizer               string
	TokenizerVerifyFraction float64
	// PD configures disaggregated prefill/decode (pd.go); it matters only in a fleet with
	// prefill-role engines.
	PD PDConfig
	// DestinationPort, when not 0, is the port Pick names each engine on (its own host): where
	// the gateway reaches it, the pd-sidecar in front of it in a split fleet, rather than the
	// engine's own port, which the router keeps using for everything else (metrics, KV events,
	// tokenization, and the prefill engine it names in PrefillerHeader). The gateway's subset
	// hint and served address are read on that port too.
	DestinationPort int
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
	if c.TTFBWatchdogFactor == 0 {
		c.TTFBWatchdogFactor = 4
	}
	if c.TTFBWatchdogFloor <= 0 {
		// Below the deadline the policy prices, a margin for what it cannot see: an engine's
		// tokenizer or scheduler slower than its fit, a first request after an idle spell.
		c.TTFBWatchdogFloor = 2 * time.Second
	}
	if c.TTFBWatchdogCap <= 0 {
		c.TTFBWatchdogCap = time.Minute
	}
	c.TTFBWatchdogCap = max(c.TTFBWatchdogCap, c.TTFBWatchdogFloor)
	if c.OutlierConsecutiveFailures == 0 {
		c.OutlierConsecutiveFailures = 5
	}
	if c.OutlierEjectionBase <= 0 {
		c.OutlierEjectionBase = 2 * time.Second
	}
	if c.OutlierEjectionMax <= 0 {
		c.OutlierEjectionMax = time.Minute
	}
	c.OutlierEjectionMax = max(c.OutlierEjectionMax, c.OutlierEjectionBase)
	if c.OutlierProbeInterval <= 0 {
		c.OutlierProbeInterval = 500 * time.Millisecond
	}
	if c.OutlierProbeTimeout <= 0 {
		c.OutlierProbeTimeout = time.Second
	}
	if c.Tokenizer == "" {
		c.Tokenizer = TokenizerAuto
	}
	if c.TokenizerVerifyFraction == 0 {
		c.TokenizerVerifyFraction = 0.01
	}
	if c.QueueMaxWait <= 0 {
		c.QueueMaxWait = DefaultQueueMaxWait
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
	// hostport is ep.URL's host:port, where the router itself reaches the engine; a DP
	// engine's ranks share it.
	hostport string
	// dest is the route's address as the gateway names it (EPP mode): hostport, or its host on
	// Config.DestinationPort.
	dest string
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
	local   *localTokens // the in-process tokenizer, when one is loaded (localtokens.go)
	client  *http.Client

	policyMu sync.Mutex
	policy   *policy.Policy

	tbl atomic.Pointer[table]

	healthMu  sync.Mutex
	downUntil map[string]time.Time
	// outliers are the routes that accept connections but stopped answering (outlier.go).
	outliers *outliers

	models *modelCache

	tokRR    atomic.Uint64
	loadRR   atomic.Uint64 // turns among equally loaded engines for requests placed by load (Pick)
	counters counters
	routed   routedWindowSamples
	metrics  *metrics

	pd *pdState

	admit      *admission.Controller // nil: admission control off
	shedMetric *prometheus.CounterVec

	rq *routerQueue // nil: no router queue
	// hold is the router queue's gate (holdByPolicy; tests replace it).
	hold func([]policy.Endpoint) bool

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
	var admit *admission.Controller
	if !cfg.DisableAdmission {
		admit = admission.New(cfg.Admission, time.Now())
		if b := admit.Config().TTFTBound; b > 0 && cfg.Policy.TargetTTFT == 0 {
			// A prefix holder predicted past the bound would have the request shed; any
			// faster engine is better than that, whatever the recompute costs.
			cfg.Policy.TargetTTFT = b.Seconds()
		}
	}
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
	// An engine's adapters are kept across failed scrapes while it still takes requests.
	tracker.SetLoRAForgetAfter(cfg.ScrapeFailuresUnready)
	// Tokenize calls are short; they get their own pool so a slow stream never starves them.
	s.tok = tokenize.New(&http.Client{Transport: transport.Clone()}, cfg.TokenizeTimeout, cfg.TokenizeCache)
	s.tok.OnCall(s.tokenizeCalled)
	s.local = newLocalTokens(cfg, reg)
	s.models = newModelCache(s)
	s.tbl.Store(&table{bySrc: map[kvindex.SourceID]int{}, byName: map[string]int{}})
	s.metrics = newMetrics(s, reg)
	s.pd = newPDState(cfg, reg)
	s.outliers = s.newOutliers()
	s.admit, s.shedMetric = admit, newShedMetric(reg)
	s.hold = s.holdByPolicy
	s.rq = newRouterQueue(s, reg)
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
		hp := urlHostPort(e.URL)
		for r := 0; r < n; r++ {
			name := e.Name
			if n > 1 {
				name = e.Name + "/dp" + strconv.Itoa(r)
			}
			t.routes = append(t.routes, route{name: name, ep: e, rank: r, ranks: n,
				src: kvindex.SourceID{Endpoint: e.Name, Rank: r}, hostport: hp, dest: s.destination(hp)})
		}
	}
	sort.Slice(t.routes, func(i, j int) bool { return t.routes[i].name < t.routes[j].name })
	for i, r := range t.routes {
		t.names = append(t.names, r.name)
		t.bySrc[r.src] = i
		t.byName[r.name] = i
	}
	old := s.tbl.Swap(t)
	routes, engines := map[string]bool{}, map[string]bool{}
	for _, r := range t.routes {
		routes[r.name], engines[r.ep.Name] = true, true
	}
	s.outliers.retain(routes, engines)
	gone := map[string]bool{}
	for _, r := range old.routes {
		if _, ok := t.byName[r.name]; !ok {
			s.tracker.Remove(r.name)
			s.policyMu.Lock()
			s.policy.Forget(r.name)
			s.pd.est.Forget(r.name)
			s.policyMu.Unlock()
			if s.admit != nil {
				s.admit.Forget(r.name)
			}
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

// readiness says whether a route takes traffic now, and if not, why. An ejected route does not,
// unless no route that is otherwise ready is free of suspicion: then suspects are all there is.
func (s *Server) readiness(r *route, failStreak int, now time.Time) (bool, string) {
	if ok, why := s.baseReadiness(r, failStreak, now); !ok {
		return false, why
	}
	if s.outliers.isEjected(r.name) && s.anotherRoutable(r, now) {
		return false, "suspect"
	}
	if s.outliers.onProbation(r.name) && s.tracker.Stats(r.name).InFlight > 0 && s.anotherRoutable(r, now) {
		return false, "probation"
	}
	return true, ""
}

// anotherRoutable reports whether some route other than r is ready and not ejected. It runs
// only while r is ejected, which is rare, so it pays for a scan of the table.
func (s *Server) anotherRoutable(r *route, now time.Time) bool {
	t := s.tbl.Load()
	for i := range t.routes {
		o := &t.routes[i]
		if o.name == r.name || s.outliers.isEjected(o.name) {
			continue
		}
		if ok, _ := s.baseReadiness(o, s.tracker.Stats(o.name).FailStreak, now); ok {
			return true
		}
	}
	return false
}

// baseReadiness is readiness without the outlier ejections.
func (s *Server) baseReadiness(r *route, failStreak int, now time.Time) (bool, string) {
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
// counters for the windowed predicted hit rate, the router queue's ticker) until ctx is done.
func (s *Server) Run(ctx context.Context) {
	go s.sampleRouted(ctx)
	if s.rq != nil {
		go s.rq.run(ctx)
	}
	s.models.run(ctx)
}
