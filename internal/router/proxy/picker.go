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
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/internal/router/kvindex"
)

// The picker is the router's decision for a front end that does not forward requests itself:
// the Gateway API Inference Extension's endpoint picker (package epp), where Envoy forwards
// the request to the address the router names. Pick runs the very steps the proxy runs before
// it forwards (decideRequest); the Flight it returns keeps the accounting the proxy keeps
// while a request is in flight (charge), fed from the response as the gateway relays it.

// inferencePaths are the requests the router decides on their content; any other is placed
// by load.
var inferencePaths = map[string]apiKind{"/v1/completions": kindCompletion, "/v1/chat/completions": kindChat}

// PickInput is a request as the front end received it.
type PickInput struct {
	Method string
	// Path is the request's path, its query allowed.
	Path   string
	Header http.Header
	// Body is the whole request body (an inference request's; see NeedsBody).
	Body []byte
	// Subset, when not nil, lists the addresses ("ip:port", or "ip" for any port) the request
	// may go to: the gateway's subset hint. Empty allows none.
	Subset []string
}

// NeedsBody reports whether Pick reads the body of a request with this method and path: only an
// inference request is placed on its content, so a front end may decide any other as soon as
// it has the headers.
func NeedsBody(method, p string) bool {
	_, ok := inferencePaths[cleanPath(p)]
	return ok && method == http.MethodPost
}

// cleanPath is the request's path without its query. Not path.Clean'ed: the gateway forwards
// the path as the client wrote it, and the engine serves only the exact paths, so
// "/v1/completions/" must not be decided (and charged) as an inference request the engine will
// then refuse.
func cleanPath(p string) string {
	p, _, _ = strings.Cut(p, "?")
	return p
}

// Flight is a request the router decided on and the gateway forwards: where it goes, and its
// accounting until it ends. The accounting is charged to the route the policy chose until the
// gateway says another served it (Served). A Flight is used from one goroutine.
type Flight struct {
	// Destinations are the addresses ("host:port") the request may go to, best first: the
	// chosen route's engine, then the policy's fallbacks on other engines (a data-parallel
	// engine's ranks share one address, which is listed once).
	Destinations []string
	// SetHeaders are to be set on the request to the engine (the data-parallel rank, the
	// engines' API key); RemoveHeaders removed from it (the router's own client key).
	SetHeaders    http.Header
	RemoveHeaders []string
	// Body, when not nil, replaces the request body (--kv-cache-report-mode full injects
	// vllm_xargs).
	Body []byte

	s    *Server
	t    *table // the routes as they were at the pick
	name string // the chosen route, for a request with no accounting (c nil)
	c    *charge
	// What moving the accounting to another route needs, until the first byte.
	keys                     []kvindex.Key
	gpuHeld                  []int
	promptTokens, workTokens int
	lora                     string // the request's LoRA adapter ("" for the base model)
	stream                   bool
	ended, done              bool
	// prefill is a split request's prefill leg, which the decode engine's sidecar runs: its
	// load is charged to the prefill engine until the decode leg's first byte (or the end).
	prefill     *charge
	prefillName string
}

// Pick decides where a request goes, or refuses it with the answer the HTTP front end would
// give (400, 401, 404, 405, 413, 429, 503). An inference request (POST /v1/completions or
// /v1/chat/completions) goes through every step of the proxy's decision, and its Flight is
// accounted from now on: call Done when its stream ends, however it ends. Any other request
// (GET /v1/models, ...) goes to the least loaded ready engine and is not accounted.
func (s *Server) Pick(ctx context.Context, in PickInput) (*Flight, *Refusal) {
	p := cleanPath(in.Path)
	if err := s.checkKey(p, in.Header); err != nil {
		return nil, s.refusal(err)
	}
	t := s.tbl.Load()
	eligible := subsetFilter(in.Subset)
	kind, ok := inferencePaths[p]
	if !ok {
		return s.pickByLoad(t, in.Header, eligible)
	}
	if in.Method != http.MethodPost {
		return nil, s.refusal(&apiError{status: http.StatusMethodNotAllowed, typ: invalidRequest,
			msg: in.Method + " is not allowed; use POST", header: http.Header{"Allow": {http.MethodPost}}})
	}
	s.counters.requests.Add(1)
	if int64(len(in.Body)) > s.cfg.MaxBodyBytes {
		return nil, s.refusal(s.tooLarge())
	}
	req, rt, err := s.decideRequest(t, incoming{ctx: ctx, header: in.Header, kind: kind, body: in.Body, eligible: eligible})
	if err != nil {
		return nil, s.refusal(err)
	}
	f := s.newFlight(t, in.Header, &req, rt)
	if len(f.Destinations) == 0 {
		// Discovery validates URLs, so this is the router's fault, not the client's. The
		// request never left: its load goes back uncounted (the refusal counts it).
		f.done = true
		f.c.release()
		if s.admit != nil {
			s.admit.Completed(f.c.rt.name, s.now())
		}
		return nil, s.refusal(fmt.Errorf("the URL of engine %s names no host:port", f.Endpoint()))
	}
	return f, nil
}

// MaxBodyBytes is the largest request body accepted (BodyTooLarge beyond).
func (s *Server) MaxBodyBytes() int64 { return s.cfg.MaxBodyBytes }

// BodyTooLarge is the 413 of a request whose body exceeds MaxBodyBytes, for a front end that
// stops reading it there rather than hand it to Pick.
func (s *Server) BodyTooLarge() *Refusal {
	s.counters.requests.Add(1)
	return s.refusal(s.tooLarge())
}

// newFlight dispatches a decided request on its route, as exchange.run does for the proxy.
func (s *Server) newFlight(t *table, header http.Header, req *inference, rt routing) *Flight {
	d := rt.decision
	i := t.byName[d.Endpoint]
	r := &t.routes[i]
	f := &Flight{s: s, t: t, keys: rt.keys, gpuHeld: rt.gpuHeld, promptTokens: rt.req.PromptTokens, lora: rt.req.LoRA,
		workTokens: rt.req.PromptTokens + s.outputTokens(rt.req), stream: req.Stream}
	work := ttftWork(d)
	if rt.split != nil {
		work = -1 // the decode leg's first token includes the KV transfer
	}
	f.c = s.newCharge(r, s.tracker.DispatchAdapter(r.name, rt.req.LoRA, d.UncachedTokens, f.workTokens), s.predict(r, i, rt.keys, rt.gpuHeld),
		work, req.Stream)
	f.c.capTokens = rt.req.MaxTokens
	order := []int{i}
	for _, fb := range d.Fallbacks {
		if j, ok := t.byName[fb]; ok && !s.outliers.isEjected(fb) {
			order = append(order, j)
		}
	}
	f.address(t, order, header.Get("Authorization"), req.authorization)
	if sp := rt.split; sp != nil {
		f.splitFlight(t, sp, rt)
	}
	if s.cfg.ReportModeFull || req.rewritten {
		f.Body = req.body
	}
	return f
}

// address fills in where the flight goes: the routes at order in t, best first, and the
// headers the engine must get. client is the request's Authorization, upstream the one the
// engine gets (Auth.upstreamAuthorization), the same unless the router has keys of its own.
func (f *Flight) address(t *table, order []int, client, upstream string) {
	seen := make(map[string]bool, len(order))
	for _, j := range order {
		hp := t.routes[j].dest
		if hp == "" || seen[hp] {
			continue
		}
		seen[hp] = true
		f.Destinations = append(f.Destinations, hp)
	}
	f.SetHeaders = http.Header{}
	// Only the router names a prefill engine (splitFlight): a client's own header would have
	// the engine's pd-sidecar send the request, with the engines' API key the gateway adds,
	// wherever it says.
	f.RemoveHeaders = append(f.RemoveHeaders, PrefillerHeader)
	if r := &t.routes[order[0]]; r.ranks > 1 {
		f.SetHeaders.Set(dpRankHeader, strconv.Itoa(r.rank))
	}
	switch {
	case upstream == client:
	case upstream == "":
		f.RemoveHeaders = append(f.RemoveHeaders, "Authorization")
	default:
		f.SetHeaders.Set("Authorization", upstream)
	}
}

// pickByLoad places a request the router does not read (a model listing, say) on the ready
// eligible route with the fewest requests in flight, then the least queued prefill; equals take
// turns. The others follow as fallbacks in the same order.
func (s *Server) pickByLoad(t *table, header http.Header, eligible func(*route) bool) (*Flight, *Refusal) {
	eps := s.snapshot(t, eligible)
	var ready []int
	for i := range eps {
		if eps[i].Ready {
			ready = append(ready, i)
		}
	}
	if len(ready) == 0 {
		return nil, s.refusal(s.unavailable("no engine is ready"))
	}
	k := int(s.loadRR.Add(1) % uint64(len(ready)))
	order := append(append(make([]int, 0, len(ready)), ready[k:]...), ready[:k]...)
	sort.SliceStable(order, func(a, b int) bool {
		la, lb := &eps[order[a]].Load, &eps[order[b]].Load
		if na, nb := la.InFlight+la.RemoteInFlight, lb.InFlight+lb.RemoteInFlight; na != nb {
			return na < nb
		}
		return la.QueuedPrefillTokens+la.RemotePrefillTokens < lb.QueuedPrefillTokens+lb.RemotePrefillTokens
	})
	f := &Flight{s: s, t: t, name: t.routes[order[0]].name}
	client := header.Get("Authorization")
	f.address(t, order, client, s.cfg.Auth.upstreamAuthorization(client))
	return f, nil
}

// Endpoint is the router's name of the route the request is charged to: the one chosen, or the
// one the gateway said served it.
func (f *Flight) Endpoint() string {
	if f.c != nil {
		return f.c.rt.name
	}
	return f.name
}

// Served tells the flight the address that served the request (the gateway's
// x-gateway-destination-endpoint-served), before any of the answer. When that is not the
// chosen route's, the gateway went down the fallbacks: the request's load, its predicted index
// entries and its answer's timing move to that route (a data-parallel engine's rank is the one
// the request asked for, whose header it still carries), charged the whole prompt as the
// proxy's retries are. It reports whether the accounting moved.
func (f *Flight) Served(addr string) bool {
	if f.c == nil || f.done || f.c.started || addr == "" {
		return false
	}
	host, port, exact := splitAddr(addr)
	if !exact || net.JoinHostPort(host, port) == f.c.rt.dest {
		return false
	}
	s := f.s
	hp := net.JoinHostPort(host, port)
	t, gpuHeld := f.t, f.gpuHeld
	i := t.find(hp, f.c.rt.rank)
	if i < 0 {
		// Discovery changed the routes since the pick: the one that served may be new.
		t, gpuHeld = s.tbl.Load(), nil
		if i = t.find(hp, f.c.rt.rank); i < 0 {
			s.log.V(1).Info("the gateway served a request on an address the router does not know; its accounting stays where it was picked",
				"picked", f.c.rt.name)
			return false
		}
	}
	r := &t.routes[i]
	old := f.c
	old.release()
	s.log.V(1).Info("the gateway served the request on another engine than picked; accounting moved", "picked", old.rt.name, "served", r.name)
	// The cache there was not weighed for this request: the whole prompt is accounted, and its
	// TTFT is not fed to the latency model (its work figure would be a guess).
	f.c = s.newCharge(r, s.tracker.DispatchAdapter(r.name, f.lora, f.promptTokens, f.workTokens), s.predict(r, i, f.keys, gpuHeld), -1, f.stream)
	f.c.sent = old.sent
	return true
}

// find is the index of the route the gateway names at address hp, rank rank if it has it, else
// its first; -1 if none is there.
func (t *table) find(hp string, rank int) int {
	first := -1
	for i := range t.routes {
		if t.routes[i].dest != hp {
			continue
		}
		if t.routes[i].rank == rank {
			return i
		}
		if first < 0 {
			first = i
		}
	}
	return first
}

// ResponseHeaders records the engine's response status.
func (f *Flight) ResponseHeaders(status int) {
	if f.c != nil && !f.done && !f.c.started {
		f.c.respond(status)
	}
}

// GatewayReply records that the response is the gateway's own (Envoy's "no healthy upstream",
// a connect failure, an overflow), with status: it is counted for the route the request was
// charged to, as an upstream error, and neither clears the engine's failure streak nor feeds
// its latency models, since the engine did not answer.
func (f *Flight) GatewayReply(status int) {
	if f.c != nil && !f.done && !f.c.started {
		f.c.respond(status)
		f.c.gateway = true
	}
}

// Unobserved ends a flight whose response the gateway never showed the picker (its filter
// skips the response, and it closed the stream cleanly): the load is released and the request
// counted as completed with no status, not as a client that left.
func (f *Flight) Unobserved() {
	if f.done || f.c == nil {
		f.Done()
		return
	}
	f.ended = true
	f.Done()
}

// ResponseBody records a piece of the answer as the gateway relays it; the last one (end of
// stream, possibly empty) ends the flight (Done).
func (f *Flight) ResponseBody(chunk []byte, endOfStream bool) {
	if f.c == nil || f.done {
		return
	}
	if f.c.status == 0 {
		f.c.respond(http.StatusOK) // a gateway that does not send response headers
	}
	if len(chunk) > 0 && f.c.received(chunk, f.s.now()) {
		f.keys, f.gpuHeld = nil, nil
		f.prefillDone()
	}
	if endOfStream {
		f.c.finished()
		f.ended = true
		f.Done()
	}
}

// Done ends the flight: its load is released, its prediction settled if it never started, and
// the request counted as completed. A flight that ends before its answer did (the client or the
// gateway went away) is counted as 499, as the proxy counts a client that left. Idempotent.
func (f *Flight) Done() {
	if f.done {
		return
	}
	f.done = true
	if f.c == nil {
		return
	}
	s := f.s
	if !f.ended {
		s.metrics.requests.WithLabelValues(f.c.rt.name, "499").Inc()
	}
	f.c.release()
	f.prefillDone()
	f.keys, f.gpuHeld = nil, nil
	if s.admit != nil {
		s.admit.Completed(f.c.rt.name, s.now())
	}
}

// Ready reports whether the router takes traffic, and if not, why: an engine is ready, and the
// ReadyGate (the index's catch-up replay at start) lets it. /ready and the EPP's readiness
// answer it.
func (s *Server) Ready() (bool, string) {
	if s.readyCount() == 0 {
		return false, "no engine is ready"
	}
	if g := s.cfg.ReadyGate; g != nil {
		if ok, why := g(); !ok {
			return false, why
		}
	}
	return true, ""
}

// subsetFilter is the eligibility of routes under a gateway's subset hint (nil: no hint).
func subsetFilter(subset []string) func(*route) bool {
	if subset == nil {
		return nil
	}
	exact, hosts := map[string]bool{}, map[string]bool{}
	for _, a := range subset {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		host, port, ok := splitAddr(a)
		if ok {
			exact[net.JoinHostPort(host, port)] = true
		} else {
			hosts[host] = true
		}
	}
	return func(r *route) bool {
		if exact[r.dest] {
			return true
		}
		if len(hosts) == 0 {
			return false
		}
		host, _, _ := net.SplitHostPort(r.dest)
		return hosts[host]
	}
}

// splitAddr splits "host:port"; a bare host (IPv6 in brackets or not) has no port (ok false).
func splitAddr(a string) (host, port string, ok bool) {
	if h, p, err := net.SplitHostPort(a); err == nil {
		return h, p, true
	}
	return strings.TrimSuffix(strings.TrimPrefix(a, "["), "]"), "", false
}

// urlHostPort is the host:port a URL reaches, its scheme's port when it names none.
func urlHostPort(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// destination is where the gateway reaches an engine at hp (its URL's host:port): there, or on
// its host at Config.DestinationPort.
func (s *Server) destination(hp string) string {
	if s.cfg.DestinationPort == 0 || hp == "" {
		return hp
	}
	host, _, err := net.SplitHostPort(hp)
	if err != nil {
		return hp
	}
	return net.JoinHostPort(host, strconv.Itoa(s.cfg.DestinationPort))
}

// splitFlight makes the flight a split request's: its destination is the decode engine (the
// policy's decode pick, then the whole option's engines), and the sidecar in front of that
// engine is told where to run the prefill leg in the routing-sidecar header.
func (f *Flight) splitFlight(t *table, sp *splitPlan, rt routing) {
	s := f.s
	i, ok := t.byName[sp.prefill.Endpoint]
	if !ok || t.routes[i].hostport == "" {
		return
	}
	r := &t.routes[i]
	f.RemoveHeaders = slices.DeleteFunc(f.RemoveHeaders, func(h string) bool { return strings.EqualFold(h, PrefillerHeader) })
	f.SetHeaders.Set(PrefillerHeader, r.hostport)
	f.prefillName = r.name
	f.prefill = s.newCharge(r, s.tracker.DispatchAdapter(r.name, rt.req.LoRA, sp.prefill.UncachedTokens, rt.req.PromptTokens+1),
		s.predict(r, i, rt.keys, rt.gpuHeld), -1, false)
}

// PrefillEndpoint names the engine a split request's prefill leg goes to ("" when whole).
func (f *Flight) PrefillEndpoint() string { return f.prefillName }

// prefillDone releases the prefill leg's charge: the decode leg answering means the prefill is
// over, one way or the other.
func (f *Flight) prefillDone() {
	if f.prefill != nil {
		f.prefill.release()
		f.prefill = nil
	}
}
