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
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/router/admission"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/router/queue"
	"github.com/kvrouter/kvrouter/internal/routerapi"
)

// The router queue (package queue, docs/router.md#router-queue): a request that no engine is
// expected to start soon (policy.ShouldHold) waits here, in its own handler goroutine, instead
// of in the queue of an engine chosen at arrival. It is released, oldest first, when load drops
// (a request's first token or end, a dispatch, a scrape seen by the ticker), and only then
// routed, with its cache affinity judged at that moment; admission control still has the last
// word on it. A request that finds the queue full, or waits its MaxWait, is shed with a 429
// as admission control sheds.

// Defaults and the shed reasons of the router queue.
const (
	// DefaultQueueMaxWait is queue.DefaultMaxWait, which the simulated router queue shares.
	DefaultQueueMaxWait = time.Duration(queue.DefaultMaxWait * float64(time.Second))
	// queueTick is how often the queue looks again without an event: the scrapes that change
	// what the engines are seen to run come every second or so, and a held request should not
	// wait a whole scrape interval longer than it must.
	queueTick = 50 * time.Millisecond
	// reasonQueueFull and reasonQueueWait label kvrouter_requests_shed_total and the admission
	// shed counts alongside admission's own reasons.
	reasonQueueFull admission.Reason = "router-queue-full"
	reasonQueueWait admission.Reason = "router-queue-wait"
)

// clientClosed is the status a request whose client left is counted with (no one reads it).
const clientClosed = 499

// routerQueue holds the waiting requests.
type routerQueue struct {
	s        *Server
	base     time.Time // the queue's clock is seconds since base
	maxWait  time.Duration
	capacity int

	mu sync.Mutex
	q  *queue.Queue[*waiter]
	// routing is 1 while a released request is being routed: its load is not in the tracker
	// yet, so no other is released on a snapshot that lacks it. Its dispatch (newCharge) or its
	// refusal looks again.
	routing int
	shed    map[string]uint64 // "reason/priority" → requests shed
	// active is the queue's length plus routing, read without the lock: the request path and
	// every dispatch ask it, and it is almost always 0.
	active atomic.Int32

	depth  prometheus.Gauge
	waited prometheus.Histogram
}

// waiter is a request in the queue. ch receives exactly one value once it leaves the queue
// other than by its own hand: true when released, false when expired.
type waiter struct {
	ch       chan bool
	eligible func(*route) bool
}

// newRouterQueue returns the server's router queue, nil when it is off. Its metrics are
// registered either way, so that dashboards find them (at 0) whatever the configuration.
func newRouterQueue(s *Server, reg prometheus.Registerer) *routerQueue {
	depth := prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvrouter_router_queue_requests",
		Help: "Requests waiting in the router queue for an engine expected to start them soon."})
	waited := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvrouter_router_queue_wait_seconds",
		Help:    "Time requests released from the router queue waited there before being routed.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30}})
	if reg != nil {
		reg.MustRegister(depth, waited)
	}
	if s.cfg.QueueCapacity <= 0 {
		return nil
	}
	maxWait := s.cfg.QueueMaxWait
	if s.admit != nil {
		// The wait counts in the client's time to first token, which admission bounds: at most
		// half of that budget goes to waiting, the other half is the engine's to start it.
		if c := s.admit.Config(); c.TTFTBound > 0 {
			maxWait = min(maxWait, time.Duration(float64(c.TTFTBound)*c.TailHeadroom/2))
		}
	}
	rq := &routerQueue{s: s, base: s.now(), maxWait: maxWait, capacity: s.cfg.QueueCapacity,
		q:     queue.New[*waiter](queue.Config{Capacity: s.cfg.QueueCapacity, MaxWait: maxWait.Seconds()}),
		shed:  map[string]uint64{},
		depth: depth, waited: waited}
	for _, r := range []admission.Reason{reasonQueueFull, reasonQueueWait} {
		for _, p := range admission.Priorities {
			s.shedMetric.WithLabelValues(string(r), p.String())
		}
	}
	return rq
}

// holdByPolicy is the policy's gate: whether a request should wait rather than go to any of eps.
func (s *Server) holdByPolicy(eps []policy.Endpoint) bool {
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	return s.policy.ShouldHold(eps)
}

func (rq *routerQueue) secs(t time.Time) float64 { return t.Sub(rq.base).Seconds() }

// changed publishes the queue's length; mu is held.
func (rq *routerQueue) changed() {
	n := rq.q.Len()
	rq.active.Store(int32(n + rq.routing))
	rq.depth.Set(float64(n))
}

// limit is the most requests a request of priority p may find waiting and still join: batch
// requests get admission's fraction of the capacity, so they are shed first.
func (rq *routerQueue) limit(p admission.Priority) int {
	if p == admission.Interactive {
		return rq.capacity
	}
	frac := admission.DefaultBatchFraction
	if rq.s.admit != nil {
		frac = rq.s.admit.Config().BatchFraction
	}
	return int(float64(rq.capacity) * frac)
}

// wait holds the request while it should wait (see the top of this file). It returns nil when
// the request may be routed now, and then done must be called with whether routing it failed
// (no dispatch follows): a request released from the queue holds the release slot until then.
// Otherwise the error is the answer: a 429 for a request shed, a 499 for a client that left.
func (rq *routerQueue) wait(ctx context.Context, t *table, p admission.Priority, eligible func(*route) bool) (done func(failed bool), err error) {
	noop := func(bool) {}
	if rq == nil {
		return noop, nil
	}
	s := rq.s
	rq.mu.Lock()
	// First come, first served: a request that finds others waiting (or one being released)
	// queues behind them even if an engine could take it now.
	if rq.q.Len() == 0 && rq.routing == 0 && !s.hold(s.snapshot(t, eligible)) {
		rq.mu.Unlock()
		return noop, nil
	}
	now := s.now()
	w := &waiter{ch: make(chan bool, 1), eligible: eligible}
	n := rq.q.Len()
	if wait := rq.expectedWait(n, now); wait > rq.maxWait.Seconds() {
		// It would only be shed later, slowly: a fast 429 now is worth more to the client.
		rq.mu.Unlock()
		return nil, rq.shedRequest(p, reasonQueueWait, n, wait)
	}
	if n >= rq.limit(p) || !rq.q.Push(w, rq.secs(now)) {
		rq.mu.Unlock()
		return nil, rq.shedRequest(p, reasonQueueFull, n, 0)
	}
	rq.changed()
	rq.mu.Unlock()
	rq.kick() // it may be first in line, and an engine free
	// The ticker expires waiters too; this timer is what bounds the wait when it has stopped
	// (the router shutting down) or falls behind.
	timer := time.NewTimer(rq.maxWait)
	defer timer.Stop()
	var released bool
	select {
	case released = <-w.ch:
	case <-ctx.Done():
		if !rq.remove(w) && <-w.ch {
			rq.done(true) // released as the client left: give the slot back
		}
		return nil, &apiError{status: clientClosed, typ: serverError, msg: "the client went away while its request waited in the router queue"}
	case <-timer.C:
		if !rq.remove(w) {
			released = <-w.ch // it left the queue as the timer fired
		}
	}
	if !released {
		return nil, rq.shedRequest(p, reasonQueueWait, s.queued(), 0)
	}
	rq.waited.Observe(s.now().Sub(now).Seconds())
	return rq.done, nil
}

// expectedWait is how long a request with ahead requests before it in the queue is expected to
// wait (seconds) at the rate the engines complete requests; 0 when there is no rate to tell
// (admission off, or nothing completed lately): the request then waits and sees. mu is held.
func (rq *routerQueue) expectedWait(ahead int, now time.Time) float64 {
	if rq.s.admit == nil || ahead == 0 {
		return 0
	}
	if rate := rq.s.admit.Snapshot(now).CompletionRate; rate > 0 {
		return float64(ahead) / rate
	}
	return 0
}

// remove takes w out of the queue, and reports whether it was still there.
func (rq *routerQueue) remove(w *waiter) bool {
	rq.mu.Lock()
	defer rq.mu.Unlock()
	ok := rq.q.Remove(func(x *waiter) bool { return x == w })
	if ok {
		rq.changed()
	}
	return ok
}

// done ends the routing of a released request. One that was dispatched looks again from its
// dispatch (newCharge), when its load is in the snapshot; one that failed looks now.
func (rq *routerQueue) done(failed bool) {
	rq.mu.Lock()
	rq.routing--
	rq.changed()
	rq.mu.Unlock()
	if failed {
		rq.kick()
	}
}

// kick releases the oldest waiting request if none is being routed and the policy no longer
// holds it. It is cheap when nothing waits: every dispatch, first token and end calls it.
func (rq *routerQueue) kick() {
	if rq == nil || rq.active.Load() == 0 {
		return
	}
	s := rq.s
	rq.mu.Lock()
	defer rq.mu.Unlock()
	if rq.routing > 0 {
		return
	}
	w, _, ok := rq.q.Head()
	if !ok || s.hold(s.snapshot(s.tbl.Load(), w.eligible)) {
		return
	}
	rq.q.Pop()
	rq.routing++
	rq.changed()
	w.ch <- true
}

// tick expires the requests that waited MaxWait at now, and looks again.
func (rq *routerQueue) tick(now time.Time) {
	rq.mu.Lock()
	expired := rq.q.Expire(rq.secs(now))
	if len(expired) > 0 {
		rq.changed()
	}
	rq.mu.Unlock()
	for _, w := range expired {
		w.ch <- false
	}
	rq.kick()
}

// run ticks until ctx is done.
func (rq *routerQueue) run(ctx context.Context) {
	tk := time.NewTicker(queueTick)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			rq.tick(rq.s.now())
		}
	}
}

// shedRequest records a request the queue turned away (ahead: the requests waiting then;
// predicted: its expected wait when it was shed for that, else 0) and returns its 429, which
// reads like admission control's.
func (rq *routerQueue) shedRequest(p admission.Priority, reason admission.Reason, ahead int, predicted float64) error {
	s := rq.s
	now := s.now()
	retry := s.cfg.RetryAfter
	if s.admit != nil {
		s.admit.Shed(admission.Decision{Reason: reason}, p, now)
		if rate := s.admit.Snapshot(now).CompletionRate; rate > 0 {
			// The requests ahead, drained at the fleet's completion rate.
			retry = int(math.Min(math.Max(math.Ceil(float64(ahead+1)/rate), 1), admission.MaxRetryAfter))
		}
	}
	rq.mu.Lock()
	rq.shed[string(reason)+"/"+p.String()]++
	rq.mu.Unlock()
	s.shedMetric.WithLabelValues(string(reason), p.String()).Inc()
	s.log.V(1).Info("request shed", "reason", string(reason), "priority", p.String(), "waiting", ahead, "retryAfter", retry)
	var msg string
	switch {
	case reason == reasonQueueFull:
		msg = fmt.Sprintf("the engines are overloaded: %d requests already wait in the router queue, where at most %d %s requests may; retry after %ds",
			ahead, rq.limit(p), p, retry)
	case predicted > 0:
		msg = fmt.Sprintf("the engines are overloaded: %d requests wait in the router queue, about %.1fs at the rate the engines complete requests, more than the %s a request may wait; retry after %ds",
			ahead, predicted, rq.maxWait, retry)
	default:
		msg = fmt.Sprintf("the engines are overloaded: no engine could start the request within the %s it may wait in the router queue; retry after %ds",
			rq.maxWait, retry)
	}
	return &apiError{status: http.StatusTooManyRequests, typ: rateLimited, msg: msg,
		header: http.Header{"Retry-After": {strconv.Itoa(retry)}}}
}

// queued is the requests waiting in the router queue (0 when it is off).
func (s *Server) queued() int {
	if s.rq == nil {
		return 0
	}
	s.rq.mu.Lock()
	defer s.rq.mu.Unlock()
	return s.rq.q.Len()
}

// queueStatus is the router queue part of /v1/status (nil when it is off).
func (s *Server) queueStatus() *routerapi.RouterQueue {
	rq := s.rq
	if rq == nil {
		return nil
	}
	rq.mu.Lock()
	defer rq.mu.Unlock()
	st := &routerapi.RouterQueue{Capacity: rq.capacity, MaxWaitSeconds: rq.maxWait.Seconds(), Waiting: rq.q.Len(),
		Shed: make(map[string]uint64, len(rq.shed))}
	for k, v := range rq.shed {
		st.Shed[k] = v
	}
	return st
}
