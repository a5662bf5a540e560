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

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestAutoStaysOnPrefixHolder(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(4)
	eps[2].Cached.GPU = 6000
	// The holder is a little busier than the others, far from saturated.
	eps[2].Load = Load{InFlight: 2, QueuedPrefillTokens: 2400}
	d := p.Pick(prefillReq(7200), eps)
	if d.Endpoint != "e2" || d.Reason != ReasonPrefix {
		t.Fatalf("got %s (%s), want e2 (prefix)", d.Endpoint, d.Reason)
	}
	if d.CachedTokens != 6000 || d.UncachedTokens != 1200 || d.PrefillWork != 3600 {
		t.Fatalf("accounting: cached %d uncached %d work %d", d.CachedTokens, d.UncachedTokens, d.PrefillWork)
	}
	if d.Shape != ShapePrefill {
		t.Fatalf("shape %s, want prefill", d.Shape)
	}
	if len(d.Fallbacks) != 3 {
		t.Fatalf("fallbacks %v", d.Fallbacks)
	}
}

func TestAutoReleasesSaturatedHolder(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(3)
	eps[0].Cached.GPU = 6000
	eps[0].Load = Load{InFlight: 40, QueuedPrefillTokens: 60000}
	eps[1].Load = Load{InFlight: 1, QueuedPrefillTokens: 1000}
	d := p.Pick(prefillReq(7200), eps)
	if d.Endpoint != "e2" || d.Reason != ReasonSaturated {
		t.Fatalf("got %s (%s), want idle e2 (saturated)", d.Endpoint, d.Reason)
	}
	if d.Fallbacks[0] != "e1" || d.Fallbacks[1] != "e0" {
		t.Fatalf("fallbacks %v, want [e1 e0]", d.Fallbacks)
	}
}

// The gate scales with the request: the same holder queue that releases a small request (whose
// recompute elsewhere is cheap) keeps a large one (whose recompute is expensive).
func TestSaturationScalesWithRecomputeCost(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(2)
	eps[0].Load = Load{InFlight: 5, QueuedPrefillTokens: 20000}
	eps[0].Cached.GPU = 30000
	if d := p.Pick(Request{PromptTokens: 32000, Tokenized: true, MaxTokens: 100}, eps); d.Endpoint != "e0" {
		t.Fatalf("large cached prompt moved off its holder: %+v", d)
	}
	eps[0].Cached.GPU = 3000
	if d := p.Pick(Request{PromptTokens: 3200, Tokenized: true, MaxTokens: 100}, eps); d.Endpoint != "e1" {
		t.Fatalf("small prompt stayed behind a 20K-token queue: %+v", d)
	}
}

// DecodeBound keeps the plain stream-count gate (Auto's is cost-based: see the tests below).
func TestDecodeBoundSaturationOnStreams(t *testing.T) {
	p := New(Config{Kind: DecodeBound})
	eps := fleet(2)
	eps[0].Cached.GPU = 480
	req := Request{PromptTokens: 500, Tokenized: true, MaxTokens: 500}
	eps[0].Load.InFlight = 4
	if d := p.Pick(req, eps); d.Endpoint != "e0" || d.Shape != ShapeDecode {
		t.Fatalf("holder with 4 streams vs 0 released or wrong shape: %+v", d)
	}
	eps[0].Load.InFlight = 5
	if d := p.Pick(req, eps); d.Endpoint != "e1" || d.Reason != ReasonSaturated {
		t.Fatalf("holder with 5 streams vs 0 kept: %+v", d)
	}
	// Relative limit once everyone is busy: 1.5 × 20 = 30.
	eps[1].Load.InFlight = 20
	eps[0].Load.InFlight = 30
	if d := p.Pick(req, eps); d.Endpoint != "e0" {
		t.Fatalf("holder at 30 vs 20 released: %+v", d)
	}
	eps[0].Load.InFlight = 31
	if d := p.Pick(req, eps); d.Endpoint != "e1" {
		t.Fatalf("holder at 31 vs 20 kept: %+v", d)
	}
}

func TestTargetTTFTReleasesEarlier(t *testing.T) {
	eps := fleet(2)
	eps[0].Cached.GPU = 6000
	eps[0].Load = Load{InFlight: 4, QueuedPrefillTokens: 8000}
	// Predicted: holder 0.05+0.0001×9200 = 0.97 s, other 0.05+0.72 = 0.77 s: under the factor.
	if d := New(Config{}).Pick(prefillReq(7200), eps); d.Endpoint != "e0" {
		t.Fatalf("without target: %+v", d)
	}
	if d := New(Config{TargetTTFT: 0.9}).Pick(prefillReq(7200), eps); d.Endpoint != "e1" {
		t.Fatalf("with a 0.9 s target: %+v", d)
	}
}

// A slower endpoint (fitted from its TTFTs) saturates at a shorter queue than a fast one.
func TestLatencyModelMakesSaturationPerEndpoint(t *testing.T) {
	p := New(Config{Kind: Auto})
	for i := 0; i < 50; i++ {
		x := 1000 + 500*i%20000
		p.ObserveTTFT("fast", x, 0.02+float64(x)/20000) // 20K tok/s
		p.ObserveTTFT("slow", x, 0.02+float64(x)/2500)  // 2.5K tok/s
	}
	eps := []Endpoint{{Name: "fast", Ready: true}, {Name: "slow", Ready: true}}
	// Same cached prefix on each, same queue: the slow one is released, the fast one kept.
	eps[1].Cached.GPU = 6000
	eps[1].Load = Load{InFlight: 2, QueuedPrefillTokens: 4000}
	if d := p.Pick(prefillReq(7200), eps); d.Endpoint != "fast" {
		t.Fatalf("slow holder kept: %+v", d)
	}
	eps[1].Cached.GPU, eps[0].Cached.GPU = 0, 6000
	eps[1].Load, eps[0].Load = Load{}, Load{InFlight: 2, QueuedPrefillTokens: 4000}
	if d := p.Pick(prefillReq(7200), eps); d.Endpoint != "fast" || d.Reason != ReasonPrefix {
		t.Fatalf("fast holder released: %+v", d)
	}
	// A new endpoint borrows the fleet's fit instead of the static prior.
	a, b := p.fleetPrior("new")
	if a <= 0 || b < 1.0/20000*0.9 || b > 1.0/2500*1.1 {
		t.Fatalf("fleet prior a=%g b=%g", a, b)
	}
	p.Forget("slow")
	if p.Model("slow") != nil {
		t.Fatal("Forget kept the model")
	}
}

// A prefix every endpoint holds (a chat template header, a shared system prompt) or a sliver of
// the prompt does not make a holder: the request is placed by load.
func TestCommonOrTinyPrefixDecidesNothing(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(3)
	for i := range eps {
		eps[i].Cached.GPU = 2000
	}
	eps[0].Cached.GPU = 2016
	eps[1].Load.InFlight = 1
	eps[1].Load.QueuedPrefillTokens = 100
	eps[2].Load.InFlight = 1
	eps[2].Load.QueuedPrefillTokens = 100
	eps[0].Load.InFlight = 1
	eps[0].Load.QueuedPrefillTokens = 3000
	d := p.Pick(prefillReq(8000), eps)
	if d.Reason != ReasonLoad || d.Endpoint == "e0" {
		t.Fatalf("one extra block of a common prefix made a holder: %+v", d)
	}
	// A real lead (here 25% of the prompt) does.
	eps[0].Cached.GPU = 4000
	if d := p.Pick(prefillReq(8000), eps); d.Endpoint != "e0" || d.Reason != ReasonPrefix {
		t.Fatalf("a 2000-token lead was ignored: %+v", d)
	}
}

// Auto does not release a decode-shaped request's holder on stream counts alone: with room in
// its KV cache, extra streams batch almost for free, and moving would recompute the prefix.
// Under memory pressure and over the bounded-load cap it does release, to the endpoint with
// room.
func TestAutoReleasesOnStreamsOnlyUnderKVPressure(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(4)
	for i := 0; i < 3; i++ {
		eps[i].Load = Load{InFlight: 12, KVUsage: 0.5}
	}
	eps[0].Cached.GPU = 3968
	req := Request{PromptTokens: 4000, Tokenized: true, MaxTokens: 300}
	// e3 just joined: no streams. Mean with this request (37/4) × 1.25 → cap 12; the holder
	// would have 13.
	if d := p.Pick(req, eps); d.Endpoint != "e0" || d.Reason != ReasonPrefix {
		t.Fatalf("holder with room released on streams: %+v", d)
	}
	eps[0].Load.KVUsage = 0.95
	d := p.Pick(req, eps)
	if d.Endpoint != "e3" || d.Reason != ReasonSaturated {
		t.Fatalf("holder under KV pressure and over its share kept: %+v", d)
	}
	// Within its share it stays, pressure or not.
	eps[0].Load.InFlight = 10
	if d := p.Pick(req, eps); d.Endpoint != "e0" {
		t.Fatalf("holder within the bounded-load cap released: %+v", d)
	}
	// PrefillBound has no decode gate.
	eps[0].Load.InFlight = 12
	if d := New(Config{Kind: PrefillBound}).Pick(req, eps); d.Endpoint != "e0" {
		t.Fatalf("PrefillBound released on streams: %+v", d)
	}
}

// A faster first token elsewhere is not enough: the recompute delays every stream decoding on
// the alternative, so the time saved must exceed recompute × (1 + its streams).
func TestReleaseWeighsRecomputeAgainstAlternativesStreams(t *testing.T) {
	eps := fleet(2)
	eps[0].Cached.GPU = 6000
	// Holder: 0.05 + 1e-4 × (30000 + 1200) = 3.17 s. Alternative: 0.05 + 1e-4 × 7200 = 0.77 s,
	// 4× faster; the recompute (6000 tokens, 0.6 s) costs the alternative's streams 0.6 × (1+s).
	eps[0].Load = Load{InFlight: 10, QueuedPrefillTokens: 30000}
	eps[1].Load = Load{InFlight: 1}
	if d := New(Config{Kind: Auto}).Pick(prefillReq(7200), eps); d.Endpoint != "e1" || d.Reason != ReasonSaturated {
		t.Fatalf("2.4 s saved vs 1.2 s of recompute cost, kept: %+v", d)
	}
	eps[1].Load = Load{InFlight: 6}
	if d := New(Config{Kind: Auto}).Pick(prefillReq(7200), eps); d.Endpoint != "e0" || d.Reason != ReasonPrefix {
		t.Fatalf("2.4 s saved vs 4.2 s of recompute cost, released: %+v", d)
	}
}

// Releases respect the bounded-load cap: the endpoint that predicts the fastest first token but
// already carries far more than its share of streams (its latency model has not caught up with
// the work just sent there) is skipped for the next best.
func TestReleaseDoesNotHerdOntoOneEndpoint(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(3)
	eps[0].Cached.GPU = 6000
	eps[0].Load = Load{InFlight: 40, QueuedPrefillTokens: 60000}
	eps[1].Load = Load{InFlight: 40}                           // fastest TTFT, 41 > cap 36
	eps[2].Load = Load{InFlight: 5, QueuedPrefillTokens: 2000} // slower TTFT, room
	d := p.Pick(prefillReq(7200), eps)
	if d.Endpoint != "e2" || d.Reason != ReasonSaturated {
		t.Fatalf("release went to %s (%s), want e2", d.Endpoint, d.Reason)
	}
}

// calibrateDecode feeds every endpoint of eps the same inter-token latency line.
func calibrateDecode(p *Policy, eps []Endpoint, d0, d1 float64) {
	for _, e := range eps {
		for s := 1; s <= 20; s++ {
			p.ObserveITL(e.Name, float64(s*10), d0+d1*float64(s*10))
		}
	}
}

// Once streams have been timed, a holder is released when the decode load it carries costs
// more than the recompute elsewhere: every stream on an engine slows every other one's tokens.
// A long prefix stays while the alternative has streams its recompute would stall; nothing is
// released on decode grounds before any stream was timed.
func TestReleaseOnDecodeCost(t *testing.T) {
	eps := fleet(2)
	eps[0].Cached.GPU = 3968
	eps[0].Load = Load{InFlight: 60}
	req := Request{PromptTokens: 4000, Tokenized: true, MaxTokens: 500}
	if d := New(Config{Kind: Auto}).Pick(req, eps); d.Endpoint != "e0" {
		t.Fatalf("released on decode load before any stream was timed: %+v", d)
	}
	p := New(Config{Kind: Auto})
	calibrateDecode(p, eps[:1], 0.014, 0.000375) // the fleet's line, from e0's streams alone
	if !p.FleetDecodeModel().Calibrated() {
		t.Fatal("decode model not calibrated")
	}
	// Holder: 500 tokens at 14 + 0.375 × 61 ms, and it slows 60 streams by 0.375 ms a token:
	// ~29 request-seconds. Empty e1: 0.4 s of recompute and 500 tokens at 14.4 ms: ~7.6.
	d := p.Pick(req, eps)
	if d.Endpoint != "e1" || d.Reason != ReasonSaturated {
		t.Fatalf("holder with 60 streams kept against an idle endpoint: %+v", d)
	}
	// The alternative decodes 40 streams: the 4,000-token recompute stalls each of them.
	eps[1].Load = Load{InFlight: 40}
	if d := p.Pick(req, eps); d.Endpoint != "e0" || d.Reason != ReasonPrefix {
		t.Fatalf("released onto 40 streams for 1.5× fewer: %+v", d)
	}
	// PrefillBound prices prefill only.
	eps[1].Load = Load{}
	q := New(Config{Kind: PrefillBound})
	calibrateDecode(q, eps, 0.014, 0.000375)
	if d := q.Pick(req, eps); d.Endpoint != "e0" {
		t.Fatalf("PrefillBound released on decode cost: %+v", d)
	}
}

// The slope of inter-token latency per stream is found by comparing engines at the same moment,
// not one engine over time: while traffic ramps up, an engine's streams grow as the prefills
// of new prefixes that stall them thin out, so each engine alone sees more streams with faster
// tokens. Fitted across the fleet the slope is found, and a holder busy with 44 streams is
// released to an idle replica; priced by each engine's own fit, decode looked free and the
// replicas added to the fleet stayed idle (kvbench scale-up).
func TestDecodeSlopeLearnedAcrossTheFleet(t *testing.T) {
	const d0, d1 = 0.020, 0.0003
	rng := rand.New(rand.NewPCG(1, 2))
	p := New(Config{Kind: Auto})
	const ramp = 120
	for i := range ramp {
		done := float64(i+1) / ramp
		stall := 0.015 * (1 - done) // prefills of new prefixes, thinning out
		for e, busiest := range []float64{44, 25, 8} {
			s := busiest * (0.3 + 0.7*done)
			p.ObserveITL(fmt.Sprintf("e%d", e), s, d0+d1*s+stall+0.002*(rng.Float64()-0.5))
		}
	}
	_, own := p.DecodeModel("e0").Params()
	_, pooled := p.FleetDecodeModel().Params()
	t.Logf("slope: fleet %.6f, e0 alone %.6f", pooled, own)
	if math.Abs(pooled-d1) > 0.25*d1 {
		t.Fatalf("fleet slope %.6f s/stream, want %.6f ± 25%% (e0 alone: %.6f)", pooled, d1, own)
	}
	eps := fleet(2)
	eps[0].Cached.GPU = 6000
	eps[0].Load = Load{InFlight: 44}
	req := Request{PromptTokens: 7200, Tokenized: true, MaxTokens: 500}
	if d := p.Pick(req, eps); d.Endpoint != "e1" || d.Reason != ReasonSaturated {
		t.Fatalf("holder with 44 streams kept against an idle replica: %+v", d)
	}
}

// A release on decode cost goes only to an endpoint with little more prefill queued than the
// holder (ReleaseQueueSlack): a replica behind 2 s of queued recomputes takes no more of a busy
// holder's prefix, however much its empty batch saves the holder's streams. Past saturation,
// where first tokens are late everywhere, the slack does not apply.
func TestReleaseOnDecodeCostWaitsForAPromptStart(t *testing.T) {
	eps := fleet(2)
	eps[0].Cached.GPU = 3968
	eps[0].Load = Load{InFlight: 60}
	eps[1].Load = Load{QueuedPrefillTokens: 20000} // 2 s queued, 2.4 s with the recompute
	req := Request{PromptTokens: 4000, Tokenized: true, MaxTokens: 500}
	for _, c := range []struct {
		slack float64
		want  string
	}{{0, "e0"}, {1.9, "e0"}, {-1, "e1"}, {2.1, "e1"}} {
		p := New(Config{Kind: Auto, ReleaseQueueSlack: c.slack})
		calibrateDecode(p, eps[:1], 0.014, 0.000375)
		if d := p.Pick(req, eps); d.Endpoint != c.want {
			t.Fatalf("slack %v: got %s (%s), want %s", c.slack, d.Endpoint, d.Reason, c.want)
		}
	}
	// Past saturation: the holder has 0.8 s queued as well.
	eps[0].Load.QueuedPrefillTokens = 8000
	p := New(Config{Kind: Auto})
	calibrateDecode(p, eps[:1], 0.014, 0.000375)
	if d := p.Pick(req, eps); d.Endpoint != "e1" || d.Reason != ReasonSaturated {
		t.Fatalf("past saturation: got %s (%s), want e1 (saturated)", d.Endpoint, d.Reason)
	}
}
