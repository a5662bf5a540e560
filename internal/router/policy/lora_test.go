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
	"math"
	"testing"
)

func loraReq(prompt int) Request {
	return Request{PromptTokens: prompt, Tokenized: true, MaxTokens: 100, LoRA: "sql"}
}

func TestLoRAPrefersActiveAdapterThenFreeSlot(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(3)
	eps[0].Load.LoRA = LoRAState{Slots: 1, Active: 1}                 // full, another adapter
	eps[1].Load.LoRA = LoRAState{Slots: 2, Active: 1}                 // a free slot
	eps[2].Load.LoRA = LoRAState{Slots: 2, Active: 2, Resident: true} // holds it
	if d := p.Pick(loraReq(1000), eps); d.Endpoint != "e2" {
		t.Fatalf("picked %s, want e2 where the adapter is active", d.Endpoint)
	}
	eps[2].Load.LoRA.Resident = false // e2 is now full of other adapters
	if d := p.Pick(loraReq(1000), eps); d.Endpoint != "e1" {
		t.Fatalf("picked %s, want e1 with a free slot", d.Endpoint)
	}
	// A base-model request does not care about adapter slots: with all else equal every
	// endpoint stays a candidate.
	seen := map[string]bool{}
	for i := range 60 {
		r := prefillReq(1000)
		r.TieBreak = uint64(i) * 0x9e3779b97f4a7c15
		seen[p.Pick(r, eps).Endpoint] = true
	}
	if !seen["e0"] {
		t.Fatalf("base-model requests avoided the endpoint with full adapter slots: %v", seen)
	}
}

func TestLoRAActiveAdapterIsNotAHardFilter(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(2)
	eps[0].Load.LoRA = LoRAState{Slots: 2, Active: 1, Resident: true}
	eps[0].Load.QueuedPrefillTokens = 200000 // ~20 s of prefill queued
	eps[0].Load.InFlight = 20
	eps[1].Load.LoRA = LoRAState{Slots: 2}
	if d := p.Pick(loraReq(1000), eps); d.Endpoint != "e1" {
		t.Fatalf("picked %s, want e1: loading the adapter beats a 20 s queue", d.Endpoint)
	}
}

func TestLoRASlotWaitReleasesPrefixHolder(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(2)
	// e0 holds most of the prompt for this adapter but its slots are now taken by others (the
	// adapter was evicted): the request would wait for a whole batch of another adapter.
	eps[0].Cached.GPU = 6000
	eps[0].Load.LoRA = LoRAState{Slots: 1, Active: 1}
	eps[1].Load.LoRA = LoRAState{Slots: 1}
	d := p.Pick(loraReq(7200), eps)
	if d.Endpoint != "e1" || d.Reason != ReasonSaturated {
		t.Fatalf("got %+v, want e1 (holder released: no adapter slot)", d)
	}
	// With the adapter active there the holder keeps it.
	eps[0].Load.LoRA.Resident = true
	if d := p.Pick(loraReq(7200), eps); d.Endpoint != "e0" || d.Reason != ReasonPrefix {
		t.Fatalf("got %+v, want e0 by prefix", d)
	}
}

func TestLoRACostPricesSlotWaitWithTheDecodeModel(t *testing.T) {
	p := New(Config{Kind: Auto})
	req := loraReq(100)
	full := LoRAState{Slots: 1, Active: 1}
	if c := p.loraCost(req, LoRAState{Slots: 4}, 0); c != p.cfg.LoRALoad {
		t.Fatalf("the first slot of an idle engine costs %v, want the load time %v", c, p.cfg.LoRALoad)
	}
	// Taking the last free slots costs more than taking the first, and less than waiting.
	one := p.loraCost(req, LoRAState{Slots: 4, Active: 1}, 0)
	three := p.loraCost(req, LoRAState{Slots: 4, Active: 3}, 0)
	wait := p.loraCost(req, LoRAState{Slots: 4, Active: 4}, 0)
	if !(p.cfg.LoRALoad < one && one < three && three < wait) {
		t.Fatalf("slot costs: 1 taken %v, 3 taken %v, full %v; want increasing above the load %v", one, three, wait, p.cfg.LoRALoad)
	}
	if c := p.loraCost(Request{PromptTokens: 100}, full, 0); c != 0 {
		t.Fatalf("base-model request charged %v", c)
	}
	// Unknown adapters cost the load: not nothing, as if the adapter were active there.
	if c := p.loraCost(req, LoRAState{}, 0); c != p.cfg.LoRALoad {
		t.Fatalf("endpoint without reported adapters charged %v, want the load time %v", c, p.cfg.LoRALoad)
	}
	if c := p.loraCost(req, LoRAState{Resident: true}, 0); c != 0 {
		t.Fatalf("endpoint without reported adapters, with this router's requests of it, charged %v", c)
	}
	prior := p.loraCost(req, full, 10)
	if want := p.cfg.LoRALoad + 100*(priorITL+10*priorITLSlope); math.Abs(prior-want) > 1e-9 {
		t.Fatalf("slot wait before calibration %v, want %v", prior, want)
	}
	// Once streams are timed, the wait follows the learned inter-token latency: a slow decoder
	// makes a full endpoint costlier.
	for range 20 {
		p.ObserveITL("e0", 10, 0.08)
	}
	learned := p.loraCost(req, full, 10)
	if learned < 3*prior {
		t.Fatalf("slot wait with a 80 ms decoder %v, want well above the prior's %v", learned, prior)
	}
}

func TestLoRAUnknownAdaptersRankBetweenFreeSlotAndFull(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(3)
	eps[0].Load.LoRA = LoRAState{}                    // unknown: not reported, or its scrape failed
	eps[1].Load.LoRA = LoRAState{Slots: 2}            // a free slot, priced as unknown: the load
	eps[2].Load.LoRA = LoRAState{Slots: 1, Active: 1} // full
	for i := range 20 {
		r := loraReq(1000)
		r.TieBreak = uint64(i) * 0x9e3779b97f4a7c15
		if d := p.Pick(r, eps); d.Endpoint != "e1" {
			t.Fatalf("picked %s, want e1 with a free slot over unknown adapters", d.Endpoint)
		}
	}
	eps[1].Load.LoRA.Active = 2 // now full
	for i := range 20 {
		r := loraReq(1000)
		r.TieBreak = uint64(i) * 0x9e3779b97f4a7c15
		if d := p.Pick(r, eps); d.Endpoint != "e0" {
			t.Fatalf("picked %s, want e0 (unknown adapters) over full ones", d.Endpoint)
		}
	}
	// An endpoint whose adapters are known active beats one whose adapters are unknown.
	eps[1].Load.LoRA = LoRAState{Slots: 2, Active: 2, Resident: true}
	if d := p.Pick(loraReq(1000), eps); d.Endpoint != "e1" {
		t.Fatalf("picked %s, want e1 where the adapter is active", d.Endpoint)
	}
}

func TestDecisionMarksAdapterColdRequests(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(1)
	for _, c := range []struct {
		req  Request
		lora LoRAState
		cold bool
	}{
		{loraReq(1000), LoRAState{Slots: 2, Active: 1, Resident: true}, false},
		{loraReq(1000), LoRAState{Slots: 2, Active: 1}, true},
		{loraReq(1000), LoRAState{Slots: 1, Active: 1}, true},
		{loraReq(1000), LoRAState{}, true}, // unknown
		{prefillReq(1000), LoRAState{Slots: 1, Active: 1}, false},
	} {
		eps[0].Load.LoRA = c.lora
		if d := p.Pick(c.req, eps); d.AdapterCold != c.cold {
			t.Errorf("adapter %q on %+v: AdapterCold %v, want %v", c.req.LoRA, c.lora, d.AdapterCold, c.cold)
		}
	}
}
