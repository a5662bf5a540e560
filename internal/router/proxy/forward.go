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
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
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

// run sends the request to the chosen endpoint and, if the connection fails before any byte
// reached the client, once more to the best fallback.
func (x *exchange) run(t *table, d policy.Decision) {
	s := x.s
	name := d.Endpoint
	uncached := d.UncachedTokens
	work := d.PrefillWork
	for attempt := 0; ; attempt++ {
		i, ok := t.byName[name]
		if !ok { // cannot happen: the decision came from this table
			writeError(x.w, http.StatusInternalServerError, "server_error", "chosen endpoint vanished", "")
			return
		}
		rt := &t.routes[i]
		var predicted []kvindex.Key
		if len(x.keys) > 0 {
			// Predicted residency covers the time until the engine reports the blocks (its
			// queue, then the events' lag), so a burst of siblings, or the next request of a
			// prefix while the first still waits in a busy engine's queue, follows this one
			// instead of starting a second copy elsewhere. The prefix the lookup just found
			// confirmed there needs no prediction (the index would skip it anyway, at the cost
			// of a probe per block: ~0.5 ms for a 90K-token cached prefix).
			held := 0
			if i < len(x.gpuHeld) {
				held = min(x.gpuHeld[i], len(x.keys))
			}
			predicted = x.keys[held:]
			s.index.PredictPendingKeys(rt.src, predicted)
		}
		retry := x.attempt(rt, s.tracker.Dispatch(name, uncached, x.workTokens), work, predicted)
		if !retry {
			return
		}
		next := ""
		for _, f := range d.Fallbacks {
			j, ok := t.byName[f]
			if !ok || t.routes[j].ep.Name == rt.ep.Name {
				continue // another rank of the engine that just failed
			}
			next = f
			break
		}
		if attempt > 0 || next == "" {
			s.metrics.requests.WithLabelValues(name, "502").Inc()
			writeError(x.w, http.StatusBadGateway, "server_error", "the engine could not be reached", "")
			return
		}
		s.counters.retries.Add(1)
		s.metrics.retries.Inc()
		s.log.Info("engine unreachable; retrying on the next-best engine", "endpoint", name, "next", next)
		name = next
		// The fallback's cache state is unknown here: account the whole prompt, and do not
		// feed this attempt's TTFT to the latency model (its work figure would be a guess).
		uncached = x.promptTokens
		work = -1
	}
}

// attempt performs one upstream exchange. It returns true when the engine could not be reached
// and nothing was written to the client (the caller may retry elsewhere).
func (x *exchange) attempt(rt *route, ticket *loadsignal.Ticket, work int, predicted []kvindex.Key) (retry bool) {
	s := x.s
	// Released on every way out, the aborted-connection panic included.
	defer ticket.Done()
	settle := func() {
		if predicted != nil {
			s.index.SettleKeys(rt.src, predicted)
			predicted = nil
		}
	}
	defer settle()
	ctx, cancel := context.WithCancel(x.r.Context())
	defer cancel()
	// A plain reader (not *bytes.Reader, which NewRequest would snapshot for GetBody) lets the
	// body be collected once it is sent.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rt.ep.URL+x.path, &onceReader{b: x.body})
	if err != nil {
		writeError(x.w, http.StatusInternalServerError, "server_error", "cannot build upstream request: "+err.Error(), "")
		return false
	}
	copyHeaders(req.Header, x.r.Header)
	s.cfg.Auth.setUpstream(req.Header, x.r.Header.Get("Authorization"))
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = int64(len(x.body))
	if rt.ranks > 1 {
		req.Header.Set(dpRankHeader, strconv.Itoa(rt.rank))
	}
	sent := s.now()
	resp, err := s.client.Do(req)
	if err != nil {
		if x.r.Context().Err() != nil {
			// The client left; nothing to answer.
			s.metrics.requests.WithLabelValues(rt.name, "499").Inc()
			return false
		}
		s.metrics.upstreamErrors.WithLabelValues(rt.name, "connect").Inc()
		s.markDown(rt.ep.Name)
		s.log.Info("engine request failed before any response", "endpoint", rt.name, "error", err.Error())
		return true
	}
	defer resp.Body.Close()
	// The engine answered: no retry can follow, so the request body and keys (~0.5 MB and 50 KB
	// for a 100K-token prompt) need not live as long as the stream.
	x.body, x.keys = nil, nil

	h := x.w.Header()
	copyHeaders(h, resp.Header)
	h.Set(EndpointHeader, rt.name)
	x.w.WriteHeader(resp.StatusCode)
	flusher, _ := x.w.(http.Flusher)
	if flusher != nil {
		flusher.Flush() // the client sees the status and the endpoint header at once
	}

	// Idle timer: a stream that sends nothing for StreamIdleTimeout is aborted.
	idle := time.AfterFunc(s.cfg.StreamIdleTimeout, cancel)
	defer idle.Stop()
	buf := make([]byte, 16<<10)
	gotFirst := false
	timed := x.stream && resp.StatusCode == http.StatusOK
	var itl itlMeter
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			idle.Reset(s.cfg.StreamIdleTimeout)
			if timed {
				itl.add(buf[:n], s.now())
			}
			if !gotFirst {
				gotFirst = true
				ttft := s.now().Sub(sent)
				ticket.FirstToken()
				settle()
				if timed {
					itl.streams = s.endpointStreams(rt.name)
				}
				if resp.StatusCode == http.StatusOK {
					s.metrics.ttft.Observe(ttft.Seconds())
					// Only streams time the first token; a whole answer times the generation.
					if x.stream && work >= 0 {
						s.policyMu.Lock()
						s.policy.ObserveTTFT(rt.name, work, ttft.Seconds())
						s.policyMu.Unlock()
					}
				}
			}
			if _, werr := x.w.Write(buf[:n]); werr != nil {
				// The client went away: returning cancels the engine request.
				s.metrics.requests.WithLabelValues(rt.name, "499").Inc()
				return false
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if rerr == io.EOF {
			s.metrics.requests.WithLabelValues(rt.name, strconv.Itoa(resp.StatusCode)).Inc()
			if gap, ok := itl.mean(); ok {
				streams := float64(itl.streams+s.endpointStreams(rt.name)) / 2
				s.policyMu.Lock()
				s.policy.ObserveITL(rt.name, streams, gap.Seconds())
				s.policyMu.Unlock()
			}
			return false
		}
		if rerr != nil {
			if x.r.Context().Err() != nil {
				s.metrics.requests.WithLabelValues(rt.name, "499").Inc()
				return false
			}
			s.metrics.upstreamErrors.WithLabelValues(rt.name, "stream").Inc()
			s.log.Info("engine response broke off", "endpoint", rt.name, "error", rerr.Error(),
				"idleTimeout", errors.Is(ctx.Err(), context.Canceled))
			if x.stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				// A clean SSE error event the client's SDK can surface, then the end.
				_, _ = io.WriteString(x.w, `data: {"error":{"message":"the engine stream broke off","type":"server_error","param":null,"code":502}}`+"\n\n")
				if flusher != nil {
					flusher.Flush()
				}
				s.metrics.requests.WithLabelValues(rt.name, "502").Inc()
				return false
			}
			// A partial JSON body must not look complete: abort the connection.
			s.metrics.requests.WithLabelValues(rt.name, "502").Inc()
			panic(http.ErrAbortHandler)
		}
	}
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
