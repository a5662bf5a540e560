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
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/kvrouter/kvrouter/internal/router/epp/epptest"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/router/proxy"
)

// nameOf maps an engine address back to the engine's name.
func nameOf(engines ...*engine) map[string]string {
	m := map[string]string{}
	for _, e := range engines {
		m[e.addr()] = e.name
	}
	return m
}

// The accounting of a routed request follows its response as the gateway relays it: load from
// the pick, the queued prefill and the prediction released at the first byte (which times the
// TTFT), the rest at the end (which times the inter-token latency), counted by status.
func TestAccountingFollowsTheResponse(t *testing.T) {
	e0, e1 := newEngine(t, "e0"), newEngine(t, "e1")
	names := nameOf(e0, e1)
	r := newRouter(t, proxy.Config{Policy: policy.Config{Kind: policy.RoundRobin}}, endpointsOf(e0, e1), true)
	p := startPicker(t, r)
	x, err := p.client(epptest.FullDuplex).Start(context.Background(), epptest.Request{Method: "POST", Path: "/v1/completions",
		Body: []byte(completion(strings.Repeat("tokens ", 20), true))})
	if err != nil {
		t.Fatal(err)
	}
	dest := x.Decision.Destinations()[0]
	name := names[dest]
	if row := r.row(t, name); row.InFlight != 1 || row.QueuedPrefillTokens == 0 {
		t.Fatalf("picked %s: %+v, want the request in flight with its prefill queued", name, row)
	}
	if predicted, settled := r.idx.counts(); predicted[name+"/0"] != 1 || settled[name+"/0"] != 0 {
		t.Fatalf("predictions %v, settled %v", predicted, settled)
	}
	set, err := x.ResponseHeaders(200, http.Header{"Content-Type": {"text/event-stream"}}, dest, false)
	if err != nil || set.Get(proxy.EndpointHeader) != name {
		t.Fatalf("response headers: %v %v", set, err)
	}
	if row := r.row(t, name); row.QueuedPrefillTokens == 0 {
		t.Fatalf("headers are not the first token: %+v", row)
	}
	for i := range 6 {
		time.Sleep(3 * time.Millisecond)
		if _, err := x.ResponseBody([]byte("data: {\"choices\":[{\"text\":\"t\"}]}\n\n"), false); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if row := r.row(t, name); row.InFlight != 1 || row.QueuedPrefillTokens != 0 {
				t.Fatalf("after the first byte: %+v", row)
			}
			if _, settled := r.idx.counts(); settled[name+"/0"] != 1 {
				t.Fatalf("the prediction was not settled at the first byte: %v", settled)
			}
		}
	}
	if _, err := x.ResponseBody([]byte("data: [DONE]\n\n"), true); err != nil {
		t.Fatal(err)
	}
	row := r.row(t, name)
	if row.InFlight != 0 || row.TokensInFlight != 0 {
		t.Fatalf("after the end: %+v", row)
	}
	if row.TTFTModel == nil || row.TTFTModel.Observations != 1 || row.ITLModel == nil || row.ITLModel.Observations != 1 {
		t.Fatalf("latency models %+v %+v: want the stream's TTFT and inter-token latency observed", row.TTFTModel, row.ITLModel)
	}
	if n := r.metric(t, "kvrouter_requests_total", map[string]string{"endpoint": name, "code": "200"}); n != 1 {
		t.Fatalf("kvrouter_requests_total{endpoint=%s,code=200} = %v", name, n)
	}
	if n := r.metric(t, "kvrouter_time_to_first_byte_seconds", nil); n != 1 {
		t.Fatalf("kvrouter_time_to_first_byte_seconds counted %v", n)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, settled := r.idx.counts(); settled[name+"/0"] != 1 {
		t.Fatalf("settled twice: %v", settled)
	}
}

// When the gateway went down the fallbacks, the engine that served is charged: the load and the
// prediction move there from the pick, and its answer is counted there.
func TestServedElsewhereMovesAccounting(t *testing.T) {
	e0, e1 := newEngine(t, "e0"), newEngine(t, "e1")
	names := nameOf(e0, e1)
	r := newRouter(t, proxy.Config{Policy: policy.Config{Kind: policy.RoundRobin}}, endpointsOf(e0, e1), true)
	p := startPicker(t, r)
	prompt := strings.Repeat("tokens ", 20)
	x, err := p.client(epptest.Buffered).Start(context.Background(), epptest.Request{Method: "POST", Path: "/v1/completions",
		Body: []byte(completion(prompt, true))})
	if err != nil {
		t.Fatal(err)
	}
	dests := x.Decision.Destinations()
	picked, served := names[dests[0]], names[dests[1]]
	set, err := x.ResponseHeaders(200, nil, dests[1], false)
	if err != nil {
		t.Fatal(err)
	}
	if set.Get(proxy.EndpointHeader) != served {
		t.Fatalf("the response names %q, served by %s", set.Get(proxy.EndpointHeader), served)
	}
	if row := r.row(t, picked); row.InFlight != 0 || row.QueuedPrefillTokens != 0 {
		t.Fatalf("the pick %s still charged: %+v", picked, row)
	}
	if row := r.row(t, served); row.InFlight != 1 || row.QueuedPrefillTokens != len(prompt) {
		t.Fatalf("%s served: %+v, want it charged the whole prompt (%d tokens)", served, row, len(prompt))
	}
	predicted, settled := r.idx.counts()
	if predicted[picked+"/0"] != 1 || settled[picked+"/0"] != 1 || predicted[served+"/0"] != 1 {
		t.Fatalf("predictions %v, settled %v: want the pick's settled and one made on %s", predicted, settled, served)
	}
	if _, err := x.ResponseBody([]byte("data: x\n\n"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := x.ResponseBody(nil, true); err != nil {
		t.Fatal(err)
	}
	_ = x.Close()
	if row := r.row(t, served); row.InFlight != 0 || (row.TTFTModel != nil && row.TTFTModel.Observations != 0) {
		t.Fatalf("%s: %+v: its TTFT must not feed the model (its work was not priced there)", served, row)
	}
	if n := r.metric(t, "kvrouter_requests_total", map[string]string{"endpoint": served, "code": "200"}); n != 1 {
		t.Fatalf("answers counted on %s: %v", served, n)
	}
	if n := r.metric(t, "kvrouter_requests_total", map[string]string{"endpoint": picked}); n != 0 {
		t.Fatalf("answers counted on the pick %s: %v", picked, n)
	}
	if n := r.metric(t, "kvrouter_epp_served_elsewhere_total", nil); n != 1 {
		t.Fatalf("kvrouter_epp_served_elsewhere_total = %v", n)
	}

	// An address the router does not know leaves the accounting where it was.
	x, err = p.client(epptest.FullDuplex).Start(context.Background(), epptest.Request{Method: "POST", Path: "/v1/completions",
		Body: []byte(completion(prompt, false))})
	if err != nil {
		t.Fatal(err)
	}
	picked = names[x.Decision.Destinations()[0]]
	if _, err := x.ResponseHeaders(200, nil, "10.1.2.3:8000", false); err != nil {
		t.Fatal(err)
	}
	if row := r.row(t, picked); row.InFlight != 1 {
		t.Fatalf("unknown served address: %s %+v", picked, row)
	}
	if _, err := x.ResponseBody([]byte("{}"), true); err != nil {
		t.Fatal(err)
	}
	_ = x.Close()
}

// Through a gateway: the picked engine refuses connections, the gateway goes on to the
// fallback, and the fallback is charged.
func TestGatewayFallbackIsCharged(t *testing.T) {
	e0, e1 := newEngine(t, "e0"), newEngine(t, "e1")
	r := newRouter(t, proxy.Config{Policy: policy.Config{Kind: policy.RoundRobin}}, endpointsOf(e0, e1), false)
	p := startPicker(t, r)
	g := p.gateway(t, epptest.FullDuplex)
	e0.Close() // refuses connections from now on; the router does not know yet
	for range 4 {
		resp, body := post(t, g.URL+"/v1/completions", completion("hello", false), nil)
		if resp.StatusCode != 200 || resp.Header.Get(proxy.EndpointHeader) != "e1" || !strings.Contains(body, "e1") {
			t.Fatalf("%d %s from %q", resp.StatusCode, body, resp.Header.Get(proxy.EndpointHeader))
		}
	}
	if n := r.metric(t, "kvrouter_epp_served_elsewhere_total", nil); n != 2 {
		t.Fatalf("kvrouter_epp_served_elsewhere_total = %v, want 2 (round robin put every other request on e0)", n)
	}
	// A whole answer reaches the client before the gateway tells the picker it ended.
	eventually(t, "the answers counted on e1 and nothing left in flight", func() bool {
		return r.metric(t, "kvrouter_requests_total", map[string]string{"endpoint": "e1", "code": "200"}) == 4 &&
			r.row(t, "e0").InFlight == 0 && r.row(t, "e1").InFlight == 0
	})
}

// However the stream ends, the request's accounting is released: the gateway resets it before
// the response, in the middle of the response, or before the request's body has all arrived;
// or the client leaves in the middle of a stream.
func TestAbortedStreamsReleaseAccounting(t *testing.T) {
	e0 := newEngine(t, "e0")
	r := newRouter(t, proxy.Config{}, endpointsOf(e0), true)
	p := startPicker(t, r)
	start := func() *epptest.Exchange {
		t.Helper()
		x, err := p.client(epptest.FullDuplex).Start(context.Background(), epptest.Request{Method: "POST", Path: "/v1/completions",
			Body: []byte(completion("some prompt", true))})
		if err != nil || x.Decision.Destination == "" {
			t.Fatalf("%+v %v", x, err)
		}
		if row := r.row(t, "e0"); row.InFlight != 1 {
			t.Fatalf("%+v", row)
		}
		return x
	}
	released := func(what string) {
		t.Helper()
		eventually(t, what+" to release the request", func() bool {
			row := r.row(t, "e0")
			return row.InFlight == 0 && row.QueuedPrefillTokens == 0 && row.TokensInFlight == 0
		})
	}
	x := start()
	x.Abort()
	released("a reset before the response")
	if predicted, settled := r.idx.counts(); predicted["e0/0"] != settled["e0/0"] {
		t.Fatalf("a prediction outlived its request: %v %v", predicted, settled)
	}

	x = start()
	if _, err := x.ResponseHeaders(200, nil, e0.addr(), false); err != nil {
		t.Fatal(err)
	}
	if _, err := x.ResponseBody([]byte("data: a\n\n"), false); err != nil {
		t.Fatal(err)
	}
	x.Abort()
	released("a reset mid-response")
	if n := r.metric(t, "kvrouter_requests_total", map[string]string{"endpoint": "e0", "code": "499"}); n != 2 {
		t.Fatalf("kvrouter_requests_total{code=499} = %v, want the 2 aborted requests", n)
	}
	eventually(t, "the aborts counted", func() bool {
		return r.metric(t, "kvrouter_epp_responses_aborted_total", nil) == 2
	})

	// Reset while the body is still arriving: no decision was made, nothing is held.
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := extprocv3.NewExternalProcessorClient(p.conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/completions")}}}}}})
	_ = stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(`{"model":"m",`)}}})
	eventually(t, "the stream to open", func() bool { return r.metric(t, "kvrouter_epp_streams_in_flight", nil) == 1 })
	cancel()
	eventually(t, "the stream to end", func() bool {
		return r.metric(t, "kvrouter_epp_streams_in_flight", nil) == 0 &&
			r.metric(t, "kvrouter_epp_requests_total", map[string]string{"outcome": "cancelled"}) == 1
	})

	// The client leaves in the middle of a stream through a gateway.
	e0.chunks, e0.gap = 200, 20*time.Millisecond
	g := p.gateway(t, epptest.FullDuplex)
	req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/completions", strings.NewReader(completion("stream me", true)))
	cctx, ccancel := context.WithCancel(context.Background())
	resp, err := http.DefaultClient.Do(req.WithContext(cctx))
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q %v", line, err)
	}
	if row := r.row(t, "e0"); row.InFlight != 1 || row.QueuedPrefillTokens != 0 {
		t.Fatalf("streaming: %+v", row)
	}
	ccancel()
	resp.Body.Close()
	released("a client leaving mid-stream")
}
