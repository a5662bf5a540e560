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
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvrouter/kvrouter/internal/sim/engine"
)

// fakeClock is a wall clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func gatherLag(t *testing.T, reg *prometheus.Registry) (count uint64, sum, scheduled, slip float64) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	for _, n := range []string{"kvrouter_sim_step_lag_seconds", "kvrouter_sim_step_scheduled_seconds_total", "kvrouter_sim_step_slip_seconds_total"} {
		if byName[n] == nil {
			t.Fatalf("metric %s not registered", n)
		}
	}
	h := byName["kvrouter_sim_step_lag_seconds"].GetMetric()[0].GetHistogram()
	return h.GetSampleCount(), h.GetSampleSum(),
		byName["kvrouter_sim_step_scheduled_seconds_total"].GetMetric()[0].GetCounter().GetValue(),
		byName["kvrouter_sim_step_slip_seconds_total"].GetMetric()[0].GetCounter().GetValue()
}

// A host that keeps up: every step is reached before its scheduled end, so nothing is late.
func TestStepLagOnSchedule(t *testing.T) {
	reg := prometheus.NewRegistry()
	clock := &fakeClock{t: time.Unix(1000, 0)}
	lag := newStepLag(reg, clock.now)
	due := clock.t
	for range 10 {
		// A 20 ms simulated step at a time scale of 0.5 is due 40 ms of wall time later; the
		// loop computes it in 1 ms and sleeps the rest.
		due = due.Add(40 * time.Millisecond)
		clock.t = clock.t.Add(time.Millisecond)
		if late := lag.stepDone(due, 0.020, 0.5); late >= 0 {
			t.Fatalf("step reported %v late although the clock is ahead of schedule", late)
		}
		clock.t = due
	}
	count, sum, scheduled, slip := gatherLag(t, reg)
	if count != 10 || sum != 0 || slip != 0 {
		t.Fatalf("count %d sum %g slip %g, want 10 steps, no lag", count, sum, slip)
	}
	if want := 10 * 0.040; scheduled < want-1e-9 || scheduled > want+1e-9 {
		t.Fatalf("scheduled %g s, want %g", scheduled, want)
	}
}

// A starved host: each 10 ms step takes 40 ms of wall time, so the lag grows by 30 ms a step;
// like Run, the loop writes it off and re-anchors once it passes 50 ms. Steps 1, 3, 5 are
// 30 ms late, steps 2, 4, 6 are 60 ms late and written off.
func TestStepLagClockFallsBehind(t *testing.T) {
	reg := prometheus.NewRegistry()
	clock := &fakeClock{t: time.Unix(1000, 0)}
	lag := newStepLag(reg, clock.now)
	due := clock.t
	written := 0
	for range 6 {
		due = due.Add(10 * time.Millisecond)
		clock.t = clock.t.Add(40 * time.Millisecond)
		late := lag.stepDone(due, 0.010, 1)
		if late <= 0 {
			t.Fatalf("step %v late, want late", late)
		}
		if late > 50*time.Millisecond {
			lag.writeOff(late)
			written++
			due = clock.t
		}
	}
	if written != 3 {
		t.Fatalf("%d write-offs, want 3", written)
	}
	count, sum, scheduled, slip := gatherLag(t, reg)
	near := func(got, want float64) bool { return got > want-1e-9 && got < want+1e-9 }
	if count != 6 || !near(sum, 3*0.030+3*0.060) || !near(slip, 3*0.060) || !near(scheduled, 6*0.010) {
		t.Fatalf("count %d lag sum %g slip %g scheduled %g; want 6, 0.27, 0.18, 0.06", count, sum, slip, scheduled)
	}
	// Non-positive lateness never counts as slip.
	lag.writeOff(-time.Second)
	if _, _, _, s := gatherLag(t, reg); s != slip {
		t.Fatalf("writing off a negative lateness changed slip from %g to %g", slip, s)
	}
}

// Through the real step loop: at a time scale no host can keep up with (a 20 ms step is due
// within nanoseconds), every step ends behind schedule and /metrics says so.
func TestStepLagExposedWhenHostCannotKeepUp(t *testing.T) {
	f := start(t, func(_ *engine.Config, o *Options) { o.TimeScale = 1e9 })
	status, body := post(t, f.url+"/v1/completions", `{"model":"sim-model","prompt":"Tell me a long story","max_tokens":200}`)
	if status != 200 {
		t.Fatalf("status %d: %v", status, body)
	}
	m := scrape(t, f.url)
	if m["kvrouter_sim_step_lag_seconds_count"] < 200 {
		t.Fatalf("lag observed for %g steps, want one per step (>= 200 for 200 tokens)", m["kvrouter_sim_step_lag_seconds_count"])
	}
	if m["kvrouter_sim_step_lag_seconds_sum"] <= 0 {
		t.Fatalf("no lag measured at time scale 1e9: %v", m["kvrouter_sim_step_lag_seconds_sum"])
	}
	if m["kvrouter_sim_step_scheduled_seconds_total"] <= 0 {
		t.Fatal("scheduled step time not counted")
	}
}
