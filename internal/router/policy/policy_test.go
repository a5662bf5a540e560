package policy

import (
	"fmt"
	"math"
	"testing"
)

func fleet(n int) []Endpoint {
	eps := make([]Endpoint, n)
	for i := range eps {
		eps[i] = Endpoint{Name: fmt.Sprintf("e%d", i), Ready: true}
	}
	return eps
}

func prefillReq(prompt int) Request {
	return Request{PromptTokens: prompt, Tokenized: true, MaxTokens: 100}
}

func TestParseKind(t *testing.T) {
	for _, k := range Kinds {
		got, err := ParseKind(string(k))
		if err != nil || got != k {
			t.Fatalf("ParseKind(%q) = %q, %v", k, got, err)
		}
	}
	if _, err := ParseKind("auto"); err == nil {
		t.Fatal("ParseKind accepted a lower-case name the CRD enum rejects")
	}
}

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

func TestShapeFollowsUncachedNotPromptLength(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(2)
	eps[0].Cached.GPU = 5900
	// A late chat turn: long prompt, mostly cached; what it costs is decode.
	d := p.Pick(Request{PromptTokens: 6000, Tokenized: true, MaxTokens: 300}, eps)
	if d.Shape != ShapeDecode || d.Endpoint != "e0" {
		t.Fatalf("got %+v, want decode shape on e0", d)
	}
	// Same prompt, nothing cached: prefill-bound.
	eps[0].Cached.GPU = 0
	if d := p.Pick(Request{PromptTokens: 6000, Tokenized: true, MaxTokens: 300}, eps); d.Shape != ShapePrefill {
		t.Fatalf("uncached long prompt classified %s", d.Shape)
	}
	// A request without max_tokens uses DefaultMaxTokens (256): 600 < 4×256 → decode.
	if d := p.Pick(Request{PromptTokens: 600, Tokenized: true}, eps); d.Shape != ShapeDecode {
		t.Fatalf("short prompt without max_tokens classified %s", d.Shape)
	}
}

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

func TestUntokenizedRequestIgnoresCache(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(2)
	eps[0].Cached.GPU = 6000
	eps[0].Load.QueuedPrefillTokens = 5000
	eps[0].Load.InFlight = 1
	d := p.Pick(Request{PromptTokens: 7200, Tokenized: false, MaxTokens: 100}, eps)
	if d.Endpoint != "e1" || d.Reason != ReasonLoad || d.CachedTokens != 0 {
		t.Fatalf("untokenized request used the cache: %+v", d)
	}
}

func TestNoEndpointAndAdmissionLimit(t *testing.T) {
	p := New(Config{Kind: Auto, MaxInFlight: 3})
	eps := fleet(2)
	eps[0].Ready, eps[1].Ready = false, false
	if d := p.Pick(prefillReq(10), eps); d.Endpoint != "" || d.Reason != ReasonNoEndpoint {
		t.Fatalf("no ready endpoint: %+v", d)
	}
	eps[0].Ready, eps[1].Ready = true, true
	eps[0].Load.InFlight = 3
	eps[1].Load = Load{InFlight: 1, RemoteInFlight: 2}
	if d := p.Pick(prefillReq(10), eps); d.Endpoint != "" || d.Reason != ReasonAdmissionFull {
		t.Fatalf("all at limit (counting remote load): %+v", d)
	}
	eps[1].Load.RemoteInFlight = 1
	if d := p.Pick(prefillReq(10), eps); d.Endpoint != "e1" {
		t.Fatalf("one endpoint under the limit: %+v", d)
	}
}

func TestRoundRobinCycles(t *testing.T) {
	p := New(Config{Kind: RoundRobin})
	eps := fleet(3)
	eps[0].Cached.GPU = 1000
	var got []string
	for i := 0; i < 6; i++ {
		got = append(got, p.Pick(prefillReq(1000), eps).Endpoint)
	}
	want := []string{"e0", "e1", "e2", "e0", "e1", "e2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("round robin %v, want %v", got, want)
	}
}

func TestLeastLoadedIgnoresCache(t *testing.T) {
	p := New(Config{Kind: LeastLoaded})
	eps := fleet(3)
	eps[0].Cached.GPU = 7000
	eps[0].Load.InFlight = 1
	eps[1].Load.InFlight = 1
	eps[1].Load.QueuedPrefillTokens = 10
	eps[2].Load.InFlight = 2
	d := p.Pick(prefillReq(7200), eps)
	if d.Endpoint != "e0" {
		t.Fatalf("least loaded picked %s", d.Endpoint)
	}
	eps[0].Load.InFlight = 3
	if d := p.Pick(prefillReq(7200), eps); d.Endpoint != "e1" || d.Reason != ReasonLeastLoaded {
		t.Fatalf("least loaded followed the cache: %+v", d)
	}
}

func TestPrefixOnlyIgnoresSaturation(t *testing.T) {
	p := New(Config{Kind: PrefixOnly})
	eps := fleet(2)
	eps[0].Cached.GPU = 6000
	eps[0].Load = Load{InFlight: 500, QueuedPrefillTokens: 1_000_000}
	if d := p.Pick(prefillReq(7200), eps); d.Endpoint != "e0" || d.Reason != ReasonPrefix {
		t.Fatalf("prefix-only: %+v", d)
	}
}

func TestPrefillAndDecodeBoundForceTheShape(t *testing.T) {
	eps := fleet(2)
	eps[0].Cached.GPU = 480
	eps[0].Load.InFlight = 6 // saturated on streams, but with no prefill queued
	req := Request{PromptTokens: 500, Tokenized: true, MaxTokens: 500}
	if d := New(Config{Kind: PrefillBound}).Pick(req, eps); d.Endpoint != "e0" || d.Shape != ShapePrefill {
		t.Fatalf("PrefillBound: %+v", d)
	}
	if d := New(Config{Kind: DecodeBound}).Pick(req, eps); d.Endpoint != "e1" || d.Shape != ShapeDecode {
		t.Fatalf("DecodeBound: %+v", d)
	}
}

func TestTieredCredit(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(3)
	eps[0].Cached.CPU = 6000
	eps[1].Cached.GPU = 6000
	eps[2].Cached.Storage = 6000
	d := p.Pick(prefillReq(7200), eps)
	if d.Endpoint != "e1" || d.CachedTokens != 6000 {
		t.Fatalf("GPU holder not preferred: %+v", d)
	}
	eps[1].Cached.GPU = 0
	if d := p.Pick(prefillReq(7200), eps); d.Endpoint != "e0" || d.CachedTokens != 4500 {
		t.Fatalf("CPU over storage: %+v", d)
	}
	// A longer CPU prefix beats a short GPU one when its credit is larger.
	eps[1].Cached.GPU = 2000
	if d := p.Pick(prefillReq(7200), eps); d.Endpoint != "e0" {
		t.Fatalf("credit comparison: %+v", d)
	}
}

func TestPredictedEntriesKeepSiblingBurstTogether(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(4)
	first := p.Pick(prefillReq(4096), eps)
	// The router records the decision as predicted residency and local load.
	for i := range eps {
		if eps[i].Name == first.Endpoint {
			eps[i].Cached.Predicted = 4096
			eps[i].Load = Load{InFlight: 1, QueuedPrefillTokens: first.UncachedTokens}
		}
	}
	for i := 0; i < 3; i++ {
		d := p.Pick(prefillReq(4096), eps)
		if d.Endpoint != first.Endpoint || d.Reason != ReasonPrefix {
			t.Fatalf("sibling %d went to %s (%s), first went to %s", i, d.Endpoint, d.Reason, first.Endpoint)
		}
	}
}

func TestSessionKeyBreaksTiesConsistently(t *testing.T) {
	eps := fleet(8)
	seen := map[string]bool{}
	for s := 0; s < 64; s++ {
		req := Request{PromptTokens: 100, Tokenized: true, MaxTokens: 100, SessionKey: fmt.Sprintf("user-%d", s)}
		a := New(Config{}).Pick(req, eps)
		b := New(Config{}).Pick(req, eps) // another router replica
		if a.Endpoint != b.Endpoint {
			t.Fatalf("session %d: replicas disagree %s vs %s", s, a.Endpoint, b.Endpoint)
		}
		seen[a.Endpoint] = true
	}
	if len(seen) < 6 {
		t.Fatalf("64 sessions landed on only %d of 8 endpoints", len(seen))
	}
	// The session is a tie-breaker, never an override of load.
	req := Request{PromptTokens: 100, Tokenized: true, MaxTokens: 100, SessionKey: "user-1"}
	home := New(Config{}).Pick(req, eps).Endpoint
	for i := range eps {
		if eps[i].Name == home {
			eps[i].Load.InFlight = 10
		}
	}
	if d := New(Config{}).Pick(req, eps); d.Endpoint == home {
		t.Fatalf("session stayed on a loaded endpoint %s", home)
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

func TestLatencyModelConverges(t *testing.T) {
	m := NewLatencyModel(priorIntercept, priorSlope)
	for i := 0; i < 200; i++ {
		x := float64((i * 7919) % 50000)
		noise := 0.01 * math.Sin(float64(i))
		m.Observe(x, 0.1+x/4000+noise)
	}
	a, b := m.Params()
	if math.Abs(a-0.1) > 0.02 || math.Abs(b-1.0/4000)/(1.0/4000) > 0.02 {
		t.Fatalf("fit a=%g b=%g, want 0.1, %g", a, b, 1.0/4000)
	}
	if !m.Calibrated() {
		t.Fatal("not calibrated after 200 observations")
	}
	// Garbage is ignored.
	m.Observe(math.NaN(), 1)
	m.Observe(10, math.Inf(1))
	m.Observe(-1, 1)
	if a2, b2 := m.Params(); a2 != a || b2 != b {
		t.Fatal("invalid observation changed the fit")
	}
	// It follows drift: the engine gets twice as slow.
	for i := 0; i < 300; i++ {
		x := float64((i * 7919) % 50000)
		m.Observe(x, 0.1+x/2000)
	}
	if _, b := m.Params(); math.Abs(b-1.0/2000)/(1.0/2000) > 0.05 {
		t.Fatalf("did not follow drift: b=%g", b)
	}
	// Constant input must not wind the covariance up into nonsense.
	for i := 0; i < 10000; i++ {
		m.Observe(1000, 0.6)
	}
	if got := m.Predict(1000); math.Abs(got-0.6) > 0.01 {
		t.Fatalf("predict after constant input %g", got)
	}
	if got := m.Predict(0); got < 0 || math.IsNaN(got) {
		t.Fatalf("predict(0) %g", got)
	}
}

func TestFallbacksListEveryOtherCandidateOnce(t *testing.T) {
	p := New(Config{Kind: Auto, MaxInFlight: 5})
	eps := fleet(6)
	eps[3].Ready = false
	eps[4].Load.InFlight = 5
	d := p.Pick(prefillReq(100), eps)
	seen := map[string]bool{d.Endpoint: true}
	for _, f := range d.Fallbacks {
		if seen[f] {
			t.Fatalf("duplicate %s in %v", f, d.Fallbacks)
		}
		if f == "e3" || f == "e4" {
			t.Fatalf("unready or full endpoint %s in fallbacks", f)
		}
		seen[f] = true
	}
	if len(seen) != 4 {
		t.Fatalf("chosen+fallbacks cover %d endpoints, want 4", len(seen))
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
	// Far slower TTFT is not worth the stream balance.
	eps[3].Load.QueuedPrefillTokens = 40000
	if d := New(Config{Kind: Auto}).Pick(prefillReq(7200), eps); d.Endpoint == "e3" {
		t.Fatalf("Auto placed a new prefix behind a 40K-token prefill queue: %+v", d)
	}
}

// New prefixes are spread by how many each endpoint was given lately, not by the streams of the
// moment: an endpoint that drew a few more requests early (within the bounded-load cap) is not
// therefore handed fewer prefixes (their traffic is what is unknown). A replica that joins later starts level with the
// least placed, so it takes its share of new prefixes, not all of them.
func TestNewPrefixesSpreadByRecentPlacements(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(4)
	count := map[string]int{}
	for i := 0; i < 40; i++ {
		r := prefillReq(7200)
		r.TieBreak = uint64(i)
		d := p.Pick(r, eps)
		if d.Reason != ReasonLoad {
			t.Fatalf("cold request %d: %+v", i, d)
		}
		count[d.Endpoint]++
		// The endpoint that just took a prefix draws more streams than the others.
		for j := range eps {
			if eps[j].Name == d.Endpoint {
				eps[j].Load.InFlight += 1 + i%3
			}
		}
	}
	for _, e := range eps {
		if count[e.Name] != 10 {
			t.Fatalf("prefixes per endpoint %v, want 10 each", count)
		}
	}
	// A newcomer takes one prefix in five, not the next forty (streams level: on streams alone,
	// an idle newcomer would take them all, below the bounded-load cap).
	eps = append(eps, Endpoint{Name: "new", Ready: true})
	for j := range eps {
		eps[j].Load.InFlight = 20
	}
	got := 0
	for i := 0; i < 10; i++ {
		r := prefillReq(7200)
		r.TieBreak = uint64(100 + i)
		if p.Pick(r, eps).Endpoint == "new" {
			got++
		}
	}
	if got < 1 || got > 3 {
		t.Fatalf("newcomer took %d of 10 new prefixes, want about 2", got)
	}
	// A prompt shorter than a block starts no prefix anyone could follow: it is not spread, and
	// its session key keeps it on one endpoint whatever the placement counts say.
	r := prefillReq(10)
	r.SessionKey = "user-1"
	first := p.Pick(r, eps).Endpoint
	for i := 0; i < 5; i++ {
		if got := p.Pick(r, eps).Endpoint; got != first {
			t.Fatalf("session moved from %s to %s", first, got)
		}
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
	calibrateDecode(p, eps[:1], 0.014, 0.000375) // e1 borrows the fleet's fit
	if m := p.DecodeModel("e0"); m == nil || !m.Calibrated() {
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

func TestDecodeModelFitsTheLine(t *testing.T) {
	m := NewDecodeModel(priorITL, priorITLSlope)
	for i := 0; i < 200; i++ {
		s := float64(i % 150)
		m.Observe(s, 0.012+0.0004*s)
	}
	a, b := m.Params()
	if math.Abs(a-0.012) > 0.001 || math.Abs(b-0.0004) > 0.00002 {
		t.Fatalf("fit a=%.4f b=%.6f, want 0.012 and 0.0004", a, b)
	}
}

// A new prefix goes to no endpoint whose streams would exceed (1+PlacementLoadBound) × the mean,
// however few prefixes it was given: its prefixes drew more than their share.
func TestNewPrefixRespectsPlacementLoadBound(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(4)
	for i := range eps {
		eps[i].Load.InFlight = 10
		p.placed[eps[i].Name] = 2
	}
	// e1 was given the fewest prefixes, but they drew more than their share: 14 streams, cap
	// ⌈1.1 × 45/4⌉ = 13.
	eps[1].Load.InFlight = 14
	p.placed["e1"] = 0
	for i := 0; i < 3; i++ {
		r := prefillReq(7200)
		r.TieBreak = uint64(50 + i)
		if d := p.Pick(r, eps); d.Endpoint == "e1" || d.Reason != ReasonLoad {
			t.Fatalf("new prefix placed on an endpoint over the cap: %+v", d)
		}
	}
	// Within the cap, the least placed wins.
	eps[1].Load.InFlight = 11
	if d := p.Pick(prefillReq(7200), eps); d.Endpoint != "e1" {
		t.Fatalf("least placed endpoint within the cap passed over: %+v", d)
	}
	// The only endpoint within the TTFT cap is over the stream cap (the other has a 1M-token
	// prefill queue): the stream cap gives way.
	two := fleet(2)
	two[0].Load.InFlight = 30
	two[1].Load.QueuedPrefillTokens = 1000000
	if d := New(Config{Kind: Auto}).Pick(prefillReq(7200), two); d.Endpoint != "e0" {
		t.Fatalf("want e0 when every endpoint within the TTFT cap is over the stream cap: %+v", d)
	}
}
