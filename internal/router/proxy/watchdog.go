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
	"errors"
	"math"
	"sync/atomic"
	"time"
)

// Why the router gave up on an attempt (context.Cause of its upstream request).
var (
	// errHung: the attempt's own watchdog found its route silent past the deadline.
	errHung = errors.New("the engine sent nothing within the time-to-first-byte deadline")
	// errEjected: the route was ejected (another request's verdict, or consecutive failures).
	errEjected = errors.New("the engine was taken out of routing as unresponsive")
	// errStalled: a started stream, and its whole route, went silent past the stall allowance.
	errStalled = errors.New("the engine stopped sending")
	// errIdle: the attempt had nothing for StreamIdleTimeout, though its route was not silent.
	errIdle = errors.New("the engine sent nothing for the idle timeout")
)

// fallbackITL is the decode time per token assumed for a non-streamed answer's deadline before
// any stream has been timed: slow on purpose, since too short a deadline ejects a working engine.
const fallbackITL = 0.05

// watchdogOn reports whether the TTFB watchdog runs.
func (s *Server) watchdogOn() bool { return s.cfg.TTFBWatchdogFactor > 0 }

// ttfbDeadline is how long a request may wait for its first byte from route before its route is
// checked for a hang: the policy's predicted TTFT for it (which prices the prefill queued there),
// times the factor, within floor and cap. A non-streamed answer's first byte comes with its last,
// so its expected decode time (max_tokens × the route's inter-token latency), times the factor,
// comes on top, uncapped: only a route silent to every other request meanwhile is judged hung.
func (s *Server) ttfbDeadline(route string, predictedTTFT float64, stream bool, maxTokens, streams int) time.Duration {
	c := &s.cfg
	d := clampDuration(c.TTFBWatchdogFactor*predictedTTFT, c.TTFBWatchdogFloor, c.TTFBWatchdogCap)
	if stream {
		return d
	}
	s.policyMu.Lock()
	itl, ok := s.policy.PredictITL(route, float64(streams))
	s.policyMu.Unlock()
	if !ok || itl <= 0 {
		itl = fallbackITL
	}
	decode := c.TTFBWatchdogFactor * float64(maxTokens) * itl
	return d + clampDuration(decode, 0, c.UpstreamHeaderTimeout)
}

// stallAllowance is how long a started stream's route may send nothing at all before it is
// judged hung: what a request would wait for its first token there now (a long prefill of
// another request can hold every stream's next token), times the factor, within floor and cap.
func (s *Server) stallAllowance(route string) time.Duration {
	queued := s.tracker.Stats(route).QueuedPrefillTokens
	s.policyMu.Lock()
	ttft, _ := s.policy.PredictTTFT(route, queued)
	s.policyMu.Unlock()
	return clampDuration(s.cfg.TTFBWatchdogFactor*ttft, s.cfg.TTFBWatchdogFloor, s.cfg.TTFBWatchdogCap)
}

// clampDuration converts seconds to a duration within [lo, hi].
func clampDuration(seconds float64, lo, hi time.Duration) time.Duration {
	if math.IsNaN(seconds) || seconds <= lo.Seconds() {
		return lo
	}
	if seconds >= hi.Seconds() {
		return hi
	}
	return time.Duration(seconds * float64(time.Second))
}

// watchdog watches one attempt: while it waits for its first byte, past its deadline; once it
// streams, past the stall allowance; and it gives up on the attempt (cancelling the upstream
// request with a cause) when the route is ejected. Its verdict is about the route, not the
// request: a request that waits long on a route that keeps answering others is merely queued
// (it waits on, up to the idle timeout), while a route that sent nothing to anyone for that long
// is hung, and is ejected. The timer re-arms itself from the times the read loop records, so a
// relayed chunk costs two atomic stores rather than a timer reset.
type watchdog struct {
	s        *Server
	h        *health
	route    string
	sent     time.Time
	deadline time.Duration
	cancel   context.CancelCauseFunc
	timer    *time.Timer
	w        *watcher

	waiting  atomic.Int64 // Unix ns since the attempt has been waiting on the engine (0: it is not)
	headers  atomic.Bool  // the response headers came
	started  atomic.Bool  // bytes went to the client: the attempt cannot move any more
	fired    atomic.Bool  // the deadline passed (counted once)
	finished atomic.Bool
}

// watch starts the watchdog of an attempt sent at sent on h's route.
func (s *Server) watch(h *health, route string, sent time.Time, deadline time.Duration, cancel context.CancelCauseFunc) *watchdog {
	wd := &watchdog{s: s, h: h, route: route, sent: sent, deadline: deadline, cancel: cancel}
	wd.waiting.Store(sent.UnixNano())
	// Armed only once assigned: check and onEject read wd.timer, and the arming (or the
	// registration's lock) orders those reads after this write.
	wd.timer = time.AfterFunc(time.Duration(math.MaxInt64), wd.check)
	wd.w = s.outliers.watch(h, wd.onEject)
	if s.watchdogOn() {
		wd.timer.Reset(deadline)
	} else {
		wd.timer.Reset(s.cfg.StreamIdleTimeout)
	}
	return wd
}

// stop ends the watchdog; a check already running does nothing more.
func (wd *watchdog) stop() {
	wd.finished.Store(true)
	wd.timer.Stop()
	wd.s.outliers.unwatch(wd.h, wd.w)
}

// reading and read bracket each read of the upstream body: only time spent waiting on the
// engine counts against it (a slow client that holds the relay up is not the engine's fault).
func (wd *watchdog) reading(now time.Time) {
	wd.headers.Store(true)
	wd.waiting.Store(now.UnixNano())
}
func (wd *watchdog) read() { wd.waiting.Store(0) }

// begin records that bytes went to the client: from now on the attempt ends with an error
// rather than moves.
func (wd *watchdog) begin() {
	wd.started.Store(true)
	if wd.s.watchdogOn() {
		wd.timer.Reset(wd.s.cfg.TTFBWatchdogFloor)
	}
}

// onEject is told that the route was ejected: an attempt that sent nothing to its client moves
// at once, if another engine can take it; a started stream ends if it has been silent for the
// floor (checked now).
func (wd *watchdog) onEject() {
	if !wd.started.Load() {
		if wd.s.elsewhere(wd.route) {
			wd.cancel(errEjected)
		}
		return
	}
	wd.timer.Reset(0)
}

// elsewhere reports whether a route other than name takes traffic: whether a request that gives
// up on name has somewhere to go.
func (s *Server) elsewhere(name string) bool {
	t := s.tbl.Load()
	i, ok := t.byName[name]
	if !ok {
		return true
	}
	return s.anotherRoutable(&t.routes[i], s.now())
}

// gaveUp reports whether the watchdog cancelled the attempt because its route is unresponsive,
// that is, whether an attempt that sent nothing to its client may move.
func gaveUp(ctx context.Context) bool {
	c := context.Cause(ctx)
	return errors.Is(c, errHung) || errors.Is(c, errEjected)
}

func (wd *watchdog) check() {
	if wd.finished.Load() {
		return
	}
	s := wd.s
	floor := s.cfg.TTFBWatchdogFloor
	now := s.now()
	waiting := wd.waiting.Load()
	if waiting == 0 {
		// Writing to the client: not the engine's time.
		wd.timer.Reset(max(floor, time.Second))
		return
	}
	waited := now.Sub(time.Unix(0, waiting))
	// Before the response headers the transport's header timeout bounds the wait (a whole
	// answer's headers come with its body); after them, the idle timeout.
	next := time.Duration(math.MaxInt64)
	if idle := s.cfg.StreamIdleTimeout; wd.headers.Load() {
		if waited >= idle {
			wd.cancel(errIdle)
			return
		}
		next = idle - waited
	}
	if !s.watchdogOn() {
		wd.timer.Reset(min(next, s.cfg.StreamIdleTimeout))
		return
	}
	// The route's silence: since its last byte to anyone, this attempt's dispatch, or the start
	// of this read, whichever is latest.
	silent := now.Sub(time.Unix(0, max(wd.h.lastByte.Load(), wd.sent.UnixNano(), waiting)))
	if !wd.started.Load() {
		if silent >= wd.deadline {
			wd.fire("hung")
			if s.elsewhere(wd.route) {
				// Ejected before the attempt is cancelled: the cancel moves the request at once,
				// and its retry could be answered (and the next request routed) while the route
				// still took traffic. The attempt stops watching first, so that its cause is this
				// verdict and not the ejection's news.
				s.outliers.unwatch(wd.h, wd.w)
				s.outliers.eject(wd.h, ejectTTFB)
				wd.cancel(errHung)
				return
			}
			// No other engine to move to: the route is ejected all the same (it shows, and
			// takes no new requests once another engine is back), but the request waits on.
			s.outliers.eject(wd.h, ejectTTFB)
			wd.timer.Reset(max(min(next, wd.deadline), time.Millisecond))
			return
		}
		if now.Sub(wd.sent) >= wd.deadline {
			wd.fire("alive")
		}
		wd.timer.Reset(max(min(next, wd.deadline-silent), time.Millisecond))
		return
	}
	if s.outliers.ejectedNow(wd.h) {
		if waited >= floor {
			wd.cancel(errEjected)
			return
		}
		next = min(next, floor-waited)
	}
	allowance := floor
	if silent >= allowance {
		// Priced only once the route has been silent for the floor: it takes the policy's lock.
		allowance = s.stallAllowance(wd.route)
	}
	if silent >= allowance {
		wd.cancel(errStalled)
		s.outliers.eject(wd.h, ejectStall)
		return
	}
	wd.timer.Reset(max(min(next, allowance-silent), time.Millisecond))
}

// fire counts the deadline's passing once per attempt, with what the watchdog found.
func (wd *watchdog) fire(verdict string) {
	if wd.fired.CompareAndSwap(false, true) {
		wd.s.metrics.watchdogFired.WithLabelValues(wd.route, verdict).Inc()
		if verdict == "alive" {
			wd.s.log.V(1).Info("no first byte by the deadline, but the engine answers others: waiting on",
				"endpoint", wd.route, "deadline", wd.deadline.String())
		}
	}
}
