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
