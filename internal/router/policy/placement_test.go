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
	"testing"
)

func TestColdRequestsSpreadAndFreshEndpointIsNotStarved(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(4)
	// e0..e2 hold big prefixes and are loaded; e3 just joined: empty and idle.
	for i := 0; i < 3; i++ {
		eps[i].Load = Load{InFlight: 10, QueuedPrefillTokens: 30000}
	}
	// A cold request goes to the fresh endpoint.
	if d := p.Pick(prefillReq(7200), eps); d.Endpoint != "e3" || d.Reason != ReasonLoad {
		t.Fatalf("cold request: %+v", d)
	}
	// A warm request whose holder is loaded also moves to the fresh one.
	eps[1].Cached.GPU = 6000
	if d := p.Pick(prefillReq(7200), eps); d.Endpoint != "e3" || d.Reason != ReasonSaturated {
		t.Fatalf("warm request on a loaded holder with an idle fresh endpoint: %+v", d)
	}
}

func TestTieBreakSpreadsColdRequests(t *testing.T) {
	p := New(Config{})
	eps := fleet(4)
	counts := map[string]int{}
	for i := 0; i < 400; i++ {
		r := prefillReq(2000)
		r.TieBreak = uint64(i)
		counts[p.Pick(r, eps).Endpoint]++
	}
	for _, e := range eps {
		if counts[e.Name] < 60 {
			t.Fatalf("tie-break spread %v", counts)
		}
	}
}

// A cold request (a new prefix) is placed for the traffic that will follow it: an engine busy
// decoding looks idle on prefill, but Auto counts its streams; PrefillBound goes by TTFT alone.
func TestColdPlacementCountsDecodeLoad(t *testing.T) {
	eps := fleet(4)
	for i := 0; i < 3; i++ {
		eps[i].Load = Load{InFlight: 20, KVUsage: 0.9} // decoding, nothing queued to prefill
	}
	eps[3].Load = Load{InFlight: 2, QueuedPrefillTokens: 2000} // a prefill in flight
	// TTFTs: 0.77 s on e0..e2, 0.97 s on e3 (within SaturationFactor).
	for i := 0; i < 20; i++ {
		r := prefillReq(7200)
		r.TieBreak = uint64(i)
		if d := New(Config{Kind: Auto}).Pick(r, eps); d.Endpoint != "e3" || d.Reason != ReasonLoad {
			t.Fatalf("Auto placed a new prefix on a busy decoder: %+v", d)
		}
		if d := New(Config{Kind: PrefillBound}).Pick(r, eps); d.Endpoint == "e3" {
			t.Fatalf("PrefillBound did not take the lowest TTFT: %+v", d)
		}
	}
	// A slower TTFT is worth it while the prompt would stall more decoding streams elsewhere
	// (interference: 20 streams × 0.72 s of prefill on e0..e2 against 4 s more of queue on e3)
	// and not once the queue is far longer than that.
	eps[3].Load.QueuedPrefillTokens = 40000
	if d := New(Config{Kind: Auto}).Pick(prefillReq(7200), eps); d.Endpoint != "e3" {
		t.Fatalf("Auto stalled 20 decoding streams rather than queue 4 s: %+v", d)
	}
	eps[3].Load.QueuedPrefillTokens = 400000
	if d := New(Config{Kind: Auto}).Pick(prefillReq(7200), eps); d.Endpoint == "e3" {
		t.Fatalf("Auto placed a new prefix behind a 400K-token prefill queue: %+v", d)
	}
}

// Interference: a long uncached prompt is not placed where its chunked prefill would stall many
// more decoding streams than elsewhere (its price, TTFT plus streams × slope × uncached, is
// more than SaturationFactor × the best), even on the endpoint the placement counts favour; the
// cost follows the learned prefill speed (TTFT slope) and the prompt length.
func TestInterferencePricesDecodingStreams(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(4)
	// e1 was given more new prefixes lately: by the counts it is the last choice.
	for i := range 4 {
		r := prefillReq(7200)
		r.TieBreak = uint64(i)
		d := p.Evaluate(r, eps)
		d.Endpoint = "e1"
		p.Commit(d)
	}
	for _, i := range []int{0, 2, 3} {
		eps[i].Load = Load{InFlight: 2}
	}
	if d := p.Pick(prefillReq(32000), eps); d.Endpoint != "e1" {
		t.Fatalf("a 32K-token prompt stalled 2 decoding streams rather than none: %+v", d)
	}
	// Behind a queue far longer than the stall it spares, e1 is out of the running again.
	eps[1].Load.QueuedPrefillTokens = 400000
	if d := p.Pick(prefillReq(32000), eps); d.Endpoint == "e1" {
		t.Fatalf("placed behind a 400K-token queue to spare 2 streams: %+v", d)
	}
	e0, e1 := p.interference("e0", &candidate{streams: 30, uncached: 16000}, 0), p.interference("e1", &candidate{streams: 4, uncached: 16000}, 0)
	if !(e0 > 7*e1) || !(e0 > 0) {
		t.Fatalf("interference %v on 30 streams, %v on 4", e0, e1)
	}
	if got := p.interference("e0", &candidate{streams: 30, uncached: 0}, 0); got != 0 {
		t.Fatalf("a fully cached prompt interferes: %v", got)
	}
	// Shared streams (those every candidate has, as far as the traffic is not reused) are not
	// priced.
	if got := p.interference("e0", &candidate{streams: 12, uncached: 16000}, 12); got != 0 {
		t.Fatalf("shared streams priced: %v", got)
	}
	if a := p.interference("e0", &candidate{streams: 30, uncached: 16000}, 26); math.Abs(a-e1) > 1e-12 {
		t.Fatalf("30 streams with 26 shared priced %v, 4 streams with none %v", a, e1)
	}
}

// A new prefix goes to an engine whose KV cache is clearly emptier (more than kvBand) before the
// placement counts: the streams resident there are the decode load every step reads, and the
// one with the fuller cache decodes slower and has less room for the traffic the prefix draws.
// Within the band, the placement counts decide as before.
func TestNewPrefixPrefersEmptierCache(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(2)
	// e1 has been given more new prefixes lately.
	for i := range 4 {
		r := prefillReq(7200)
		r.TieBreak = uint64(i)
		d := p.Evaluate(r, eps)
		d.Endpoint = "e1"
		p.Commit(d)
	}
	eps[0].Load.KVUsage, eps[1].Load.KVUsage = 0.7, 0.3
	if d := p.Pick(prefillReq(7200), eps); d.Endpoint != "e1" {
		t.Fatalf("placed on the fuller cache: %+v", d)
	}
	eps[0].Load.KVUsage, eps[1].Load.KVUsage = 0.35, 0.3
	if d := p.Pick(prefillReq(7200), eps); d.Endpoint != "e0" {
		t.Fatalf("within the band, placement counts ignored: %+v", d)
	}
}

// Interference among busy engines: where prompts are not reused, a long uncached prompt whose
// first token comes as soon everywhere avoids the engine decoding 2 more streams than the rest
// (within the bounded-load cap) even if the placement counts favour it. Where the traffic
// follows its prefixes (a new policy assumes it does), the streams every engine has are priced
// too, the prices are alike (16.6 s against 15.2 s, within the cost cap), and the counts spread
// the new prefix there for the traffic it will draw.
func TestInterferenceAmongBusyEngines(t *testing.T) {
	busy := func(p *Policy, cold int) []Endpoint {
		eps := fleet(4)
		// e1..e3 were given the new prefixes lately: by the counts e0 is the first choice.
		for i := range cold {
			d := p.Evaluate(prefillReq(7200), eps)
			d.Endpoint = eps[1+i%3].Name
			p.Commit(d)
		}
		eps[0].Load = Load{InFlight: 22}
		for i := 1; i < 4; i++ {
			eps[i].Load = Load{InFlight: 20}
		}
		return eps
	}
	p := New(Config{Kind: Auto})
	eps := busy(p, 300) // 300 prompts in a row that no engine held
	for i := range 8 {
		r := prefillReq(7200)
		r.TieBreak = uint64(i)
		if d := p.Evaluate(r, eps); d.Endpoint == "e0" {
			t.Fatalf("unreused traffic: a 7,200-token prompt placed beside 22 decoding streams rather than 20: %+v", d)
		}
	}
	eps[0].Load = Load{InFlight: 20}
	if d := p.Evaluate(prefillReq(7200), eps); d.Endpoint != "e0" {
		t.Fatalf("with even streams the least placed engine was not chosen: %+v", d)
	}
	q := New(Config{Kind: Auto})
	eps = busy(q, 3)
	if d := q.Evaluate(prefillReq(7200), eps); d.Endpoint != "e0" {
		t.Fatalf("traffic taken to follow its prefixes: the least placed engine within the caps was not chosen: %+v", d)
	}
}

// The reuse share follows the traffic: requests that find a holder raise it, cold prompts lower
// it, and requests too short to start a prefix leave it alone.
func TestReuseShareFollowsTraffic(t *testing.T) {
	p := New(Config{Kind: Auto, BlockSize: 16})
	eps := fleet(2)
	for range 200 {
		p.Pick(prefillReq(4000), eps)
	}
	if p.reuse > 0.05 {
		t.Fatalf("reuse %.3f after 200 cold prompts", p.reuse)
	}
	low := p.reuse
	for range 50 {
		p.Pick(Request{PromptTokens: 8, Tokenized: true}, eps)
	}
	if p.reuse != low {
		t.Fatalf("sub-block prompts moved the reuse share: %.3f → %.3f", low, p.reuse)
	}
	eps[1].Cached = Cached{GPU: 3900}
	for range 200 {
		if d := p.Pick(prefillReq(4000), eps); d.Reason != ReasonPrefix {
			t.Fatalf("not routed to the holder: %+v", d)
		}
	}
	if p.reuse < 0.95 {
		t.Fatalf("reuse %.3f after 200 requests that found their holder", p.reuse)
	}
}

// A long new prompt is not spread onto an engine whose first token comes more than
// PlacementTTFTSlack later than the best one's, although the SaturationFactor ratio would
// allow it; past saturation the ratio alone applies and the placement counts spread it.
func TestPlacementTTFTSlack(t *testing.T) {
	req := prefillReq(30000) // 3 s of prefill at the priors' 10K tokens/s
	pick := func(cfg Config, queued0, queued1 int) string {
		p := New(cfg)
		p.placed = map[string]float64{"e0": 5, "e1": 0} // e1 is owed new prefixes
		eps := fleet(2)
		eps[0].Load.QueuedPrefillTokens = queued0
		eps[1].Load.QueuedPrefillTokens = queued1
		return p.Pick(req, eps).Endpoint
	}
	// e0 starts now (first token at 3.05 s), e1 after 1 s of queue (4.05 s: 1.33× the best).
	if got := pick(Config{Kind: Auto}, 0, 10000); got != "e0" {
		t.Fatalf("placed on %s, a second later than e0 for the placement counts", got)
	}
	if got := pick(Config{Kind: Auto, PlacementTTFTSlack: -1}, 0, 10000); got != "e1" {
		t.Fatalf("without the slack the counts should spread it to e1, got %s", got)
	}
	if got := pick(Config{Kind: Auto, PlacementTTFTSlack: 2}, 0, 10000); got != "e1" {
		t.Fatalf("a 2 s slack admits e1, got %s", got)
	}
	// Past saturation (both engines have more than HoldAfter queued) the counts decide.
	if got := pick(Config{Kind: Auto}, 8000, 18000); got != "e1" {
		t.Fatalf("past saturation the slack applied: placed on %s", got)
	}
}

// Where the traffic does not follow its prefixes, a new prompt goes where it starts soonest
// rather than where the placement counts would spread it: the slack under the TTFT cap buys
// nothing there. Where it does (a new policy assumes so), the counts still spread it.
func TestLowReuseNarrowsThePlacementTTFTCap(t *testing.T) {
	pick := func(reuse float64) string {
		p := New(Config{Kind: Auto})
		p.reuse = reuse
		p.placed = map[string]float64{"e0": 5, "e1": 0} // e1 is owed new prefixes
		eps := fleet(2)
		eps[1].Load.QueuedPrefillTokens = 1000 // first token 0.35 s against e0's 0.25 s
		return p.Pick(prefillReq(2000), eps).Endpoint
	}
	if got := pick(1); got != "e1" {
		t.Fatalf("followed traffic: the counts did not spread the prefix, placed on %s", got)
	}
	if got := pick(lowReuse / 2); got != "e0" {
		t.Fatalf("unfollowed traffic: placed on %s, 0.1 s later than e0, for the placement counts", got)
	}
}

// Where every engine has a prefill under way, an unfollowed prompt goes to the one whose prefill
// is nearly done (the router counts queued prompts whole until their first token), not where the
// placement counts would put it; the TTFT the policy predicts and learns from still counts the
// whole queue, and followed traffic is still spread by the counts.
func TestUnfollowedPromptsStartWhereAPrefillIsNearlyDone(t *testing.T) {
	pick := func(reuse float64) Decision {
		p := New(Config{Kind: Auto})
		p.reuse = reuse
		p.placed = map[string]float64{"e0": 0, "e1": 5, "e2": 5} // e0 is owed new prefixes
		eps := fleet(3)
		for i := range eps {
			eps[i].Load.InFlight, eps[i].Load.QueuedPrefillTokens = 1, 2000
			eps[i].Load.PrefillElapsed = 0.01
		}
		// At the priors (0.05 s + 0.1 ms a token) e2's prefill has 500 of its 2,000 tokens left.
		eps[2].Load.PrefillElapsed = 0.2
		return p.Pick(prefillReq(2000), eps)
	}
	d := pick(lowReuse / 2)
	if d.Endpoint != "e2" {
		t.Fatalf("unfollowed traffic: placed on %s, whose prefill has barely started, not on e2", d.Endpoint)
	}
	if d.PrefillWork != 4000 || math.Abs(d.PredictedTTFT-0.45) > 1e-9 {
		t.Fatalf("prediction: work %d, TTFT %.3f s; want the whole queue counted (4000, 0.450 s)", d.PrefillWork, d.PredictedTTFT)
	}
	if got := pick(1).Endpoint; got != "e0" {
		t.Fatalf("followed traffic: placed on %s, not by the placement counts", got)
	}
}

// Where the narrow TTFT cap's passes take nothing, the usual TTFT cap still outranks the cost
// cap. Here e1's fit is faster than the others' (beyond fitBand) and its long queue nearly done,
// so the start cap keeps to it, but its whole queue puts its first token far past the narrow cap:
// the narrow passes are empty. e0, idle of prefill, is within the usual cap but over the cost cap
// for the streams its prefill would stall; e2 is within the cost cap a second later. Without a
// pass on the usual cap and the stream cap alone the placement fell through to one without a
// TTFT cap, and to e2.
func TestUsualTTFTCapOutranksTheCostCapAfterTheNarrowOne(t *testing.T) {
	p := New(Config{Kind: Auto})
	p.reuse = lowReuse / 2
	for i, slope := range []float64{1e-4, 0.7e-4, 1e-4} {
		name := fmt.Sprintf("e%d", i)
		for x := 10000; x <= 100000; x += 10000 {
			p.ObserveTTFT(name, x, priorIntercept+slope*float64(x))
		}
	}
	eps := fleet(3)
	eps[0].Load.InFlight = 2
	eps[1].Load.InFlight, eps[1].Load.QueuedPrefillTokens, eps[1].Load.PrefillElapsed = 2, 150000, 20
	eps[2].Load.InFlight, eps[2].Load.QueuedPrefillTokens = 1, 10000
	d := p.Pick(prefillReq(60000), eps)
	if d.Endpoint != "e0" {
		t.Fatalf("placed on %s (predicted TTFT %.2f s), not on e0, the one endpoint within the usual TTFT cap and the stream cap", d.Endpoint, d.PredictedTTFT)
	}
}

// Where prompts seldom find a holder, a new one goes to the engine with clearly fewer tokens in
// flight (whose decode steps read less KV cache) before the placement counts; where traffic
// follows its prefixes the counts keep the first word, and a difference inside the band is no
// reason to overrule them.
func TestUnfollowedPromptsPlaceByTokensInFlight(t *testing.T) {
	pick := func(followed float64, tokens0, tokens1 int) string {
		p := New(Config{Kind: Auto})
		p.reuse, p.followed = followed, followed
		p.placed = map[string]float64{"e0": 0, "e1": 5} // e0 is owed new prefixes
		eps := fleet(2)
		for i, n := range []int{tokens0, tokens1} {
			eps[i].Load.InFlight, eps[i].Load.InFlightTokens = 3, n
		}
		return p.Pick(prefillReq(2000), eps).Endpoint
	}
	if got := pick(0.1, 90000, 30000); got != "e1" {
		t.Fatalf("unfollowed traffic: placed on %s with 3× the tokens in flight", got)
	}
	if got := pick(0.1, 33000, 30000); got != "e0" {
		t.Fatalf("unfollowed traffic: placed on %s for a 10 %% difference in tokens in flight", got)
	}
	if got := pick(followedReuse, 90000, 30000); got != "e0" {
		t.Fatalf("followed traffic: placed on %s by tokens in flight, not by the placement counts", got)
	}
}

// The share that hands placements to the tokens in flight has the longer memory: the first
// hundreds of new prefixes of traffic that will follow them are still placed by the counts.
func TestFollowedShareOutlastsAColdStart(t *testing.T) {
	p := New(Config{Kind: Auto, BlockSize: 16})
	eps := fleet(8)
	for range 150 {
		p.Pick(prefillReq(4000), eps)
	}
	if p.reuse >= followedReuse || p.followed < followedReuse {
		t.Fatalf("after 150 new prefixes: reuse share %.3f, followed share %.3f; want the first under %.1f, the second not",
			p.reuse, p.followed, followedReuse)
	}
	for range 1000 {
		p.Pick(prefillReq(4000), eps)
	}
	if p.followed >= followedReuse {
		t.Fatalf("followed share %.3f after 1,150 new prefixes", p.followed)
	}
}

// With the TTFT cap narrowed for unfollowed traffic, an endpoint that would start a prompt soonest
// but is over the bounded-load cap hands it to one within the usual cap, not to the least
// placed endpoint behind a longer queue.
func TestNarrowTTFTCapFallsBackToTheUsualCap(t *testing.T) {
	p := New(Config{Kind: Auto})
	p.reuse = 0
	p.placed = map[string]float64{"e0": 5, "e1": 5, "e2": 0}
	eps := fleet(3)
	eps[0].Load.InFlight = 6               // first token at 3.05 s, over the bounded-load cap
	eps[1].Load.QueuedPrefillTokens = 3000 // 3.35 s: within the 0.5 s slack
	eps[2].Load.QueuedPrefillTokens = 8000 // 3.85 s: beyond it, and owed new prefixes
	if d := p.Pick(prefillReq(30000), eps); d.Endpoint != "e1" {
		t.Fatalf("placed on %s; want e1, the one within the usual TTFT cap: %+v", d.Endpoint, d)
	}
}

// When no endpoint is within all of the placement's caps, the TTFT cap outranks the cost cap:
// interference steers a new prompt among the endpoints that start it soon enough, but does not
// send it behind a queue seconds longer to spare a few decoding streams.
func TestPlacementTTFTCapOutranksInterference(t *testing.T) {
	pick := func(queued3 int) Decision {
		eps := fleet(4)
		eps[0].Load.InFlight = 3 // first token at 2.05 s, stalls 3 streams for 2 s each
		eps[1].Load.InFlight = 6 // over the bounded-load cap (5 streams with this one)
		eps[2].Load.InFlight = 6
		eps[3].Load.QueuedPrefillTokens = queued3 // idle streams, a prefill queue
		return New(Config{Kind: Auto}).Pick(prefillReq(20000), eps)
	}
	// e3 after a 2 s queue: its first token at 4.05 s, 2 s past e0's, is beyond the TTFT cap
	// (0.5 s slack); by cost (TTFT plus 6 stream-seconds of stalls on e0) it is the cheapest.
	if d := pick(20000); d.Endpoint != "e0" {
		t.Fatalf("placed behind a 2 s queue to spare 3 decoding streams: %+v", d)
	}
	// e3 after 0.4 s of queue is within the TTFT cap, and there interference decides.
	if d := pick(4000); d.Endpoint != "e3" {
		t.Fatalf("stalled 3 decoding streams to save 0.4 s: %+v", d)
	}
}

// The bounded-load cap on a new prefix's endpoint counts streams where the KV cache is half full
// or more, and inter-token latency on the fleet's decode line where it is not: a few more
// streams on an engine with room cost the others little when each step's fixed cost dominates.
func TestPlacementBoundInLatencyWhereMemoryIsRoomy(t *testing.T) {
	pick := func(kv0 float64, calibrated bool) string {
		p := New(Config{Kind: Auto})
		if calibrated {
			// A 20 ms step, 0.4 ms more per stream: the 10 % cap is worth 5 streams more.
			for i := range 400 {
				s := float64(i%20 + 1)
				p.ObserveITL(fmt.Sprintf("e%d", i%4), s, 0.02+0.0004*s)
			}
		}
		eps := fleet(4)
		eps[0].Load = Load{InFlight: 8, KVUsage: kv0} // first token at 0.25 s
		for i := 1; i < 4; i++ {
			eps[i].Load = Load{InFlight: 2, QueuedPrefillTokens: 20000, KVUsage: 0.3} // 2.25 s
		}
		return p.Pick(prefillReq(2000), eps).Endpoint
	}
	// 9 streams with this one against a count cap of 5 (1.1 × the mean of 15 / 4).
	if got := pick(0.3, true); got != "e0" {
		t.Fatalf("an engine with room and 4 streams over the count cap was passed over for a 2 s queue: %s", got)
	}
	if got := pick(0.7, true); got == "e0" {
		t.Fatal("past half its KV cache the count cap did not apply")
	}
	if got := pick(0.3, false); got == "e0" {
		t.Fatal("the cap was loosened before the decode line was calibrated")
	}
	// Where an engine within the count starts the prompt almost as soon (40 ms later than e0,
	// under ttftTie) the count rules, however roomy e0's cache: first tokens milliseconds apart
	// do not justify piling new prefixes on the fastest engine, which the TTFT cap, a ratio,
	// would otherwise do at low load (e1..e3 are past 1.5 × e0's 70 ms).
	p := New(Config{Kind: Auto})
	for i := range 400 {
		s := float64(i%20 + 1)
		p.ObserveITL("e0", s, 0.02+0.0004*s)
	}
	eps := fleet(4)
	eps[0].Load = Load{InFlight: 8, KVUsage: 0.3}
	for i := 1; i < 4; i++ {
		eps[i].Load = Load{InFlight: 2, QueuedPrefillTokens: 400, KVUsage: 0.3}
	}
	for i := range 20 {
		r := prefillReq(200)
		r.TieBreak = uint64(i)
		if d := p.Evaluate(r, eps); d.Endpoint == "e0" {
			t.Fatalf("a short new prompt went to the engine over the count cap to start 40 ms sooner: %+v", d)
		}
	}
	if _, roomy := p.placementBound(nil, 0); math.Abs(roomy-5) > 0.5 {
		t.Fatalf("latency cap worth %.2f streams, want about 5", roomy)
	}
}

// An engine whose TTFT fit was left pessimistic gets no new prefix while its fit is fresh, and
// none to correct it either; once the fleet has timed enough first tokens elsewhere its fit is
// stale and bounded by the fleet's, and new prefixes reach it again.
func TestStaleTTFTFitIsBoundedByTheFleets(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(4)
	for i := range 12 {
		w := 500 + 1000*i
		p.ObserveTTFT("e0", w, 0.5+float64(w)*1e-4) // a slow spell
		for _, e := range []string{"e1", "e2", "e3"} {
			p.ObserveTTFT(e, w, 0.01+float64(w)*1e-5)
		}
	}
	served := func(n int) (e0 int) {
		for i := range n {
			r := prefillReq(300)
			r.TieBreak = uint64(i)
			d := p.Pick(r, eps)
			if d.Endpoint == "e0" {
				e0++
				continue
			}
			p.ObserveTTFT(d.Endpoint, d.PrefillWork, 0.01+float64(d.PrefillWork)*1e-5)
		}
		return e0
	}
	if got := served(8); got != 0 {
		t.Fatalf("the engine with a fresh pessimistic fit got %d of 8 new prefixes", got)
	}
	if got := served(40); got == 0 {
		t.Fatal("the engine with a stale pessimistic fit got none of 40 new prefixes")
	}
}
