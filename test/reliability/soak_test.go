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

package reliability

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/test/fleettest"
)

var soakRate = flag.Float64("soak-rate", 20, "soak test arrivals per second")

// sample is one reading of the router during the soak.
type sample struct {
	at                 time.Time
	heap               int64
	goroutines, pooled int
}

// slope is the least-squares slope of heap over time, in bytes per minute.
func slope(ss []sample) float64 {
	if len(ss) < 2 {
		return 0
	}
	t0 := ss[0].at
	var n, sx, sy, sxx, sxy float64
	for _, s := range ss {
		x, y := s.at.Sub(t0).Minutes(), float64(s.heap)
		n++
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

// TestSoak sends a steady rate of mixed requests (-soak-rate, default 20/s) through the router
// for -soak (env KVROUTER_SOAK; CI 20 s, make soak 10 min) and samples its live heap (after a
// forced GC) and goroutines every 2 s. It requires zero lost and zero errored requests, the
// router's own goroutines (pooled engine connections aside) not above the start by more than
// 5, a heap slope under 1 MiB/min (see docs/reliability.md for why that bound), and the last
// window's p99 latency within 3× (+50 ms) of the first's. It prints the figures for
// docs/reliability.md.
func TestSoak(t *testing.T) {
	fleettest.NeedBinaries(t)
	es, r := fleetBehindRouter(t, 3, "2")
	// 8 prefixes × 16 questions: 128 distinct prompts, so the engines' caches, the index and
	// the tokenize cache reach a steady state early and growth after that is a leak.
	load := &fleettest.Load{URL: r.URL, Workers: 64, Rate: *soakRate, Work: fleettest.SharedPrefix(8, 300, 16, 16)}
	load.Start()
	// Warm-up: every prompt seen at least once, pools and caches filled.
	warm := min(10*time.Second, *soakFor/4)
	time.Sleep(warm)
	start := time.Now()
	var ss []sample
	take := func() {
		total, pooled := r.Goroutines(t)
		ss = append(ss, sample{at: time.Now(), heap: r.LiveHeap(t), goroutines: total, pooled: pooled})
	}
	for take(); time.Since(start) < *soakFor; take() {
		time.Sleep(2 * time.Second)
	}
	end := time.Now()
	tally := load.Stop()
	tally.AssertNoneLost(t)
	if n := tally.Count(fleettest.ClearError); n != 0 {
		t.Errorf("%d requests failed without any fault: %s", n, tally)
	}

	// Latency per window of the measured span.
	windows := 3
	if *soakFor >= 3*time.Minute {
		windows = 10
	}
	span := end.Sub(start) / time.Duration(windows)
	rs := tally.Results()
	var p99s []time.Duration
	var rows []string
	for w := range windows {
		from, to := start.Add(time.Duration(w)*span), start.Add(time.Duration(w+1)*span)
		in := func(res fleettest.Result) bool { return !res.Start.Before(from) && res.Start.Before(to) }
		n := 0
		for _, res := range rs {
			if in(res) {
				n++
			}
		}
		p99 := fleettest.Percentile(rs, 0.99, in)
		p99s = append(p99s, p99)
		rows = append(rows, fmt.Sprintf("| %d | %v–%v | %d | %v | %v |", w+1, from.Sub(start).Round(time.Second), to.Sub(start).Round(time.Second),
			n, fleettest.Percentile(rs, 0.5, in).Round(time.Millisecond), p99.Round(time.Millisecond)))
	}
	first, last := ss[0], ss[len(ss)-1]
	sl := slope(ss)
	var minHeap, maxHeap int64 = first.heap, first.heap
	for _, s := range ss {
		minHeap, maxHeap = min(minHeap, s.heap), max(maxHeap, s.heap)
	}
	t.Logf("soak: %v at %.0f requests/s after %v warm-up; %s", *soakFor, *soakRate, warm, tally)
	t.Logf("soak: live heap %d → %d bytes (min %d, max %d over %d samples), slope %+.0f bytes/min", first.heap, last.heap, minHeap, maxHeap, len(ss), sl)
	t.Logf("soak: router goroutines %d → %d (pooled engine connections %d → %d)", first.goroutines-first.pooled,
		last.goroutines-last.pooled, first.pooled, last.pooled)
	t.Logf("soak: latency per window\n| window | span | requests | p50 | p99 |\n|---|---|---|---|---|\n%s", strings.Join(rows, "\n"))

	// A leak of one request-sized object (~1 KiB) per request at 20/s is 1.2 MiB/min: above the bound.
	if sl > 1<<20 {
		t.Errorf("live heap grows %.0f bytes/min", sl)
	}
	if own0, own1 := first.goroutines-first.pooled, last.goroutines-last.pooled; own1 > own0+5 {
		t.Errorf("router goroutines grew from %d to %d:\n%s", own0, own1, r.GoroutineProfile(t))
	}
	if p99s[len(p99s)-1] > 3*p99s[0]+50*time.Millisecond {
		t.Errorf("p99 went from %v in the first window to %v in the last", p99s[0], p99s[len(p99s)-1])
	}
	fleettest.CheckConsistent(t, r, es)
}
