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

// Package epp makes the router a Gateway API Inference Extension endpoint picker: Envoy (or any
// gateway that speaks the protocol) asks it over ext_proc where each request goes, forwards the
// request there itself, and passes the response back through it. The decision is the proxy's
// own (proxy.Server.Pick), so a request is placed the same way whichever front end it came
// through, and its accounting (load, predicted cache entries, latency observations, admission)
// is kept from the response as the gateway relays it.
//
// See docs/router.md, "EPP mode".
package epp

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/kvrouter/kvrouter/internal/router/epp/protocol"
	"github.com/kvrouter/kvrouter/internal/router/proxy"
)

// Options configure a Server.
type Options struct {
	// ShutdownGrace is how long the requests in flight may take to finish once Serve's context
	// ends; then their streams are cut. Default 30 s.
	ShutdownGrace time.Duration
	// HealthInterval is how often the readiness the health services report is refreshed for
	// their watchers (a Check always reads it afresh). Default 1 s.
	HealthInterval time.Duration
	// TLS, when set, is what Serve's ext_proc port speaks: gateways dial an endpoint picker
	// with TLS by default (the reference picker serves it, with a self-signed certificate the
	// gateways do not verify), and some cannot dial one in clear text at all. ServeHealth stays
	// in clear text: the kubelet's gRPC probes speak no TLS.
	TLS *tls.Config
	// Fallbacks lists the policy's second choices after its first in the destination header and
	// metadata ("ip:port,ip:port"), which the protocol allows. Off by default: gateways that
	// route on the header with an ORIGINAL_DST cluster (kgateway, Envoy AI Gateway) read one
	// address and fail on a list, and the reference picker sends one.
	Fallbacks bool
}

// Server is the endpoint picker: the ext_proc service and the gRPC health services.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	router   *proxy.Server
	log      logr.Logger
	opts     Options
	metrics  *metrics
	health   *health.Server
	draining atomic.Bool
	now      func() time.Time
	// servedSeen: the gateway reports the served endpoint on responses. From then on a response
	// without it is the gateway's own reply, not an engine's.
	servedSeen atomic.Bool
	// unobservedLogged: the first response the gateway did not show the picker was logged.
	unobservedLogged atomic.Bool
}

// New returns a picker that decides with router. reg receives its metrics (kvrouter_epp_*).
func New(router *proxy.Server, log logr.Logger, reg prometheus.Registerer, opts Options) *Server {
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = 30 * time.Second
	}
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = time.Second
	}
	s := &Server{router: router, log: log, opts: opts, metrics: newMetrics(reg), health: health.NewServer(), now: time.Now}
	s.refreshHealth()
	return s
}

// Serve serves the ext_proc service, and the health services too (gateways that health-check
// their ext_proc cluster ask there), on lis until ctx ends; then it lets the streams in flight
// finish within the shutdown grace.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	var creds []grpc.ServerOption
	if s.opts.TLS != nil {
		creds = append(creds, grpc.Creds(credentials.NewTLS(s.opts.TLS)))
	}
	g := s.newGRPCServer(creds...)
	extprocv3.RegisterExternalProcessorServer(g, s)
	healthgrpc.RegisterHealthServer(g, healthService{Server: s.health, epp: s})
	return s.serve(ctx, g, lis)
}

// ServeHealth serves the health services alone on lis until ctx ends: the port the kubelet's
// probes use.
func (s *Server) ServeHealth(ctx context.Context, lis net.Listener) error {
	g := s.newGRPCServer()
	healthgrpc.RegisterHealthServer(g, healthService{Server: s.health, epp: s})
	return s.serve(ctx, g, lis)
}

func (s *Server) newGRPCServer(extra ...grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append([]grpc.ServerOption{
		// A buffered body comes in one message: room for the largest body the router takes
		// (it answers 413 beyond), and the headers besides.
		grpc.MaxRecvMsgSize(int(min(s.router.MaxBodyBytes(), 1<<30)) + 1<<20),
		// Envoy holds one long-lived connection per worker; its keepalive pings must not be
		// answered with GOAWAY too_many_pings.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}, extra...)...)
}

func (s *Server) serve(ctx context.Context, g *grpc.Server, lis net.Listener) error {
	loop, stop := context.WithCancel(ctx)
	defer stop()
	go s.watchHealth(loop)
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Not ready any more, so that health-checking gateways send nothing new, while the
	// requests in flight finish.
	s.draining.Store(true)
	s.refreshHealth()
	stopped := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(s.opts.ShutdownGrace)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		s.log.Info("ext_proc streams cut at the end of the shutdown grace", "grace", s.opts.ShutdownGrace.String())
		g.Stop()
		<-stopped
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// Process serves one ext_proc stream: one HTTP request and its response, as the gateway relays
// them.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()
	x := &exchange{s: s, stream: stream, reqMode: defaultMode, respMode: defaultMode}
	defer x.end()
	for {
		req, err := stream.Recv()
		if err != nil {
			// io.EOF is the gateway closing its side cleanly: it has nothing more to show (the
			// response ended, or its filter does not send the response at all). A cancel or
			// a reset is the request going away.
			x.halfClosed = errors.Is(err, io.EOF) && stream.Context().Err() == nil
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || stream.Context().Err() != nil {
				return nil
			}
			return err
		}
		closed, err := x.handle(req)
		if err != nil || closed {
			return err
		}
	}
}

// defaultMode is the body mode assumed of a gateway that does not say (Envoy before 1.33 sends
// no protocol_config): the mode the Inference Extension's gateways are configured with.
const defaultMode = extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED

// exchange is one stream's state.
type exchange struct {
	s      *Server
	stream extprocv3.ExternalProcessor_ProcessServer
	// The body modes the gateway runs the filter in.
	reqMode, respMode extprocfilterv3.ProcessingMode_BodySendMode
	observe           bool // observability mode: the gateway ignores answers, so none is sent

	method, path string
	header       http.Header
	subset       []string
	body         []byte
	decided      bool // the gateway has its answer (a destination, or an immediate response)
	outcome      string
	flight       *proxy.Flight
	responded    bool // the response ended
	respStatus   int  // the response's status, once its headers came (0: not shown)
	halfClosed   bool // the gateway closed the stream cleanly
}

// handle answers one message; closed says the stream is over (an immediate response went).
func (x *exchange) handle(req *extprocv3.ProcessingRequest) (closed bool, err error) {
	if pc := req.GetProtocolConfig(); pc != nil {
		x.reqMode, x.respMode = pc.GetRequestBodyMode(), pc.GetResponseBodyMode()
	}
	x.observe = req.GetObservabilityMode()
	switch v := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return x.requestHeaders(req, v.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return x.requestBody(v.RequestBody.GetBody(), v.RequestBody.GetEndOfStream())
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if !x.decided {
			// The body ended with trailers rather than an end-of-stream chunk: the body goes
			// back without end-of-stream, the trailers' answer ends it.
			if closed, err := x.bodyEnded(false); closed || err != nil {
				return closed, err
			}
		}
		return false, x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return false, x.responseHeaders(req, v.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return false, x.responseBody(v.ResponseBody.GetBody(), v.ResponseBody.GetEndOfStream())
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		x.responseEnded()
		return false, x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}})
	}
	return false, nil // a flow-control message alone: nothing to answer
}

func (x *exchange) fullDuplexRequest() bool {
	return x.reqMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
}

func (x *exchange) fullDuplexResponse() bool {
	return x.respMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
}

// requestHeaders decides at once on a request with no body, or whose body the decision does
// not read; otherwise it waits for the body: in full-duplex mode silently (the answer to the
// headers carries the decision), in buffered mode after letting the headers through (the
// answer to the body carries it).
func (x *exchange) requestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) (bool, error) {
	pseudo, header := protocol.SplitHeaders(h.GetHeaders())
	x.method, x.path, x.header, x.subset = pseudo[":method"], pseudo[":path"], header, protocol.Subset(req)
	if h.GetEndOfStream() || !proxy.NeedsBody(x.method, x.path) {
		return x.decide(nil, false, true)
	}
	switch x.reqMode {
	case extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		return false, nil
	case extprocfilterv3.ProcessingMode_BUFFERED, extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL:
		return false, x.send(headersResponse(&extprocv3.CommonResponse{}))
	}
	// Any other mode forwards the headers before the body is seen, or never shows the body.
	x.s.log.Error(nil, "the gateway's ext_proc filter does not send the request body as the picker needs; set request_body_mode to FULL_DUPLEX_STREAMED (or BUFFERED)",
		"requestBodyMode", x.reqMode.String())
	return x.refuse(&proxy.Refusal{Status: http.StatusInternalServerError, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{"error":{"message":"the gateway is misconfigured: its endpoint picker needs the request body","type":"server_error","param":null,"code":500}}` + "\n")})
}

// requestBody gathers an inference request's body and decides at its end; a body that is not
// read passes through.
func (x *exchange) requestBody(chunk []byte, eos bool) (bool, error) {
	if x.decided {
		if x.fullDuplexRequest() {
			return false, x.sendBody(requestBodyResponse, chunk, eos)
		}
		return false, x.send(bodyResponse(requestBodyResponse, &extprocv3.CommonResponse{}))
	}
	if int64(len(x.body))+int64(len(chunk)) > x.s.router.MaxBodyBytes() {
		x.body = nil
		return x.refuse(x.s.router.BodyTooLarge())
	}
	x.body = append(x.body, chunk...)
	if !eos {
		switch x.reqMode {
		case extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
			return false, nil // more to come
		case extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL:
			// The gateway's buffer filled before the body ended: what came is a fragment, and
			// deciding on it would answer a 400 for a well-formed request.
			x.body = nil
			x.s.log.Info("the gateway sent a partial request body (BUFFERED_PARTIAL, its buffer limit reached); refused with 413: raise the gateway's buffer limit or use FULL_DUPLEX_STREAMED")
			return x.refuse(x.s.router.BodyTooLarge())
		}
		// BUFFERED: the whole body, with trailers to follow.
	}
	return x.bodyEnded(eos)
}

// bodyEnded decides on the gathered body; eos says whether its last chunk ended the stream (not
// so when trailers follow), which the body streamed back must say too.
func (x *exchange) bodyEnded(eos bool) (bool, error) {
	if x.body == nil {
		x.body = []byte{}
	}
	return x.decide(x.body, true, eos)
}

// decide picks for the request (body nil: it has none, or none is read) and answers the gateway:
// the destination on the message the gateway waits on, or an immediate response.
func (x *exchange) decide(body []byte, withBody, eos bool) (bool, error) {
	s := x.s
	start := s.now()
	f, refusal := s.router.Pick(x.stream.Context(), proxy.PickInput{Method: x.method, Path: x.path, Header: x.header,
		Body: body, Subset: x.subset})
	x.body = nil
	if refusal != nil {
		closed, err := x.refuse(refusal)
		s.metrics.decisionSeconds.Observe(s.now().Sub(start).Seconds())
		return closed, err
	}
	x.flight, x.decided, x.outcome = f, true, outcomeRouted
	s.metrics.requests.WithLabelValues(outcomeRouted).Inc()
	dests := f.Destinations
	if !s.opts.Fallbacks {
		dests = dests[:1]
	}
	dest := strings.Join(dests, ",")
	set := http.Header{protocol.DestinationKey: {dest}}
	for k, v := range f.SetHeaders {
		set[k] = v
	}
	forwarded := body
	if f.Body != nil {
		forwarded = f.Body
		set.Set("Content-Length", strconv.Itoa(len(f.Body)))
	}
	common := &extprocv3.CommonResponse{ClearRouteCache: true,
		HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: protocol.SetHeaders(set), RemoveHeaders: lower(f.RemoveHeaders)}}
	s.log.V(2).Info("picked", "endpoint", f.Endpoint(), "destinations", dest, "path", x.path)
	var err error
	switch {
	case !withBody || x.fullDuplexRequest():
		resp := headersResponse(common)
		resp.DynamicMetadata = protocol.DestinationMetadata(dest)
		if err = x.send(resp); err == nil && withBody {
			// The body was held back until the decision; it goes on after the headers.
			err = x.sendBody(requestBodyResponse, forwarded, eos)
		}
	default:
		if f.Body != nil {
			common.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: f.Body}}
		}
		resp := bodyResponse(requestBodyResponse, common)
		resp.DynamicMetadata = protocol.DestinationMetadata(dest)
		err = x.send(resp)
	}
	s.metrics.decisionSeconds.Observe(s.now().Sub(start).Seconds())
	return false, err
}

// refuse answers the request without an engine. The stream is over for the picker: the gateway
// sends the answer to the client and closes it.
func (x *exchange) refuse(r *proxy.Refusal) (bool, error) {
	x.decided, x.outcome = true, outcomeOf(r.Status)
	x.s.metrics.requests.WithLabelValues(x.outcome).Inc()
	return true, x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(r.Status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: protocol.SetHeaders(r.Header)},
			Body:    r.Body,
			Details: "kvrouter_epp_" + x.outcome,
		}}})
}

// responseHeaders moves the accounting to the engine that served, if the gateway went down the
// fallbacks, and names it on the response as the proxy does.
func (x *exchange) responseHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	common := &extprocv3.CommonResponse{}
	if f := x.flight; f != nil {
		served := protocol.Served(req)
		pseudo, upstream := protocol.SplitHeaders(h.GetHeaders())
		code, _ := strconv.Atoi(pseudo[":status"])
		x.respStatus = code
		switch {
		case served == "" && x.s.servedSeen.Load():
			// A gateway that names the served engine names none on a reply of its own (no
			// healthy upstream, a refused connection): the engine did not answer, and the
			// response is not named after it.
			f.GatewayReply(code)
			x.s.metrics.gatewayReplies.Inc()
		default:
			if served != "" {
				x.s.servedSeen.Store(true)
			}
			if f.Served(served) {
				x.s.metrics.servedElsewhere.Inc()
			}
			if code > 0 {
				f.ResponseHeaders(code)
			}
			named := http.Header{proxy.EndpointHeader: {f.Endpoint()}}
			// The sidecar names the prefill engine only when it ran the prefill leg: a leg
			// that failed there was served whole, and an engine without a sidecar never split.
			if p := f.PrefillEndpoint(); p != "" && upstream.Get(proxy.PrefillEndpointHeader) != "" {
				named.Set(proxy.PrefillEndpointHeader, p)
			}
			common.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: protocol.SetHeaders(named)}
		}
		if h.GetEndOfStream() {
			x.responseEnded()
		}
	}
	return x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: common}}})
}

// responseBody times the answer as it passes, unchanged.
func (x *exchange) responseBody(chunk []byte, eos bool) error {
	if x.flight != nil {
		x.flight.ResponseBody(chunk, eos)
		if eos {
			x.responded = true
		}
	}
	if x.fullDuplexResponse() {
		return x.sendBody(responseBodyResponse, chunk, eos)
	}
	return x.send(bodyResponse(responseBodyResponse, &extprocv3.CommonResponse{}))
}

func (x *exchange) responseEnded() {
	if x.flight != nil {
		x.flight.ResponseBody(nil, true)
		x.responded = true
	}
}

// end releases what the stream holds, however it ended.
func (x *exchange) end() {
	if !x.decided {
		x.s.metrics.requests.WithLabelValues(outcomeCancelled).Inc()
	}
	if x.flight != nil {
		switch {
		case x.responded:
		case x.halfClosed && x.respStatus > 0:
			// The gateway showed the response's headers but not its body (its filter skips
			// it), and closed the stream when the response ended: complete it with the status.
			x.responseEnded()
		case x.halfClosed:
			// It never showed the response: the request is over, but how it went is unknown.
			x.s.metrics.unobserved.Inc()
			if !x.s.unobservedLogged.Swap(true) {
				x.s.log.Info("the gateway closes ext_proc streams without sending the response: requests complete with no status or timing, and an engine's load is released when the gateway closes the stream; set the filter's response_header_mode to SEND and response_body_mode to FULL_DUPLEX_STREAMED")
			}
			x.flight.Unobserved()
		default:
			x.s.metrics.aborted.Inc()
		}
		x.flight.Done()
	}
}

func (x *exchange) send(resp *extprocv3.ProcessingResponse) error {
	if x.observe {
		return nil
	}
	return x.stream.Send(resp)
}

type bodyKind int

const (
	requestBodyResponse bodyKind = iota
	responseBodyResponse
)

// sendBody streams body back in full-duplex mode, in chunks of at most protocol.BodyChunkBytes (one
// empty one for an empty body), the last marked eos.
func (x *exchange) sendBody(kind bodyKind, body []byte, eos bool) error {
	for first := true; first || len(body) > 0; first = false {
		n := min(len(body), protocol.BodyChunkBytes)
		last := n == len(body)
		common := &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body[:n], EndOfStream: eos && last}}}}
		if err := x.send(bodyResponse(kind, common)); err != nil {
			return err
		}
		body = body[n:]
	}
	return nil
}

func headersResponse(c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: c}}}
}

func bodyResponse(kind bodyKind, c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	if kind == responseBodyResponse {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{Response: c}}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: c}}}
}

func lower(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = strings.ToLower(k)
	}
	return out
}

// healthService is the standard health server with its statuses refreshed on every Check, so
// that a probe never reads a second-old readiness.
type healthService struct {
	*health.Server
	epp *Server
}

func (h healthService) Check(ctx context.Context, req *healthgrpc.HealthCheckRequest) (*healthgrpc.HealthCheckResponse, error) {
	h.epp.refreshHealth()
	return h.Server.Check(ctx, req)
}

func (h healthService) List(ctx context.Context, req *healthgrpc.HealthListRequest) (*healthgrpc.HealthListResponse, error) {
	h.epp.refreshHealth()
	return h.Server.List(ctx, req)
}

// refreshHealth sets the services' statuses: alive always, ready while the router is (and the
// server is not draining).
func (s *Server) refreshHealth() {
	serving := func(ok bool) healthgrpc.HealthCheckResponse_ServingStatus {
		if ok {
			return healthgrpc.HealthCheckResponse_SERVING
		}
		return healthgrpc.HealthCheckResponse_NOT_SERVING
	}
	ready, _ := s.router.Ready()
	ready = ready && !s.draining.Load()
	s.health.SetServingStatus("", serving(ready))
	s.health.SetServingStatus(protocol.LivenessService, healthgrpc.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(protocol.ReadinessService, serving(ready))
	s.health.SetServingStatus(protocol.ExtProcService, serving(ready))
}

// watchHealth refreshes the statuses for the health services' watchers until ctx ends.
func (s *Server) watchHealth(ctx context.Context) {
	tick := time.NewTicker(s.opts.HealthInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.refreshHealth()
		}
	}
}
