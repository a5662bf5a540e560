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

// Evaluate prices an option without placing it: the round-robin cursor stays put until the
// decision is committed, and each commit advances it once.
func TestEvaluateLeavesRoundRobinCursor(t *testing.T) {
	p := New(Config{Kind: RoundRobin})
	eps := fleet(3)
	first := p.Evaluate(prefillReq(100), eps)
	for i := 0; i < 5; i++ {
		if d := p.Evaluate(prefillReq(100), eps); d.Endpoint != first.Endpoint {
			t.Fatalf("evaluation %d moved the cursor: %s, then %s", i, first.Endpoint, d.Endpoint)
		}
	}
	p.Commit(first)
	if d := p.Evaluate(prefillReq(100), eps); d.Endpoint == first.Endpoint {
		t.Fatalf("commit did not advance the cursor: still %s", d.Endpoint)
	}
	// Pick is Evaluate then Commit: three picks visit the three endpoints.
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		seen[p.Pick(prefillReq(100), eps).Endpoint] = true
	}
	if len(seen) != 3 {
		t.Fatalf("picks after a commit visited %v", seen)
	}
}

// New prefixes are spread by the placements recorded: evaluations record none, commits do.
func TestEvaluateRecordsNoPlacement(t *testing.T) {
	p := New(Config{Kind: Auto})
	eps := fleet(4)
	req := prefillReq(2000)
	req.TieBreak = 7
	first := p.Evaluate(req, eps)
	if first.Reason != ReasonLoad {
		t.Fatalf("a cold prompt on an idle fleet is placed by load, got %+v", first)
	}
	for i := 0; i < 10; i++ {
		if d := p.Evaluate(req, eps); d.Endpoint != first.Endpoint {
			t.Fatalf("evaluation %d changed the placement: %s, then %s", i, first.Endpoint, d.Endpoint)
		}
	}
	if len(p.placed) != 0 {
		t.Fatalf("evaluations recorded placements: %v", p.placed)
	}
	p.Commit(first)
	if d := p.Evaluate(req, eps); d.Endpoint == first.Endpoint {
		t.Fatalf("the same cold prompt after a committed placement went to %s again", d.Endpoint)
	}
	// A decision without an endpoint commits nothing.
	before := p.placed[first.Endpoint]
	p.Commit(Decision{})
	if p.placed[first.Endpoint] != before {
		t.Fatal("an empty decision changed the placement record")
	}
}
