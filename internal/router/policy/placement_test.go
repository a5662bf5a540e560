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
