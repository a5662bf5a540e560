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
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvrouter/kvrouter/internal/router/admission"
	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/policy"
)

// gateEngine is an engine that holds each completion until the test lets one through (gate),
// so that a test decides when load drops. It records the prompts in the order they arrived.
type gateEngine struct {
	*httptest.Server
	name    string
	gate    chan struct{}
	arrived chan string // each completion's prompt, as it arrives
	count   atomic.Int32
}

func newGateEngine(t *testing.T, name string, open bool) *gateEngine {
	g := &gateEngine{name: name, gate: make(chan struct{}), arrived: make(chan string, 64)}
	if open {
		close(g.gate)
	}
	mux := http.NewServeMux()
	handleByteTokensAndModels(mux)
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Prompt string `json:"prompt"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		g.count.Add(1)
		g.arrived <- body.Prompt
		select {
		case <-g.gate:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"text_completion","choices":[{"text":"ok"}]}`)
	})
	g.Server = httptest.NewServer(mux)
	t.Cleanup(g.Close)
	t.Cleanup(g.open) // runs first: lets held requests finish before the servers close
	return g
}

// open lets every request through from now on.
func (g *gateEngine) open() {
	select {
	case <-g.gate:
	default:
		close(g.gate)
	}
}

// next is the prompt of the next completion to arrive.
func (g *gateEngine) next(t *testing.T) string {
	t.Helper()
	select {
	case p := <-g.arrived:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the engine")
		return ""
	}
}

func newQueueHarness(t *testing.T, cfg Config, engines ...*gateEngine) *harness {
	t.Helper()
	var eps []discovery.Endpoint
	for _, e := range engines {
		eps = append(eps, discovery.Endpoint{Name: e.name, URL: e.URL, Ready: true})
	}
	h := startHarness(t, cfg, nil, eps)
	t.Cleanup(func() { // first: a test that failed half way leaves no handler held
		for _, e := range engines {
			e.open()
		}
	})
	return h
}

// answer is a response read in the background.
type answer struct {
	resp *http.Response
	body string
	err  error
}

// postAsync posts a completion of prompt and answers on the channel it returns.
func (h *harness) postAsync(ctx context.Context, prompt string, hdr map[string]string) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.http.URL+"/v1/completions",
			strings.NewReader(`{"model":"m","prompt":"`+prompt+`"}`))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- answer{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- answer{resp: resp, body: string(b)}
	}()
	return out
}

func await(t *testing.T, c <-chan answer) answer {
	t.Helper()
	select {
	case a := <-c:
		if a.err != nil {
			t.Fatal(a.err)
		}
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
		return answer{}
	}
}

// noTTFTBound is admission control without a TTFT bound, which would cap the queue's MaxWait.
var noTTFTBound = admission.Config{TTFTBound: -1}

// holdWhileBusy holds a request while every ready endpoint has one of this router's requests.
func holdWhileBusy(eps []policy.Endpoint) bool {
	ready := false
	for _, e := range eps {
		if e.Ready {
			ready = true
			if e.Load.InFlight == 0 {
				return false
			}
		}
	}
	return ready
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

func histogramCount(t *testing.T, hi prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := hi.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// Held requests wait in the router, not at the engine, and go there oldest first as the engine
// frees: the releases come from the requests' own completions, with no ticker running.
func TestRouterQueueReleasesInOrderAsLoadDrops(t *testing.T) {
	e0 := newGateEngine(t, "e0", false)
	h := newQueueHarness(t, Config{QueueCapacity: 8, QueueMaxWait: time.Minute, Admission: noTTFTBound}, e0)
	h.srv.hold = holdWhileBusy
	ctx := context.Background()
	first := h.postAsync(ctx, "a", nil)
	if p := e0.next(t); p != "a" {
		t.Fatalf("first request %q", p)
	}
	var rest []<-chan answer
	for i, p := range []string{"b", "c", "d"} {
		rest = append(rest, h.postAsync(ctx, p, nil))
		waitFor(t, p+" queued", func() bool { return h.srv.queued() == i+1 })
	}
	if n := e0.count.Load(); n != 1 {
		t.Fatalf("the engine got %d requests while it was busy, want only the first", n)
	}
	if a := h.srv.Autoscale(); a.WaitingRequests != 3 {
		t.Fatalf("autoscale waiting %d, want the 3 held in the router", a.WaitingRequests)
	}
	if st := h.srv.Status(); st.RouterQueue == nil || st.RouterQueue.Waiting != 3 || st.RouterQueue.Capacity != 8 ||
		st.RouterQueue.MaxWaitSeconds != 60 {
		t.Fatalf("status %+v", st.RouterQueue)
	}
	if g := gaugeValue(t, h.srv.rq.depth); g != 3 {
		t.Fatalf("kvrouter_router_queue_requests = %v", g)
	}
	for _, want := range []string{"b", "c", "d"} {
		e0.gate <- struct{}{} // the engine finishes one request: the next is released
		if p := e0.next(t); p != want {
			t.Fatalf("released %q, want %q (first come, first served)", p, want)
		}
	}
	e0.gate <- struct{}{}
	for _, c := range append(rest, first) {
		if a := await(t, c); a.resp.StatusCode != 200 {
			t.Fatalf("%d %s", a.resp.StatusCode, a.body)
		}
	}
	if n := histogramCount(t, h.srv.rq.waited); n != 3 {
		t.Fatalf("kvrouter_router_queue_wait_seconds counted %d, want the 3 released", n)
	}
	if h.srv.queued() != 0 || h.srv.rq.active.Load() != 0 || gaugeValue(t, h.srv.rq.depth) != 0 {
		t.Fatalf("queue not empty after the releases: active %d", h.srv.rq.active.Load())
	}
}

// The policy's own gate: a request waits while the only engine has seconds of prefill queued
// (more than HoldAfter, less than admission's bound), and goes once that queue has drained.
func TestRouterQueueHoldsOnThePolicysGate(t *testing.T) {
	e0 := newGateEngine(t, "e0", true)
	h := newQueueHarness(t, Config{QueueCapacity: 4, Policy: policy.Config{HoldAfter: 0.5}}, e0)
	// TTFT = 0.5 s + 0.1 ms per token of prefill work.
	h.srv.policyMu.Lock()
	for i := range 40 {
		x := (i % 10) * 5000
		h.srv.policy.ObserveTTFT("e0", x, 0.5+float64(x)*1e-4)
	}
	h.srv.policyMu.Unlock()
	busy := h.tracker.Dispatch("e0", 20000, 20000) // 2 s of prefill queued: not soon
	waiting := h.postAsync(context.Background(), "a", nil)
	waitFor(t, "a held", func() bool { return h.srv.queued() == 1 })
	h.srv.rq.tick(time.Now())
	if h.srv.queued() != 1 || e0.count.Load() != 0 {
		t.Fatal("released while the engine still had its queue")
	}
	busy.Done()
	h.srv.rq.tick(time.Now())
	if a := await(t, waiting); a.resp.StatusCode != 200 {
		t.Fatalf("%d %s", a.resp.StatusCode, a.body)
	}
	if n := histogramCount(t, h.srv.rq.waited); n != 1 {
		t.Fatalf("wait histogram counted %d, want 1", n)
	}
}

// A full queue sheds at once with admission control's 429; batch requests may fill only
// admission's fraction of it.
func TestRouterQueueFullSheds(t *testing.T) {
	e0 := newGateEngine(t, "e0", true)
	h := newQueueHarness(t, Config{QueueCapacity: 1, QueueMaxWait: time.Minute, Admission: noTTFTBound}, e0)
	var held atomic.Bool
	held.Store(true)
	h.srv.hold = func([]policy.Endpoint) bool { return held.Load() }

	// capacity 1 × batch fraction 0.5: no room for a batch request even in an empty queue.
	resp, b := h.post(t, "/v1/completions", `{"model":"m","prompt":"x"}`, map[string]string{PriorityHeader: "batch"})
	if msg := shedBody(t, resp, b); !strings.Contains(msg, "router queue") {
		t.Fatalf("batch: %q", msg)
	}
	waiting := h.postAsync(context.Background(), "a", nil)
	waitFor(t, "a queued", func() bool { return h.srv.queued() == 1 })
	resp, b = h.post(t, "/v1/completions", `{"model":"m","prompt":"secret prompt"}`, nil)
	msg := shedBody(t, resp, b)
	if !strings.Contains(msg, "1 requests already wait in the router queue") || strings.Contains(msg, "secret") {
		t.Fatalf("message %q: should say why and never echo the prompt", msg)
	}
	st := h.srv.Status()
	if st.RouterQueue.Shed["router-queue-full/interactive"] != 1 || st.RouterQueue.Shed["router-queue-full/batch"] != 1 {
		t.Fatalf("router queue shed counts %+v", st.RouterQueue.Shed)
	}
	if st.Admission.Shed["router-queue-full/interactive"] != 1 {
		t.Fatalf("admission shed counts %+v: the queue's sheds are the fleet's turned-away demand too", st.Admission.Shed)
	}
	if n := counterValue(t, h.srv.shedMetric.WithLabelValues("router-queue-full", "interactive")); n != 1 {
		t.Fatalf(`kvrouter_requests_shed_total{reason="router-queue-full",priority="interactive"} = %v`, n)
	}
	if n := e0.count.Load(); n != 0 {
		t.Fatalf("engine got %d requests while all were held or shed", n)
	}
	held.Store(false)
	h.srv.rq.kick()
	if a := await(t, waiting); a.resp.StatusCode != 200 {
		t.Fatalf("released request: %d %s", a.resp.StatusCode, a.body)
	}
}

// A client that leaves while its request waits takes it out of the queue, and nothing of it
// stays behind.
func TestRouterQueueClientCancel(t *testing.T) {
	e0 := newGateEngine(t, "e0", true)
	h := newQueueHarness(t, Config{QueueCapacity: 4, QueueMaxWait: time.Minute, Admission: noTTFTBound}, e0)
	var held atomic.Bool
	held.Store(true)
	h.srv.hold = func([]policy.Endpoint) bool { return held.Load() }
	ctx, cancel := context.WithCancel(context.Background())
	gone := h.postAsync(ctx, "a", nil)
	waitFor(t, "a queued", func() bool { return h.srv.queued() == 1 })
	cancel()
	if a := <-gone; a.err == nil {
		t.Fatalf("cancelled request answered %d", a.resp.StatusCode)
	}
	waitFor(t, "the waiter removed", func() bool { return h.srv.queued() == 0 })
	waitFor(t, "the 499 counted", func() bool {
		return counterValue(t, h.srv.metrics.requests.WithLabelValues("", "499")) == 1
	})
	if n := h.srv.rq.active.Load(); n != 0 {
		t.Fatalf("active %d after the only waiter left", n)
	}
	held.Store(false)
	if resp, b := h.post(t, "/v1/completions", `{"model":"m","prompt":"b"}`, nil); resp.StatusCode != 200 {
		t.Fatalf("after the cancel: %d %s", resp.StatusCode, b)
	}
	if p := e0.next(t); p != "b" || e0.count.Load() != 1 {
		t.Fatalf("engine got %q (%d requests), want only b", p, e0.count.Load())
	}
}

// A request that waits its MaxWait is shed with a 429 and never reaches an engine.
func TestRouterQueueMaxWaitSheds(t *testing.T) {
	e0 := newGateEngine(t, "e0", true)
	h := newQueueHarness(t, Config{QueueCapacity: 4, QueueMaxWait: time.Minute, Admission: noTTFTBound}, e0)
	h.srv.hold = func([]policy.Endpoint) bool { return true }
	waiting := h.postAsync(context.Background(), "a", nil)
	waitFor(t, "a queued", func() bool { return h.srv.queued() == 1 })
	h.srv.rq.tick(time.Now().Add(59 * time.Second))
	if h.srv.queued() != 1 {
		t.Fatal("expired before its MaxWait")
	}
	h.srv.rq.tick(time.Now().Add(2 * time.Minute))
	a := await(t, waiting)
	if msg := shedBody(t, a.resp, a.body); !strings.Contains(msg, "within the 1m0s it may wait in the router queue") {
		t.Fatalf("message %q", msg)
	}
	if st := h.srv.Status(); st.RouterQueue.Shed["router-queue-wait/interactive"] != 1 || st.RouterQueue.Waiting != 0 {
		t.Fatalf("status %+v", st.RouterQueue)
	}
	if n := e0.count.Load(); n != 0 {
		t.Fatalf("an expired request reached the engine %d times", n)
	}
	if n := histogramCount(t, h.srv.rq.waited); n != 0 {
		t.Fatalf("wait histogram counted %d, want only released requests", n)
	}
}

// The wait counts in the client's time to first token: at most half the admission TTFT budget
// (bound × tail headroom) goes to it, whatever the configured MaxWait.
func TestRouterQueueMaxWaitWithinTTFTBudget(t *testing.T) {
	e0 := newGateEngine(t, "e0", true)
	h := newQueueHarness(t, Config{QueueCapacity: 4, QueueMaxWait: time.Minute,
		Admission: admission.Config{TTFTBound: 10 * time.Second, TailHeadroom: 0.7}}, e0)
	if w := h.srv.Status().RouterQueue.MaxWaitSeconds; w != 3.5 {
		t.Fatalf("MaxWait %vs, want 3.5s", w)
	}
	h = newQueueHarness(t, Config{QueueCapacity: 4, QueueMaxWait: time.Second}, e0)
	if w := h.srv.Status().RouterQueue.MaxWaitSeconds; w != 1 {
		t.Fatalf("MaxWait %vs, want the configured 1s (within the default budget)", w)
	}
	h = newQueueHarness(t, Config{QueueCapacity: 4}, e0)
	if w := h.srv.Status().RouterQueue.MaxWaitSeconds; w != DefaultQueueMaxWait.Seconds() {
		t.Fatalf("MaxWait %vs, want the default %v", w, DefaultQueueMaxWait)
	}
}

// A request that would wait longer than MaxWait at the rate the engines complete requests is
// shed at once rather than after the wait.
func TestRouterQueueShedsAtOnceWhatWouldWaitTooLong(t *testing.T) {
	e0 := newGateEngine(t, "e0", true)
	h := newQueueHarness(t, Config{QueueCapacity: 4, QueueMaxWait: 5 * time.Second,
		Admission: admission.Config{TTFTBound: 200 * time.Second}}, e0)
	var held atomic.Bool
	held.Store(true)
	h.srv.hold = func([]policy.Endpoint) bool { return held.Load() }
	// An hour on, one completion in the last seconds: 0.1 completions a second.
	later := time.Now().Add(time.Hour)
	h.srv.now = func() time.Time { return later }
	h.srv.admit.Completed("e0", later)
	first := h.postAsync(context.Background(), "a", nil) // nothing ahead: it waits
	waitFor(t, "a queued", func() bool { return h.srv.queued() == 1 })
	resp, b := h.post(t, "/v1/completions", `{"model":"m","prompt":"b"}`, nil)
	if msg := shedBody(t, resp, b); !strings.Contains(msg, "about 10.0s") || resp.Header.Get("Retry-After") != "20" {
		t.Fatalf("message %q, Retry-After %s", msg, resp.Header.Get("Retry-After"))
	}
	if st := h.srv.Status(); st.RouterQueue.Shed["router-queue-wait/interactive"] != 1 || st.RouterQueue.Waiting != 1 {
		t.Fatalf("status %+v", st.RouterQueue)
	}
	held.Store(false)
	h.srv.rq.kick()
	if a := await(t, first); a.resp.StatusCode != 200 {
		t.Fatalf("%d %s", a.resp.StatusCode, a.body)
	}
}

// With no capacity there is no router queue: the gate is never asked, and every request is
// routed at once, as before. With a capacity and holding turned off in the policy (HoldAfter
// negative), nothing is held either.
func TestRouterQueueOff(t *testing.T) {
	e0 := newGateEngine(t, "e0", true)
	h := newQueueHarness(t, Config{}, e0)
	h.srv.hold = func([]policy.Endpoint) bool { t.Error("gate asked with the queue off"); return true }
	if resp, b := h.post(t, "/v1/completions", `{"model":"m","prompt":"a"}`, nil); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if h.srv.rq != nil || h.srv.Status().RouterQueue != nil {
		t.Fatal("a router queue with capacity 0")
	}

	h = newQueueHarness(t, Config{QueueCapacity: 4, Policy: policy.Config{HoldAfter: -1}, DisableAdmission: true}, e0)
	defer h.tracker.Dispatch("e0", 1<<20, 1<<20).Done() // a long queue at the only engine
	if resp, b := h.post(t, "/v1/completions", `{"model":"m","prompt":"b"}`, nil); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if n := histogramCount(t, h.srv.rq.waited); n != 0 || h.srv.rq.active.Load() != 0 {
		t.Fatalf("HoldAfter -1 held a request (%d waited)", n)
	}
}

// The endpoint picker's decisions never wait in the router queue: the gateway bounds each by
// its ext_proc message timeout.
func TestRouterQueueNotInEPPMode(t *testing.T) {
	e0 := newGateEngine(t, "e0", true)
	h := newQueueHarness(t, Config{QueueCapacity: 4}, e0)
	h.srv.hold = func([]policy.Endpoint) bool { return true }
	f, ref := h.srv.Pick(context.Background(), PickInput{Method: http.MethodPost, Path: "/v1/completions",
		Header: http.Header{}, Body: []byte(`{"model":"m","prompt":"a"}`)})
	if ref != nil {
		t.Fatalf("refused: %d %s", ref.Status, ref.Body)
	}
	f.Done()
	if h.srv.queued() != 0 {
		t.Fatal("an EPP request waited in the router queue")
	}
}

// The ticker stops with the server.
func TestRouterQueueTickerStops(t *testing.T) {
	e0 := newGateEngine(t, "e0", true)
	h := newQueueHarness(t, Config{QueueCapacity: 4}, e0)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); h.srv.rq.run(ctx) }()
	cancel()
	wg.Wait() // hangs (and the test times out) if the ticker outlives its context
}
