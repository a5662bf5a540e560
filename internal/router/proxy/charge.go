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
	"time"

	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/policy"
)

// charge is a dispatched request's accounting on the route it went to: its share of the route's
// load, the index entries predicted for it there, and the timing of its answer for the latency
// models. The proxy's attempts and the EPP's flights both keep one, so that the policy learns
// the same from either front end.
type charge struct {
	s         *Server
	rt        *route
	h         *health
	ticket    *loadsignal.Ticket
	predicted []kvindex.Key // until the first byte or the end; nil once settled
	work      int           // the TTFT model's x at dispatch; -1: the TTFT is not fed to it
	stream    bool
	sent      time.Time // the first byte's TTFT counts from here
	status    int       // the engine's response status, once known
	started   bool      // a byte of the answer came back
	// gateway: the answer is the gateway's own (it could not reach the engine, or gave up on
	// it), not the engine's: it says nothing of the engine's health or speed.
	gateway bool
	itl     itlMeter
	// onFirst, when set, is told a streamed answer's time to first token (a split request's
	// decode leg, whose TTFT prices the KV transfer).
	onFirst func(ttft time.Duration)
	// capTokens is the request's own max_tokens (0: none): a streamed answer's length is fed
	// to the policy as a share of it (policy.ObserveOutput), as kvbench's kvrouter does.
	capTokens int
}

func (s *Server) newCharge(rt *route, ticket *loadsignal.Ticket, predicted []kvindex.Key, work int, stream bool) *charge {
	c := &charge{s: s, rt: rt, h: s.outliers.route(rt.name, rt.ep.URL), ticket: ticket, predicted: predicted,
		work: work, stream: stream, sent: s.now()}
	s.rq.kick() // the load is charged now: the router queue may release the next request
	return c
}

// ttftWork is the work figure a decided request's TTFT is fed to the latency model with, or -1
// when it must not be: a LoRA request whose adapter was not known to be active there may have
// waited for an adapter slot and a load, which says nothing of the engine's prefill speed. It is
// left out rather than fed less the predicted adapter cost: that cost is a rough price (the
// slot wait especially), and its error would land in the model every request is routed by.
func ttftWork(d policy.Decision) int {
	if d.AdapterCold {
		return -1
	}
	return d.PrefillWork
}

// predict records the request's blocks as predicted on route rt (index i of its table), except
// the prefix the lookup found confirmed there (gpuHeld), and returns what it predicted.
// Predicted residency covers the time until the engine reports the blocks (its queue, then the
// events' lag), so a burst of siblings, or the next request of a prefix while the first still
// waits in a busy engine's queue, follows this one instead of starting a second copy elsewhere.
// The confirmed prefix needs no prediction (the index would skip it anyway, at the cost of a
// probe per block: ~0.5 ms for a 90K-token cached prefix).
func (s *Server) predict(rt *route, i int, keys []kvindex.Key, gpuHeld []int) []kvindex.Key {
	if len(keys) == 0 {
		return nil
	}
	held := 0
	if i >= 0 && i < len(gpuHeld) {
		held = min(gpuHeld[i], len(keys))
	}
	predicted := keys[held:]
	s.index.PredictPendingKeys(rt.src, predicted)
	return predicted
}

// settle ends the prediction: the request started there (its blocks are being computed, and
// the engine's events will confirm them), or it ended.
func (c *charge) settle() {
	if c.predicted != nil {
		c.s.index.SettleKeys(c.rt.src, c.predicted)
		c.predicted = nil
	}
}

// respond records the engine's response status.
func (c *charge) respond(status int) { c.status = status }

// timed reports whether the answer times the engine: a stream that succeeded sends its first
// token as its first byte, and one event per token after that.
func (c *charge) timed() bool { return c.stream && c.status == http.StatusOK }

// received records bytes of the answer at now, and reports whether they were its first: the
// request's prefill is done (its queued tokens leave the load, its prediction settles), the
// engine answered (its failure streak ends), and a stream's first token times the engine.
func (c *charge) received(b []byte, now time.Time) bool {
	s := c.s
	if c.gateway {
		return false
	}
	c.h.touch(now)
	if c.timed() {
		c.itl.add(b, now)
	}
	if c.started {
		return false
	}
	c.started = true
	c.ticket.FirstToken()
	c.settle()
	s.rq.kick() // its prefill left the queue
	s.outliers.success(c.h)
	if c.timed() {
		c.itl.streams = s.endpointStreams(c.rt.name)
	}
	if c.status == http.StatusOK {
		ttft := now.Sub(c.sent)
		s.metrics.ttft.Observe(ttft.Seconds())
		// Only streams time the first token; a whole answer times the generation.
		if c.stream && c.work >= 0 {
			s.policyMu.Lock()
			s.policy.ObserveTTFT(c.rt.name, c.work, ttft.Seconds())
			s.policyMu.Unlock()
		}
		if c.stream && c.onFirst != nil {
			c.onFirst(ttft)
		}
	}
	return true
}

// finished records an answer that ended whole: counted by status, and a stream's mean gap
// between tokens fed to the engine's decode model.
func (c *charge) finished() {
	s := c.s
	if c.gateway {
		s.metrics.upstreamErrors.WithLabelValues(c.rt.name, "gateway").Inc()
		s.metrics.requests.WithLabelValues(c.rt.name, strconv.Itoa(c.status)).Inc()
		return
	}
	if !c.started {
		s.outliers.success(c.h) // an empty answer is an answer
	}
	s.metrics.answered(c.rt.name, c.status).Inc()
	gap, timedGap := c.itl.mean()
	// The stream's events less its closing [DONE] are its tokens, near enough (a chat stream's
	// first event may carry only the role): what the policy prices a request's decode at is the
	// share of its cap that answers use.
	counted := c.timed() && c.itl.events > 1
	if !timedGap && !counted {
		return
	}
	var streams float64
	if timedGap {
		streams = float64(c.itl.streams+s.endpointStreams(c.rt.name)) / 2
	}
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	if timedGap {
		s.policy.ObserveITL(c.rt.name, streams, gap.Seconds())
	}
	if counted {
		s.policy.ObserveOutput(c.capTokens, c.itl.events-1)
	}
}

// release gives the request's load back, and its prediction if it never started.
func (c *charge) release() {
	c.ticket.Done()
	c.settle()
	c.s.rq.kick()
}
