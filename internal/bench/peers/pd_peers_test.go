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

package peers

import "testing"

// peerPDFleet is prefill engines p0, p1 then decode engines d0, d1.
func peerPDFleet() []Endpoint {
	return []Endpoint{
		{Name: "p0", Role: RolePrefill, NumBlocks: 1000}, {Name: "p1", Role: RolePrefill, NumBlocks: 1000},
		{Name: "d0", Role: RoleDecode, NumBlocks: 1000}, {Name: "d1", Role: RoleDecode, NumBlocks: 1000},
	}
}

func peerPD(t *testing.T, name string, e Env) PDPolicy {
	t.Helper()
	fs, err := Select([]string{name})
	if err != nil {
		t.Fatal(err)
	}
	p, ok := fs[0].New(e).(PDPolicy)
	if !ok {
		t.Fatalf("%s is not a P/D policy", name)
	}
	return p
}

func TestPeerPDPlansSplitAcrossThePools(t *testing.T) {
	for _, name := range []string{"dynamo-pd", "llmd-pd", "prodstack-pd"} {
		p := peerPD(t, name, env())
		fleet := peerPDFleet()
		for i := range 6 {
			r := &Request{ID: i, Tokens: toks(uint32(i+1), 200), MaxTokens: 10}
			plan := p.PlanPD(r, fleet)
			if plan.Aggregated() || fleet[plan.Prefill].Role != RolePrefill || fleet[plan.Decode].Role != RoleDecode {
				t.Fatalf("%s: plan %+v over %v", name, plan, fleet)
			}
		}
		// Without a prefill pool the peer routes whole, over every engine.
		plan := p.PlanPD(&Request{ID: 99, Tokens: toks(9, 200)}, eps(3))
		if !plan.Aggregated() || plan.Decode < 0 || plan.Decode >= 3 {
			t.Fatalf("%s: plan %+v on an aggregated fleet", name, plan)
		}
	}
}

func TestProdstackPDTurnsBothCursors(t *testing.T) {
	p := peerPD(t, "prodstack-pd", env())
	fleet := peerPDFleet()
	var got []PDPlan
	for i := range 4 {
		got = append(got, p.PlanPD(&Request{ID: i, Tokens: toks(1, 64)}, fleet))
	}
	want := []PDPlan{{Prefill: 0, Decode: 2}, {Prefill: 1, Decode: 3}, {Prefill: 0, Decode: 2}, {Prefill: 1, Decode: 3}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("plans %v, want %v", got, want)
		}
	}
}

func TestLLMDPDDecodeTakesTheLeastBusy(t *testing.T) {
	p := peerPD(t, "llmd-pd", env())
	fleet := peerPDFleet()
	fleet[2].InFlight, fleet[3].InFlight = 5, 1
	if plan := p.PlanPD(&Request{ID: 1, Tokens: toks(1, 640)}, fleet); plan.Decode != 3 {
		t.Fatalf("decode %d, want the endpoint with fewer requests in flight (3)", plan.Decode)
	}
}

func TestDynamoPDPrefillFollowsTheCacheDecodeIgnoresIt(t *testing.T) {
	e := env()
	prompt := toks(7, 640)
	store(e.Events, "p1", prompt)
	store(e.Events, "d0", prompt)
	p := peerPD(t, "dynamo-pd", e)
	fleet := peerPDFleet()
	// d0 holds the prompt and decodes a 20-block request; d1 holds nothing and is idle. With
	// the cache credit d0 would cost 0 + 60 blocks against d1's 40 + 40; without it 40 + 60.
	busy := &Request{ID: 1, Tokens: toks(8, 320)}
	p.PlanPD(busy, fleet)
	p.Dispatched(busy, "d0")
	p.FirstToken(busy, "d0", 0.1)
	r := &Request{ID: 2, Tokens: prompt}
	plan := p.PlanPD(r, fleet)
	if plan.Prefill != 1 {
		t.Fatalf("prefill %d, want the prefill engine holding the prompt (1)", plan.Prefill)
	}
	if plan.Decode != 3 {
		t.Fatalf("decode %d, want the idle decode engine (3): the decode cost gives no cache credit", plan.Decode)
	}
	// The prefill leg's load is released by its answer, whether it succeeded or failed.
	p.PrefillDispatched(r, "p1")
	p.PrefillDone(r, "p1", 0.2, true)
	d := p.(*pdPair).prefill.(*dynamo)
	if d.prefill["p1"] != 0 || len(d.blocks["p1"]) != 0 {
		t.Fatalf("prefill engine still charged %d tokens, %d blocks after the leg", d.prefill["p1"], len(d.blocks["p1"]))
	}
}

func TestSelectFindsPDPolicies(t *testing.T) {
	fs, err := Select([]string{"prodstack-pd", "round-robin"})
	if err != nil || len(fs) != 2 || fs[0].Name != "prodstack-pd" {
		t.Fatalf("Select: %v %v", fs, err)
	}
	all, _ := Select(nil)
	for _, f := range all {
		if _, ok := f.New(env()).(PDPolicy); ok {
			t.Fatalf("the default selection includes the P/D policy %s", f.Name)
		}
	}
}

// Dynamo routes the decode request once the prefill has answered: its decode pick then sees the
// decode legs dispatched meanwhile. The others keep the plan made at arrival.
func TestDynamoPDPicksDecodeAfterThePrefill(t *testing.T) {
	p := peerPD(t, "dynamo-pd", env())
	fleet := peerPDFleet()
	r := &Request{ID: 1, Tokens: toks(3, 640)}
	plan := p.PlanPD(r, fleet)
	// A 40-block decode leg lands on the planned engine while r is being prefilled.
	busy := &Request{ID: 2, Tokens: toks(4, 640)}
	p.PlanPD(busy, fleet)
	p.Dispatched(busy, fleet[plan.Decode].Name)
	late, ok := p.(DecodeAfterPrefill)
	if !ok {
		t.Fatal("dynamo-pd does not pick its decode engine after the prefill")
	}
	d := late.RepickDecode(r, fleet)
	if d < 0 || d == plan.Decode || fleet[d].Role != RoleDecode {
		t.Fatalf("decode %d after the prefill (planned %d), want the other, idle decode engine", d, plan.Decode)
	}
	for _, name := range []string{"llmd-pd", "prodstack-pd"} {
		if late, ok := peerPD(t, name, env()).(DecodeAfterPrefill); ok && late.RepickDecode(r, fleet) >= 0 {
			t.Errorf("%s re-picks its decode engine after the prefill; it routes both at arrival", name)
		}
	}
}
