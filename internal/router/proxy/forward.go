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

package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/policy"
)

// exchange is one client request on its way through an engine.
type exchange struct {
	s            *Server
	w            http.ResponseWriter
	r            *http.Request
	body         []byte
	path         string
	stream       bool
	keys         []kvindex.Key // the prompt's content keys (nil: not tokenized, or no index)
	gpuHeld      []int         // per route: leading blocks of keys it held on GPU at the lookup
	workTokens   int
	promptTokens int
	maxTokens    int    // the request's output limit, or the policy's default
	capTokens    int    // the request's own output limit, 0 when it sets none
	lora         string // the request's LoRA adapter ("" for the base model)

	// A split request's decode leg (pd.go). untimed keeps its TTFT, which includes the KV
	// transfer, out of the engine's prefill model; onFirst learns the transfer from it instead.
	// retryBody is the client's own body, which a retry elsewhere sends (the prefilled KV is
	// the decode engine's to pull, not another's); prefillEndpoint names the prefill engine on
	// the answer.
	untimed         bool
	onFirst         func(ttft time.Duration)
	retryBody       []byte
	prefillEndpoint string
}

// onceReader reads a byte slice once and then drops it.
type onceReader struct{ b []byte }

func (o *onceReader) Read(p []byte) (int, error) {
	if len(o.b) == 0 {
		o.b = nil
		return 0, io.EOF
	}
	n := copy(p, o.b)
	o.b = o.b[n:]
	return n, nil
}

// hopHeaders are connection-scoped and never forwarded (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// result is how an attempt ended.
type result int

const (
	// answered: the client has its answer or error, or left.
	answered result = iota
	// unreached: the connection failed before the request was written; the engine never saw it.
	unreached
	// unresponsive: the engine sent nothing back before the watchdog judged it hung, or it was
	// ejected as unresponsive; the client has seen nothing.
	unresponsive
)

// run sends the request to the chosen endpoint and, when that is safe, once more to the best
// fallback: when the connection failed before the request was written, or when the engine sent
// nothing back before it was judged hung (the attempt there is cancelled). An engine that
// failed after it read the request may have run it, so that is answered with an error, never
// retried: a request that makes engines drop it must not take them out one after another.
func (x *exchange) run(t *table, d policy.Decision) {
	s := x.s
	name := d.Endpoint
	uncached := d.UncachedTokens
	work := ttftWork(d)
	if x.untimed {
		work = -1
	}
	ttft := d.PredictedTTFT
	for attempt := 0; ; attempt++ {
		i, ok := t.byName[name]
		if !ok { // cannot happen: the decision came from this table
			writeError(x.w, http.StatusInternalServerError, "server_error", "chosen endpoint vanished", "")
			return
		}
		rt := &t.routes[i]
		predicted := s.predict(rt, i, x.keys, x.gpuHeld)
		deadline := s.ttfbDeadline(rt.name, ttft, x.stream, x.maxTokens, s.endpointStreams(rt.name))
		c := s.newCharge(rt, s.tracker.DispatchAdapter(name, x.lora, uncached, x.workTokens), predicted, work, x.stream)
		c.onFirst, c.capTokens = x.onFirst, x.capTokens
		res := x.attempt(c, deadline)
		if res == answered {
			return
		}
		next := x.fallback(t, d.Fallbacks, rt)
		if attempt > 0 || next == "" {
			if res == unreached {
				s.metrics.requests.WithLabelValues(name, "502").Inc()
				writeError(x.w, http.StatusBadGateway, serverError, "the engine could not be reached", "")
				return
			}
			s.metrics.requests.WithLabelValues(name, "504").Inc()
			writeError(x.w, http.StatusGatewayTimeout, serverError,
				"the engine stopped responding and no other engine could take the request", "")
			return
		}
		s.counters.retries.Add(1)
		s.metrics.retries.Inc()
		if x.retryBody != nil {
			// A decode leg that failed before its first byte: the retry is a whole request.
			x.body, x.retryBody, x.prefillEndpoint, x.onFirst = x.retryBody, nil, "", nil
			s.pd.fellBack(legDecode)
		}
		if res == unreached {
			s.log.Info("engine unreachable; retrying on the next-best engine", "endpoint", name, "next", next)
		} else {
			s.log.Info("engine unresponsive; moving the request to the next-best engine", "endpoint", name, "next", next)
		}
		name = next
		// The fallback's cache state is unknown here: account the whole prompt, and do not
		// feed this attempt's TTFT to the latency model (its work figure would be a guess).
		uncached = x.promptTokens
		work = -1
		queued := s.tracker.Stats(next).QueuedPrefillTokens
		s.policyMu.Lock()
		ttft, _ = s.policy.PredictTTFT(next, queued+x.promptTokens)
		s.policyMu.Unlock()
	}
}

// fallback is the best of the decision's fallbacks on another engine than failed's that is not
// ejected meanwhile, or "".
func (x *exchange) fallback(t *table, fallbacks []string, failed *route) string {
	for _, f := range fallbacks {
		j, ok := t.byName[f]
		if !ok || t.routes[j].ep.Name == failed.ep.Name {
			continue // another rank of the engine that just failed
		}
		if x.s.outliers.isEjected(f) {
			continue
		}
		return f
	}
	return ""
}

// attempt performs one upstream exchange, accounted on c, and says how it ended. Nothing
// reaches the client before the engine's first body byte (the status and headers wait for it
// too), so that an attempt on an engine that never answers can still move.
func (x *exchange) attempt(c *charge, deadline time.Duration) result {
	s := x.s
	rt, h := c.rt, c.h
	// Released on every way out, the aborted-connection panic included.
	defer c.release()
	ctx, cancel := context.WithCancelCause(x.r.Context())
	defer cancel(nil)
	// Whether the whole request reached the engine decides whether moving it is safe.
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			wrote.Store(true)
		}
	}})
	// A plain reader (not *bytes.Reader, which NewRequest would snapshot for GetBody) lets the
	// body be collected once it is sent.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rt.ep.URL+x.path, &onceReader{b: x.body})
	if err != nil {
		writeError(x.w, http.StatusInternalServerError, "server_error", "cannot build upstream request: "+err.Error(), "")
		return answered
	}
	copyHeaders(req.Header, x.r.Header)
	// Only the router names a prefill engine: a client's own header would have an engine's
	// pd-sidecar send the request, and the engines' API key, wherever it says.
	req.Header.Del(PrefillerHeader)
	s.cfg.Auth.setUpstream(req.Header, x.r.Header.Get("Authorization"))
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = int64(len(x.body))
	if rt.ranks > 1 {
		req.Header.Set(dpRankHeader, strconv.Itoa(rt.rank))
	}
	c.sent = s.now()
	wd := s.watch(h, rt.name, c.sent, deadline, cancel)
	defer wd.stop()
	resp, err := s.client.Do(req)
	if err != nil {
		switch {
		case x.r.Context().Err() != nil:
			// The client left; nothing to answer.
			s.metrics.requests.WithLabelValues(rt.name, "499").Inc()
			return answered
		case gaveUp(ctx):
			s.metrics.upstreamErrors.WithLabelValues(rt.name, "unresponsive").Inc()
			return unresponsive
		case !wrote.Load():
			s.metrics.upstreamErrors.WithLabelValues(rt.name, "connect").Inc()
			if isDialError(err) {
				s.markDown(rt.ep.Name)
			}
			s.log.Info("engine request failed before it was sent", "endpoint", rt.name, "error", err.Error())
			return unreached
		}
		x.failedAfterWrite(rt, h, context.Cause(ctx), err)
		return answered
	}
	defer resp.Body.Close()

	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	buf := *bp
	c.respond(resp.StatusCode)
	var flusher http.Flusher
	for {
		wd.reading(s.now())
		n, rerr := resp.Body.Read(buf)
		wd.read()
		if n > 0 {
			if c.received(buf[:n], s.now()) {
				wd.begin()
				// The attempt cannot move any more: the request body and keys (~0.5 MB and
				// 50 KB for a 100K-token prompt) need not live as long as the stream.
				x.body, x.keys = nil, nil
				flusher = x.writeHeader(rt, resp)
			}
			if _, werr := x.w.Write(buf[:n]); werr != nil {
				// The client went away: returning cancels the engine request.
				s.metrics.requests.WithLabelValues(rt.name, "499").Inc()
				return answered
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if rerr == io.EOF {
			if !c.started {
				x.writeHeader(rt, resp)
			}
			if flusher == nil {
				// The whole answer goes out now, in one write, rather than after the
				// accounting below and the deferred releases.
				if f, ok := x.w.(http.Flusher); ok {
					f.Flush()
				}
			}
			c.finished()
			return answered
		}
		if rerr == nil {
			continue
		}
		if x.r.Context().Err() != nil {
			s.metrics.requests.WithLabelValues(rt.name, "499").Inc()
			return answered
		}
		cause := context.Cause(ctx)
		if !c.started {
			if gaveUp(ctx) {
				s.metrics.upstreamErrors.WithLabelValues(rt.name, "unresponsive").Inc()
				return unresponsive
			}
			x.failedAfterWrite(rt, h, cause, rerr)
			return answered
		}
		x.brokeOff(rt, h, resp, cause, rerr)
		return answered
	}
}

// relayBufs holds the relay's read buffers: one per request in flight rather than one per request.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// writeHeader sends the engine's status and headers to the client and, for an answer that
// streams (SSE, or no Content-Length), returns the writer's flusher (nil if it has none) after
// flushing them. A whole answer is not flushed piecemeal: the server writes its headers and
// body together when the handler returns (one write system call instead of three: headers,
// body, chunk end), as httputil.ReverseProxy does; the client cannot use part of it anyway.
func (x *exchange) writeHeader(rt *route, resp *http.Response) http.Flusher {
	h := x.w.Header()
	copyHeaders(h, resp.Header)
	h.Set(EndpointHeader, rt.name)
	if x.prefillEndpoint != "" {
		h.Set(PrefillEndpointHeader, x.prefillEndpoint)
	}
	x.w.WriteHeader(resp.StatusCode)
	if !streams(resp) {
		return nil
	}
	flusher, _ := x.w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	return flusher
}

// streams reports whether an answer is relayed as it arrives: an event stream, or a body of
// unknown length (which may be one under another name), as httputil.ReverseProxy decides.
func streams(resp *http.Response) bool {
	if resp.ContentLength == -1 {
		return true
	}
	ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

// failedAfterWrite answers a request whose engine failed after the request was written and
// before anything reached the client. The engine may have run it (a request that crashes or
// wedges engines would), so it is not retried; and one such failure does not mark the engine
// down either: it counts toward the engine's outlier score.
func (x *exchange) failedAfterWrite(rt *route, h *health, cause, err error) {
	s := x.s
	status, msg := http.StatusBadGateway, "the engine closed the connection before answering; the request was not retried because the engine may have run it"
	if errors.Is(cause, errIdle) {
		status, msg = http.StatusGatewayTimeout, "the engine sent nothing for "+s.cfg.StreamIdleTimeout.String()
	} else {
		s.outliers.failure(h, "failed after the request was sent")
	}
	s.metrics.upstreamErrors.WithLabelValues(rt.name, "response").Inc()
	s.log.Info("engine failed after the request was sent; answered, not retried", "endpoint", rt.name, "error", err.Error())
	s.metrics.requests.WithLabelValues(rt.name, strconv.Itoa(status)).Inc()
	writeError(x.w, status, serverError, msg, "")
}

// brokeOff ends a response that already reached the client in part: an SSE stream with an error
// event its client's SDK can surface, anything else by aborting the connection (a partial JSON
// body must not look complete).
func (x *exchange) brokeOff(rt *route, h *health, resp *http.Response, cause, err error) {
	s := x.s
	msg := "the engine stream broke off"
	switch {
	case errors.Is(cause, errStalled), errors.Is(cause, errEjected):
		msg = "the engine stopped responding"
	case errors.Is(cause, errIdle):
		msg = "the engine sent nothing for " + s.cfg.StreamIdleTimeout.String()
	default:
		s.outliers.failure(h, "response broke off")
	}
	s.metrics.upstreamErrors.WithLabelValues(rt.name, "stream").Inc()
	s.log.Info("engine response broke off", "endpoint", rt.name, "error", err.Error(), "cause", fmt.Sprint(cause))
	s.metrics.requests.WithLabelValues(rt.name, "502").Inc()
	if x.stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		event, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": serverError,
			"param": nil, "code": http.StatusBadGateway}})
		_, _ = io.WriteString(x.w, "data: "+string(event)+"\n\n")
		if flusher, ok := x.w.(http.Flusher); ok {
			flusher.Flush()
		}
		return
	}
	panic(http.ErrAbortHandler)
}

// isDialError reports whether err is a failure to connect (refused, unroutable, timed out),
// which says the engine is not there, unlike a failure on a connection it accepted.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// itlMeter times a relayed SSE stream: vLLM sends one event per generated token (more tokens per
// event with --stream-interval, which this then reads as a longer gap), so the mean gap between
// the first and last event is the stream's inter-token latency as its client saw it. Counting
// event separators costs a byte scan of what is relayed anyway.
type itlMeter struct {
	events      int
	first, last time.Time
	nl          bool // the last byte seen, '\r' aside, ended a line (a separator may straddle reads)
	streams     int  // the endpoint's streams at the first event
}

// add scans relayed bytes for event separators: a blank line, "\n\n" or "\r\n\r\n".
func (m *itlMeter) add(b []byte, now time.Time) {
	for _, c := range b {
		switch c {
		case '\r':
			continue
		case '\n':
			if !m.nl {
				m.nl = true
				continue
			}
			if m.events == 0 {
				m.first = now
			}
			m.events++
			m.last = now
		}
		m.nl = false
	}
}

// mean is the mean gap between token events; the last event ("data: [DONE]") carries no token.
// ok is false for streams too short to time.
func (m *itlMeter) mean() (time.Duration, bool) {
	tokens := m.events - 1
	if tokens < 3 || !m.last.After(m.first) {
		return 0, false
	}
	return m.last.Sub(m.first) / time.Duration(tokens-1), true
}

func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		if isHop(k) {
			continue
		}
		dst[k] = append(dst[k][:0], vs...)
	}
	// Headers named by Connection are hop-by-hop too.
	for _, c := range src.Values("Connection") {
		for _, f := range strings.Split(c, ",") {
			dst.Del(strings.TrimSpace(f))
		}
	}
}

func isHop(k string) bool {
	for _, h := range hopHeaders {
		if strings.EqualFold(k, h) {
			return true
		}
	}
	return false
}
