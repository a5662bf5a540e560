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

package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/router/kvstream"
)

// replayGate holds the router's /ready until the KV-event subscribers have replayed the
// engines' buffers once (or found that they cannot), at most for the timeout. A replica
// restarted during a rollout otherwise takes its share of traffic with an empty index and routes
// it as if nothing were cached, which shows as a dip in the fleet's hit rate until the events
// refill it. Only the start is gated: an engine that joins later does not make a serving replica
// unready.
type replayGate struct {
	streams *kvstream.Manager
	timeout time.Duration
	log     logr.Logger
	done    atomic.Bool

	waited   prometheus.Gauge
	timedOut prometheus.Gauge
}

func newReplayGate(streams *kvstream.Manager, timeout time.Duration, log logr.Logger, reg prometheus.Registerer) *replayGate {
	g := &replayGate{streams: streams, timeout: timeout, log: log,
		waited: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvrouter_ready_replay_wait_seconds",
			Help: "How long /ready waited at start for the KV-event catch-up replay (until it ended or --ready-replay-timeout)."}),
		timedOut: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvrouter_ready_replay_timed_out",
			Help: "1 if /ready stopped waiting for the start-up replay at --ready-replay-timeout, with sources still catching up."}),
	}
	reg.MustRegister(g.waited, g.timedOut)
	return g
}

// run waits for the catch-up, then opens the gate for good.
func (g *replayGate) run(ctx context.Context) {
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	err := g.streams.WaitCaughtUp(wctx)
	if ctx.Err() != nil {
		return
	}
	g.waited.Set(time.Since(start).Seconds())
	if err != nil {
		pending, _ := g.streams.CatchingUp()
		g.timedOut.Set(1)
		g.log.Info("ready before the start-up replay finished: --ready-replay-timeout passed",
			"timeout", g.timeout.String(), "catchingUp", len(pending))
	} else {
		g.log.Info("start-up replay done; ready for traffic", "after", time.Since(start).Round(time.Millisecond).String())
	}
	g.done.Store(true)
}

// ready is proxy.Config.ReadyGate.
func (g *replayGate) ready() (bool, string) {
	if g.done.Load() {
		return true, ""
	}
	pending, known := g.streams.CatchingUp()
	if !known {
		return false, "kv events: waiting for the endpoints"
	}
	if len(pending) == 0 {
		return true, "" // run latches it on its next poll
	}
	names := make([]string, 0, min(len(pending), 3))
	for _, p := range pending[:min(len(pending), 3)] {
		names = append(names, fmt.Sprintf("%s/%d", p.Endpoint, p.Rank))
	}
	return false, fmt.Sprintf("kv events: start-up replay of %d source(s) not finished (%s)", len(pending), strings.Join(names, ", "))
}
