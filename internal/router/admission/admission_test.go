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

package admission

import (
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1_000_000, 0)

func TestParsePriority(t *testing.T) {
	for in, want := range map[string]Priority{"": Interactive, "interactive": Interactive, " Batch ": Batch, "BATCH": Batch} {
		if got, err := ParsePriority(in); err != nil || got != want {
			t.Errorf("ParsePriority(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"high", "0", "batch,interactive"} {
		if _, err := ParsePriority(bad); err == nil {
			t.Errorf("ParsePriority(%q) accepted", bad)
		}
	}
}

func TestCalibratedTTFTBound(t *testing.T) {
	c := New(Config{TTFTBound: 10 * time.Second}, t0)
	eps := []Endpoint{{Queued: 3, Calibrated: true}, {Queued: 500, Calibrated: true}}
	eps[0].TTFT = 9.5
	if d := c.Check(Interactive, eps, 0, t0); !d.Admit {
		t.Fatalf("within the bound: %+v", d)
	}
	// Calibrated: the TTFT bound replaces the length cap, so a queue far beyond the batch
	// capacity that still predicts within the bound is admitted...
	eps[1].TTFT = 4
	if d := c.Check(Interactive, eps, 1, t0); !d.Admit {
		t.Fatalf("long but fast queue shed: %+v", d)
	}
	// ...and a short queue predicting beyond it is not.
	eps[0].TTFT = 12.2
	d := c.Check(Interactive, eps, 0, t0)
	if d.Admit || d.Reason != ReasonTTFT || d.Value != 12.2 || d.Limit != 10 {
		t.Fatalf("beyond the bound: %+v", d)
	}
	// The excess (2.2 s) is the time until the queue has drained to the bound.
	if d.RetryAfter != 3 {
		t.Errorf("Retry-After %d, want ceil(12.2-10) = 3", d.RetryAfter)
	}
	if m := d.Message(Interactive); !strings.Contains(m, "12.2s") || !strings.Contains(m, "retry after 3s") {
		t.Errorf("message %q", m)
	}
}

// With headroom, predictions are held to a fraction of the bound (the tail of admitted TTFTs
// runs above their prediction); without it, to the bound itself.
func TestTailHeadroom(t *testing.T) {
	eps := []Endpoint{{Queued: 3, Calibrated: true, TTFT: 9}}
	if d := New(Config{TTFTBound: 10 * time.Second}, t0).Check(Interactive, eps, 0, t0); !d.Admit {
		t.Fatalf("no headroom: 9 s within a 10 s bound shed: %+v", d)
	}
	d := New(Config{TTFTBound: 10 * time.Second, TailHeadroom: 0.8}, t0).Check(Interactive, eps, 0, t0)
	if d.Admit || d.Reason != ReasonTTFT || d.Limit != 8 || d.RetryAfter != 1 {
		t.Fatalf("headroom 0.8: want 9 s shed against an 8 s limit, Retry-After 1: %+v", d)
	}
	d = New(Config{TTFTBound: 10 * time.Second, TailHeadroom: 0.8}, t0).Check(Batch, eps, 0, t0)
	if d.Admit || d.Limit != 10*DefaultBatchFraction*0.8 {
		t.Fatalf("batch: headroom and batch fraction both apply: %+v", d)
	}
}

// An engine with nothing queued takes the request whatever its model predicts: there is no queue
// to bound, and a model that came to predict past the bound would otherwise never be sent the
// requests whose first tokens correct it.
func TestEmptyQueueAdmits(t *testing.T) {
	c := New(Config{TTFTBound: time.Second}, t0)
	e := Endpoint{Calibrated: true, TTFT: 3}
	if d := c.Check(Interactive, []Endpoint{e}, 0, t0); !d.Admit {
		t.Fatalf("empty queue shed: %+v", d)
	}
	if d := c.Check(Interactive, []Endpoint{e}, -1, t0); !d.Admit {
		t.Fatalf("empty queue shed before routing: %+v", d)
	}
	e.Queued = 1
	if d := c.Check(Interactive, []Endpoint{e}, 0, t0); d.Admit {
		t.Fatalf("queue beyond the bound admitted: %+v", d)
	}
}

func TestUncalibratedFallsBackToQueueCap(t *testing.T) {
	c := New(Config{EngineCapacity: 8, FleetQueueCap: -1}, t0) // one engine: the fleet cap would be the same
	// A prediction from priors alone is not trusted, however large.
	eps := []Endpoint{{Queued: 7, TTFT: 100}}
	if d := c.Check(Interactive, eps, 0, t0); !d.Admit {
		t.Fatalf("uncalibrated, queue under its capacity: %+v", d)
	}
	eps[0].Queued = 8
	if d := c.Check(Interactive, eps, 0, t0); d.Admit || d.Reason != ReasonQueue || d.Limit != 8 {
		t.Fatalf("uncalibrated, queue at its capacity: %+v", d)
	}
	// None configured: vLLM's default --max-num-seqs.
	c = New(Config{FleetQueueCap: -1}, t0)
	eps = []Endpoint{{Queued: DefaultEngineCapacity - 1}}
	if d := c.Check(Interactive, eps, 0, t0); !d.Admit {
		t.Fatalf("under the default capacity: %+v", d)
	}
	eps[0].Queued++
	if d := c.Check(Interactive, eps, 0, t0); d.Admit || d.Reason != ReasonQueue {
		t.Fatalf("at the default capacity: %+v", d)
	}
	// An engine seen running more than configured holds at least that many.
	c = New(Config{EngineCapacity: 4, FleetQueueCap: -1}, t0)
	if d := c.Check(Interactive, []Endpoint{{Queued: 4}}, 0, t0); d.Admit || d.Limit != 4 {
		t.Fatalf("configured capacity ignored: %+v", d)
	}
	if d := c.Check(Interactive, []Endpoint{{Queued: 4, PeakRunning: 6}}, 0, t0); !d.Admit {
		t.Fatalf("capacity not raised to the peak seen running: %+v", d)
	}
	if d := c.Check(Interactive, []Endpoint{{Queued: 6, PeakRunning: 6}}, 0, t0); d.Admit || d.Limit != 6 {
		t.Fatalf("capacity raised to the peak: %+v", d)
	}
	// Fewer seen running than configured lowers nothing: an engine busy with long prompts
	// runs a few and queues many for want of token budget, not of slots.
	if d := c.Check(Interactive, []Endpoint{{Queued: 3, PeakRunning: 1}}, 0, t0); !d.Admit {
		t.Fatalf("capacity lowered to the peak seen running: %+v", d)
	}
}

func TestStaticQueueCapOverrides(t *testing.T) {
	c := New(Config{QueueCap: 5}, t0)
	// Enforced even when calibrated and well within the TTFT bound.
	eps := []Endpoint{{Queued: 5, Calibrated: true, TTFT: 0.5}}
	if d := c.Check(Interactive, eps, 0, t0); d.Admit || d.Reason != ReasonQueue || d.Limit != 5 {
		t.Fatalf("static cap not enforced: %+v", d)
	}
	// The TTFT bound still applies alongside it.
	eps[0].Queued, eps[0].TTFT = 1, 11
	if d := c.Check(Interactive, eps, 0, t0); d.Admit || d.Reason != ReasonTTFT {
		t.Fatalf("TTFT bound dropped by a static cap: %+v", d)
	}
	// No TTFT test, no per-engine cap: only the fleet cap is left.
	c = New(Config{TTFTBound: -1, QueueCap: -1, EngineCapacity: 8}, t0)
	eps = []Endpoint{{Queued: 7, Calibrated: true, TTFT: 60}}
	if d := c.Check(Interactive, eps, 0, t0); !d.Admit {
		t.Fatalf("every per-engine test off: %+v", d)
	}
	eps[0].Queued = 8
	if d := c.Check(Interactive, eps, 0, t0); d.Admit || d.Reason != ReasonFleetQueue {
		t.Fatalf("fleet cap: %+v", d)
	}
}

func TestFleetQueueCap(t *testing.T) {
	c := New(Config{EngineCapacity: 4}, t0)
	// Derived: the sum of the engines' capacities.
	eps := []Endpoint{{Queued: 3, Calibrated: true}, {Queued: 4, Calibrated: true}}
	if got := c.FleetQueueCap(eps); got != 8 {
		t.Fatalf("fleet cap %d, want 4+4", got)
	}
	if d := c.Check(Interactive, eps, 0, t0); !d.Admit {
		t.Fatalf("7 of 8 queued: %+v", d)
	}
	eps[0].Queued = 4
	d := c.Check(Interactive, eps, 0, t0)
	if d.Admit || d.Reason != ReasonFleetQueue || d.Value != 8 || d.Limit != 8 {
		t.Fatalf("8 of 8 queued: %+v", d)
	}
	if got := New(Config{FleetQueueCap: 3}, t0).FleetQueueCap(eps); got != 3 {
		t.Errorf("configured fleet cap %d", got)
	}
	if got := New(Config{FleetQueueCap: -1}, t0).FleetQueueCap(eps); got != 0 {
		t.Errorf("disabled fleet cap %d", got)
	}
}

func TestBatchShedFirst(t *testing.T) {
	c := New(Config{TTFTBound: 10 * time.Second}, t0)
	for _, tc := range []struct {
		ttft               float64
		interactive, batch bool
	}{
		{ttft: 1, interactive: true, batch: true},
		{ttft: 5, interactive: true, batch: true},
		{ttft: 6, interactive: true, batch: false},
		{ttft: 10, interactive: true, batch: false},
		{ttft: 10.5, interactive: false, batch: false},
	} {
		eps := []Endpoint{{Queued: 1, Calibrated: true, TTFT: tc.ttft}}
		if got := c.Check(Interactive, eps, 0, t0).Admit; got != tc.interactive {
			t.Errorf("TTFT %v: interactive admitted %v, want %v", tc.ttft, got, tc.interactive)
		}
		d := c.Check(Batch, eps, 0, t0)
		if d.Admit != tc.batch {
			t.Errorf("TTFT %v: batch admitted %v, want %v", tc.ttft, d.Admit, tc.batch)
		}
		if !d.Admit && d.Limit != 5 {
			t.Errorf("batch limit %v, want half the bound", d.Limit)
		}
	}
	// The queue caps scale the same way; an empty queue admits everyone.
	c = New(Config{TTFTBound: 10 * time.Second, EngineCapacity: 8}, t0)
	eps := []Endpoint{{}, {}}
	if !c.Check(Batch, eps, 0, t0).Admit {
		t.Fatal("batch shed with empty queues")
	}
	eps[0].Queued = 4
	if d := c.Check(Batch, eps, 0, t0); d.Admit || d.Reason != ReasonQueue {
		t.Fatalf("batch at half the queue cap: %+v", d)
	}
	if !c.Check(Interactive, eps, 0, t0).Admit {
		t.Fatal("interactive shed at half the queue cap")
	}
	eps[1].Queued = 4
	if d := c.Check(Batch, []Endpoint{{Queued: 3}, {Queued: 5}}, 0, t0); d.Admit || d.Reason != ReasonFleetQueue {
		t.Fatalf("batch at half the fleet cap: %+v", d)
	}
	c = New(Config{BatchFraction: 0.25, EngineCapacity: 8}, t0)
	if d := c.Check(Batch, []Endpoint{{Queued: 2}}, 0, t0); d.Admit || d.Limit != 2 {
		t.Fatalf("batch fraction 0.25: %+v", d)
	}
}

func TestPrecheckShedsOnlyWhatNoEngineCouldTake(t *testing.T) {
	c := New(Config{TTFTBound: 10 * time.Second}, t0)
	eps := []Endpoint{
		{Queued: 1, Calibrated: true, TTFT: 14},
		{Queued: 1, Calibrated: true, TTFT: 9},
		{Queued: 1, Calibrated: true, TTFT: 15},
	}
	if d := c.Check(Interactive, eps, -1, t0); !d.Admit {
		t.Fatalf("one engine can take it: %+v", d)
	}
	eps[1].TTFT = 12
	d := c.Check(Interactive, eps, -1, t0)
	if d.Admit {
		t.Fatal("every engine is beyond its bound, yet admitted")
	}
	// Retry-After is the soonest any of them frees up: e1, 2 s.
	if d.Reason != ReasonTTFT || d.RetryAfter != 2 {
		t.Fatalf("precheck shed %+v, want ttft with Retry-After 2", d)
	}
	if d := c.Check(Interactive, nil, -1, t0); !d.Admit {
		t.Fatal("no endpoint: admission leaves the answer (503) to routing")
	}
}

func TestRetryAfterFromDrainRate(t *testing.T) {
	c := New(Config{EngineCapacity: 10}, t0)
	eps := []Endpoint{{Name: "e0", Queued: 30}, {Name: "e1", Queued: 30}}
	// Nothing has completed yet: the minimum.
	if d := c.Check(Interactive, eps, 0, t0); d.Admit || d.RetryAfter != 1 {
		t.Fatalf("no rate: %+v", d)
	}
	// 4 completions a second for a minute: the rate converges to 4/s.
	now := t0
	for range 240 {
		now = now.Add(250 * time.Millisecond)
		c.Completed("e0", now)
	}
	if r := c.Snapshot(now).CompletionRate; math.Abs(r-4) > 0.2 {
		t.Fatalf("completion rate %.2f, want ~4/s", r)
	}
	// The fleet holds 60 queued against a cap of 20: 41 must leave at 4/s: ~11 s.
	d := c.Check(Interactive, eps, 0, now)
	if d.Reason != ReasonFleetQueue || d.RetryAfter < 10 || d.RetryAfter > 12 {
		t.Fatalf("fleet drain: %+v, want Retry-After ~11", d)
	}
	// Capped: a client told to wait minutes may not come back.
	if got := clampRetry(1e6); got != MaxRetryAfter {
		t.Errorf("clamp %d", got)
	}
	if got := clampRetry(math.NaN()); got != 1 {
		t.Errorf("NaN → %d", got)
	}
}

// warm admits one request to e (starting its completion window at t0) and feeds it perSecond
// completions for a minute; it returns the time after.
func warm(t *testing.T, c *Controller, e Endpoint, perSecond float64) time.Time {
	t.Helper()
	if d := c.Check(Interactive, []Endpoint{{Name: e.Name}}, 0, t0); !d.Admit {
		t.Fatalf("idle endpoint shed: %+v", d)
	}
	now := t0
	gap := time.Duration(float64(time.Second) / perSecond)
	for now.Before(t0.Add(time.Minute)) {
		now = now.Add(gap)
		c.Completed(e.Name, now)
	}
	return now
}

// The wait for a free slot prices a queue the latency model has not yet seen: requests beyond
// the engine's batch capacity ahead of this one, drained at the engine's completion rate.
func TestSlotWait(t *testing.T) {
	c := New(Config{TTFTBound: time.Second, FleetQueueCap: -1, EngineCapacity: 8}, t0)
	e := Endpoint{Name: "e0", Calibrated: true, TTFT: 0.3}
	now := warm(t, c, e, 8) // 8 completions/s
	// 12 in flight (8 running, 4 waiting): the request is the 5th to wait, 5/8 s. The model
	// says 0.3 s; the larger wins, within the bound.
	e.InFlight, e.Queued = 12, 4
	if d := c.Check(Interactive, []Endpoint{e}, 0, now); !d.Admit {
		t.Fatalf("0.625 s slot wait: %+v", d)
	}
	// The request's own first token follows the wait: with 0.5 s of its own, 1.125 s.
	e.ServiceTTFT = 0.5
	if d := c.Check(Interactive, []Endpoint{e}, 0, now); d.Admit || math.Abs(d.Value-1.125) > 0.05 {
		t.Fatalf("slot wait then 0.5 s of service: %+v", d)
	}
	e.ServiceTTFT = 0
	// 16 in flight: 9/8 s > 1 s, whatever the model says.
	e.InFlight, e.Queued = 16, 8
	d := c.Check(Interactive, []Endpoint{e}, 0, now)
	if d.Admit || d.Reason != ReasonTTFT || math.Abs(d.Value-9.0/8) > 0.05 || d.RetryAfter != 1 {
		t.Fatalf("1.125 s slot wait: %+v", d)
	}
	// Another router replica has as many requests there: this one sees half the completions,
	// so the engine's rate is twice what it measures: 9/16 s, admitted.
	e.InFlight, e.RemoteInFlight, e.Queued = 8, 8, 8
	if d := c.Check(Interactive, []Endpoint{e}, 0, now); !d.Admit {
		t.Fatalf("shared engine: %+v, want the wait at twice the local rate", d)
	}
	// Uncalibrated model: the slot wait alone is the TTFT test, next to the queue cap.
	e.Calibrated, e.TTFT, e.InFlight, e.RemoteInFlight, e.Queued = false, 0, 16, 0, 7
	if d := c.Check(Interactive, []Endpoint{e}, 0, now); d.Admit || d.Reason != ReasonTTFT {
		t.Fatalf("uncalibrated, long slot wait: %+v", d)
	}
	// A queue cap's Retry-After drains the excess at the engine's rate: 30 queued, cap 8,
	// 23 to leave at 8/s: 3 s.
	c = New(Config{TTFTBound: -1, FleetQueueCap: -1, EngineCapacity: 8}, t0)
	now = warm(t, c, e, 8)
	e.InFlight, e.Queued = 38, 30
	if d := c.Check(Interactive, []Endpoint{e}, 0, now); d.Reason != ReasonQueue || d.RetryAfter != 3 {
		t.Fatalf("queue drain: %+v, want Retry-After 3", d)
	}
	// An endpoint that left the fleet has its rate forgotten.
	c.Forget("e0")
	if d := c.Check(Interactive, []Endpoint{e}, 0, now); d.RetryAfter != 1 {
		t.Fatalf("forgotten rate still used: %+v", d)
	}
}

// An engine whose KV cache is full runs what fits in it, far below its batch capacity: its
// waiting requests start as running ones finish, and that wait is priced at what it runs.
func TestSlotWaitWhenKVCacheIsFull(t *testing.T) {
	c := New(Config{TTFTBound: 5 * time.Second, FleetQueueCap: -1}, t0) // 256 slots
	e := Endpoint{Name: "e0", Calibrated: true, TTFT: 0.4}
	now := warm(t, c, e, 2) // 2 completions/s
	// 40 running, 30 waiting: with room in the cache the slots are free, and the model's
	// 0.4 s stands.
	e.InFlight, e.Queued, e.Running, e.KVUsage = 70, 30, 40, 0.6
	if d := c.Check(Interactive, []Endpoint{e}, 0, now); !d.Admit {
		t.Fatalf("cache 60 %% full: %+v, want admitted on the model's 0.4 s", d)
	}
	// The same queue with the cache full: 31 must finish first, 15.5 s at 2/s.
	e.KVUsage = 0.97
	d := c.Check(Interactive, []Endpoint{e}, 0, now)
	if d.Admit || d.Reason != ReasonTTFT || math.Abs(d.Value-15.5) > 0.5 {
		t.Fatalf("cache full: %+v, want shed on a 15.5 s wait", d)
	}
	// Not learned downwards: a scrape that saw nothing running leaves the batch capacity.
	e.Running = 0
	if d := c.Check(Interactive, []Endpoint{e}, 0, now); !d.Admit {
		t.Fatalf("cache full, nothing seen running: %+v, want the batch capacity", d)
	}
}

func TestShedCountsAndDecay(t *testing.T) {
	c := New(Config{}, t0)
	d := Decision{Reason: ReasonTTFT}
	for i := range 10 {
		c.Shed(d, Batch, t0.Add(time.Duration(i)*time.Millisecond))
	}
	c.Shed(Decision{Reason: ReasonFleetQueue}, Interactive, t0)
	s := c.Snapshot(t0.Add(10 * time.Millisecond))
	if s.Shed[ReasonTTFT][Batch] != 10 || s.Shed[ReasonFleetQueue][Interactive] != 1 || s.Shed[ReasonQueue] != nil {
		t.Fatalf("counts %+v", s.Shed)
	}
	if math.Abs(s.RecentShed-11) > 0.01 {
		t.Fatalf("recent shed %.3f, want ~11", s.RecentShed)
	}
	// One time constant later it has faded to 1/e.
	s = c.Snapshot(t0.Add(ShedWindow))
	if math.Abs(s.RecentShed-11/math.E) > 0.05 {
		t.Fatalf("after %s: %.3f, want %.3f", ShedWindow, s.RecentShed, 11/math.E)
	}
	// At a steady rate r it reads r × ShedWindow.
	c = New(Config{}, t0)
	now := t0
	for range 2000 {
		now = now.Add(100 * time.Millisecond)
		c.Shed(d, Interactive, now)
	}
	if got, want := c.Snapshot(now).RecentShed, 10*ShedWindow.Seconds(); math.Abs(got-want)/want > 0.05 {
		t.Fatalf("steady 10/s: %.1f, want ~%.0f", got, want)
	}
}
