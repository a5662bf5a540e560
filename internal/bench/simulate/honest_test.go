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

package simulate

import (
	"container/heap"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench/peers"
	"github.com/kvrouter/kvrouter/internal/bench/workload"
	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
)

// linkSim is a sim with only the event path: engines that publish what the test says.
func linkSim(cfg Config, engines int) *sim {
	if cfg.EventLag == 0 {
		cfg.EventLag = 0.005
	}
	s := &sim{cfg: cfg}
	s.events = kvindex.New(kvindex.Config{BlockSize: 4, Now: func() time.Time { return time.Unix(0, 0).Add(time.Duration(s.now * 1e9)) }})
	for j := range engines {
		s.engines = append(s.engines, &simEngine{name: fmt.Sprintf("engine-%02d", j)})
	}
	s.link = newEventLink(cfg, engines)
	return s
}

// until runs the sim's deliveries and replays up to t.
func (s *sim) until(t float64) {
	for s.q.Len() > 0 && s.q[0].t <= t {
		ev := heap.Pop(&s.q).(event)
		s.now = ev.t
		switch ev.kind {
		case evDeliver:
			s.deliver(ev.i, ev.b)
		case evReplay:
			s.replay(ev.i)
		}
	}
	s.now = max(s.now, t)
}

// blockBatch stores (or removes) one root block of hash h.
func blockBatch(h uint64, remove bool) *kvevents.Batch {
	ev := kvevents.Event{Kind: kvevents.KindBlockStored, BlockHashes: []uint64{h}, BlockSize: 4, Medium: kvevents.MediumGPU,
		TokenIDs: []uint32{uint32(h), uint32(h >> 32), 1, 2}}
	if remove {
		ev = kvevents.Event{Kind: kvevents.KindBlockRemoved, BlockHashes: []uint64{h}, Medium: kvevents.MediumGPU}
	}
	return &kvevents.Batch{Events: []kvevents.Event{ev}}
}

func hashes(s *sim, j int) []uint64 {
	h := s.events.SourceHashes(kvindex.SourceID{Endpoint: s.engines[j].name}, kvevents.MediumGPU)
	slices.Sort(h)
	return h
}

// publishPattern has each engine store a block per batch and remove it in the next, keeping
// every third: applied out of order, a removal before its store would leave a block behind.
func publishPattern(s *sim, engines, n int, last func()) {
	for k := range n {
		s.until(float64(k) * 0.0005)
		if k == n-1 && last != nil {
			last()
		}
		for j := range engines {
			h := uint64(j)<<32 | uint64(k/2)
			s.send(j, blockBatch(h, k%2 == 1 && (k/2)%3 != 0))
		}
	}
	s.until(10)
}

func TestEventLossIsRepairedInOrder(t *testing.T) {
	const engines, n = 3, 400
	ref := linkSim(Config{}, engines)
	publishPattern(ref, engines, n, nil)

	s := linkSim(Config{EventJitter: 0.003, EventLoss: 0.2, ReplayDelay: 0.002, Seed: 4}, engines)
	// The last batches go through, so that every loss is revealed by a later batch.
	publishPattern(s, engines, n, func() { s.link.loss = 0 })
	for j := range engines {
		if want := hashes(ref, j); len(want) == 0 || !slices.Equal(hashes(s, j), want) {
			t.Fatalf("engine %d: index holds %d blocks after loss and replay, %d without loss", j, len(hashes(s, j)), len(want))
		}
	}
	x := map[string]float64{}
	s.link.extras(x)
	if x["events_batches_lost"] < 100 || x["events_gaps_repaired"] < 50 || x["events_lost_unrepaired"] != 0 {
		t.Fatalf("lost %v, gaps repaired %v, unrepaired %v", x["events_batches_lost"], x["events_gaps_repaired"], x["events_lost_unrepaired"])
	}
	if math.Abs(x["events_repair_wait_mean_s"]-0.002) > 1e-9 || x["events_repair_delay_mean_s"] <= 0.005 {
		t.Fatalf("repair wait %v (want the replay delay), lost batches applied %v after publication", x["events_repair_wait_mean_s"], x["events_repair_delay_mean_s"])
	}
}

func TestEventJitterKeepsEachEngineInOrder(t *testing.T) {
	s := linkSim(Config{EventJitter: 0.05, Seed: 9}, 2)
	for k := range 300 {
		s.now = float64(k) * 0.001 // far closer than the jitter
		for j := range 2 {
			s.send(j, blockBatch(uint64(k), false))
		}
	}
	last := map[int]float64{}
	seq := map[int]uint64{}
	spread := 0.0
	for s.q.Len() > 0 {
		ev := heap.Pop(&s.q).(event)
		d := ev.b.(*delivery)
		if d.seq != seq[ev.i] || ev.t < last[ev.i] {
			t.Fatalf("engine %d: batch %d arrived at %v, expected batch %d no earlier than %v", ev.i, d.seq, ev.t, seq[ev.i], last[ev.i])
		}
		spread = max(spread, ev.t-d.b.TS-0.005)
		seq[ev.i]++
		last[ev.i] = ev.t
	}
	if seq[0] != 300 || seq[1] != 300 || spread < 0.05 {
		t.Fatalf("delivered %v batches, largest extra delay %v: want all, jittered", seq, spread)
	}
}

func TestLossIsNoticedAtTheNextBatch(t *testing.T) {
	s := linkSim(Config{EventLoss: 1, ReplayDelay: 0.002}, 1)
	s.link.loss = 0
	s.send(0, blockBatch(1, false)) // t=0, lands at 0.005
	s.now = 0.001
	s.link.loss = 1
	s.send(0, blockBatch(2, false)) // lost
	s.link.loss = 0
	s.now = 0.002
	s.send(0, blockBatch(3, false)) // lands at 0.007: the gap is seen, replay at 0.009
	s.now = 0.0025
	s.send(0, blockBatch(4, false)) // lands at 0.0075, held behind the replay
	s.until(0.0089)
	if got := hashes(s, 0); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("before the replay the index holds %v, want only batch 0's block", got)
	}
	s.until(0.0091)
	if got := hashes(s, 0); !slices.Equal(got, []uint64{1, 2, 3, 4}) {
		t.Fatalf("after the replay the index holds %v, want every block", got)
	}
	x := map[string]float64{}
	s.link.extras(x)
	if x["events_batches_lost"] != 1 || x["events_gaps_repaired"] != 1 || math.Abs(x["events_repair_delay_mean_s"]-0.008) > 1e-9 {
		t.Fatalf("extras %v", x)
	}
}

// honestRun runs the tiny workload with EOS and every switch on.
func honestRun(t *testing.T, policy string, cfg Config) (workload.Spec, []workload.Request, Config) {
	t.Helper()
	s := tinySpec()
	reqs, err := workload.Generate(s, s.Load.Rates[0], workload.Options{EOS: true})
	if err != nil {
		t.Fatal(err)
	}
	f, err := peers.Select([]string{policy})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Spec, cfg.Rate, cfg.Requests, cfg.Policy, cfg.Seed = s, s.Load.Rates[0], reqs, f[0], 1
	return *s, reqs, cfg
}

func TestHonestRunIsDeterministicAndStopsAtEOS(t *testing.T) {
	_, reqs, cfg := honestRun(t, "kvrouter", Config{StepNoise: 0.05, EventJitter: 0.003, EventLoss: 0.05, ReplayDelay: 0.002})
	a, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	delete(a.Extra, "sim_wall_s")
	delete(b.Extra, "sim_wall_s")
	if a.TTFTP99 != b.TTFTP99 || a.OutputThroughput != b.OutputThroughput || fmt.Sprint(a.Extra) != fmt.Sprint(b.Extra) {
		t.Fatalf("two honest runs with one seed differ: %+v vs %+v", a, b)
	}
	if a.Completed != a.Requests || a.Extra["events_batches_lost"] == 0 {
		t.Fatalf("%d of %d completed, %v batches lost", a.Completed, a.Requests, a.Extra["events_batches_lost"])
	}
	want, nominal := 0, 0
	for _, r := range reqs {
		want += min(r.OutputLen, r.MaxTokens)
		nominal += 8
	}
	if got := a.OutputThroughput * a.DurationS; math.Abs(got-float64(want)) > 0.5 || want == nominal {
		t.Fatalf("%.1f output tokens, want the true lengths' %d (nominal %d)", got, want, nominal)
	}
	// Step noise alone changes the timings but not what is generated.
	_, _, quiet := honestRun(t, "kvrouter", Config{})
	c, err := Run(quiet)
	if err != nil {
		t.Fatal(err)
	}
	if c.TTFTP99 == a.TTFTP99 || math.Abs(c.OutputThroughput*c.DurationS-float64(want)) > 0.5 {
		t.Fatalf("without the switches TTFT p99 %v (with: %v), %v tokens", c.TTFTP99, a.TTFTP99, c.OutputThroughput*c.DurationS)
	}
}
