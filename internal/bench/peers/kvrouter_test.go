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
	"testing"

	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/router/queue"
)

func newKVRouter(t *testing.T) *kvrouter {
	t.Helper()
	f, err := Select([]string{"kvrouter"})
	if err != nil {
		t.Fatal(err)
	}
	return f[0].New(env()).(*kvrouter)
}

func TestKVRouterPickWithoutEndpoints(t *testing.T) {
	p := newKVRouter(t)
	// No panic; the harness never routes with no endpoint, but a picker must not index one.
	_ = p.Pick(&Request{ID: 1, Tokens: toks(1, 64), MaxTokens: 10, Adapter: "sql"}, nil)
	if p.last.Endpoint != "" {
		t.Fatalf("decided %q with no endpoint", p.last.Endpoint)
	}
}

// As the router: a request whose adapter was not active where it went does not feed the TTFT
// model (its first token included the adapter's slot wait and load).
func TestKVRouterSkipsColdAdapterTTFT(t *testing.T) {
	p := newKVRouter(t)
	e := eps(1)
	e[0].MaxLoRAs = 2
	observations := func() int {
		if m := p.pol.Model(e[0].Name); m != nil {
			return m.Observations()
		}
		return 0
	}
	send := func(id int, adapter string) {
		r := &Request{ID: id, Tokens: toks(uint32(id), 64), MaxTokens: 10, Adapter: adapter}
		route(p, r, e)
		p.FirstToken(r, e[0].Name, 2.5)
		p.Finished(r, e[0].Name)
	}
	send(1, "sql") // loaded for this request
	if n := observations(); n != 0 {
		t.Fatalf("cold adapter TTFT observed: %d", n)
	}
	send(2, "sql") // in a slot now
	send(3, "")
	if n := observations(); n != 2 {
		t.Fatalf("warm adapter and base-model TTFTs: %d observations, want 2", n)
	}
}

// As the router with its defaults: admission control sheds (ep -1 from Release, the client's
// fast 429) a request that no engine would start within the TTFT bound, and the policy's
// TargetTTFT is that bound; with NoAdmission (--admission=false) the request joins the queue.
func TestKVRouterAdmissionShedsPastTheBound(t *testing.T) {
	for _, off := range []bool{false, true} {
		f, err := SelectWith([]string{"kvrouter"}, Options{NoAdmission: off})
		if err != nil {
			t.Fatal(err)
		}
		p := f[0].New(env()).(*kvrouter)
		if want := map[bool]float64{false: 10, true: 0}[off]; p.pol.Config().TargetTTFT != want {
			t.Fatalf("admission off=%v: TargetTTFT %v, want %v", off, p.pol.Config().TargetTTFT, want)
		}
		e := eps(1)
		for i := range 20 { // 1 ms a token, calibrated
			p.pol.ObserveTTFT(e[0].Name, 1000*(i%4+1), float64(i%4+1))
		}
		// 15,000 tokens of prefill queued: 15 s, past 70 % of the 10 s bound.
		// (Dispatched past admission, as other clients' requests would be.)
		for i := range 3 {
			q := &Request{ID: 100 + i, Tokens: toks(uint32(100+i), 5000), MaxTokens: 10}
			p.last = p.pol.Pick(p.request(q), p.view(q, e))
			p.Dispatched(q, e[0].Name)
		}
		r := &Request{ID: 1, Tokens: toks(1, 64), MaxTokens: 10}
		got := p.Pick(r, e)
		if off {
			if got != 0 {
				t.Fatalf("admission off: Pick %d, want the engine", got)
			}
			continue
		}
		if got != Hold {
			t.Fatalf("15 s queue: Pick %d, want Hold (shed)", got)
		}
		if shed, j, ok := p.Release(e); !ok || shed != r || j >= 0 {
			t.Fatalf("Release: %v %d %v, want request 1 shed", shed, j, ok)
		}
		if p.reasons["admission_shed_early_ttft"] != 1 {
			t.Fatalf("shed reasons %v", p.reasons)
		}
	}
}

func newKVRouterQueue(t *testing.T) *kvrouter {
	t.Helper()
	f, err := SelectWith([]string{"kvrouter"}, Options{KVRouter: policy.Config{HoldAfter: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	p := f[0].New(env()).(*kvrouter)
	if p.q == nil {
		t.Fatal("HoldAfter set but no router queue")
	}
	return p
}

// With the router queue on, a request that no engine can start soon waits in the router (Hold),
// later arrivals wait behind it, and Release hands them out oldest first once an engine frees,
// routed then; the default kvrouter has no queue, as the router without --queue-capacity.
func TestKVRouterQueueHoldsAndReleasesFIFO(t *testing.T) {
	if p := newKVRouter(t); p.q != nil {
		t.Fatal("default kvrouter runs a router queue")
	}
	p := newKVRouterQueue(t)
	e := eps(2)
	// Both engines busy: 200K prefill tokens each (many seconds at the prior slope).
	var busy []*Request
	for i, ep := range e {
		r := &Request{ID: 100 + i, Tokens: toks(uint32(100+i), 200000), MaxTokens: 10}
		p.last = p.pol.Pick(p.request(r), p.view(r, e))
		p.Dispatched(r, ep.Name)
		busy = append(busy, r)
	}
	a := &Request{ID: 1, Tokens: toks(1, 64), MaxTokens: 10}
	b := &Request{ID: 2, Tokens: toks(2, 64), MaxTokens: 10}
	if got := p.Pick(a, e); got != Hold {
		t.Fatalf("backlogged fleet: Pick %d, want Hold", got)
	}
	if got := p.Pick(b, e); got != Hold {
		t.Fatalf("second arrival: Pick %d, want Hold", got)
	}
	if p.Queued() != 2 {
		t.Fatalf("queued %d, want 2", p.Queued())
	}
	if _, _, ok := p.Release(e); ok {
		t.Fatal("released while every engine is backlogged")
	}
	// Engine b's prefill finishes: the head goes, then the next.
	p.FirstToken(busy[1], e[1].Name, 1)
	r, j, ok := p.Release(e)
	if !ok || r != a || j != 1 {
		t.Fatalf("release: %v %d %v, want request 1 to engine 1", r, j, ok)
	}
	p.Dispatched(r, e[j].Name)
	r, _, ok = p.Release(e)
	if !ok || r != b {
		t.Fatalf("second release: %v %v, want request 2", r, ok)
	}
	if p.Queued() != 0 {
		t.Fatalf("queued %d after releasing both", p.Queued())
	}
}

// A request that waited past the queue's MaxWait is shed (ep -1), as the router answers 429.
func TestKVRouterQueueShedsAfterMaxWait(t *testing.T) {
	now := 0.0
	f, err := SelectWith([]string{"kvrouter"}, Options{KVRouter: policy.Config{HoldAfter: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	en := env()
	en.Now = func() float64 { return now }
	p := f[0].New(en).(*kvrouter)
	e := eps(1)
	r0 := &Request{ID: 100, Tokens: toks(100, 200000), MaxTokens: 10}
	route(p, r0, e)
	r := &Request{ID: 1, Tokens: toks(1, 64), MaxTokens: 10}
	if p.Pick(r, e) != Hold {
		t.Fatal("not held")
	}
	now = queue.DefaultMaxWait + 0.1
	got, j, ok := p.Release(e)
	if !ok || got != r || j >= 0 {
		t.Fatalf("after MaxWait: %v %d %v, want request 1 shed", got, j, ok)
	}
	if p.Queued() != 0 {
		t.Fatalf("queued %d after shedding", p.Queued())
	}
}

// Once the gate opens, the head of the queue goes where the policy picks it at that moment (as
// the proxy's router queue releases it), not to the engine whose load change opened the gate.
func TestKVRouterQueueReleasesWherePolicyPicksNow(t *testing.T) {
	p := newKVRouterQueue(t)
	e := eps(2)
	doc := toks(7, 30000)
	store(p.ix, e[0].Name, doc)
	// e0 holds the document and has 0.8 s of prefill queued; e1 is far behind.
	b0 := &Request{ID: 100, Tokens: toks(100, 8000), MaxTokens: 10}
	b1 := &Request{ID: 101, Tokens: toks(101, 200000), MaxTokens: 10}
	for i, r := range []*Request{b0, b1} {
		p.last = p.pol.Pick(p.request(r), p.view(r, e))
		if p.last.Endpoint != e[i].Name {
			p.last.Endpoint = e[i].Name
		}
		p.Dispatched(r, e[i].Name)
	}
	q := &Request{ID: 1, Tokens: append(append([]uint32{}, doc...), toks(8, 100)...), MaxTokens: 10}
	if p.Pick(q, e) != Hold {
		t.Fatal("not held")
	}
	if _, _, ok := p.Release(e); ok {
		t.Fatal("released while every engine is behind")
	}
	p.FirstToken(b1, e[1].Name, 1) // e1 frees: the gate opens
	want := p.pol.Evaluate(p.request(q), p.view(q, e)).Endpoint
	r, j, ok := p.Release(e)
	if !ok || r != q || j < 0 || e[j].Name != want {
		t.Fatalf("gate open: %v %d %v, want request 1 to %s", r, j, ok, want)
	}
	if p.Queued() != 0 {
		t.Fatalf("queued %d after the release", p.Queued())
	}
}
