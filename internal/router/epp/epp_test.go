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

package epp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/router/admission"
	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/epp/epptest"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/router/proxy"
	"github.com/kvrouter/kvrouter/internal/routerapi"
)

// The same requests over the same fleet state get the same engine whether the router proxies
// them or picks for a gateway: the two front ends share the decision and the accounting.
// Two identical routers, one driven over HTTP, one through an Envoy-like gateway (request
// bodies alternately streamed in chunks and buffered), over the same engines (one of them
// data-parallel) and the same index contents.
func TestPicksMatchProxy(t *testing.T) {
	engines := []*engine{newEngine(t, "e0"), newEngine(t, "e1"), newEngine(t, "e2"), newEngine(t, "dp")}
	eps := endpointsOf(engines[:3]...)
	eps = append(eps, discovery.Endpoint{Name: "dp", URL: engines[3].URL, Ready: true, DPRanks: 2})
	byName := map[string]*engine{}
	for _, e := range engines {
		byName[e.name] = e
	}
	cfg := proxy.Config{SessionHeader: "X-Session", Policy: policy.Config{Kind: policy.Auto}}
	direct := newRouter(t, cfg, eps, true)
	picked := newRouter(t, cfg, eps, true)
	proxyHTTP := httptest.NewServer(direct.srv.Handler())
	t.Cleanup(proxyHTTP.Close)
	p := startPicker(t, picked)
	gateways := []*httptest.Server{p.gateway(t, epptest.FullDuplex), p.gateway(t, epptest.Buffered)}

	routes := []string{"dp/dp0", "dp/dp1", "e0", "e1", "e2"}
	var held []*loadsignal.Ticket
	defer func() {
		for _, k := range held {
			k.Done()
		}
	}()
	words := []string{"alpha", "bravo", "charlie", "delta"}
	reasons := map[string]int{}
	for i := range 30 {
		if i%5 == 3 {
			// The same load on both, so that some picks are made by load.
			r := routes[(i/5)%len(routes)]
			held = append(held, direct.tracker.Dispatch(r, 300, 400), picked.tracker.Dispatch(r, 300, 400))
		}
		text := fmt.Sprintf("%d %s", i*7919, strings.Repeat(words[i%4]+" ", 4+i%7))
		path, body := "/v1/completions", completion(text, false)
		header := http.Header{}
		switch i % 6 {
		case 1:
			path, body = "/v1/chat/completions", chat(text, false)
		case 2:
			body = completion(text, true) // streams: at most 7 in all, so no latency model calibrates
		case 3:
			body = tokenIDs([]int{i, i + 1, i + 2, 7, 8, 9, 10, 11, 12, i * 3}, false)
		case 4:
			path, body = "/v1/chat/completions", chat(text, i < 14)
		case 5:
			header.Set("X-Session", words[i%3])
		}
		ra, ba := post(t, proxyHTTP.URL+path, body, header)
		rb, bb := post(t, gateways[i%2].URL+path, body, header)
		if ra.StatusCode != 200 || rb.StatusCode != 200 {
			t.Fatalf("request %d: proxy %d %s, picker %d %s", i, ra.StatusCode, ba, rb.StatusCode, bb)
		}
		ea, eb := ra.Header.Get(proxy.EndpointHeader), rb.Header.Get(proxy.EndpointHeader)
		if ea != eb || ba != bb {
			t.Fatalf("request %d (%s): proxy picked %s (%q), the picker %s (%q)", i, path, ea, ba, eb, bb)
		}
		// The engine that answered is the one named, at the rank named.
		name, rank, dp := strings.Cut(eb, "/dp")
		if !strings.Contains(bb, name) || (dp && !strings.Contains(bb, strconv.Quote(rank)) && !strings.Contains(bb, "-"+rank+"-")) {
			t.Fatalf("request %d: answered %q, named %s", i, bb, eb)
		}
		if !dp && byName[name].lastRank() != "" {
			t.Fatalf("request %d: a rank header reached the single-rank engine %s", i, name)
		}
		reasons[eb]++
		// A whole answer reaches its client before either front end has released its request
		// (its length is known): the next pick must see the same load on both.
		eventually(t, "both routers to release the request", func() bool {
			return inFlight(direct) == len(held)/2 && inFlight(picked) == len(held)/2
		})
	}
	if len(reasons) < 4 {
		t.Fatalf("picks %v: the sequence should spread over the fleet", reasons)
	}
	// The accounting each kept from the responses is the same too.
	sa, sb := direct.srv.Status(), picked.srv.Status()
	for _, r := range routes {
		a, b := direct.row(t, r), picked.row(t, r)
		if a.InFlight != b.InFlight || a.QueuedPrefillTokens != b.QueuedPrefillTokens || a.TokensInFlight != b.TokensInFlight {
			t.Errorf("%s: load %+v via the proxy, %+v via the picker", r, a, b)
		}
		if fmt.Sprint(observations(a)) != fmt.Sprint(observations(b)) {
			t.Errorf("%s: latency models %+v %+v via the proxy, %+v %+v via the picker", r, a.TTFTModel, a.ITLModel, b.TTFTModel, b.ITLModel)
		}
		ok := map[string]string{"endpoint": r, "code": "200"}
		if na, nb := direct.metric(t, "kvrouter_requests_total", ok), picked.metric(t, "kvrouter_requests_total", ok); na != nb {
			t.Errorf("%s: %v answers counted via the proxy, %v via the picker", r, na, nb)
		}
	}
	if fmt.Sprint(sa.Router.Decisions) != fmt.Sprint(sb.Router.Decisions) || sa.Router.Requests != sb.Router.Requests ||
		sa.Router.CachedPromptTokens != sb.Router.CachedPromptTokens {
		t.Errorf("decisions %+v via the proxy, %+v via the picker", sa.Router, sb.Router)
	}
	if n := picked.metric(t, "kvrouter_epp_requests_total", map[string]string{"outcome": "routed"}); n != 30 {
		t.Errorf("kvrouter_epp_requests_total{outcome=routed} = %v, want 30", n)
	}
	if n := picked.metric(t, "kvrouter_epp_decision_seconds", nil); n != 30 {
		t.Errorf("kvrouter_epp_decision_seconds counted %v decisions, want 30", n)
	}
}

// Every kind of request goes through the protocol in both body modes, and the decision is
// complete: the destination in the header and in the metadata alike, the route cache cleared,
// the body forwarded intact, the data-parallel rank named.
func TestDecisionMessages(t *testing.T) {
	e0, dp := newEngine(t, "e0"), newEngine(t, "dp")
	eps := append(endpointsOf(e0), discovery.Endpoint{Name: "dp", URL: dp.URL, Ready: true, DPRanks: 2})
	r := newRouter(t, proxy.Config{Policy: policy.Config{Kind: policy.RoundRobin}}, eps, false)
	p := startPicker(t, r)
	long := strings.Repeat("a long document ", 9000) // 144 KB: several chunks back at 62 KB each
	bodies := []struct{ path, body string }{
		{"/v1/completions", completion("hello", false)},
		{"/v1/completions", completion("hello", true)},
		{"/v1/chat/completions", chat("hi there", false)},
		{"/v1/chat/completions", chat("hi there", true)},
		{"/v1/completions", tokenIDs([]int{1, 2, 3, 4, 5, 6, 7, 8, 9}, true)},
		{"/v1/completions", completion(long, false)},
	}
	for _, mode := range []epptest.Mode{epptest.FullDuplex, epptest.Buffered} {
		c := p.client(mode)
		c.ChunkBytes = 16 << 10
		for i, b := range bodies {
			x, err := c.Start(context.Background(), epptest.Request{Method: "POST", Path: b.path + "?x=1",
				Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(b.body)})
			if err != nil {
				t.Fatal(err)
			}
			d := x.Decision
			if d.Immediate != nil {
				t.Fatalf("%v %d: refused %d %s", mode, i, d.Immediate.Status, d.Immediate.Body)
			}
			dests := d.Destinations()
			if len(dests) != 2 || d.MetadataDestination != d.Destination || !d.ClearRouteCache {
				t.Fatalf("%v %d: decision %+v", mode, i, d)
			}
			// A data-parallel engine's ranks share one address: it is listed once.
			if !slices.Contains(dests, e0.addr()) || !slices.Contains(dests, dp.addr()) {
				t.Fatalf("%v %d: destinations %v", mode, i, dests)
			}
			if string(d.Body) != b.body {
				t.Fatalf("%v %d: the body forwarded is not the client's (%d bytes, want %d)", mode, i, len(d.Body), len(b.body))
			}
			if mode == epptest.FullDuplex && len(b.body) > 62000 && d.BodyChunks < 3 {
				t.Fatalf("%v %d: %d body chunks back for %d bytes", mode, i, d.BodyChunks, len(b.body))
			}
			rank := d.SetHeaders.Get("X-Data-Parallel-Rank")
			if (dests[0] == dp.addr()) != (rank != "") {
				t.Fatalf("%v %d: first destination %s, rank header %q", mode, i, dests[0], rank)
			}
			set, err := x.ResponseHeaders(200, http.Header{"Content-Type": {"application/json"}}, dests[0], false)
			if err != nil {
				t.Fatal(err)
			}
			if name := set.Get(proxy.EndpointHeader); name == "" || (rank != "" && name != "dp/dp"+rank) {
				t.Fatalf("%v %d: response names %q (rank %q)", mode, i, name, rank)
			}
			out, err := x.ResponseBody([]byte("data: x\n\n"), false)
			if err != nil || string(out) != "data: x\n\n" {
				t.Fatalf("%v %d: response chunk passed on as %q (%v)", mode, i, out, err)
			}
			if out, err := x.ResponseBody(nil, true); err != nil || len(out) != 0 {
				t.Fatalf("%v %d: last chunk %q (%v)", mode, i, out, err)
			}
			if err := x.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, "every flight to end", func() bool {
		return r.row(t, "e0").InFlight+r.row(t, "dp/dp0").InFlight+r.row(t, "dp/dp1").InFlight == 0
	})

	// A gateway that sends no protocol_config (Envoy before 1.33) is taken for full duplex.
	c := p.client(epptest.FullDuplex)
	c.NoProtocolConfig = true
	x, err := c.Start(context.Background(), epptest.Request{Method: "POST", Path: "/v1/completions", Body: []byte(completion("x", false))})
	if err != nil || x.Decision.Destination == "" || string(x.Decision.Body) != completion("x", false) {
		t.Fatalf("no protocol_config: %+v, %v", x, err)
	}
	x.Abort()
}

// A request the router does not read (a model listing) goes to the least loaded ready engine
// as soon as its headers arrive, and is not accounted.
func TestRequestsPlacedByLoad(t *testing.T) {
	e0, e1, e2 := newEngine(t, "e0"), newEngine(t, "e1"), newEngine(t, "e2")
	r := newRouter(t, proxy.Config{}, endpointsOf(e0, e1, e2), false)
	defer r.tracker.Dispatch("e0", 10, 10).Done()
	defer r.tracker.Dispatch("e2", 10, 10).Done()
	defer r.tracker.Dispatch("e2", 10, 10).Done()
	p := startPicker(t, r)
	for _, mode := range []epptest.Mode{epptest.FullDuplex, epptest.Buffered} {
		x, err := p.client(mode).Start(context.Background(), epptest.Request{Method: "GET", Path: "/v1/models"})
		if err != nil {
			t.Fatal(err)
		}
		if got := x.Decision.Destinations(); len(got) != 3 || got[0] != e1.addr() || got[1] != e0.addr() || got[2] != e2.addr() {
			t.Fatalf("%v: destinations %v, want e1, e0, e2 by load", mode, got)
		}
		_ = x.Close()
		// A body the router does not read passes through as it comes.
		body := strings.Repeat("z", 100)
		x, err = p.client(mode).Start(context.Background(), epptest.Request{Method: "POST", Path: "/v1/embeddings", Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		if x.Decision.Destination == "" || string(x.Decision.Body) != body {
			t.Fatalf("%v: %+v", mode, x.Decision)
		}
		_ = x.Close()
	}
	g := p.gateway(t, epptest.FullDuplex)
	resp, err := http.Get(g.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || e1.modelHits.Load() == 0 {
		t.Fatalf("GET /v1/models through the gateway: %d, e1 listed %d times", resp.StatusCode, e1.modelHits.Load())
	}
	if row := r.row(t, "e1"); row.InFlight != 0 {
		t.Fatalf("a model listing was accounted: %+v", row)
	}
}

// The gateway's subset hint bounds the pick and its fallbacks; a subset with no ready engine
// of the router's, or an empty one, is a 503.
func TestSubsetHint(t *testing.T) {
	e0, e1, e2 := newEngine(t, "e0"), newEngine(t, "e1"), newEngine(t, "e2")
	r := newRouter(t, proxy.Config{Policy: policy.Config{Kind: policy.RoundRobin}}, endpointsOf(e0, e1, e2), false)
	p := startPicker(t, r)
	c := p.client(epptest.FullDuplex)
	pick := func(subset []string, asString bool) epptest.Decision {
		t.Helper()
		x, err := c.Start(context.Background(), epptest.Request{Method: "POST", Path: "/v1/completions",
			Body: []byte(completion("subset", false)), Subset: subset, SubsetString: asString})
		if err != nil {
			t.Fatal(err)
		}
		x.Abort()
		return x.Decision
	}
	for i := range 6 {
		if d := pick([]string{e1.addr()}, i%2 == 0); d.Destination != e1.addr() {
			t.Fatalf("subset {e1}: %+v", d)
		}
		d := pick([]string{e2.addr(), "10.9.9.9:8000", e0.addr()}, i%2 == 1)
		got := d.Destinations()
		slices.Sort(got)
		want := []string{e0.addr(), e2.addr()}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("subset {e2, e0, unknown}: destinations %v", d.Destinations())
		}
	}
	// A bare IP allows any port of it.
	if d := pick([]string{"127.0.0.1"}, false); len(d.Destinations()) != 3 {
		t.Fatalf("subset {127.0.0.1}: %+v", d)
	}
	want := refusal(t, r, proxy.PickInput{Method: "POST", Path: "/v1/completions", Body: []byte(completion("subset", false)),
		Subset: []string{}})
	for _, subset := range [][]string{{}, {"10.9.9.9:8000"}} {
		d := pick(subset, false)
		if d.Immediate == nil || d.Immediate.Status != 503 || string(d.Immediate.Body) != string(want.Body) ||
			d.Immediate.Header.Get("Retry-After") != "1" || d.Immediate.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("subset %v: %+v", subset, d)
		}
	}
	// Not ready counts as not there.
	eps := endpointsOf(e0, e1, e2)
	eps[1].Ready = false
	r.srv.SetEndpoints(eps)
	if d := pick([]string{e1.addr()}, false); d.Immediate == nil || d.Immediate.Status != 503 {
		t.Fatalf("subset of a not-ready engine: %+v", d)
	}
}

// refusal is what the proxy answers a request with, for comparison (a second router over the
// same engines).
func refusal(t *testing.T, r *router, in proxy.PickInput) *proxy.Refusal {
	t.Helper()
	f, ref := r.srv.Pick(context.Background(), in)
	if f != nil {
		f.Done()
		t.Fatalf("%+v was routed", in)
	}
	return ref
}

// The answers the router gives without an engine are the proxy's, byte for byte: no ready
// engine (503), shed by admission control (429), malformed (400), unknown model (404), too
// large (413, at the chunk that crosses the limit), wrong method (405).
func TestRefusalsAreTheProxys(t *testing.T) {
	e0 := newEngine(t, "e0")
	cfg := proxy.Config{MaxBodyBytes: 400, Admission: admission.Config{QueueCap: 2}}
	r := newRouter(t, cfg, endpointsOf(e0), false)
	twin := newRouter(t, cfg, endpointsOf(e0), false) // answers over HTTP for comparison
	twinHTTP := httptest.NewServer(twin.srv.Handler())
	t.Cleanup(twinHTTP.Close)
	p := startPicker(t, r)
	cases := []struct {
		name, method, path, body string
		header                   http.Header
		status                   int
	}{
		{"malformed", "POST", "/v1/completions", `{"model":`, nil, 400},
		{"not an object", "POST", "/v1/completions", `[1,2]`, nil, 400},
		{"no prompt", "POST", "/v1/completions", `{"model":"m"}`, nil, 400},
		{"messages not a list", "POST", "/v1/chat/completions", `{"model":"m","messages":"hi"}`, nil, 400},
		{"unknown model", "POST", "/v1/completions", `{"model":"nope","prompt":"x"}`, nil, 404},
		{"bad priority", "POST", "/v1/completions", completion("x", false), http.Header{proxy.PriorityHeader: {"urgent"}}, 400},
		{"too large", "POST", "/v1/completions", completion(strings.Repeat("x", 500), false), nil, 413},
		{"no body", "POST", "/v1/completions", "", nil, 400},
	}
	for _, mode := range []epptest.Mode{epptest.FullDuplex, epptest.Buffered} {
		for _, c := range cases {
			x, err := p.client(mode).Start(context.Background(), epptest.Request{Method: c.method, Path: c.path,
				Header: c.header, Body: []byte(c.body)})
			if err != nil {
				t.Fatalf("%v %s: %v", mode, c.name, err)
			}
			_ = x.Close()
			im := x.Decision.Immediate
			if im == nil || im.Status != c.status {
				t.Fatalf("%v %s: %+v, want %d", mode, c.name, x.Decision, c.status)
			}
			resp, body := post(t, twinHTTP.URL+c.path, c.body, c.header)
			if resp.StatusCode != c.status || body != string(im.Body) || im.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%v %s: picker %d %q, proxy %d %q", mode, c.name, im.Status, im.Body, resp.StatusCode, body)
			}
		}
	}
	x, err := p.client(epptest.FullDuplex).Start(context.Background(), epptest.Request{Method: "GET", Path: "/v1/completions"})
	if err != nil {
		t.Fatal(err)
	}
	if im := x.Decision.Immediate; im == nil || im.Status != 405 || im.Header.Get("Allow") != "POST" {
		t.Fatalf("GET /v1/completions: %+v", x.Decision)
	}
	_ = x.Close()

	// Shed: both engines' queues at the cap.
	for range 2 {
		defer r.tracker.Dispatch("e0", 100, 200).Done()
		defer twin.tracker.Dispatch("e0", 100, 200).Done()
	}
	x, err = p.client(epptest.Buffered).Start(context.Background(), epptest.Request{Method: "POST", Path: "/v1/completions",
		Body: []byte(completion("hello", false))})
	if err != nil {
		t.Fatal(err)
	}
	_ = x.Close()
	resp, body := post(t, twinHTTP.URL+"/v1/completions", completion("hello", false), nil)
	im := x.Decision.Immediate
	if im == nil || im.Status != 429 || string(im.Body) != body || im.Header.Get("Retry-After") != resp.Header.Get("Retry-After") ||
		!strings.Contains(body, `"type":"rate_limit_exceeded"`) {
		t.Fatalf("shed: picker %+v, proxy %d %q", x.Decision, resp.StatusCode, body)
	}
	if n := r.metric(t, "kvrouter_requests_shed_total", map[string]string{"reason": "queue", "priority": "interactive"}); n != 1 {
		t.Fatalf("kvrouter_requests_shed_total{reason=queue} = %v", n)
	}

	// No engine at all.
	r.srv.SetEndpoints(nil)
	twin.srv.SetEndpoints(nil)
	x, err = p.client(epptest.FullDuplex).Start(context.Background(), epptest.Request{Method: "POST", Path: "/v1/completions",
		Body: []byte(completion("hello", false))})
	if err != nil {
		t.Fatal(err)
	}
	_ = x.Close()
	resp, body = post(t, twinHTTP.URL+"/v1/completions", completion("hello", false), nil)
	if im := x.Decision.Immediate; im == nil || im.Status != 503 || string(im.Body) != body || resp.StatusCode != 503 ||
		im.Header.Get("Retry-After") != "1" {
		t.Fatalf("no engine: picker %+v, proxy %d %q", x.Decision, resp.StatusCode, body)
	}
	x, err = p.client(epptest.FullDuplex).Start(context.Background(), epptest.Request{Method: "GET", Path: "/v1/models"})
	if err != nil {
		t.Fatal(err)
	}
	_ = x.Close()
	if im := x.Decision.Immediate; im == nil || im.Status != 503 {
		t.Fatalf("GET /v1/models with no engine: %+v", x.Decision)
	}
	for outcome, want := range map[string]float64{"invalid": 2*float64(len(cases)) + 1, "shed": 1, "unavailable": 2, "routed": 0} {
		if n := r.metric(t, "kvrouter_epp_requests_total", map[string]string{"outcome": outcome}); n != want {
			t.Errorf("kvrouter_epp_requests_total{outcome=%s} = %v, want %v", outcome, n, want)
		}
	}
}

// observations is how many TTFTs and inter-token latencies an endpoint's models were fed.
func observations(e routerapi.Endpoint) [2]int {
	var n [2]int
	if e.TTFTModel != nil {
		n[0] = e.TTFTModel.Observations
	}
	if e.ITLModel != nil {
		n[1] = e.ITLModel.Observations
	}
	return n
}

// inFlight is the requests a router has in flight over all its endpoints.
func inFlight(r *router) int {
	n := 0
	for _, e := range r.srv.Status().Endpoints {
		n += e.InFlight
	}
	return n
}
