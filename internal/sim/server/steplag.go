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

package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// stepLag measures how far the step loop runs behind the wall-clock schedule that --time-scale
// sets. On a host with too little CPU for the engines, the router and the load generator, steps
// end late and the loop eventually writes the backlog off, so simulated time runs slower than
// the time scale says and every latency a client measures in wall time (kvbench live converts
// it to simulated seconds with the same scale) is stretched. These metrics let a benchmark tell
// a starved run from a real result.
type stepLag struct {
	now func() time.Time
	// late observes, per step, the wall seconds between the step's scheduled end and the moment
	// the loop got to it (0 when on time).
	late prometheus.Histogram
	// scheduled counts the wall seconds the steps were due to take at the time scale; slip the
	// wall seconds of lateness the loop gave up on. slip/(scheduled+slip) is the share of the
	// engine's busy time that simulated time stood still.
	scheduled, slip prometheus.Counter
}

// Wall-clock seconds: from a timer tick to a step that runs several times its length late.
var stepLagBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

func newStepLag(reg prometheus.Registerer, now func() time.Time) *stepLag {
	l := &stepLag{
		now: now,
		late: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvrouter_sim_step_lag_seconds",
			Help:    "Wall-clock seconds each engine step ended after its end as scheduled by --time-scale (0 when on time).",
			Buckets: stepLagBuckets}),
		scheduled: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_sim_step_scheduled_seconds_total",
			Help: "Wall-clock seconds the engine steps were due to take at --time-scale."}),
		slip: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_sim_step_slip_seconds_total",
			Help: "Wall-clock seconds of step lag the engine gave up catching up on: simulated time ran slower than --time-scale for this long."}),
	}
	reg.MustRegister(l.late, l.scheduled, l.slip)
	return l
}

// stepDone records a step that was due to end at due after running for its simulated duration
// (seconds) at the given time scale, and returns how late the loop is (negative: early, the
// time left to sleep).
func (l *stepLag) stepDone(due time.Time, duration, timeScale float64) time.Duration {
	late := l.now().Sub(due)
	l.scheduled.Add(duration / timeScale)
	l.late.Observe(max(late, 0).Seconds())
	return late
}

// writeOff records lateness that the loop stops trying to make up for (it re-anchors simulated
// time to the wall clock instead of rushing through a backlog of steps).
func (l *stepLag) writeOff(late time.Duration) {
	if late > 0 {
		l.slip.Add(late.Seconds())
	}
}
