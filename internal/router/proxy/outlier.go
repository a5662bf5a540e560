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
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/internal/router/tokenize"
)

// Outlier detection, in the manner of Envoy's: an engine that accepts connections but stops
// answering (a stopped process, a wedged GPU, a full accept queue) refuses nothing, so the
// connect-failure mark-down never sees it, and a scrape-failure streak takes seconds and
// strands the requests already there. Two signals eject a route instead:
//
//   - the watchdog's verdict (watchdog.go): a request waited past its deadline for a first byte,
//     or a stream stalled past its allowance, while the route sent nothing at all to anyone;
//   - consecutive gateway failures: the connection reset after the request was written, a
//     stream cut, a /tokenize timeout, that many in a row with no answer in between.
//
// An ejected route takes no new requests (unless every route is ejected: better a suspect
// engine than none), its waiting requests move to the next-best engine (if there is one), and
// its silent streams end with an error. It stays out for a base time that doubles with each
// ejection following soon after the last (flowcontrol.Backoff), up to a cap, and then until a
// probe, GET /health, answers: a stopped process is back as soon as it runs again. Back, it takes
// one request at a time until it answers one, so that a process whose HTTP server answers while
// its engine does not strands one request, and is ejected again, for longer each time.

// Ejection reasons, as /v1/status and kvrouter_endpoint_ejections_total show them.
const (
	ejectTTFB        = "ttfb-timeout"
	ejectStall       = "stream-stall"
	ejectConsecutive = "consecutive-failures"
)

type outlierConfig struct {
	consecutive   int // gateway failures in a row that eject (<= 0: never)
	base, max     time.Duration
	probeInterval time.Duration
	probeTimeout  time.Duration
}

// outliers holds every route's health. Safe for concurrent use.
type outliers struct {
	cfg   outlierConfig
	clock clock.Clock
	// probe asks the engine at url whether it answers (nil error: it does).
	probe func(ctx context.Context, url string) error
	// ejected and returned report transitions (metrics, logs); called without the lock.
	ejected  func(route, reason string, until time.Duration)
	returned func(route string, out time.Duration)

	mu       sync.Mutex
	routes   map[string]*health
	backoff  *flowcontrol.Backoff // ejection time, by route
	tokUntil map[string]time.Time // engines /tokenize skips until then (or until a call answers)
	// tokPending holds the start of every /tokenize call in flight, by engine and call.
	tokPending map[string]map[uint64]time.Time
	tokSeq     uint64
}

// health is one route's state. lastByte is written on every relayed chunk, so it is an atomic
// outside the lock.
type health struct {
	name, url string
	// lastByte is when the route last sent a response byte to anyone (Unix ns; 0: never).
	lastByte atomic.Int64

	consecutive int
	ejected     bool
	reason      string
	since       time.Time
	until       time.Time // no probe before then
	probing     bool
	ejections   uint64
	watchers    map[*watcher]struct{}
	// returned is when a probe brought the route back (Unix ns; 0: it was not ejected, or it has
	// answered a request since): until it sends a byte, it gets one request at a time.
	returned int64
}

// watcher is one request in flight on a route, told when the route is ejected.
type watcher struct{ fn func() }

// newOutliers returns the server's outlier detection, with its metrics and logs.
func (s *Server) newOutliers() *outliers {
	c := &s.cfg
	o := newOutliers(outlierConfig{consecutive: c.OutlierConsecutiveFailures, base: c.OutlierEjectionBase,
		max: c.OutlierEjectionMax, probeInterval: c.OutlierProbeInterval, probeTimeout: c.OutlierProbeTimeout},
		clock.RealClock{})
	o.probe = probeHealth(s.client)
	o.ejected = func(route, reason string, d time.Duration) {
		kind, _, _ := strings.Cut(reason, " (")
		s.metrics.ejections.WithLabelValues(route, kind).Inc()
		s.log.Info("endpoint ejected as unresponsive", "endpoint", route, "reason", reason, "for", d.String())
	}
	o.returned = func(route string, out time.Duration) {
		s.log.Info("ejected endpoint answers again; back in routing", "endpoint", route, "after", out.String())
	}
	return o
}

func newOutliers(cfg outlierConfig, clk clock.Clock) *outliers {
	o := &outliers{cfg: cfg, clock: clk, routes: map[string]*health{}, tokUntil: map[string]time.Time{},
		tokPending: map[string]map[uint64]time.Time{},
		backoff:    flowcontrol.NewBackOff(cfg.base, cfg.max),
		ejected:    func(string, string, time.Duration) {}, returned: func(string, time.Duration) {}}
	o.backoff.Clock = clk
	return o
}

// route returns name's health, created on first use.
func (o *outliers) route(name, url string) *health {
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.routes[name]
	if h == nil || h.url != url {
		h = &health{name: name, url: url, watchers: map[*watcher]struct{}{}}
		o.routes[name] = h
	}
	return h
}

// retain forgets the routes and engines not in the sets (they left the fleet: a namesake that
// comes back is a new process with a clean record).
func (o *outliers) retain(routes, engines map[string]bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for name := range o.routes {
		if !routes[name] {
			delete(o.routes, name)
			o.backoff.DeleteEntry(name)
		}
	}
	for e := range o.tokUntil {
		if !engines[e] {
			delete(o.tokUntil, e)
		}
	}
	for e, p := range o.tokPending {
		if !engines[e] && len(p) == 0 {
			delete(o.tokPending, e)
		}
	}
}

// touch records a response byte from h's route.
func (h *health) touch(now time.Time) { h.lastByte.Store(now.UnixNano()) }

// success records an answer from h's route: its failure streak ends.
func (o *outliers) success(h *health) {
	o.mu.Lock()
	h.consecutive = 0
	o.mu.Unlock()
}

// failure records a gateway failure of h's route; enough in a row eject it.
func (o *outliers) failure(h *health, what string) {
	o.mu.Lock()
	h.consecutive++
	if o.cfg.consecutive <= 0 || h.consecutive < o.cfg.consecutive {
		o.mu.Unlock()
		return
	}
	o.ejectLocked(h, ejectConsecutive+" ("+what+")")
}

// eject takes h's route out of routing now (the watchdog's verdict). A route already out
// stays out on its current terms.
func (o *outliers) eject(h *health, reason string) {
	o.mu.Lock()
	o.ejectLocked(h, reason)
}

// ejectLocked ejects h and unlocks o; then it tells h's watchers.
func (o *outliers) ejectLocked(h *health, reason string) {
	if h.ejected || o.routes[h.name] != h {
		o.mu.Unlock()
		return
	}
	now := o.clock.Now()
	o.backoff.Next(h.name, now)
	d := o.backoff.Get(h.name)
	h.ejected, h.reason, h.since, h.until, h.probing, h.returned = true, reason, now, now.Add(d), false, 0
	h.ejections++
	h.consecutive = 0
	fns := make([]func(), 0, len(h.watchers))
	for w := range h.watchers {
		fns = append(fns, w.fn)
	}
	o.mu.Unlock()
	o.ejected(h.name, reason, d)
	for _, fn := range fns {
		fn()
	}
}

// isEjected reports whether the route is out of routing. Once its time is up it starts a probe
// (one at a time): routing decisions and status reads are what drive the return, so an idle
// router probes nothing.
func (o *outliers) isEjected(name string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.routes[name]
	if h == nil || !h.ejected {
		return false
	}
	if !h.probing && !o.clock.Now().Before(h.until) {
		h.probing = true
		go o.runProbe(h)
	}
	return true
}

// onProbation reports whether the route is back from an ejection and has not sent a byte since:
// its /health answered, but whether it serves is known only once a request gets an answer, so
// it takes one request at a time until then, and a route that is ejected again strands one
// request, not every request its prefixes attract.
func (o *outliers) onProbation(name string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.routes[name]
	if h == nil || h.returned == 0 {
		return false
	}
	if h.lastByte.Load() >= h.returned {
		h.returned = 0
		return false
	}
	return true
}

// ejectedNow is isEjected without starting a probe.
func (o *outliers) ejectedNow(h *health) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return h.ejected
}

func (o *outliers) runProbe(h *health) {
	ctx, cancel := context.WithTimeout(context.Background(), o.cfg.probeTimeout)
	err := o.probe(ctx, h.url)
	cancel()
	o.mu.Lock()
	h.probing = false
	if !h.ejected {
		o.mu.Unlock()
		return
	}
	now := o.clock.Now()
	if err != nil {
		h.until = now.Add(o.cfg.probeInterval)
		o.mu.Unlock()
		return
	}
	h.ejected = false
	h.returned = now.UnixNano()
	out := now.Sub(h.since)
	o.mu.Unlock()
	o.returned(h.name, out)
}

// suspectInfo is a route's ejection as /v1/status shows it.
type suspectInfo struct {
	ejected      bool
	reason       string
	since, until time.Time
	ejections    uint64
}

func (o *outliers) info(name string) suspectInfo {
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.routes[name]
	if h == nil {
		return suspectInfo{}
	}
	return suspectInfo{ejected: h.ejected, reason: h.reason, since: h.since, until: h.until, ejections: h.ejections}
}

// watch registers fn to be called when h's route is ejected; unwatch removes it.
func (o *outliers) watch(h *health, fn func()) *watcher {
	w := &watcher{fn: fn}
	o.mu.Lock()
	h.watchers[w] = struct{}{}
	o.mu.Unlock()
	return w
}

func (o *outliers) unwatch(h *health, w *watcher) {
	o.mu.Lock()
	delete(h.watchers, w)
	o.mu.Unlock()
}

// tokenizeTimedOut records a /tokenize timeout on engine: /tokenize skips it for the base
// ejection time, and then sends it one call at a time until one answers (so its backoff is the
// call timeout itself, paid by one request at a time). It reports whether this timeout was news
// (calls sent before the skip began time out after it, but are the same timeout).
func (o *outliers) tokenizeTimedOut(engine string) (news bool, skip time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.clock.Now()
	if now.Before(o.tokUntil[engine]) {
		return false, 0
	}
	o.tokUntil[engine] = now.Add(o.cfg.base)
	return true, o.cfg.base
}

// tokenizeSkips reports whether /tokenize should avoid engine now: during its skip, and after it
// while a call to it is in flight and none has answered since the timeout (one call at a time
// finds out whether it answers again).
func (o *outliers) tokenizeSkips(engine string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	until, ok := o.tokUntil[engine]
	return ok && (o.clock.Now().Before(until) || len(o.tokPending[engine]) > 0)
}

// tokenizeStarted records a /tokenize call to engine starting at now; the function it returns
// records its end.
func (o *outliers) tokenizeStarted(engine string, now time.Time) func() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.tokSeq++
	id := o.tokSeq
	p := o.tokPending[engine]
	if p == nil {
		p = map[uint64]time.Time{}
		o.tokPending[engine] = p
	}
	p[id] = now
	return func() {
		o.mu.Lock()
		delete(p, id)
		o.mu.Unlock()
	}
}

// tokenizeSlow reports whether engine has a /tokenize call in flight for longer than after: a
// sign of a stalled tokenizer well before the call's timeout ends it, so that the requests behind
// it go elsewhere rather than each wait the whole timeout.
func (o *outliers) tokenizeSlow(engine string, now time.Time, after time.Duration) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, at := range o.tokPending[engine] {
		if now.Sub(at) > after {
			return true
		}
	}
	return false
}

// tokenizeOK records a /tokenize answer from engine: its timeouts are forgotten.
func (o *outliers) tokenizeOK(engine string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.tokUntil, engine)
}

// tokenizeCalled hears the outcome of every /tokenize call that reached an engine. A timeout has
// /tokenize skip the engine for a while and counts toward the ejection of its routes; an answer
// ends the skip.
func (s *Server) tokenizeCalled(baseURL string, err error) {
	t := s.tbl.Load()
	var routes []*route
	for i := range t.routes {
		if t.routes[i].ep.URL == baseURL {
			routes = append(routes, &t.routes[i])
		}
	}
	if len(routes) == 0 {
		return // the engine left meanwhile
	}
	engine := routes[0].ep.Name
	if err == nil {
		s.outliers.tokenizeOK(engine)
		return
	}
	if !tokenize.IsTimeout(err) {
		return
	}
	s.metrics.tokenizeTimeouts.WithLabelValues(engine).Inc()
	news, skip := s.outliers.tokenizeTimedOut(engine)
	if !news {
		return // calls sent before the first one timed out
	}
	s.log.Info("engine's /tokenize timed out; tokenizing on the others for a while", "endpoint", engine, "for", skip.String())
	for _, r := range routes {
		s.outliers.failure(s.outliers.route(r.name, r.ep.URL), "tokenize timeout")
	}
}

// probeHealth is the probe of an ejected engine: GET /health, which vLLM and vllm-sim serve
// without a key. Any answer below 500 shows a process that runs; a 5xx is an engine that
// says it is unwell.
func probeHealth(c *http.Client) func(ctx context.Context, url string) error {
	return func(ctx context.Context, url string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			return fmt.Errorf("health probe: %s", resp.Status)
		}
		return nil
	}
}
