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
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
	"github.com/kvrouter/kvrouter/internal/bench/peers"
	"github.com/kvrouter/kvrouter/internal/bench/workload"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
)

// pdSpec is a 1 prefill + 2 decode fleet with unique 1,000-1,600-token prompts.
func pdSpec(transport string) *workload.Spec {
	s := &workload.Spec{
		Name: "pd", Kind: workload.KindMix, Seed: 7,
		Fleet: workload.Fleet{Profile: "h100-llama-3.1-8b-tp1", BlockSize: 16,
			Disaggregation: &workload.Disaggregation{Prefill: 1, Decode: 2, Transport: transport}},
		Load: workload.Load{Rates: []float64{4}, Requests: 30},
		SLO:  workload.SLO{TTFTSeconds: 1, ITLSeconds: 0.1},
		Mix: &workload.Mix{Classes: []workload.MixClass{{Name: "long", Share: 1,
			MinPromptTokens: 1000, MaxPromptTokens: 1600, MinOutputTokens: 8, MaxOutputTokens: 16}}},
	}
	if err := s.Validate(); err != nil {
		panic(err)
	}
	return s
}

// splitAll is a P/D policy that splits every request (first prefill engine, decode engines in
// turn) and records what the harness reports.
type splitAll struct {
	env                          peers.Env
	next                         int
	dispatchedPrefill, done, bad int
	prefilledOn                  map[int]string
	ttft                         map[int]float64
	legSeconds                   map[int]float64
}

func (p *splitAll) Pick(_ *peers.Request, eps []peers.Endpoint) int { return 0 }
func (p *splitAll) PlanPD(_ *peers.Request, eps []peers.Endpoint) peers.PDPlan {
	var pre, dec []int
	for i, e := range eps {
		switch e.Role {
		case peers.RolePrefill:
			pre = append(pre, i)
		case peers.RoleDecode:
			dec = append(dec, i)
		}
	}
	if len(pre) == 0 {
		return peers.PDPlan{Prefill: -1, Decode: 0}
	}
	p.next++
	return peers.PDPlan{Prefill: pre[0], Decode: dec[p.next%len(dec)]}
}
func (p *splitAll) PrefillDispatched(*peers.Request, string) { p.dispatchedPrefill++ }
func (p *splitAll) PrefillDone(r *peers.Request, _ string, s float64, ok bool) {
	if ok {
		p.done++
		p.legSeconds[r.ID] = s
	} else {
		p.bad++
	}
}
func (p *splitAll) Dispatched(r *peers.Request, _ string) { p.prefilledOn[r.ID] = r.PrefilledOn }
func (p *splitAll) FirstToken(r *peers.Request, _ string, ttft float64) {
	p.ttft[r.ID] = ttft
}
func (p *splitAll) Finished(*peers.Request, string) {}

func runPD(t *testing.T, s *workload.Spec, f peers.Factory) (metrics.Result, []workload.Request) {
	t.Helper()
	reqs, err := workload.Generate(s, s.Load.Rates[0], workload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(Config{Spec: s, Rate: s.Load.Rates[0], Requests: reqs, Policy: f, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return res, reqs
}

func splitFactory() (peers.Factory, **splitAll) {
	var last *splitAll
	return peers.Factory{Name: "split-all", NeedsEvents: true, New: func(e peers.Env) peers.Policy {
		last = &splitAll{env: e, prefilledOn: map[int]string{}, ttft: map[int]float64{}, legSeconds: map[int]float64{}}
		return last
	}}, &last
}

func TestSplitRequestsRunBothLegs(t *testing.T) {
	s := pdSpec("rdma")
	f, pol := splitFactory()
	res, reqs := runPD(t, s, f)
	p := *pol
	if res.Completed != len(reqs) {
		t.Fatalf("%d of %d requests completed", res.Completed, len(reqs))
	}
	if p.dispatchedPrefill != len(reqs) || p.done != len(reqs) || p.bad != 0 {
		t.Fatalf("prefill legs: %d dispatched, %d done, %d failed; want %d done", p.dispatchedPrefill, p.done, p.bad, len(reqs))
	}
	if res.Extra["pd_split_share"] != 1 || res.Extra["pd_transfer_ms_mean"] <= 0 || res.Extra["pd_prefill_leg_ms_mean"] <= 0 {
		t.Fatalf("P/D figures %v", res.Extra)
	}
	for id, on := range p.prefilledOn {
		if on != "prefill-00" {
			t.Fatalf("request %d: decode leg dispatched with PrefilledOn %q", id, on)
		}
		// TTFT runs from arrival to the decode leg's first token: past the prefill leg.
		if p.ttft[id] <= p.legSeconds[id] {
			t.Fatalf("request %d: TTFT %.4fs not above its prefill leg %.4fs", id, p.ttft[id], p.legSeconds[id])
		}
	}
	// The requests' answers are counted on the decode engines only.
	if res.PerEndpoint["prefill-00"] != 0 || res.PerEndpoint["decode-00"]+res.PerEndpoint["decode-01"] != len(reqs) {
		t.Fatalf("requests per endpoint %v", res.PerEndpoint)
	}
	// Both engines' KV events reach the index: the prefill engine's computed blocks and the
	// decode engine's transferred ones.
	last := reqs[len(reqs)-1].Tokens()
	seen := map[string]bool{}
	for _, m := range p.env.Events.Lookup(last, kvindex.LookupOptions{}) {
		seen[m.Source.Endpoint] = true
	}
	if !seen["prefill-00"] || !(seen["decode-00"] || seen["decode-01"]) {
		t.Fatalf("index holds the last prompt on %v; want the prefill engine and a decode engine", seen)
	}
}

func TestTransferTimeIsPaidBeforeTheFirstToken(t *testing.T) {
	fast, _ := runPD(t, pdSpec("nvlink"), mustSplit())
	slow, _ := runPD(t, pdSpec("tcp"), mustSplit())
	if !(slow.Extra["pd_transfer_ms_mean"] > 10*fast.Extra["pd_transfer_ms_mean"]) {
		t.Fatalf("transfer tcp %.2fms vs nvlink %.2fms", slow.Extra["pd_transfer_ms_mean"], fast.Extra["pd_transfer_ms_mean"])
	}
	if !(slow.TTFTP50 > fast.TTFTP50) {
		t.Fatalf("TTFT p50 over tcp %.4fs not above nvlink %.4fs", slow.TTFTP50, fast.TTFTP50)
	}
}

func mustSplit() peers.Factory { f, _ := splitFactory(); return f }

func TestAggregatedPolicyUsesTheWholeFleetUnsplit(t *testing.T) {
	s := pdSpec("rdma")
	f, err := peers.Select([]string{"round-robin"})
	if err != nil {
		t.Fatal(err)
	}
	res, reqs := runPD(t, s, f[0])
	if res.Completed != len(reqs) || len(res.PerEndpoint) != 3 || res.Extra["pd_split_share"] != 0 {
		t.Fatalf("round-robin on a 1+2 fleet: %d/%d done, endpoints %v, split %v", res.Completed, len(reqs), res.PerEndpoint, res.Extra["pd_split_share"])
	}
	for name := range res.PerEndpoint {
		if !strings.HasPrefix(name, "engine-") {
			t.Fatalf("an aggregated run names its engines %v", res.PerEndpoint)
		}
	}
	if _, ok := res.Extra["itl_p99_ms"]; !ok {
		t.Fatal("a run on a disaggregated fleet reports no ITL tail")
	}
}

func TestRefusedPrefillLegFallsBackWhole(t *testing.T) {
	// Prompts longer than the model: the prefill engine refuses the leg, the harness tells the
	// policy and serves the request whole on the decode engine (which refuses it too).
	s := pdSpec("rdma")
	s.Fleet.MaxModelLen = 512
	f, pol := splitFactory()
	res, reqs := runPD(t, s, f)
	if (*pol).bad != len(reqs) || (*pol).done != 0 {
		t.Fatalf("PrefillDone: %d failed, %d ok; want %d failed", (*pol).bad, (*pol).done, len(reqs))
	}
	if res.Extra["pd_prefill_fallbacks"] != float64(len(reqs)) || res.Extra["pd_split_share"] != 0 || res.Completed != 0 {
		t.Fatalf("fallbacks %v, split %v, completed %d", res.Extra["pd_prefill_fallbacks"], res.Extra["pd_split_share"], res.Completed)
	}
}

func TestPDRunsAreDeterministic(t *testing.T) {
	for _, name := range []string{"dynamo-pd", "llmd-pd", "prodstack-pd"} {
		f, err := peers.Select([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		a, reqs := runPD(t, pdSpec("rdma"), f[0])
		b, _ := runPD(t, pdSpec("rdma"), f[0])
		if a.Completed != len(reqs) || a.Extra["pd_split_share"] != 1 {
			t.Fatalf("%s: %d/%d done, split share %v", name, a.Completed, len(reqs), a.Extra["pd_split_share"])
		}
		if a.TTFTP99 != b.TTFTP99 || a.OutputThroughput != b.OutputThroughput || a.Extra["pd_transfer_ms_mean"] != b.Extra["pd_transfer_ms_mean"] {
			t.Fatalf("%s: two runs with one seed differ", name)
		}
	}
}

// decodeLoadProbe splits every request like splitAll and records the largest decode-pool
// in-flight count a plan saw before any decode leg was dispatched.
type decodeLoadProbe struct {
	splitAll
	decodeLegs, seen int
}

func (p *decodeLoadProbe) PlanPD(r *peers.Request, eps []peers.Endpoint) peers.PDPlan {
	if p.decodeLegs == 0 {
		n := 0
		for _, e := range eps {
			if e.Role == peers.RoleDecode {
				n += e.InFlight
			}
		}
		p.seen = max(p.seen, n)
	}
	return p.splitAll.PlanPD(r, eps)
}
func (p *decodeLoadProbe) Dispatched(r *peers.Request, ep string) {
	p.decodeLegs++
	p.splitAll.Dispatched(r, ep)
}

// A split request is in flight on its decode engine from the plan on (the decode engine is its
// destination while the prefill runs), not only once its decode leg starts.
func TestSplitRequestCountsOnItsDecodeEngineDuringThePrefill(t *testing.T) {
	s := pdSpec("rdma")
	s.Load.Rates = []float64{200} // arrivals overlap the prefill legs
	var probe *decodeLoadProbe
	f := peers.Factory{Name: "probe", New: func(e peers.Env) peers.Policy {
		probe = &decodeLoadProbe{splitAll: splitAll{env: e, prefilledOn: map[int]string{}, ttft: map[int]float64{}, legSeconds: map[int]float64{}}}
		return probe
	}}
	res, reqs := runPD(t, s, f)
	if res.Completed != len(reqs) {
		t.Fatalf("%d of %d requests completed", res.Completed, len(reqs))
	}
	if probe.seen == 0 {
		t.Fatal("plans made while earlier requests were being prefilled saw an idle decode pool")
	}
}

// shedOdd is splitAll refusing every odd request, as admission control does with a fast 429.
type shedOdd struct{ *splitAll }

func (p shedOdd) PlanPD(r *peers.Request, eps []peers.Endpoint) peers.PDPlan {
	if r.ID%2 == 1 {
		return peers.PDPlan{Prefill: -1, Decode: -1, Shed: true}
	}
	return p.splitAll.PlanPD(r, eps)
}

func TestShedPlanFailsTheRequestUnsent(t *testing.T) {
	s := pdSpec("rdma")
	split, pol := splitFactory()
	f := peers.Factory{Name: "shed-odd", NeedsEvents: true, New: func(e peers.Env) peers.Policy {
		return shedOdd{split.New(e).(*splitAll)}
	}}
	res, reqs := runPD(t, s, f)
	odd := len(reqs) / 2
	if res.Shed != odd || res.Failed != odd || res.Completed != len(reqs)-odd {
		t.Fatalf("shed %d, failed %d, completed %d of %d; want %d shed and failed", res.Shed, res.Failed, res.Completed, len(reqs), odd)
	}
	if p := *pol; p.dispatchedPrefill != len(reqs)-odd {
		t.Fatalf("%d prefill legs for %d requests not shed", p.dispatchedPrefill, len(reqs)-odd)
	}
}
