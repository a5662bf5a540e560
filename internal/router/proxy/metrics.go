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
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the router's own Prometheus metrics (kvrouter_ prefix).
type metrics struct {
	requests         *prometheus.CounterVec
	decisions        *prometheus.CounterVec
	decisionSeconds  prometheus.Histogram
	tokenizeSeconds  prometheus.Histogram
	tokenizeFailures prometheus.Counter
	retries          prometheus.Counter
	upstreamErrors   *prometheus.CounterVec
	ttft             prometheus.Histogram
	watchdogFired    *prometheus.CounterVec
	ejections        *prometheus.CounterVec
	tokenizeTimeouts *prometheus.CounterVec
	// children caches the per-request counters' children by their labels: WithLabelValues
	// hashes the labels and takes the vector's lock on every call, and these are on every
	// request. (A map under a read lock rather than a sync.Map, whose keys would be boxed.)
	childMu  sync.RWMutex
	children map[childKey]prometheus.Counter
}

type childKey struct {
	vec  *prometheus.CounterVec
	a, b string
}

// child is vec's child for labels a and b.
func (m *metrics) child(vec *prometheus.CounterVec, a, b string) prometheus.Counter {
	k := childKey{vec, a, b}
	m.childMu.RLock()
	c, ok := m.children[k]
	m.childMu.RUnlock()
	if ok {
		return c
	}
	c = vec.WithLabelValues(a, b)
	m.childMu.Lock()
	if m.children == nil {
		m.children = map[childKey]prometheus.Counter{}
	}
	m.children[k] = c
	m.childMu.Unlock()
	return c
}

// answered is the requests counter of an answer from endpoint with status.
func (m *metrics) answered(endpoint string, status int) prometheus.Counter {
	if status != 200 {
		return m.requests.WithLabelValues(endpoint, strconv.Itoa(status))
	}
	return m.child(m.requests, endpoint, "200")
}

// decided is the decisions counter of reason and shape.
func (m *metrics) decided(reason, shape string) prometheus.Counter {
	return m.child(m.decisions, reason, shape)
}

func newMetrics(s *Server, reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_requests_total",
			Help: "Requests answered, by endpoint (empty when the router answered itself) and HTTP status (499: client went away)."},
			[]string{"endpoint", "code"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_routing_decisions_total",
			Help: "Routing decisions by reason (prefix, saturated, load, round_robin, least_loaded, no_endpoint, admission_limit) and request shape."},
			[]string{"reason", "shape"}),
		decisionSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvrouter_routing_decision_seconds",
			Help:    "Time to decide where a tokenized request goes: index lookup and policy.",
			Buckets: prometheus.ExponentialBuckets(5e-6, 2.5, 12)}),
		tokenizeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvrouter_tokenize_seconds",
			Help:    "Time to tokenize a request on an engine (cache hits included).",
			Buckets: prometheus.ExponentialBuckets(1e-4, 2.5, 12)}),
		tokenizeFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_tokenize_failures_total",
			Help: "Requests routed by load alone because /tokenize failed or timed out."}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_retries_total",
			Help: "Requests moved to the next-best engine: the connection failed before the request was sent, or the engine sent nothing before it was judged hung."}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_upstream_errors_total",
			Help: "Engine failures by endpoint and stage (connect: before the request was sent; unresponsive: nothing back before the engine was judged hung; response: after the request was sent, before any byte; stream: after the first byte; gateway: in EPP mode, the gateway answered itself instead of the engine)."},
			[]string{"endpoint", "stage"}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvrouter_time_to_first_byte_seconds",
			Help:    "Time from dispatch to the engine's first response byte (the first token for streams).",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2.5, 14)}),
		watchdogFired: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_ttfb_watchdog_fired_total",
			Help: "Requests with no first byte by their TTFB watchdog deadline, by endpoint and verdict (hung: the endpoint sent nothing to anyone either and was ejected; alive: it answered others, the request waited on)."},
			[]string{"endpoint", "verdict"}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_endpoint_ejections_total",
			Help: "Endpoints taken out of routing as unresponsive, by endpoint and reason (ttfb-timeout, stream-stall, consecutive-failures)."},
			[]string{"endpoint", "reason"}),
		tokenizeTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_tokenize_timeouts_total",
			Help: "/tokenize calls that timed out, by engine (each also counts toward the engine's ejection and has /tokenize skip it for a while)."},
			[]string{"endpoint"}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.requests, m.decisions, m.decisionSeconds, m.tokenizeSeconds, m.tokenizeFailures,
		m.retries, m.upstreamErrors, m.ttft, m.watchdogFired, m.ejections, m.tokenizeTimeouts, &endpointCollector{s: s})
	return m
}

var (
	descInFlight = prometheus.NewDesc("kvrouter_endpoint_requests_in_flight",
		"Requests this router has in flight on the endpoint.", []string{"endpoint"}, nil)
	descQueued = prometheus.NewDesc("kvrouter_endpoint_queued_prefill_tokens",
		"Uncached prompt tokens this router sent to the endpoint that have no first token yet.", []string{"endpoint"}, nil)
	descReady = prometheus.NewDesc("kvrouter_endpoint_ready",
		"1 when the endpoint takes traffic.", []string{"endpoint"}, nil)
	descSuspect = prometheus.NewDesc("kvrouter_endpoint_suspect",
		"1 while the endpoint is ejected as unresponsive (it gets no new requests unless every endpoint is).", []string{"endpoint"}, nil)
	descRouted = prometheus.NewDesc("kvrouter_routed_prompt_tokens_total",
		"Prompt tokens of tokenized requests routed.", nil, nil)
	descCached = prometheus.NewDesc("kvrouter_routed_cached_prompt_tokens_total",
		"Prompt tokens the index said the chosen endpoint held (the router's predicted hits).", nil, nil)
)

// endpointCollector exposes per-endpoint state at scrape time.
type endpointCollector struct{ s *Server }

func (c *endpointCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descInFlight
	ch <- descQueued
	ch <- descReady
	ch <- descSuspect
	ch <- descRouted
	ch <- descCached
}

func (c *endpointCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	t := s.tbl.Load()
	now := s.now()
	for i := range t.routes {
		rt := &t.routes[i]
		st := s.tracker.Stats(rt.name)
		ready, _ := s.readiness(rt, st.FailStreak, now)
		r := 0.0
		if ready {
			r = 1
		}
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(st.InFlight), rt.name)
		ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(st.QueuedPrefillTokens), rt.name)
		ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, r, rt.name)
		suspect := 0.0
		if s.outliers.info(rt.name).ejected {
			suspect = 1
		}
		ch <- prometheus.MustNewConstMetric(descSuspect, prometheus.GaugeValue, suspect, rt.name)
	}
	ch <- prometheus.MustNewConstMetric(descRouted, prometheus.CounterValue, float64(s.counters.promptTokens.Load()))
	ch <- prometheus.MustNewConstMetric(descCached, prometheus.CounterValue, float64(s.counters.cachedTokens.Load()))
}
