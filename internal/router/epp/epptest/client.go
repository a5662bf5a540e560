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

// Package epptest drives an endpoint picker over ext_proc the way Envoy's ext_proc filter
// does, for tests and benchmarks that need a gateway without running Envoy: Client runs the
// protocol message by message, Gateway is an HTTP front end built on it that forwards requests
// where the picker says.
package epptest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvrouter/kvrouter/internal/router/epp/protocol"
)

// Mode is a body send mode of Envoy's ext_proc filter.
type Mode = extprocfilterv3.ProcessingMode_BodySendMode

// The body modes the client runs in, as Envoy's filter names them.
const (
	FullDuplex Mode = extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	Buffered   Mode = extprocfilterv3.ProcessingMode_BUFFERED
	Streamed   Mode = extprocfilterv3.ProcessingMode_STREAMED
)

// Client drives a picker as Envoy's ext_proc filter does: one stream per HTTP request. It is
// safe for concurrent use.
type Client struct {
	ext extprocv3.ExternalProcessorClient
	// RequestMode is how request bodies are sent: FullDuplex (the default; in chunks of
	// ChunkBytes, without waiting for answers) or Buffered (the whole body in one message,
	// after the answer to the headers).
	RequestMode Mode
	// ResponseMode is how response bodies are sent: FullDuplex (the default: the picker
	// streams each chunk back, and what it sends back is what the client gets) or Streamed
	// (each chunk answered, passed on unchanged).
	ResponseMode Mode
	// ChunkBytes is the size of the request body's chunks in full-duplex mode (Envoy sends what
	// it reads off the connection). Default 16 KiB.
	ChunkBytes int
	// NoProtocolConfig leaves protocol_config out of the first message, as Envoy before 1.33
	// does.
	NoProtocolConfig bool
}

// NewClient returns a client over conn, in full-duplex mode both ways.
func NewClient(conn grpc.ClientConnInterface) *Client {
	return &Client{ext: extprocv3.NewExternalProcessorClient(conn), RequestMode: FullDuplex, ResponseMode: FullDuplex}
}

// Dial connects to a picker at addr (host:port) in clear text (a picker run with
// --grpc-tls=false).
func Dial(addr string) (*Client, *grpc.ClientConn, error) {
	return dial(addr, insecure.NewCredentials())
}

// DialTLS connects to a picker at addr over TLS without verifying its certificate, as the
// Inference Extension's gateways reach a picker that serves a self-signed one.
func DialTLS(addr string) (*Client, *grpc.ClientConn, error) {
	return dial(addr, credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}))
}

func dial(addr string, creds credentials.TransportCredentials) (*Client, *grpc.ClientConn, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, err
	}
	return NewClient(conn), conn, nil
}

// Request is an HTTP request as the gateway received it.
type Request struct {
	Method string
	// Path is the request target: path and query.
	Path      string
	Authority string
	Header    http.Header
	Body      []byte
	// Subset, when not nil, is sent as the subset hint (filter metadata envoy.lb.subset_hint),
	// as a list; SubsetString sends it as one comma-separated string instead.
	Subset       []string
	SubsetString bool
}

// Decision is the picker's answer to a request.
type Decision struct {
	// Immediate is set when the picker answered the request itself; nothing else is then.
	Immediate *Immediate
	// Destination is the x-gateway-destination-endpoint header the picker set,
	// MetadataDestination the same key of its dynamic metadata (the protocol wants them equal).
	Destination, MetadataDestination string
	ClearRouteCache                  bool
	// SetHeaders and RemoveHeaders are the picker's mutations of the request's headers (the
	// destination included), keyed as net/http keys them.
	SetHeaders    http.Header
	RemoveHeaders []string
	// Body is the body the gateway forwards: what the picker streamed back (full duplex), or
	// the buffered body, replaced if the picker replaced it.
	Body []byte
	// BodyChunks is how many body chunks the picker streamed back (full duplex).
	BodyChunks int
	// At is when the picker's decision arrived (its answer to the headers, or its immediate
	// response): what a gateway waits for before it can open the upstream connection, so what
	// a picker's decision latency is measured to.
	At time.Time
}

// Destinations is Destination split: where the gateway tries the request, in order.
func (d *Decision) Destinations() []string {
	if d.Destination == "" {
		return nil
	}
	return strings.Split(d.Destination, ",")
}

// Immediate is a response the picker gave in place of an engine.
type Immediate struct {
	Status int
	Header http.Header
	Body   []byte
	// Details is what the gateway appends to its access log.
	Details string
}

// Exchange is one request's stream to the picker.
type Exchange struct {
	Decision Decision

	c      *Client
	stream extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
	mu     sync.Mutex // Send is not safe for concurrent use; the full-duplex sender runs aside
	closed bool
}

// Start sends the request's headers and body to the picker, as the filter would, and reads its
// decision. When the decision is an immediate response, the exchange is over (Close it all the
// same).
func (c *Client) Start(ctx context.Context, req Request) (*Exchange, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.ext.Process(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	x := &Exchange{c: c, stream: stream, cancel: cancel}
	if err := x.start(req); err != nil {
		x.Abort()
		return nil, err
	}
	return x, nil
}

func (x *Exchange) start(req Request) error {
	c := x.c
	first := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers:     requestHeaderMap(req),
			EndOfStream: len(req.Body) == 0,
		}},
		MetadataContext: subsetMetadata(req),
	}
	if !c.NoProtocolConfig {
		first.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: c.RequestMode, ResponseBodyMode: c.ResponseMode}
	}
	if err := x.send(first); err != nil {
		return err
	}
	if len(req.Body) == 0 {
		return x.receiveDecision(false)
	}
	if c.RequestMode == Buffered {
		// The body waits in the filter's buffer until the headers are answered (with the
		// decision already, for a request whose body the picker does not read).
		if err := x.receiveDecision(false); err != nil || x.Decision.Immediate != nil {
			return err
		}
		x.Decision.Body = req.Body
		if err := x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: req.Body, EndOfStream: true}}}); err != nil {
			return err
		}
		return x.receiveDecision(false)
	}
	// Full duplex: the body goes on in chunks while the picker answers whenever it is ready,
	// as Envoy relays it.
	chunk := c.ChunkBytes
	if chunk <= 0 {
		chunk = 16 << 10
	}
	sent := make(chan error, 1)
	go func() {
		body := req.Body
		for len(body) > 0 {
			n := min(chunk, len(body))
			err := x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
				RequestBody: &extprocv3.HttpBody{Body: body[:n], EndOfStream: n == len(body)}}})
			if err != nil {
				// The picker ended the stream (an immediate response): what it said is read
				// below.
				sent <- nil
				return
			}
			body = body[n:]
		}
		sent <- nil
	}()
	err := x.receiveDecision(true)
	if err != nil {
		x.cancel() // unblocks the sender
	}
	<-sent
	return err
}

// receiveDecision reads the picker's answers: when streamed (full duplex), until it has decided
// (an immediate response, or the headers' answer and the body streamed back to its end);
// otherwise one answer.
func (x *Exchange) receiveDecision(streamed bool) error {
	d := &x.Decision
	gotHeaders := false
	for {
		resp, err := x.stream.Recv()
		if err != nil {
			return fmt.Errorf("picker stream: %w", err)
		}
		if md := resp.GetDynamicMetadata(); md != nil {
			d.MetadataDestination = md.GetFields()[protocol.DestinationNamespace].GetStructValue().GetFields()[protocol.DestinationKey].GetStringValue()
		}
		switch v := resp.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			ir := v.ImmediateResponse
			im := &Immediate{Status: int(ir.GetStatus().GetCode()), Header: http.Header{}, Body: ir.GetBody(), Details: ir.GetDetails()}
			for _, h := range ir.GetHeaders().GetSetHeaders() {
				im.Header.Set(h.GetHeader().GetKey(), protocol.HeaderValue(h.GetHeader()))
			}
			d.Immediate = im
			d.At = time.Now()
			return nil
		case *extprocv3.ProcessingResponse_RequestHeaders:
			gotHeaders = true
			d.At = time.Now()
			d.apply(v.RequestHeaders.GetResponse())
			if !streamed {
				return nil
			}
		case *extprocv3.ProcessingResponse_RequestBody:
			common := v.RequestBody.GetResponse()
			d.apply(common)
			if sr := common.GetBodyMutation().GetStreamedResponse(); sr != nil {
				if !gotHeaders {
					return errors.New("picker streamed the body back before answering the headers")
				}
				d.Body = append(d.Body, sr.GetBody()...)
				d.BodyChunks++
				if sr.GetEndOfStream() {
					return nil
				}
				continue
			}
			if !streamed {
				return nil
			}
		default:
			return fmt.Errorf("unexpected answer from the picker while the request is sent: %T", v)
		}
	}
}

func (d *Decision) apply(c *extprocv3.CommonResponse) {
	if c == nil {
		return
	}
	d.ClearRouteCache = d.ClearRouteCache || c.GetClearRouteCache()
	for _, h := range c.GetHeaderMutation().GetSetHeaders() {
		if d.SetHeaders == nil {
			d.SetHeaders = http.Header{}
		}
		d.SetHeaders.Set(h.GetHeader().GetKey(), protocol.HeaderValue(h.GetHeader()))
	}
	d.RemoveHeaders = append(d.RemoveHeaders, c.GetHeaderMutation().GetRemoveHeaders()...)
	if b, ok := c.GetBodyMutation().GetMutation().(*extprocv3.BodyMutation_Body); ok {
		d.Body = b.Body
	}
	if v := d.SetHeaders.Get(protocol.DestinationKey); v != "" {
		d.Destination = v
	}
}

// ResponseHeaders sends the response's status and headers, with the address that served it
// ("" sends no served metadata), and returns the headers the picker sets on the response.
// endOfStream says the response has no body.
func (x *Exchange) ResponseHeaders(status int, header http.Header, served string, endOfStream bool) (http.Header, error) {
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte(fmt.Sprint(status))}}}
	addHeaders(hm, header)
	req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: hm, EndOfStream: endOfStream}}}
	if served != "" {
		req.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			protocol.DestinationNamespace: {Fields: map[string]*structpb.Value{protocol.ServedKey: structpb.NewStringValue(served)}},
		}}
	}
	if err := x.send(req); err != nil {
		return nil, err
	}
	resp, err := x.stream.Recv()
	if err != nil {
		return nil, fmt.Errorf("picker stream: %w", err)
	}
	rh, ok := resp.GetResponse().(*extprocv3.ProcessingResponse_ResponseHeaders)
	if !ok {
		return nil, fmt.Errorf("picker answered the response headers with %T", resp.GetResponse())
	}
	set := http.Header{}
	for _, h := range rh.ResponseHeaders.GetResponse().GetHeaderMutation().GetSetHeaders() {
		set.Set(h.GetHeader().GetKey(), protocol.HeaderValue(h.GetHeader()))
	}
	return set, nil
}

// ResponseBody sends a piece of the response body and returns what the gateway passes on to
// the client: what the picker streamed back (full duplex), else the chunk itself.
func (x *Exchange) ResponseBody(chunk []byte, endOfStream bool) ([]byte, error) {
	if err := x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: endOfStream}}}); err != nil {
		return nil, err
	}
	var out []byte
	for {
		resp, err := x.stream.Recv()
		if err != nil {
			return nil, fmt.Errorf("picker stream: %w", err)
		}
		rb, ok := resp.GetResponse().(*extprocv3.ProcessingResponse_ResponseBody)
		if !ok {
			return nil, fmt.Errorf("picker answered the response body with %T", resp.GetResponse())
		}
		sr := rb.ResponseBody.GetResponse().GetBodyMutation().GetStreamedResponse()
		if x.c.ResponseMode != FullDuplex {
			return chunk, nil
		}
		if sr == nil {
			return nil, errors.New("picker did not stream the response body back in full-duplex mode")
		}
		out = append(out, sr.GetBody()...)
		// The picker streams a chunk back whole, in pieces of at most protocol.BodyChunkBytes.
		if sr.GetEndOfStream() || len(out) >= len(chunk) {
			return out, nil
		}
	}
}

// Close ends the exchange as the filter does when the HTTP stream ends, and waits for the
// picker to close its side.
func (x *Exchange) Close() error {
	defer x.cancel()
	x.mu.Lock()
	x.closed = true
	err := x.stream.CloseSend()
	x.mu.Unlock()
	if err != nil {
		return err
	}
	for {
		if _, err := x.stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// Abort resets the stream, as the filter does when the client or the upstream goes away.
func (x *Exchange) Abort() { x.cancel() }

func (x *Exchange) send(req *extprocv3.ProcessingRequest) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return io.EOF
	}
	return x.stream.Send(req)
}

func requestHeaderMap(req Request) *corev3.HeaderMap {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	authority := req.Authority
	if authority == "" {
		authority = "gateway"
	}
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte(method)},
		{Key: ":path", RawValue: []byte(req.Path)},
		{Key: ":authority", RawValue: []byte(authority)},
		{Key: ":scheme", RawValue: []byte("http")},
	}}
	addHeaders(hm, req.Header)
	if len(req.Body) > 0 && req.Header.Get("Content-Length") == "" {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: "content-length", RawValue: []byte(fmt.Sprint(len(req.Body)))})
	}
	return hm
}

// addHeaders adds h to hm as Envoy lists headers: lowercase keys, one entry per value.
func addHeaders(hm *corev3.HeaderMap, h http.Header) {
	for k, vs := range h {
		for _, v := range vs {
			hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(v)})
		}
	}
}

func subsetMetadata(req Request) *corev3.Metadata {
	if req.Subset == nil {
		return nil
	}
	var v *structpb.Value
	if req.SubsetString {
		v = structpb.NewStringValue(strings.Join(req.Subset, ","))
	} else {
		list := &structpb.ListValue{}
		for _, a := range req.Subset {
			list.Values = append(list.Values, structpb.NewStringValue(a))
		}
		v = structpb.NewListValue(list)
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		protocol.SubsetNamespace: {Fields: map[string]*structpb.Value{protocol.SubsetKey: v}},
	}}
}
