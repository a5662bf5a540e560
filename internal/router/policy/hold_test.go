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

package policy

import "testing"

// The router holds a request only when every ready endpoint has more than HoldAfter of prefill
// queued (priced by the TTFT model's slope); one endpoint that can start it soon is enough to
// route it now.
func TestShouldHoldWhenEveryEndpointIsBacklogged(t *testing.T) {
	p := New(Config{Kind: Auto})
	if got := p.Config().HoldAfter; got != DefaultHoldAfter {
		t.Fatalf("HoldAfter default %v, want %v", got, DefaultHoldAfter)
	}
	eps := fleet(3)
	// The prior slope prices the tokens; a queue of many seconds on every endpoint.
	backlog := int(10/p.slope("e0")) + 1
	for i := range eps {
		eps[i].Load.QueuedPrefillTokens = backlog
	}
	if !p.ShouldHold(eps) {
		t.Fatal("every endpoint 10 s behind: not held")
	}
	eps[1].Load = Load{RemotePrefillTokens: int(0.4 * DefaultHoldAfter / p.slope("e1"))}
	if p.ShouldHold(eps) {
		t.Fatal("e1 can start soon: held anyway")
	}
	if !p.CanStart(&eps[1]) || p.CanStart(&eps[0]) {
		t.Fatal("CanStart disagrees with the backlogs")
	}
	// A not-ready endpoint starts nothing, and a fleet with none ready is not held (there is
	// nothing to wait for: the caller answers no endpoint).
	eps[1].Ready = false
	if !p.ShouldHold(eps) {
		t.Fatal("the only idle endpoint is not ready: not held")
	}
	for i := range eps {
		eps[i].Ready = false
	}
	if p.ShouldHold(eps) {
		t.Fatal("held with no ready endpoint")
	}
}

// An endpoint at the admission limit cannot start a request however short its queue.
func TestShouldHoldAtAdmissionLimit(t *testing.T) {
	p := New(Config{Kind: Auto, MaxInFlight: 4})
	eps := fleet(2)
	eps[0].Load.InFlight = 4
	eps[1].Load = Load{InFlight: 1, RemoteInFlight: 3}
	if !p.ShouldHold(eps) {
		t.Fatal("both endpoints full: not held")
	}
	eps[1].Load.RemoteInFlight = 2
	if p.ShouldHold(eps) {
		t.Fatal("e1 has room: held")
	}
}

// A negative HoldAfter turns holding off whatever the load.
func TestShouldHoldDisabled(t *testing.T) {
	p := New(Config{Kind: Auto, HoldAfter: -1})
	eps := fleet(2)
	for i := range eps {
		eps[i].Load.QueuedPrefillTokens = 1 << 24
	}
	if p.ShouldHold(eps) || !p.CanStart(&eps[0]) {
		t.Fatal("holding is off but the policy holds")
	}
}

// The hold threshold follows the learned prefill speed: the same queue holds on a slow fleet
// and not on a fast one.
func TestShouldHoldFollowsLearnedSlope(t *testing.T) {
	eps := fleet(2)
	for i := range eps {
		eps[i].Load.QueuedPrefillTokens = 20000
	}
	slow, fast := New(Config{Kind: Auto}), New(Config{Kind: Auto})
	for k := range 20 {
		x := float64(1000 * (k + 1))
		for _, e := range eps {
			slow.ObserveTTFT(e.Name, int(x), 0.02+x*1e-4) // 10K tokens/s: 2 s queued
			fast.ObserveTTFT(e.Name, int(x), 0.02+x*1e-5) // 100K tokens/s: 0.2 s queued
		}
	}
	if !slow.ShouldHold(eps) {
		t.Fatal("2 s of prefill queued everywhere: not held")
	}
	if fast.ShouldHold(eps) {
		t.Fatal("0.2 s of prefill queued: held")
	}
}

// max_tokens is a cap: once enough requests have finished, a request is priced at the share of
// its cap that they used, not at the cap itself (and never below one token).
func TestExpectedOutputLearnsShareOfCap(t *testing.T) {
	p := New(Config{Kind: Auto, DefaultMaxTokens: 200})
	req := Request{MaxTokens: 1000}
	if got := p.expectedOutput(req); got != 1000 {
		t.Fatalf("before any observation: %d, want the cap", got)
	}
	for range outputCalibrated - 1 {
		p.ObserveOutput(1000, 250)
	}
	if got := p.expectedOutput(req); got != 1000 {
		t.Fatalf("too few observations already used: %d", got)
	}
	p.ObserveOutput(1000, 250)
	if got := p.expectedOutput(req); got != 250 {
		t.Fatalf("after requests that used a quarter of their cap: %d, want 250", got)
	}
	// Requests without max_tokens learn their own share, of DefaultMaxTokens.
	if got := p.expectedOutput(Request{}); got != 200 {
		t.Fatalf("uncapped before observations: %d, want DefaultMaxTokens", got)
	}
	for range outputCalibrated {
		p.ObserveOutput(0, 400) // longer than the default: the share is capped at 1
		p.ObserveOutput(1000, 0)
	}
	if got := p.expectedOutput(Request{}); got != 200 {
		t.Fatalf("uncapped: %d, want 200", got)
	}
	if got := p.expectedOutput(req); !(got >= 50 && got < 250) {
		t.Fatalf("after empty answers: %d, want it lower but above the floor", got)
	}
	p.ObserveOutput(1000, -1) // ignored
}
