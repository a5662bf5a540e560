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

	"github.com/kvrouter/kvrouter/internal/router/kvindex"
)

// clockEnv is env() with a clock the test moves.
func clockEnv(now *float64) Env {
	ix := kvindex.New(kvindex.Config{BlockSize: bs, Now: func() time.Time { return time.Unix(0, 0) }})
	return Env{BlockSize: bs, Rand: rand.New(rand.NewPCG(1, 2)), Now: func() float64 { return *now }, Events: ix, Exact: ix}
}

func TestDynamoCountsOnlyFullBlocksAsDecodeLoad(t *testing.T) {
	p := newDynamoWith(env(), dynamoOptions{})
	e := eps(1)
	r := &Request{ID: 1, Tokens: toks(1, 2*bs-1)} // one full block and a partial one
	route(p, r, e)
	if got := p.decodeBlocks("a", nil); got != 1 {
		t.Fatalf("active decode blocks = %d, want 1 (the partial block is not counted)", got)
	}
	keys := kvindex.RequestKeys(nil, toks(2, 3*bs+5), bs, kvindex.KeyParams{})
	if got := p.decodeBlocks("a", keys); got != 4 {
		t.Fatalf("decode blocks with a new 3.3-block request = %d, want 1 + 3", got)
	}
	p.Finished(r, "a")
	if got := p.decodeBlocks("a", nil); got != 0 {
		t.Fatalf("after Finished: %d active blocks", got)
	}
}

// A sibling arrives after its twin was served on w (finished, its blocks never reported by
// events) while w carries one unrelated active block: only the side index says w holds the prefix.
func TestDynamoPredictedTTLFindsTheSiblingUntilItExpires(t *testing.T) {
	prompt := toks(5, 64*bs)
	run := func(o dynamoOptions) (first, second, afterTTL int) {
		now := 0.0
		p := newDynamoWith(clockEnv(&now), o)
		e := eps(4)
		r0 := &Request{ID: 0, Tokens: prompt}
		first = route(p, r0, e)
		p.FirstToken(r0, e[first].Name, 0.1)
		p.Finished(r0, e[first].Name)
		u := &Request{ID: 1, Tokens: toks(9, bs)}
		p.Pick(u, e)
		p.Dispatched(u, e[first].Name) // one active block on w
		p.FirstToken(u, e[first].Name, 0.1)
		now = 1
		r1 := &Request{ID: 2, Tokens: prompt}
		second = route(p, r1, e)
		p.FirstToken(r1, e[second].Name, 0.1)
		p.Finished(r1, e[second].Name)
		now = 1 + dynamoPredictedTTL + 0.5
		afterTTL = p.Pick(&Request{ID: 3, Tokens: prompt}, e)
		return first, second, afterTTL
	}
	w, second, after := run(dynamoOptions{predictedTTL: dynamoPredictedTTL})
	if second != w {
		t.Fatalf("predicted TTL: the sibling went to %d, not to %d where its twin was routed", second, w)
	}
	if after == w {
		t.Fatal("predicted TTL: the side entry must expire after 5 s")
	}
	w, second, _ = run(dynamoOptions{})
	if second == w {
		t.Fatal("without predicted TTL the sibling sees no overlap before the events and w's extra block sends it elsewhere")
	}
}

func TestDynamoQueueHoldsWhileAllBusyAndReleasesFCFS(t *testing.T) {
	now := 0.0
	p := newDynamoQueued(clockEnv(&now), dynamoOptions{}, 1).(*gatedQueue) // busy above 8,192 prefill tokens
	q := Queuer(p)
	e := eps(2)
	big := func(id int) *Request { return &Request{ID: id, Tokens: toks(uint32(id), 9000)} }
	r1, r2 := big(1), big(2)
	i1 := route(p, r1, e)
	i2 := route(p, r2, e)
	if i1 == i2 {
		t.Fatal("the second large request should go to the idle worker")
	}
	r3, r4 := big(3), big(4)
	if p.Pick(r3, e) != Hold || p.Pick(r4, e) != Hold {
		t.Fatal("every worker is over the threshold: requests must wait in the router")
	}
	if q.Queued() != 2 {
		t.Fatalf("queued %d, want 2", q.Queued())
	}
	if _, _, ok := q.Release(e); ok {
		t.Fatal("nothing may be released while every worker is busy")
	}
	p.FirstToken(r1, e[i1].Name, 1) // r1's prefill is done: its worker drops below the threshold
	got, j, ok := q.Release(e)
	if !ok || got != r3 || j != i1 {
		t.Fatalf("release: %v %d %v, want request 3 (first come) on the freed worker %d", got, j, ok, i1)
	}
	p.Dispatched(got, e[j].Name)
	if _, _, ok := q.Release(e); ok {
		t.Fatal("request 3 made its worker busy again: request 4 must keep waiting")
	}
	// Anti-bypass: a worker frees, but a new arrival still queues behind request 4.
	p.FirstToken(r2, e[i2].Name, 1)
	if p.Pick(big(5), e) != Hold {
		t.Fatal("a new arrival must not overtake the queued request")
	}
	if got, _, ok := q.Release(e); !ok || got != r4 {
		t.Fatal("request 4 must be released before request 5")
	}
}

func TestLLMDFlowControlHoldsWhileSaturated(t *testing.T) {
	now := 0.0
	p := newLLMDFlowControl(newLLMDDefault(clockEnv(&now)), clockEnv(&now)).(*gatedQueue)
	e := eps(2)
	e[0].Waiting, e[1].KVUsage = 5, 0.8 // scores 1 and 1: pool saturation 1
	r1, r2 := &Request{ID: 1, Tokens: toks(1, 100)}, &Request{ID: 2, Tokens: toks(2, 100)}
	if p.Pick(r1, e) != Hold || p.Pick(r2, e) != Hold {
		t.Fatal("saturation 1.0 must hold requests in the flow-control queue")
	}
	if _, _, ok := p.Release(e); ok {
		t.Fatal("still saturated: nothing released")
	}
	e[1].KVUsage = 0.7 // mean (1 + 0.875)/2 < 1
	if got, j, ok := p.Release(e); !ok || got != r1 || j < 0 {
		t.Fatalf("below saturation the head must go first: %v %d %v", got, j, ok)
	}
	if _, _, ok := p.Release(e); ok {
		t.Fatal("one dispatch per 1 ms tick: the second waits for the next tick")
	}
	now += 0.002
	if got, _, ok := p.Release(e); !ok || got != r2 {
		t.Fatal("the next tick releases the second request")
	}
	// A request still queued after the 60 s request TTL is shed.
	e[1].KVUsage = 0.8
	r3 := &Request{ID: 3, Tokens: toks(3, 100)}
	if p.Pick(r3, e) != Hold {
		t.Fatal("saturated again: hold")
	}
	now += 30
	if _, _, ok := p.Release(e); ok {
		t.Fatal("30 s in the queue: neither released nor shed")
	}
	now += 31
	if got, j, ok := p.Release(e); !ok || got != r3 || j >= 0 {
		t.Fatalf("after 61 s the request must be shed (ep < 0): %v %d %v", got, j, ok)
	}
	if p.Queued() != 0 || p.Stats()["flow_control_shed"] != 1 {
		t.Fatalf("queue %d, stats %v", p.Queued(), p.Stats())
	}
}

func TestLLMDSpeculativeIndexingCoversTheEventLag(t *testing.T) {
	prompt := toks(4, 40*bs)
	run := func(o llmdPreciseOptions) (first, second, afterTTL int) {
		now := 0.0
		p := newLLMDPreciseWith(clockEnv(&now), o)
		e := eps(4)
		first = route(p, &Request{ID: 1, Tokens: prompt}, e)
		e[first].Waiting = 1 // the holder now looks busier than the others
		now = 0.5
		second = route(p, &Request{ID: 2, Tokens: prompt}, e)
		now = 0.5 + llmdSpeculativeTTL + 0.1
		afterTTL = p.Pick(&Request{ID: 3, Tokens: prompt}, e)
		return first, second, afterTTL
	}
	w, second, after := run(llmdPreciseOptions{specTTL: llmdSpeculativeTTL})
	if second != w {
		t.Fatal("speculative entries must draw the sibling to the pod chosen for the first")
	}
	if after == w {
		t.Fatal("speculative entries expire after 2 s")
	}
	if w, second, _ = run(llmdPreciseOptions{}); second == w {
		t.Fatal("without speculative indexing the sibling sees no match before the events")
	}
}

func TestLLMDPreciseIndexerBlockSize(t *testing.T) {
	// c holds 3 engine blocks (48 tokens) of an 8-block prompt. In 16-token index blocks that is a
	// 3/8 match; in the shipped config's 64-token blocks, no full block matches.
	prompt := toks(6, 8*bs)
	for _, tc := range []struct {
		idxBlock int
		wantC    bool
	}{{0, true}, {64, false}} {
		en := env()
		store(en.Events, "c", prompt[:3*bs])
		p := newLLMDPreciseWith(en, llmdPreciseOptions{idxBlock: tc.idxBlock})
		e := eps(3)
		e[2].KVUsage = 0.1 // c: 2·ratio + 0.9 + 1 against 2 for the others
		if got := p.Pick(&Request{ID: 1, Tokens: prompt}, e) == 2; got != tc.wantC {
			t.Fatalf("indexer block %d: picked c = %v, want %v", tc.idxBlock, got, tc.wantC)
		}
	}
}

func TestEveryPolicyHasAFamily(t *testing.T) {
	want := map[string]string{
		"kvrouter":              FamilyKVRouter,
		"kvrouter-prefix-only":  FamilyKVRouter,
		"round-robin":           FamilyBaseline,
		"least-loaded":          FamilyBaseline,
		"session-affinity":      FamilyBaseline,
		"prodstack-prefixaware": FamilyProductionStack,
		"prodstack-pd":          FamilyProductionStack,
		"sglang-cache-aware":    FamilySGLang,
		"llmd-default":          FamilyLLMD,
		"llmd-default-fc":       FamilyLLMD,
		"llmd-precise-spec":     FamilyLLMD,
		"llmd-precise-fc":       FamilyLLMD,
		"llmd-precise-best":     FamilyLLMD,
		"llmd-pd":               FamilyLLMD,
		"dynamo":                FamilyDynamo,
		"dynamo-decay":          FamilyDynamo,
		"dynamo-predicted":      FamilyDynamo,
		"dynamo-queue":          FamilyDynamo,
		"dynamo-best":           FamilyDynamo,
		"dynamo-pd":             FamilyDynamo,
		"oracle-bounded":        FamilyOracle,
	}
	seen := map[string]bool{}
	for _, f := range append(All(), PDAll(Options{})...) {
		if f.Family == "" {
			t.Errorf("%s has no family", f.Name)
		}
		if w, ok := want[f.Name]; ok && f.FamilyName() != w {
			t.Errorf("%s: family %q, want %q", f.Name, f.FamilyName(), w)
		}
		seen[f.Name] = true
	}
	for n := range want {
		if !seen[n] {
			t.Errorf("policy %s is not registered", n)
		}
	}
}

func TestQueueVariantsAreQueuers(t *testing.T) {
	fs, err := Select([]string{"dynamo-queue", "dynamo-best", "llmd-precise-fc", "llmd-default-fc", "llmd-precise-best"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if _, ok := f.New(env()).(Queuer); !ok {
			t.Errorf("%s does not implement Queuer", f.Name)
		}
	}
}
