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
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvrouter/kvrouter/internal/router/epp"
	"github.com/kvrouter/kvrouter/internal/router/epp/epptest"
	"github.com/kvrouter/kvrouter/internal/router/epp/protocol"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/router/proxy"
)

// The gateway cases the Envoy-like client does not play: Envoy's own messages, driven one by one
// on a raw ext_proc stream.

type rawStream struct {
	t *testing.T
	s extprocv3.ExternalProcessor_ProcessClient
}

func openRaw(t *testing.T, p *picker) *rawStream {
	t.Helper()
	s, err := extprocv3.NewExternalProcessorClient(p.conn).Process(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return &rawStream{t: t, s: s}
}

func (r *rawStream) send(req *extprocv3.ProcessingRequest) {
	r.t.Helper()
	if err := r.s.Send(req); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawStream) recv() *extprocv3.ProcessingResponse {
	r.t.Helper()
	resp, err := r.s.Recv()
	if err != nil {
		r.t.Fatal(err)
	}
	return resp
}

func requestHeaders(mode extprocfilterv3.ProcessingMode_BodySendMode, path string) *extprocv3.ProcessingRequest {
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte(path)},
		{Key: ":authority", RawValue: []byte("gw")}, {Key: "content-type", RawValue: []byte("application/json")}}}
	return &extprocv3.ProcessingRequest{
		Request:        &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hm}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: mode, ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED},
	}
}

func requestBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

func responseHeaders(status string, served string) *extprocv3.ProcessingRequest {
	req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":status", RawValue: []byte(status)}}}}}}
	if served != "" {
		req.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			protocol.DestinationNamespace: {Fields: map[string]*structpb.Value{protocol.ServedKey: structpb.NewStringValue(served)}}}}
	}
	return req
}

// destination reads the decision off the answer to the headers.
func destination(t *testing.T, resp *extprocv3.ProcessingResponse) string {
	t.Helper()
	for _, h := range resp.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == protocol.DestinationKey {
			return protocol.HeaderValue(h.GetHeader())
		}
	}
	t.Fatalf("no destination in %v", resp)
	return ""
}

// By default the destination is one address, in the header and the metadata alike: gateways
// that route on it with an ORIGINAL_DST cluster read one address and fail on a list.
func TestDestinationIsOneAddressByDefault(t *testing.T) {
	e0, e1, e2 := newEngine(t, "e0"), newEngine(t, "e1"), newEngine(t, "e2")
	r := newRouter(t, proxy.Config{}, endpointsOf(e0, e1, e2), true)
	p := servePicker(t, epp.New(r.srv, logr.Discard(), r.reg, epp.Options{}))
	client := epptest.NewClient(p.conn)
	for path, body := range map[string]string{"/v1/completions": completion("a prompt about one thing", false),
		"/v1/chat/completions": chat("another", true)} {
		x, err := client.Start(context.Background(), epptest.Request{Method: "POST", Path: path, Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		d := x.Decision
		if d.Immediate != nil {
			t.Fatalf("%s refused: %d %s", path, d.Immediate.Status, d.Immediate.Body)
		}
		if d.Destination == "" || strings.Contains(d.Destination, ",") || d.MetadataDestination != d.Destination {
			t.Fatalf("destination %q, metadata %q: want one address in both", d.Destination, d.MetadataDestination)
		}
		x.Abort()
	}
}

// A body that ends with trailers goes back without end-of-stream (Envoy would end the upstream
// request there and then meet the trailers), and the trailers' answer follows it.
func TestTrailersEndTheBodyStream(t *testing.T) {
	e0 := newEngine(t, "e0")
	r := newRouter(t, proxy.Config{}, endpointsOf(e0), true)
	rs := openRaw(t, startPicker(t, r))
	rs.send(requestHeaders(extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, "/v1/completions"))
	body := completion("hello there", false)
	rs.send(requestBody(body[:5], false))
	rs.send(requestBody(body[5:], false))
	rs.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
		RequestTrailers: &extprocv3.HttpTrailers{}}})
	if dest := destination(t, rs.recv()); dest != e0.addr() {
		t.Fatalf("destination %q", dest)
	}
	var echoed string
	for {
		resp := rs.recv()
		if resp.GetRequestTrailers() != nil {
			break
		}
		sr := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			t.Fatalf("unexpected answer %v", resp)
		}
		if sr.GetEndOfStream() {
			t.Fatal("the body streamed back says end-of-stream before the trailers")
		}
		echoed += string(sr.GetBody())
	}
	if echoed != body {
		t.Fatalf("body streamed back %q, want %q", echoed, body)
	}
}

// In BUFFERED_PARTIAL mode a body message without end-of-stream is what fitted the gateway's
// buffer: a fragment. It gets the 413 a too-large body gets, not a 400 for invalid JSON.
func TestBufferedPartialFragmentIsTooLarge(t *testing.T) {
	e0 := newEngine(t, "e0")
	r := newRouter(t, proxy.Config{}, endpointsOf(e0), true)
	rs := openRaw(t, startPicker(t, r))
	rs.send(requestHeaders(extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL, "/v1/completions"))
	if rs.recv().GetRequestHeaders() == nil {
		t.Fatal("headers not let through in a buffered mode")
	}
	body := completion(strings.Repeat("long ", 50), false)
	rs.send(requestBody(body[:len(body)/2], false))
	im := rs.recv().GetImmediateResponse()
	if im == nil || im.GetStatus().GetCode() != http.StatusRequestEntityTooLarge || !strings.Contains(string(im.GetBody()), `"error"`) {
		t.Fatalf("answer %v, want a 413 with a JSON error", im)
	}
	if e0.requests.Load() != 0 {
		t.Fatal("the fragment reached an engine")
	}
}

// A gateway whose filter skips the response body closes the stream when the response ends: the
// request completes with the status its headers had, not as a client that left. One that skips
// the response altogether completes it unobserved: no status, not 499, not aborted.
func TestGatewayThatSkipsTheResponse(t *testing.T) {
	for _, showHeaders := range []bool{true, false} {
		e0 := newEngine(t, "e0")
		r := newRouter(t, proxy.Config{}, endpointsOf(e0), true)
		p := startPicker(t, r)
		rs := openRaw(t, p)
		rs.send(requestHeaders(extprocfilterv3.ProcessingMode_BUFFERED, "/v1/completions"))
		rs.recv() // headers let through
		rs.send(requestBody(completion("skip the response", false), true))
		rs.recv() // the decision, on the body's answer
		if row := r.row(t, "e0"); row.InFlight != 1 {
			t.Fatalf("after the pick: %+v", row)
		}
		if showHeaders {
			rs.send(responseHeaders("200", e0.addr()))
			rs.recv()
		}
		if err := rs.s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := rs.s.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("picker stream after the gateway closed: %v", err)
		}
		eventually(t, "the flight ends", func() bool { return r.row(t, "e0").InFlight == 0 })
		got := map[string]float64{
			"200":        r.metric(t, "kvrouter_requests_total", map[string]string{"endpoint": "e0", "code": "200"}),
			"499":        r.metric(t, "kvrouter_requests_total", map[string]string{"endpoint": "e0", "code": "499"}),
			"aborted":    r.metric(t, "kvrouter_epp_responses_aborted_total", nil),
			"unobserved": r.metric(t, "kvrouter_epp_responses_unobserved_total", nil),
		}
		want := map[string]float64{"200": 1, "499": 0, "aborted": 0, "unobserved": 0}
		if !showHeaders {
			want = map[string]float64{"200": 0, "499": 0, "aborted": 0, "unobserved": 1}
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("response headers shown %v: %s = %v, want %v (all: %v)", showHeaders, k, got[k], v, got)
			}
		}
	}
}

// Once the gateway names the served engine on responses, a response that names none is the
// gateway's own reply (no healthy upstream): it is an upstream error of the picked engine, not
// an answer of it, and the response is not named after the engine.
func TestGatewayOwnReplyIsNotTheEngines(t *testing.T) {
	e0 := newEngine(t, "e0")
	r := newRouter(t, proxy.Config{Policy: policy.Config{Kind: policy.RoundRobin}}, endpointsOf(e0), true)
	p := startPicker(t, r)
	client := p.client(epptest.FullDuplex)
	run := func(served string, status int) http.Header {
		t.Helper()
		x, err := client.Start(context.Background(), epptest.Request{Method: "POST", Path: "/v1/completions",
			Body: []byte(completion("x y z", false))})
		if err != nil {
			t.Fatal(err)
		}
		set, err := x.ResponseHeaders(status, nil, served, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := x.ResponseBody([]byte("no healthy upstream"), true); err != nil {
			t.Fatal(err)
		}
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		return set
	}
	if set := run(e0.addr(), 200); set.Get(proxy.EndpointHeader) != "e0" {
		t.Fatalf("an engine's answer: %v", set)
	}
	set := run("", http.StatusServiceUnavailable)
	if set.Get(proxy.EndpointHeader) != "" {
		t.Fatalf("the gateway's own reply is named after an engine: %v", set)
	}
	eventually(t, "both flights end", func() bool { return r.row(t, "e0").InFlight == 0 })
	if n := r.metric(t, "kvrouter_epp_gateway_replies_total", nil); n != 1 {
		t.Fatalf("gateway replies %v, want 1", n)
	}
	if n := r.metric(t, "kvrouter_upstream_errors_total", map[string]string{"endpoint": "e0", "stage": "gateway"}); n != 1 {
		t.Fatalf("upstream errors of kind gateway %v, want 1", n)
	}
	if n := r.metric(t, "kvrouter_requests_total", map[string]string{"endpoint": "e0", "code": "503"}); n != 1 {
		t.Fatalf("503s counted %v, want 1", n)
	}
}
