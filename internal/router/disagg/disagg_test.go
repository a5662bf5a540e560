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
	"math/rand/v2"
	"testing"
)

// An 8B model on one H100: about 33K prefill tokens a second.
const secondsPerToken = 3e-5

func prefillTime(tokens int) float64 { return float64(tokens) * secondsPerToken }

// trained returns an estimator fed with exact transfers of a link with the given fixed cost and
// seconds per block, over a spread of sizes.
func trained(latency, perBlock float64) *Estimator {
	e := NewEstimator()
	for i := 0; i < 60; i++ {
		b := 10 + (i*97)%900
		e.ObserveTransfer(b, latency+perBlock*float64(b))
	}
	return e
}

// costs prices a request of uncached tokens and a 200-token answer the way the router does with
// identical engines: whole on an engine with wholeDecodes streams and wholeQueue tokens queued;
// split with prefillQueue tokens queued on an idle prefill engine and a decode engine holding
// none of the prompt, as busy as the whole engine.
func costs(uncached, wholeDecodes, wholeQueue, prefillQueue int) Costs {
	const intercept, itl, perStream = 0.03, 0.02, 5e-5
	return Costs{
		WholeTTFT: intercept + prefillTime(wholeQueue+uncached), WholeUncached: uncached, WholeDecodes: wholeDecodes,
		PrefillTTFT: intercept + prefillTime(prefillQueue+uncached), TransferBlocks: uncached / 16,
		DecodeStep: intercept, OutputTokens: 200, WholeITL: itl, SplitITL: itl,
		WholeITLPerStream: perStream, SplitITLPerStream: perStream, SplitDecodes: wholeDecodes,
	}
}

func TestDecideAuto(t *testing.T) {
	rdma := trained(0.001, 2<<20/40e9)   // 2 MiB blocks at 40 GB/s
	tcp := trained(0.003, 2<<20/312.5e6) // the same blocks over 2.5 Gb/s
	for _, tc := range []struct {
		name  string
		est   *Estimator
		k     Costs
		split bool
		// short: kept whole by the break-even gate (the prefill saves less than the split costs)
		short bool
	}{
		{"short prompt stays whole", rdma, costs(200, 32, 0, 0), false, true},
		{"long uncached prompt on busy decodes splits", rdma, costs(8000, 32, 0, 0), true, false},
		{"long prompt, one stream decoding, splits", rdma, costs(8000, 1, 0, 0), true, false},
		{"long prompt on an idle engine stays whole", rdma, costs(8000, 0, 0, 0), false, false},
		{"saturated prefill pool keeps it whole", rdma, costs(8000, 4, 0, 200000), false, false},
		{"many streams to stall outweigh a queued prefill pool", rdma, costs(8000, 64, 0, 50000), true, false},
		{"queued whole engine makes splitting pay even without decodes", rdma, costs(4000, 0, 20000, 0), true, false},
		{"slow TCP transfer keeps it whole", tcp, costs(8000, 4, 0, 0), false, false},
		{"cached on the whole engine stays whole", rdma, func() Costs {
			k := costs(8000, 32, 0, 0)
			k.WholeUncached, k.WholeTTFT = 64, 0.03+prefillTime(64)
			return k
		}(), false, true},
		{"prefill engine as busy decoding as the whole one stays whole", rdma, func() Costs {
			k := costs(8000, 32, 0, 0)
			k.PrefillUncached, k.PrefillDecodes = 8000, 32
			return k
		}(), false, false},
		{"decode engine already holding the prompt splits cheaper", tcp, func() Costs { k := costs(8000, 32, 0, 0); k.TransferBlocks = 0; return k }(), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Config{Mode: Auto}.Decide(tc.est, tc.k, prefillTime)
			if v.Split != tc.split {
				t.Fatalf("split = %v, want %v (whole cost %.4f s, split cost %.4f s)", v.Split, tc.split, v.WholeCost, v.SplitCost)
			}
			want := map[bool]string{true: "split", false: "whole"}[tc.split]
			if tc.short {
				want = "short"
			}
			if v.Reason != want {
				t.Fatalf("reason %q, want %q", v.Reason, want)
			}
			if !(v.WholeCost > 0) || !(v.SplitCost > 0) {
				t.Fatalf("costs not reported: %+v", v)
			}
		})
	}
}

// The decision is a break-even point: past the prompt length where splitting first pays, it
// keeps paying, and the point moves out as the transfer gets slower.
func TestDecideBreakEvenIsMonotone(t *testing.T) {
	breakEven := func(e *Estimator) int {
		first := -1
		for n := 16; n <= 32768; n += 16 {
			split := Config{Mode: Auto}.Decide(e, costs(n, 1, 0, 0), prefillTime).Split
			switch {
			case split && first < 0:
				first = n
			case !split && first >= 0:
				t.Fatalf("splits at %d tokens but not at %d", first, n)
			}
		}
		return first
	}
	fast, slow := breakEven(trained(0.001, 5e-5)), breakEven(trained(0.003, 1e-3))
	if fast < 0 || fast > 4096 {
		t.Fatalf("over a fast link splitting should pay from a few thousand tokens, got break-even %d", fast)
	}
	if slow >= 0 && slow <= fast {
		t.Fatalf("a slower link must move the break-even out: fast %d, slow %d", fast, slow)
	}
}

func TestDecideStallWeight(t *testing.T) {
	e := trained(0.001, 5e-5)
	k := costs(3000, 8, 0, 3000) // the prefill pool is as busy as the request
	light := Config{Mode: Auto, StallWeight: 0.1}.Decide(e, k, prefillTime)
	heavy := Config{Mode: Auto, StallWeight: 10}.Decide(e, k, prefillTime)
	if light.Split || !heavy.Split {
		t.Fatalf("a light stall weight should keep it whole and a heavy one split: light %+v, heavy %+v", light, heavy)
	}
	// The weight prices what other streams suffer: the stall, on the whole side, more than the
	// one stream the split adds to the decode engine.
	if !(heavy.WholeCost-light.WholeCost > heavy.SplitCost-light.SplitCost) {
		t.Fatalf("the weight should price the stall above the added stream: light %+v, heavy %+v", light, heavy)
	}
}

func TestDecidePinnedModes(t *testing.T) {
	e := NewEstimator()
	long, short := costs(8000, 0, 0, 1e6), costs(100, 64, 0, 0)
	for _, tc := range []struct {
		cfg          Config
		long, short  bool
		reason       string
		cachedSplits bool
	}{
		{Config{Mode: Always}, true, true, "always", true},
		{Config{Mode: Never}, false, false, "never", false},
		{Config{Mode: Threshold, ThresholdTokens: 1024}, true, false, "threshold", false},
		{Config{Mode: Threshold, ThresholdTokens: 50}, true, true, "threshold", false},
	} {
		l, s := tc.cfg.Decide(e, long, prefillTime), tc.cfg.Decide(e, short, prefillTime)
		if l.Split != tc.long || s.Split != tc.short || l.Reason != tc.reason || s.Reason != tc.reason {
			t.Errorf("%+v: long %+v, short %+v; want split %v/%v, reason %q", tc.cfg, l, s, tc.long, tc.short, tc.reason)
		}
		cached := costs(0, 0, 0, 0)
		if got := tc.cfg.Decide(e, cached, prefillTime).Split; got != tc.cachedSplits {
			t.Errorf("%+v: fully cached prompt split = %v, want %v", tc.cfg, got, tc.cachedSplits)
		}
	}
}

func TestDecideBadInputs(t *testing.T) {
	e := trained(0.001, 5e-5)
	nan := math.NaN()
	for name, k := range map[string]Costs{
		"NaN whole TTFT":   func() Costs { k := costs(8000, 32, 0, 0); k.WholeTTFT = nan; return k }(),
		"Inf prefill TTFT": func() Costs { k := costs(8000, 32, 0, 0); k.PrefillTTFT = math.Inf(1); return k }(),
		"NaN decode step":  func() Costs { k := costs(8000, 32, 0, 0); k.DecodeStep = nan; return k }(),
	} {
		if v := (Config{Mode: Auto}).Decide(e, k, prefillTime); v.Split || v.Reason != "invalid" {
			t.Errorf("%s: %+v, want whole for reason invalid", name, v)
		}
	}
	if v := (Config{Mode: Auto}).Decide(nil, costs(8000, 32, 0, 0), prefillTime); v.Split {
		t.Errorf("no estimator: %+v, want whole", v)
	}
	if v := (Config{Mode: Auto}).Decide(e, costs(8000, 32, 0, 0), nil); v.Split {
		t.Errorf("no prefill model: %+v, want whole", v)
	}
	// A broken prefill model prices no stall; negative predictions count as zero.
	if v := (Config{Mode: Auto}).Decide(e, costs(8000, 32, 0, 0), func(int) float64 { return nan }); v.Split {
		t.Errorf("NaN prefill time: %+v, want whole", v)
	}
	k := costs(8000, 32, 0, 0)
	k.WholeTTFT, k.PrefillTTFT = -5, -5
	if v := (Config{Mode: Auto}).Decide(e, k, prefillTime); v.WholeCost < 0 || v.SplitCost < 0 {
		t.Errorf("negative predictions leaked into the costs: %+v", v)
	}
}

func TestEstimatorLearnsLineFromNoise(t *testing.T) {
	const latency, perBlock = 0.004, 2e-4
	rng := rand.New(rand.NewPCG(1, 2))
	e := NewEstimator()
	for i := 0; i < 400; i++ {
		b := rng.IntN(2000)
		noise := (rng.Float64() - 0.5) * 0.2 * (latency + perBlock*float64(b))
		e.ObserveTransfer(b, latency+perBlock*float64(b)+noise)
	}
	lat, per := e.Line()
	if math.Abs(per-perBlock)/perBlock > 0.1 {
		t.Errorf("learned %.3g s/block, want %.3g within 10%%", per, perBlock)
	}
	if math.Abs(lat-latency) > 0.01 {
		t.Errorf("learned latency %.4f s, want %.4f", lat, latency)
	}
	want := latency + perBlock*1000
	if got := e.TransferSeconds(1000); math.Abs(got-want)/want > 0.1 {
		t.Errorf("TransferSeconds(1000) = %.4f, want %.4f within 10%%", got, want)
	}
	if e.TransferSeconds(0) != 0 || e.TransferSeconds(-3) != 0 {
		t.Errorf("moving nothing must cost nothing")
	}
	if e.Observations() != 400 {
		t.Errorf("observations %d, want 400", e.Observations())
	}
}

func TestEstimatorIgnoresBrokenMeasurements(t *testing.T) {
	e := trained(0.002, 1e-4)
	before := e.TransferSeconds(500)
	n := e.Observations()
	for _, s := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		e.ObserveTransfer(500, s)
	}
	e.ObserveTransfer(-1, 0.5)
	if e.Observations() != n || e.TransferSeconds(500) != before {
		t.Fatalf("broken measurements moved the line: %d observations, %.5f s (was %d, %.5f)", e.Observations(), e.TransferSeconds(500), n, before)
	}
	// A negative time (the decode step was over-predicted) is a transfer that cost nothing.
	for i := 0; i < 200; i++ {
		e.ObserveTransfer(500, -0.01)
	}
	if got := e.TransferSeconds(500); !(got >= 0) || got > before/2 {
		t.Fatalf("after many near-free transfers TransferSeconds(500) = %v (was %v)", got, before)
	}
}

func TestPickDecode(t *testing.T) {
	tcp := trained(0.003, 2<<20/312.5e6)
	if got := PickDecode(tcp, nil, 100); got != -1 {
		t.Fatalf("no option: got %d", got)
	}
	// Over a slow link the engine that holds the prompt wins despite more streams.
	opts := []DecodeOption{
		{LackingBlocks: 500, FirstStep: 0.02, ITL: 0.010, Streams: 2},
		{LackingBlocks: 0, FirstStep: 0.02, ITL: 0.012, Streams: 10},
	}
	if got := PickDecode(tcp, opts, 100); got != 1 {
		t.Fatalf("slow link: picked %d, want the holder", got)
	}
	// Over a fast link, a long answer goes where tokens come faster.
	fast := trained(0.001, 5e-5)
	opts[1].ITL = 0.03
	if got := PickDecode(fast, opts, 500); got != 0 {
		t.Fatalf("fast link, long answer: picked %d, want the faster decoder", got)
	}
	// Ties go to the engine with the fewest streams.
	tied := []DecodeOption{{FirstStep: 0.02, Streams: 9}, {FirstStep: 0.02, Streams: 3}, {FirstStep: 0.0201, Streams: 1}}
	if got := PickDecode(fast, tied, 100); got != 2 {
		t.Fatalf("tie: picked %d, want the least loaded", got)
	}
	if got := PickDecode(fast, []DecodeOption{{FirstStep: math.NaN()}, {FirstStep: 0.5}}, 10); got != 1 {
		t.Fatalf("NaN cost: picked %d", got)
	}
}

func TestParseModeAndValidate(t *testing.T) {
	for in, want := range map[string]Mode{"auto": Auto, "ALWAYS": Always, "Never": Never, "threshold": Threshold} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseMode("sometimes"); err == nil {
		t.Error("ParseMode accepted an unknown mode")
	}
	for _, c := range []Config{{Mode: "x"}, {Mode: Threshold}, {Mode: Auto, BlockSize: -1}, {Mode: Auto, StallWeight: math.NaN()}, {Mode: Auto, StallWeight: -1}} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted a bad config", c)
		}
	}
	for _, c := range []Config{{Mode: Auto}, {Mode: Threshold, ThresholdTokens: 512}, {Mode: Never, BlockSize: 16}} {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", c, err)
		}
	}
}

// The short-prefill gate keeps a short prompt whole on an idle prefill pool, and lifts while
// the prefill engines are busy with legs: the costs decide then.
func TestDecideShortGateLiftsWhileLegsFlow(t *testing.T) {
	rdma := trained(0.001, 2<<20/40e9)
	k := costs(300, 64, 0, 0)
	if v := (Config{Mode: Auto}).Decide(rdma, k, prefillTime); v.Split || v.Reason != "short" {
		t.Fatalf("idle prefill pool: %+v, want kept whole by the gate", v)
	}
	k.PrefillDuty = 0.3
	v := Config{Mode: Auto}.Decide(rdma, k, prefillTime)
	if v.Reason == "short" || v.Split != (v.SplitCost < v.WholeCost) {
		t.Fatalf("busy prefill pool: %+v, want the costs to decide", v)
	}
}
