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

package epp

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a request through the picker, as kvrouter_epp_requests_total labels them.
const (
	outcomeRouted      = "routed"      // the gateway was told where to send it
	outcomeInvalid     = "invalid"     // answered 4xx: malformed, unknown model, too large, no key...
	outcomeShed        = "shed"        // answered 429 by admission control
	outcomeUnavailable = "unavailable" // answered 503: no (eligible) engine ready
	outcomeError       = "error"       // answered 5xx otherwise: a fault of the router's, a misconfigured gateway
	outcomeCancelled   = "cancelled"   // the stream ended before a decision
)

var outcomes = []string{outcomeRouted, outcomeInvalid, outcomeShed, outcomeUnavailable, outcomeError, outcomeCancelled}

// outcomeOf labels a refusal by its status.
func outcomeOf(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return outcomeShed
	case status == http.StatusServiceUnavailable:
		return outcomeUnavailable
	case status >= 400 && status < 500:
		return outcomeInvalid
	}
	return outcomeError
}

type metrics struct {
	requests        *prometheus.CounterVec
	decisionSeconds prometheus.Histogram
	streams         prometheus.Gauge
	servedElsewhere prometheus.Counter
	aborted         prometheus.Counter
	unobserved      prometheus.Counter
	gatewayReplies  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_epp_requests_total",
			Help: "Requests the endpoint picker decided on, by outcome (routed, invalid, shed, unavailable, error, cancelled)."},
			[]string{"outcome"}),
		decisionSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvrouter_epp_decision_seconds",
			Help:    "Time from the request's last message the decision needed (its body's end, or its headers) to the answer sent to the gateway: tokenization, lookup, policy and admission.",
			Buckets: prometheus.ExponentialBuckets(5e-5, 2.5, 14)}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvrouter_epp_streams_in_flight",
			Help: "ext_proc streams open: one per request the gateway has in flight through the picker."}),
		servedElsewhere: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_epp_served_elsewhere_total",
			Help: "Requests the gateway served on another engine than the one picked (it went down the fallbacks); their accounting moved there."}),
		aborted: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_epp_responses_aborted_total",
			Help: "Routed requests whose stream ended before their response did (the client or the gateway went away); their accounting was released."}),
		unobserved: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_epp_responses_unobserved_total",
			Help: "Routed requests whose response the gateway never sent the picker before closing the stream (its ext_proc filter skips the response): completed without a status or timing."}),
		gatewayReplies: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_epp_gateway_replies_total",
			Help: "Routed requests the gateway answered itself (no served endpoint on the response: it could not reach the engine): counted as upstream errors of the picked engine, not as its answers."}),
	}
	for _, o := range outcomes {
		m.requests.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.decisionSeconds, m.streams, m.servedElsewhere, m.aborted, m.unobserved, m.gatewayReplies)
	}
	return m
}
