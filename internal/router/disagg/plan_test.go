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

package disagg

import (
	"math"
	"testing"

	"github.com/kvrouter/kvrouter/internal/router/policy"
)

const testBlock = 64

// pdFleet is two prefill and two decode engines, idle, holding nothing of the prompt.
func pdFleet() []Engine {
	eps := []Engine{{Prefill: true}, {Prefill: true}, {}, {}}
	for i, n := range []string{"p0", "p1", "d0", "d1"} {
		eps[i].Endpoint = policy.Endpoint{Name: n, Ready: true}
	}
	return eps
}

func planReq(prompt int) policy.Request {
	return policy.Request{PromptTokens: prompt, Tokenized: true, MaxTokens: 64, TieBreak: 3}
}

func role(eps []Engine, name string) (prefill, found bool) {
	for _, e := range eps {
		if e.Name == name {
			return e.Prefill, true
		}
	}
	return false, false
}

// A fleet without a prefill pool is aggregated: the plan is the policy's own pick.
func TestPlanAggregatedFleetIsThePolicyPick(t *testing.T) {
	eps := pdFleet()
	views := make([]policy.Endpoint, len(eps))
	for i := range eps {
		eps[i].Prefill = false
		views[i] = eps[i].Endpoint
	}
	eps[2].Cached = policy.Cached{GPU: 6400}
	views[2].Cached = eps[2].Cached
	cfg := Config{Mode: Auto, BlockSize: testBlock}
	pol := policy.New(policy.Config{Kind: policy.Auto, BlockSize: testBlock})
	plan := cfg.Plan(PlanInput{Policy: pol, Estimator: NewEstimator(), Request: planReq(8000), Engines: eps, WholeOnAny: true})
	want := policy.New(policy.Config{Kind: policy.Auto, BlockSize: testBlock}).Pick(planReq(8000), views)
	if plan.Split || plan.Verdict.Reason != "aggregated" || plan.Whole.Endpoint != want.Endpoint || plan.Whole.UncachedTokens != want.UncachedTokens {
		t.Fatalf("aggregated fleet: plan %+v, policy picks %+v", plan, want)
	}
}

// Planning evaluates; only Commit advances the policy (here its round-robin cursor), once.
func TestPlanCommitsOncePerRequest(t *testing.T) {
	eps := pdFleet()
	cfg := Config{Mode: Always, BlockSize: testBlock}
	pol := policy.New(policy.Config{Kind: policy.RoundRobin, BlockSize: testBlock})
	in := PlanInput{Policy: pol, Estimator: NewEstimator(), Request: planReq(8000), Engines: eps}
	first := cfg.Plan(in)
	if !first.Split {
		t.Fatalf("Always on a split fleet: %+v", first)
	}
	for i := 0; i < 4; i++ {
		if again := cfg.Plan(in); again.Prefill.Endpoint != first.Prefill.Endpoint || again.Whole.Endpoint != first.Whole.Endpoint {
			t.Fatalf("plan %d moved the policy without a commit: %+v, then %+v", i, first, again)
		}
	}
	first.Commit(pol)
	if next := cfg.Plan(in); next.Prefill.Endpoint == first.Prefill.Endpoint {
		t.Fatalf("the commit did not advance the prefill pick: %s twice", first.Prefill.Endpoint)
	}
}

// A split plan's legs come from their pools; the decode engine that already holds most of the
// prompt pulls the fewest blocks and wins; whole requests stay off the prefill pool unless
// WholeOnAny.
func TestPlanLegsAndPools(t *testing.T) {
	eps := pdFleet()
	eps[3].Cached = policy.Cached{GPU: 4096} // d1 holds 64 blocks of the prompt
	cfg := Config{Mode: Always, BlockSize: testBlock}
	for i := 0; i < 20; i++ {
		req := planReq(8000)
		req.TieBreak = uint64(i)
		plan := cfg.Plan(PlanInput{Policy: policy.New(policy.Config{Kind: policy.Auto, BlockSize: testBlock}),
			Estimator: NewEstimator(), Request: req, Engines: eps, WholeOnAny: true})
		if pre, ok := role(eps, plan.Prefill.Endpoint); !plan.Split || !ok || !pre {
			t.Fatalf("prefill leg not on the prefill pool: %+v", plan)
		}
		if plan.Decode != "d1" || plan.TransferBlocks != (8000-1)/testBlock-4096/testBlock {
			t.Fatalf("decode leg %s pulling %d blocks, want d1 pulling %d", plan.Decode, plan.TransferBlocks, (8000-1)/testBlock-4096/testBlock)
		}
		if plan.DecodeWhole.Endpoint != "d1" || plan.DecodeWhole.UncachedTokens != 8000-4096 {
			t.Fatalf("fallback on the decode engine: %+v", plan.DecodeWhole)
		}
		if pre, _ := role(eps, plan.Whole.Endpoint); pre {
			t.Fatalf("Always kept a whole option on the prefill pool: %s", plan.Whole.Endpoint)
		}
	}
	// Never, whole on any engine: a busy decode pool sends the request to an idle prefill engine.
	for i := 2; i < 4; i++ {
		eps[i].Load = policy.Load{InFlight: 30, QueuedPrefillTokens: 40000}
	}
	never := Config{Mode: Never, BlockSize: testBlock}
	plan := never.Plan(PlanInput{Policy: policy.New(policy.Config{Kind: policy.Auto, BlockSize: testBlock}),
		Estimator: NewEstimator(), Request: planReq(8000), Engines: eps, WholeOnAny: true})
	if pre, _ := role(eps, plan.Whole.Endpoint); plan.Split || !pre || plan.Verdict.Reason != "never" {
		t.Fatalf("Never with whole on any engine: %+v", plan)
	}
	plan = never.Plan(PlanInput{Policy: policy.New(policy.Config{Kind: policy.Auto, BlockSize: testBlock}),
		Estimator: NewEstimator(), Request: planReq(8000), Engines: eps})
	if pre, _ := role(eps, plan.Whole.Endpoint); plan.Split || pre {
		t.Fatalf("Never with whole on the decode pool: %+v", plan)
	}
}

// A whole request is kept off a prefill engine busy with the legs committed to it (they would
// stall its decode), and uses it again once those legs are long past or without a clock.
func TestPlanKeepsWholeRequestsAwayFromPrefillLegs(t *testing.T) {
	pol := policy.New(policy.Config{Kind: policy.Auto, BlockSize: testBlock})
	for k := 0; k < 20; k++ {
		for _, n := range []string{"p0", "d0"} {
			pol.ObserveITL(n, float64(1+k%8), 0.01+0.0005*float64(k%8))
		}
	}
	eps := []Engine{{Endpoint: policy.Endpoint{Name: "p0", Ready: true}, Prefill: true},
		{Endpoint: policy.Endpoint{Name: "d0", Ready: true, Load: policy.Load{InFlight: 3}}}}
	req := policy.Request{PromptTokens: 300, Tokenized: true, MaxTokens: 300, TieBreak: 1}
	est := NewEstimator()
	cfg := Config{Mode: Auto, BlockSize: testBlock}
	plan := func(now float64) Plan {
		return cfg.Plan(PlanInput{Policy: pol, Estimator: est, Request: req, Engines: eps, WholeOnAny: true, Now: now})
	}
	if p := plan(100); p.Split || p.Whole.Endpoint != "p0" {
		t.Fatalf("no legs yet: the idle prefill engine should take the request whole, got %+v", p)
	}
	for s := 0.0; s < 30; s++ {
		est.notePrefillLeg("p0", 70+s, 0.5) // half of p0's time on legs for the last 30 s
	}
	if d := est.PrefillDuty("p0", 100); d < 0.2 || d > 0.6 {
		t.Fatalf("duty %v after half the time on legs", d)
	}
	if p := plan(100); p.Split || p.Whole.Endpoint != "d0" {
		t.Fatalf("a prefill engine busy with legs kept the whole request: %+v", p)
	}
	if p := plan(0); p.Whole.Endpoint != "p0" {
		t.Fatalf("without a clock nothing is charged, got %+v", p)
	}
	if d := est.PrefillDuty("p0", 400); d > 0.01 {
		t.Fatalf("duty %v five minutes after the last leg", d)
	}
	if p := plan(400); p.Whole.Endpoint != "p0" {
		t.Fatalf("legs long past still keep the request away: %+v", p)
	}
}

// With the decode pool out of room (requests waiting there for memory), a request is neither
// split nor sent whole into that queue: the prefill engine serves it whole, when whole requests
// may use it. Requests waiting on a decode engine with room in its cache (decode legs pulling
// their KV cache, a step's token budget) do not make it full.
func TestPlanKeepsWholeRequestsOffAFullDecodePool(t *testing.T) {
	eps := []Engine{{Endpoint: policy.Endpoint{Name: "p0", Ready: true, Load: policy.Load{InFlight: 2, QueuedPrefillTokens: 30000}}, Prefill: true},
		{Endpoint: policy.Endpoint{Name: "d0", Ready: true}}}
	req := policy.Request{PromptTokens: 12000, Tokenized: true, MaxTokens: 64, TieBreak: 1}
	cfg := Config{Mode: Auto, BlockSize: testBlock}
	plan := func(any bool) Plan {
		return cfg.Plan(PlanInput{Policy: policy.New(policy.Config{Kind: policy.Auto, BlockSize: testBlock}),
			Estimator: NewEstimator(), Request: req, Engines: eps, WholeOnAny: any})
	}
	if p := plan(true); p.Whole.Endpoint != "d0" {
		t.Fatalf("with room on the decode pool the idle decode engine is the whole option, got %+v", p.Whole)
	}
	eps[1].Waiting = 3
	if p := plan(true); p.Verdict.Reason == "decode-full" || p.Whole.Endpoint != "d0" {
		t.Fatalf("requests waiting on a decode engine with its cache 0 %% used made it full: %+v", p)
	}
	eps[1].Load.KVUsage = 0.85
	if p := plan(true); p.Split || p.Verdict.Reason != "decode-full" || p.Whole.Endpoint != "p0" {
		t.Fatalf("full decode pool: %+v", p)
	}
	eps[1].Waiting = 0
	if p := plan(true); p.Verdict.Reason == "decode-full" {
		t.Fatalf("a decode engine at 85 %% with nothing waiting made it full: %+v", p)
	}
	eps[1].Waiting, eps[1].Load.KVUsage = 3, 0.85
	if p := plan(false); p.Whole.Endpoint != "d0" {
		t.Fatalf("whole requests kept on the decode pool must stay there, got %+v", p.Whole)
	}
}

// The duty forgets an engine that left the fleet, and a broken clock (infinite) neither records
// a leg nor freezes the decay of the ones recorded.
func TestPrefillDutyForgetAndBrokenClock(t *testing.T) {
	est := NewEstimator()
	est.notePrefillLeg("p0", 10, 15)
	if d := est.PrefillDuty("p0", 10); !(d > 0.4) {
		t.Fatalf("duty %v after 15 s of legs in a 30 s window", d)
	}
	est.notePrefillLeg("p0", math.Inf(1), 15)
	if d := est.PrefillDuty("p0", math.Inf(1)); d != 0 {
		t.Fatalf("duty %v at an infinite clock", d)
	}
	if d := est.PrefillDuty("p0", 400); d > 0.01 {
		t.Fatalf("duty %v long after the last leg: an infinite clock froze the decay", d)
	}
	est.notePrefillLeg("p0", 500, 15)
	est.Forget("p0")
	if d := est.PrefillDuty("p0", 500); d != 0 {
		t.Fatalf("duty %v of a forgotten engine", d)
	}
}
