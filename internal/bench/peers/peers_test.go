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

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
)

const bs = 16

func toks(seed uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = seed*100000 + uint32(i)
	}
	return out
}

func env() Env {
	now := 0.0
	ix := kvindex.New(kvindex.Config{BlockSize: bs, Now: func() time.Time { return time.Unix(0, 0) }})
	return Env{BlockSize: bs, Rand: rand.New(rand.NewPCG(1, 2)), Now: func() float64 { return now }, Events: ix, Exact: ix}
}

// store tells the index that ep holds the full blocks of tokens.
func store(ix *kvindex.Index, ep string, tokens []uint32) {
	n := len(tokens) / bs
	ev := kvevents.Event{Kind: kvevents.KindBlockStored, BlockSize: bs, TokenIDs: tokens[:n*bs]}
	for i := range n {
		ev.BlockHashes = append(ev.BlockHashes, uint64(1000+i))
	}
	ix.Apply(kvindex.SourceID{Endpoint: ep}, &kvevents.Batch{Events: []kvevents.Event{ev}})
}

func eps(n int) []Endpoint {
	out := make([]Endpoint, n)
	for i := range out {
		out[i] = Endpoint{Name: string(rune('a' + i)), NumBlocks: 1000}
	}
	return out
}

func route(p Policy, r *Request, e []Endpoint) int {
	i := p.Pick(r, e)
	p.Dispatched(r, e[i].Name)
	return i
}

func TestRoundRobinCycles(t *testing.T) {
	p := newRoundRobin(env())
	e := eps(3)
	for k := range 6 {
		if got := route(p, &Request{ID: k}, e); got != k%3 {
			t.Fatalf("request %d went to %d", k, got)
		}
	}
}

func TestEveryPolicyPicksAValidEndpoint(t *testing.T) {
	for _, f := range All() {
		p := f.New(env())
		e := eps(4)
		for k := range 50 {
			r := &Request{ID: k, Tokens: toks(uint32(k%5), 100), MaxTokens: 10, Session: "s"}
			i := route(p, r, e)
			if i < 0 || i >= len(e) {
				t.Fatalf("%s picked %d of %d", f.Name, i, len(e))
			}
			e[i].InFlight++
			p.FirstToken(r, e[i].Name, 0.1)
			if k%2 == 0 {
				p.Finished(r, e[i].Name)
				e[i].InFlight--
			}
		}
	}
}

func TestApproximatePoliciesFollowTheirOwnRouting(t *testing.T) {
	// Policies that learn from their own decisions send a repeated prompt where the first went.
	for _, name := range []string{"prodstack-prefixaware", "sglang-cache-aware", "llmd-token-prefill"} {
		f, _ := Select([]string{name})
		p := f[0].New(env())
		e := eps(4)
		r := &Request{ID: 1, Tokens: toks(7, 512), MaxTokens: 10}
		first := route(p, r, e)
		for k := range 5 {
			if got := route(p, &Request{ID: 2 + k, Tokens: toks(7, 512), MaxTokens: 10}, e); got != first {
				t.Fatalf("%s: repeat %d went to %d, first to %d", name, k, got, first)
			}
		}
	}
}

func TestLLMDDefaultBlendCachedBeatsOneQueued(t *testing.T) {
	// docs/peer-policies.md §1.1: a fully cached endpoint with queue 1 beats a cold one with queue 0.
	p := newLLMDDefault(env())
	e := eps(2)
	r := &Request{ID: 1, Tokens: toks(3, 640)}
	first := route(p, r, e)
	e[first].Waiting = 1
	if got := route(p, &Request{ID: 2, Tokens: toks(3, 640)}, e); got != first {
		t.Fatalf("cached endpoint lost to a cold one with one fewer waiting request")
	}
}

func TestLLMDTokenPrefillBreaksAffinityPastPenalty(t *testing.T) {
	p := newLLMDTokenPrefill(env()).(*llmdTokenPrefill)
	e := eps(2)
	first := route(p, &Request{ID: 1, Tokens: toks(3, 640)}, e)
	// 18 s × 15,928 tok/s ≈ 286.7K tokens of in-flight prefill more than the idle endpoint.
	p.inflight[e[first].Name] = 300000
	if got := route(p, &Request{ID: 2, Tokens: toks(3, 640)}, e); got == first {
		t.Fatal("the affinity filter must open once the holder is 18 s of prefill behind")
	}
	q := newLLMDTokenPrefill(env()).(*llmdTokenPrefill)
	first = route(q, &Request{ID: 1, Tokens: toks(3, 640)}, e)
	q.inflight[e[first].Name] = 200000
	if got := route(q, &Request{ID: 3, Tokens: toks(3, 640)}, e); got != first {
		t.Fatal("below the penalty the sticky endpoint must keep the request")
	}
}

func TestDynamoFollowsOverlapAndDecayReleasesIt(t *testing.T) {
	en := env()
	prompt := toks(5, 64*bs)
	store(en.Events, "b", prompt)
	p := newDynamo(en, 0).(*dynamo)
	e := eps(3)
	if got := p.Pick(&Request{ID: 1, Tokens: prompt}, e); got != 1 {
		t.Fatalf("dynamo picked %d, want the holder b", got)
	}
	// A backlog of 60 blocks of prefill on b: with credit decay 0 the overlap (64 blocks) still
	// masks it; with decay 1 the credit shrinks and a cold endpoint wins.
	p.prefill["b"] = 60 * bs
	if got := p.Pick(&Request{ID: 2, Tokens: prompt}, e); got != 1 {
		t.Fatalf("decay 0: picked %d, want b (credit masks backlog)", got)
	}
	d := newDynamo(en, 1).(*dynamo)
	d.prefill["b"] = 60 * bs
	if got := d.Pick(&Request{ID: 3, Tokens: prompt}, e); got == 1 {
		t.Fatal("decay 1: the loaded holder should lose its credit")
	}
}

func TestOracleAndPreciseFollowTheIndex(t *testing.T) {
	for _, name := range []string{"oracle", "llmd-precise", "kvrouter", "kvrouter-prefix-only"} {
		en := env()
		prompt := toks(9, 40*bs)
		store(en.Events, "c", prompt)
		f, _ := Select([]string{name})
		p := f[0].New(en)
		if got := p.Pick(&Request{ID: 1, Tokens: prompt, MaxTokens: 10}, eps(4)); got != 2 {
			t.Fatalf("%s picked %d, want the holder c", name, got)
		}
	}
}

func TestSGLangFallsBackToShortestQueueWhenImbalanced(t *testing.T) {
	p := newSGLang(env())
	e := eps(2)
	first := route(p, &Request{ID: 1, Tokens: toks(1, 400)}, e)
	e[first].InFlight, e[1-first].InFlight = 100, 10 // gap 90 > 64 and 100 > 1.5×10
	if got := p.Pick(&Request{ID: 2, Tokens: toks(1, 400)}, e); got != 1-first {
		t.Fatal("imbalanced: must go to the shortest queue")
	}
}

func TestSessionAffinityIsSticky(t *testing.T) {
	p := newSession(env())
	e := eps(5)
	first := route(p, &Request{ID: 1, Session: "alice"}, e)
	for k := range 5 {
		if got := route(p, &Request{ID: 2 + k, Session: "alice"}, e); got != first {
			t.Fatal("a session must stay on one endpoint")
		}
	}
	// Without a session: QPS routing picks a never-used endpoint first.
	if got := route(p, &Request{ID: 10}, e); got == first {
		t.Fatal("sessionless request should go to an endpoint with no request stats")
	}
}

func TestSelectRejectsUnknown(t *testing.T) {
	if _, err := Select([]string{"nope"}); err == nil {
		t.Fatal("unknown policy names must be rejected")
	}
}
