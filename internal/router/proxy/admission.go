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
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/router/admission"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/routerapi"
)

// PriorityHeader sets a request's admission priority: "interactive" (the default) or "batch",
// which is shed first (see package admission).
const PriorityHeader = "X-Kvrouter-Priority"

// rateLimited is the error type of a shed request. OpenAI sends this string as the code of its
// 429s; the router's errors carry the HTTP status as the code (as vLLM's do), so it goes in the
// type, where the router's other errors name their kind too.
const rateLimited = "rate_limit_exceeded"

func newShedMetric(reg prometheus.Registerer) *prometheus.CounterVec {
	m := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_requests_shed_total",
		Help: "Requests answered 429 by admission control, or by the router queue, by the bound they met (ttft, queue, fleet-queue, router-queue-full, router-queue-wait) and priority."},
		[]string{"reason", "priority"})
	// Every series exists from the start, so that rate() sees the first shed.
	for _, r := range admission.Reasons {
		for _, p := range admission.Priorities {
			m.WithLabelValues(string(r), p.String())
		}
	}
	if reg != nil {
		reg.MustRegister(m)
	}
	return m
}

// priority reads the request's admission priority; an unknown value is the client's error,
// not silently the default, so a typo in a batch job's header shows at once. With admission off
// the header means nothing and is not read.
func (s *Server) priority(header http.Header) (admission.Priority, error) {
	if s.admit == nil {
		return admission.Interactive, nil
	}
	p, err := admission.ParsePriority(header.Get(PriorityHeader))
	if err != nil {
		return p, &apiError{status: http.StatusBadRequest, typ: invalidRequest, msg: PriorityHeader + ": " + err.Error()}
	}
	return p, nil
}

// admitEarly sheds, before the request is tokenized and routed, what no engine could take within
// the bounds: the cheapest place, since a shed request then costs neither a /tokenize call nor an
// index lookup. Only the eligible routes count (nil: all).
func (s *Server) admitEarly(t *table, p admission.Priority, eligible func(*route) bool) error {
	if s.admit == nil {
		return nil
	}
	eps := s.snapshot(t, eligible)
	now := s.now()
	s.policyMu.Lock() // once for the fleet, not once per endpoint
	d := s.admit.CheckEarly(s.policy, p, eps, now)
	s.policyMu.Unlock()
	if !d.Admit {
		return s.shed(p, d)
	}
	return nil
}

// admitRouted applies the bounds to the engine the policy chose, with the request's own predicted
// TTFT there, against the same snapshot the policy decided on; when its choice is beyond an
// engine's bound, a fallback that admits it takes the request and d is rewritten
// (admission.Controller.CheckRouted). The request is shed only when no engine can take it in time.
func (s *Server) admitRouted(eps []policy.Endpoint, d *policy.Decision, promptTokens int, adapter string, p admission.Priority) error {
	if s.admit == nil || d.Endpoint == "" {
		return nil
	}
	// The policy is locked for each prediction only, not across the admission checks.
	a := s.admit.CheckRouted(lockedPredictor{s}, p, eps, d, promptTokens, adapter, s.now())
	if !a.Admit {
		return s.shed(p, a)
	}
	return nil
}

// lockedPredictor reads the policy's TTFT model under policyMu.
type lockedPredictor struct{ s *Server }

func (l lockedPredictor) PredictTTFT(endpoint string, work int) (float64, bool) {
	l.s.policyMu.Lock()
	defer l.s.policyMu.Unlock()
	return l.s.policy.PredictTTFT(endpoint, work)
}

// shed records a request turned away and returns the 429 it gets.
func (s *Server) shed(p admission.Priority, d admission.Decision) error {
	s.admit.Shed(d, p, s.now())
	s.shedMetric.WithLabelValues(string(d.Reason), p.String()).Inc()
	s.log.V(1).Info("request shed", "reason", string(d.Reason), "priority", p.String(), "value", d.Value,
		"limit", d.Limit, "retryAfter", d.RetryAfter)
	return &apiError{status: http.StatusTooManyRequests, typ: rateLimited, msg: d.Message(p),
		header: http.Header{"Retry-After": {strconv.Itoa(d.RetryAfter)}}}
}

// admissionStatus is the admission part of /v1/status (nil when admission is off).
func (s *Server) admissionStatus(t *table) *routerapi.Admission {
	if s.admit == nil {
		return nil
	}
	eps := s.endpoints(t)
	aeps := make([]admission.Endpoint, 0, len(eps))
	for i := range eps {
		if eps[i].Ready {
			aeps = append(aeps, admission.FromPolicy(&eps[i]))
		}
	}
	cfg := s.admit.Config()
	snap := s.admit.Snapshot(s.now())
	a := &routerapi.Admission{BatchFraction: cfg.BatchFraction, QueueCap: max(cfg.QueueCap, 0),
		FleetQueueCap: s.admit.FleetQueueCap(aeps), RecentShed: snap.RecentShed,
		CompletionsPerSecond: snap.CompletionRate, Shed: map[string]uint64{}}
	if cfg.TTFTBound > 0 {
		a.TTFTBoundSeconds = cfg.TTFTBound.Seconds()
	}
	for _, e := range aeps {
		a.FleetQueued += e.Queued
	}
	for r, byPriority := range snap.Shed {
		for p, n := range byPriority {
			a.Shed[string(r)+"/"+p.String()] = n
		}
	}
	return a
}

// recentShed is the decaying count of shed requests that /v1/autoscale adds to the engines'
// queues (0 when admission is off).
func (s *Server) recentShed() int {
	if s.admit == nil {
		return 0
	}
	return int(s.admit.Snapshot(s.now()).RecentShed + 0.5)
}
