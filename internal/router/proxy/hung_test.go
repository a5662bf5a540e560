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
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	testclock "k8s.io/utils/clock/testing"

	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
)

// hangEngine is an engine that can stop answering like a stopped process: it accepts
// connections and reads requests, and then says nothing (every route, /health included) until
// it runs again.
type hangEngine struct {
	*fakeEngine
	hung       atomic.Bool
	stallAfter atomic.Int32 // >0: streams stop after this many chunks (and the engine with them)
	dropAll    atomic.Bool  // completions: read the request, then close the connection
	tokDelay   atomic.Int64 // /tokenize answers after this long (ns)
	genDelay   atomic.Int64 // completions send nothing for this long (ns) first
	healthUp   atomic.Bool  // /health answers even while the engine is hung
	requests   atomic.Int32
	cancelled  atomic.Int32 // completions whose connection the router closed while they hung
	healthHits atomic.Int32
	stop       chan struct{}
}

func newHangEngine(t *testing.T, name string) *hangEngine {
	t.Helper()
	e := &hangEngine{fakeEngine: &fakeEngine{name: name}, stop: make(chan struct{})}
	// hang blocks while the engine is stopped; false when the caller left meanwhile.
	hang := func(r *http.Request) bool {
		for e.hung.Load() {
			select {
			case <-r.Context().Done():
				return false
			case <-e.stop:
				return false
			case <-time.After(5 * time.Millisecond):
			}
		}
		return true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		e.healthHits.Add(1)
		if e.healthUp.Load() || hang(r) {
			w.WriteHeader(http.StatusOK)
		}
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if hang(r) {
			_, _ = io.WriteString(w, "vllm:num_requests_running{engine=\"0\"} 0\n")
		}
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","parent":null}]}`)
	})
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		e.tokenizes.Add(1)
		var body struct {
			Prompt string `json:"prompt"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		select {
		case <-time.After(time.Duration(e.tokDelay.Load())):
		case <-r.Context().Done():
			return
		}
		if !hang(r) {
			return
		}
		toks := make([]uint32, len(body.Prompt))
		for i := range body.Prompt {
			toks[i] = uint32(body.Prompt[i])
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"count": len(toks), "tokens": toks})
	})
	gen := func(w http.ResponseWriter, r *http.Request) {
		e.requests.Add(1)
		b, _ := io.ReadAll(r.Body)
		if e.dropAll.Load() {
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		var req struct {
			Stream bool `json:"stream"`
		}
		_ = json.Unmarshal(b, &req)
		select {
		case <-time.After(time.Duration(e.genDelay.Load())):
		case <-r.Context().Done():
			e.cancelled.Add(1)
			return
		}
		if !req.Stream {
			if !hang(r) {
				e.cancelled.Add(1)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"x","object":"text_completion","choices":[{"text":"hello from %s","finish_reason":"length"}]}`, name)
			return
		}
		// Streams send their headers at once, as vLLM does, and then tokens.
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for i := 0; i < 5; i++ {
			if n := e.stallAfter.Load(); n > 0 && i == int(n) {
				e.hung.Store(true)
			}
			if !hang(r) {
				e.cancelled.Add(1)
				return
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"t%d\"}]}\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(10 * time.Millisecond)
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
	mux.HandleFunc("POST /v1/completions", gen)
	mux.HandleFunc("POST /v1/chat/completions", gen)
	e.Server = httptest.NewServer(mux)
	t.Cleanup(e.Close)
	t.Cleanup(func() { close(e.stop) }) // runs first: hung handlers return, so Close can finish
	return e
}

// hungConfig is a router configuration with the watchdog and ejections on a test's time scale.
func hungConfig() Config {
	return Config{Model: "m", TTFBWatchdogFloor: 200 * time.Millisecond, TTFBWatchdogCap: time.Second,
		OutlierEjectionBase: 300 * time.Millisecond, OutlierEjectionMax: 2 * time.Second,
		OutlierProbeInterval: 50 * time.Millisecond, OutlierProbeTimeout: 100 * time.Millisecond,
		TokenizeTimeout: 300 * time.Millisecond}
}

func endpointRow(t *testing.T, h *harness, name string) (row struct {
	Ready          bool
	NotReadyReason string
	Suspect        string
	Ejections      uint64
}) {
	t.Helper()
	for _, e := range h.srv.Status().Endpoints {
		if e.Name == name {
			row.Ready, row.NotReadyReason, row.Ejections = e.Ready, e.NotReadyReason, e.Ejections
			if e.Suspect != nil {
				row.Suspect = e.Suspect.Reason
			}
			return row
		}
	}
	t.Fatalf("no endpoint %s in the status", name)
	return row
}

func TestTTFBDeadline(t *testing.T) {
	s := New(Config{TTFBWatchdogFactor: 4, TTFBWatchdogFloor: time.Second, TTFBWatchdogCap: 30 * time.Second},
		logr.Discard(), nil, nil, loadsignal.NewTracker(), nil)
	cases := []struct {
		name      string
		predicted float64
		stream    bool
		maxTokens int
		want      time.Duration
	}{
		{"fast engine: the floor", 0.05, true, 16, time.Second},
		{"queued prefill: factor times the prediction", 2, true, 16, 8 * time.Second},
		{"a long queue: the cap", 60, true, 16, 30 * time.Second},
		{"not a number: the floor", math.NaN(), true, 16, time.Second},
		// No stream timed yet: 50 ms per token assumed, times the factor, on top.
		{"whole answer: plus its decode time", 0.05, false, 100, time.Second + 20*time.Second},
	}
	for _, c := range cases {
		if got := s.ttfbDeadline("e0", c.predicted, c.stream, c.maxTokens, 1); got != c.want {
			t.Errorf("%s: deadline %v, want %v", c.name, got, c.want)
		}
	}
	// Once streams are timed, a whole answer's decode time is the endpoint's measured one.
	for range 10 {
		s.policy.ObserveITL("e0", 1, 0.01)
	}
	got := s.ttfbDeadline("e0", 0.05, false, 100, 1)
	if got < time.Second+3*time.Second || got > time.Second+5*time.Second {
		t.Errorf("whole answer with a 10 ms decode model: deadline %v, want about 5 s", got)
	}
	// The stall allowance prices what is queued on the route now.
	if a := s.stallAllowance("e0"); a != time.Second {
		t.Errorf("stall allowance of an idle route %v, want the floor", a)
	}
	k := s.tracker.Dispatch("e0", 50000, 50000)
	defer k.Done()
	if a := s.stallAllowance("e0"); a <= time.Second || a > 30*time.Second {
		t.Errorf("stall allowance behind 50K queued tokens %v, want above the floor", a)
	}
}

func TestOutlierEjectionBackoffAndProbe(t *testing.T) {
	clk := testclock.NewFakeClock(time.Unix(1000, 0))
	o := newOutliers(outlierConfig{consecutive: 3, base: time.Second, max: 4 * time.Second,
		probeInterval: 100 * time.Millisecond, probeTimeout: time.Second}, clk)
	var answers atomic.Bool
	probes := make(chan struct{}, 16)
	o.probe = func(context.Context, string) error {
		probes <- struct{}{}
		if !answers.Load() {
			return errors.New("no answer")
		}
		return nil
	}
	var ejectedFor []time.Duration
	o.ejected = func(_, _ string, d time.Duration) { ejectedFor = append(ejectedFor, d) }
	h := o.route("e0", "http://e0")
	told := 0
	w := o.watch(h, func() { told++ })

	// Failures in a row eject; an answer in between starts the count again.
	o.failure(h, "reset")
	o.failure(h, "reset")
	o.success(h)
	o.failure(h, "reset")
	o.failure(h, "reset")
	if o.isEjected("e0") {
		t.Fatal("ejected although an answer broke the streak")
	}
	o.failure(h, "reset")
	if !o.isEjected("e0") || told != 1 {
		t.Fatalf("three failures in a row: ejected %v, watchers told %d", o.isEjected("e0"), told)
	}
	if info := o.info("e0"); !strings.HasPrefix(info.reason, ejectConsecutive) || info.until != clk.Now().Add(time.Second) {
		t.Fatalf("ejection %+v", info)
	}
	// No probe before the ejection time is up.
	clk.Step(900 * time.Millisecond)
	o.isEjected("e0")
	expectNoProbe(t, probes)
	// Then a probe; a failed one keeps the route out, and the next waits for the interval.
	clk.Step(200 * time.Millisecond)
	o.isEjected("e0")
	<-probes
	waitFor(t, "failed probe recorded", func() bool { return o.info("e0").until.Equal(clk.Now().Add(100 * time.Millisecond)) })
	if !o.isEjected("e0") {
		t.Fatal("a failed probe brought the route back")
	}
	expectNoProbe(t, probes)
	// An answer brings it back.
	answers.Store(true)
	clk.Step(100 * time.Millisecond)
	o.isEjected("e0")
	<-probes
	waitFor(t, "route back after an answered probe", func() bool { return !o.isEjected("e0") })

	// Ejected again soon after: twice as long, then four times, then the cap.
	for _, want := range []time.Duration{2 * time.Second, 4 * time.Second, 4 * time.Second} {
		o.eject(h, ejectTTFB)
		if got := ejectedFor[len(ejectedFor)-1]; got != want {
			t.Fatalf("ejection for %v, want %v (all: %v)", got, want, ejectedFor)
		}
		clk.Step(want)
		o.isEjected("e0")
		<-probes
		waitFor(t, "route back", func() bool { return !o.isEjected("e0") })
	}
	// A route quiet for twice the cap starts again from the base time.
	clk.Step(9 * time.Second)
	o.eject(h, ejectStall)
	if got := ejectedFor[len(ejectedFor)-1]; got != time.Second {
		t.Fatalf("ejection after a quiet spell for %v, want the base time", got)
	}
	// An ejection of a route already out changes nothing.
	o.eject(h, ejectTTFB)
	if len(ejectedFor) != 5 || o.info("e0").reason != ejectStall || told != 5 {
		t.Fatalf("second ejection of an ejected route: %v %+v told %d", ejectedFor, o.info("e0"), told)
	}
	o.unwatch(h, w)

	// A route that left the fleet is forgotten: its namesake starts clean.
	o.retain(map[string]bool{}, map[string]bool{})
	if o.isEjected("e0") || o.info("e0").ejections != 0 {
		t.Fatal("a route that left is still ejected")
	}

	// /tokenize skips an engine after a timeout; calls that timed out together count once;
	// after the skip it gets one call at a time until one answers.
	if news, d := o.tokenizeTimedOut("e1"); !news || d != time.Second || !o.tokenizeSkips("e1") {
		t.Fatalf("first tokenize timeout: news %v for %v", news, d)
	}
	if news, _ := o.tokenizeTimedOut("e1"); news {
		t.Fatal("a timeout during the skip counted again")
	}
	clk.Step(time.Second)
	if o.tokenizeSkips("e1") {
		t.Fatal("still skipped after its time")
	}
	done := o.tokenizeStarted("e1", clk.Now())
	if !o.tokenizeSkips("e1") {
		t.Fatal("a second call sent while the first after a skip has no answer")
	}
	clk.Step(time.Second)
	if !o.tokenizeSlow("e1", clk.Now(), 500*time.Millisecond) || o.tokenizeSlow("e1", clk.Now(), 2*time.Second) {
		t.Fatal("a call in flight for 1 s: slow after 500 ms, not after 2 s")
	}
	done()
	if o.tokenizeSlow("e1", clk.Now(), 0) {
		t.Fatal("a finished call still counts as in flight")
	}
	if news, _ := o.tokenizeTimedOut("e1"); !news || !o.tokenizeSkips("e1") {
		t.Fatal("a timeout after the skip is news")
	}
	o.tokenizeOK("e1")
	if o.tokenizeSkips("e1") {
		t.Fatal("skipped after an answer")
	}
}

func expectNoProbe(t *testing.T, probes chan struct{}) {
	t.Helper()
	select {
	case <-probes:
		t.Fatal("probed before its time")
	case <-time.After(20 * time.Millisecond):
	}
}

// A request on an engine that accepted it and then fell silent moves to the next-best engine
// once the watchdog's deadline passes; the silent engine is ejected (no new requests), its
// request there is cancelled, and it is back in routing once its probe answers.
func TestHungEngineRequestMovesAndEngineIsEjected(t *testing.T) {
	hung, live := newHangEngine(t, "hung"), newHangEngine(t, "live")
	h := newHarness(t, hungConfig(), nil, hung.fakeEngine, live.fakeEngine)
	busy := h.tracker.Dispatch("live", 100000, 100000) // the policy prefers "hung"
	hung.hung.Store(true)
	for _, stream := range []bool{false, true} {
		start := time.Now()
		resp, body := h.post(t, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":[1,2,3],"max_tokens":4,"stream":%v}`, stream), nil)
		took := time.Since(start)
		if resp.StatusCode != 200 || resp.Header.Get(EndpointHeader) != "live" || !strings.Contains(body, "[DONE]") && stream {
			t.Fatalf("stream %v: status %d endpoint %q body %q", stream, resp.StatusCode, resp.Header.Get(EndpointHeader), body)
		}
		if !stream && took > 3*time.Second {
			t.Fatalf("moved after %v", took)
		}
		if !stream {
			// The first request found the engine hung; the second is not sent there at all.
			row := endpointRow(t, h, "hung")
			if row.Ready || row.NotReadyReason != "suspect" || row.Suspect != ejectTTFB || row.Ejections != 1 {
				t.Fatalf("hung endpoint after the watchdog fired: %+v", row)
			}
		}
	}
	if n := hung.requests.Load(); n != 1 {
		t.Fatalf("the hung engine got %d requests, want 1 (new requests avoid a suspect engine)", n)
	}
	waitFor(t, "request on the hung engine cancelled", func() bool { return hung.cancelled.Load() == 1 })
	st := h.srv.Status()
	if st.Router.Retries != 1 {
		t.Fatalf("retries %d, want 1", st.Router.Retries)
	}
	if got := counted(t, h.srv.metrics.watchdogFired.WithLabelValues("hung", "hung")); got != 1 {
		t.Fatalf("watchdog fired %v times", got)
	}
	if got := counted(t, h.srv.metrics.ejections.WithLabelValues("hung", ejectTTFB)); got != 1 {
		t.Fatalf("ejections %v", got)
	}
	// Probes go unanswered while it is stopped; once it runs again, it is back.
	waitFor(t, "probes of the ejected engine", func() bool { h.srv.Status(); return hung.healthHits.Load() >= 2 })
	if row := endpointRow(t, h, "hung"); row.Suspect == "" {
		t.Fatalf("back before a probe answered: %+v", row)
	}
	hung.hung.Store(false)
	waitFor(t, "engine back after SIGCONT", func() bool { return endpointRow(t, h, "hung").Ready })

	// Back on probation: its /health answered, but until it answers a request it gets one at a
	// time. Here it hangs again: one request is stranded there (and moves), the next one does
	// not go there at all, and the second ejection lasts twice as long.
	hung.hung.Store(true)
	first := make(chan *http.Response, 1)
	go func() {
		resp, _ := h.post(t, "/v1/completions", `{"model":"m","prompt":[1,2,3],"max_tokens":4}`, nil)
		first <- resp
	}()
	waitFor(t, "a request on the returned engine", func() bool { return hung.requests.Load() == 2 })
	if row := endpointRow(t, h, "hung"); row.Ready || row.NotReadyReason != "probation" {
		t.Fatalf("engine on probation with a request in flight: %+v", row)
	}
	resp, _ := h.post(t, "/v1/completions", `{"model":"m","prompt":[1,2,3],"max_tokens":4}`, nil)
	if resp.Header.Get(EndpointHeader) != "live" || hung.requests.Load() != 2 {
		t.Fatalf("second request during probation went to %q", resp.Header.Get(EndpointHeader))
	}
	if resp := <-first; resp.Header.Get(EndpointHeader) != "live" {
		t.Fatalf("request stranded on the returned engine answered by %q", resp.Header.Get(EndpointHeader))
	}
	if row := endpointRow(t, h, "hung"); row.Suspect != ejectTTFB || row.Ejections != 2 {
		t.Fatalf("engine hung again after its return: %+v", row)
	}
	if o := h.srv.outliers.info("hung"); o.until.Sub(o.since) != 600*time.Millisecond {
		t.Fatalf("second ejection for %v, want twice the base", o.until.Sub(o.since))
	}
	// Once it answers, it is an ordinary engine again.
	hung.hung.Store(false)
	waitFor(t, "engine back again", func() bool { return endpointRow(t, h, "hung").Ready })
	resp, _ = h.post(t, "/v1/completions", `{"model":"m","prompt":[1,2,3],"max_tokens":4}`, nil)
	if resp.Header.Get(EndpointHeader) != "hung" {
		t.Fatalf("the engine did not take traffic again: %s", resp.Header.Get(EndpointHeader))
	}
	if h.srv.outliers.onProbation("hung") {
		t.Fatal("still on probation after an answer")
	}
	busy.Done()
}

// A request that waits past its deadline on an engine that keeps answering other requests is
// queued, not hung: it waits on, and the engine stays in routing.
func TestWatchdogWaitsOnAnEngineThatAnswersOthers(t *testing.T) {
	e := newHangEngine(t, "e0")
	h := newHarness(t, hungConfig(), nil, e.fakeEngine)
	// The engine's other work: a stream that trickles bytes for a while.
	stop := make(chan struct{})
	go func() {
		hh := h.srv.outliers.route("e0", e.URL)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				hh.touch(time.Now())
			}
		}
	}()
	defer close(stop)
	e.hung.Store(true)
	done := make(chan *http.Response, 1)
	go func() {
		resp, _ := h.post(t, "/v1/completions", `{"model":"m","prompt":[1,2,3],"max_tokens":1}`, nil)
		done <- resp
	}()
	time.Sleep(800 * time.Millisecond) // four deadlines of the floor
	e.hung.Store(false)
	resp := <-done
	if resp.StatusCode != 200 || resp.Header.Get(EndpointHeader) != "e0" {
		t.Fatalf("status %d from %q", resp.StatusCode, resp.Header.Get(EndpointHeader))
	}
	if row := endpointRow(t, h, "e0"); !row.Ready || row.Ejections != 0 {
		t.Fatalf("an engine answering others was ejected: %+v", row)
	}
	if got := counted(t, h.srv.metrics.watchdogFired.WithLabelValues("e0", "alive")); got != 1 {
		t.Fatalf("watchdog alive verdicts %v, want 1", got)
	}
}

// An engine silent past the deadline when no other engine can take the request: it is ejected
// (it shows), but the request waits on rather than fail, and is answered when the engine is.
func TestSilentEngineWithNowhereElse(t *testing.T) {
	slow := newHangEngine(t, "slow")
	h := newHarness(t, hungConfig(), nil, slow.fakeEngine)
	slow.genDelay.Store(int64(700 * time.Millisecond)) // 3.5 deadlines of the floor
	resp, body := h.post(t, "/v1/completions", `{"model":"m","prompt":[1,2,3],"max_tokens":2,"stream":true}`, nil)
	if resp.StatusCode != 200 || resp.Header.Get(EndpointHeader) != "slow" || !strings.Contains(body, "[DONE]") {
		t.Fatalf("only engine, slow: %d from %q: %s", resp.StatusCode, resp.Header.Get(EndpointHeader), body)
	}
	if row := endpointRow(t, h, "slow"); !row.Ready || row.Suspect != ejectTTFB {
		t.Fatalf("the only engine, silent past the deadline: %+v", row)
	}
	if slow.cancelled.Load() != 0 {
		t.Fatal("the request was given up although nothing could take it")
	}
}

// A stream that already sent tokens cannot move: when its engine stops, it ends with an SSE
// error event within the stall allowance, rather than hang for the idle timeout.
func TestStalledStreamEndsWithAnError(t *testing.T) {
	e, other := newHangEngine(t, "e0"), newHangEngine(t, "e1")
	h := newHarness(t, hungConfig(), nil, e.fakeEngine, other.fakeEngine)
	busy := h.tracker.Dispatch("e1", 100000, 100000)
	defer busy.Done()
	e.stallAfter.Store(2)
	start := time.Now()
	resp, err := http.Post(h.http.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","prompt":[1,2,3],"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l := sc.Text(); l != "" {
			lines = append(lines, l)
		}
	}
	took := time.Since(start)
	if len(lines) != 3 || !strings.Contains(lines[1], "t1") || !strings.Contains(lines[2], `"error"`) ||
		!strings.Contains(lines[2], "stopped responding") {
		t.Fatalf("stream %q", lines)
	}
	if took > 3*time.Second {
		t.Fatalf("stalled stream ended after %v", took)
	}
	if e.requests.Load() != 1 || other.requests.Load() != 0 {
		t.Fatal("a started stream was retried")
	}
	if row := endpointRow(t, h, "e0"); row.Suspect != ejectStall {
		t.Fatalf("stalled engine: %+v", row)
	}
}

// A poison request, one that makes the engine drop the connection after reading it: the client
// gets a clear 502, the request is not retried on another engine (it might take that one out
// too), the engine is not marked down, and the ordinary requests that follow all succeed.
func TestPoisonRequestIsAnsweredNotRetried(t *testing.T) {
	e0, e1 := newHangEngine(t, "e0"), newHangEngine(t, "e1")
	h := newHarness(t, hungConfig(), nil, e0.fakeEngine, e1.fakeEngine)
	busy := h.tracker.Dispatch("e1", 100000, 100000)
	e0.dropAll.Store(true)
	resp, body := h.post(t, "/v1/completions", `{"model":"m","prompt":[1,2,3]}`, nil)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("poison request: %d %s", resp.StatusCode, body)
	}
	if _, msg := decodeError(t, body); !strings.Contains(msg, "not retried") {
		t.Fatalf("message %q", msg)
	}
	if e0.requests.Load() != 1 || e1.requests.Load() != 0 {
		t.Fatalf("poison request sent %d + %d times", e0.requests.Load(), e1.requests.Load())
	}
	if row := endpointRow(t, h, "e0"); !row.Ready || row.Suspect != "" {
		t.Fatalf("one dropped request took the engine out: %+v", row)
	}
	if st := h.srv.Status(); st.Router.Retries != 0 {
		t.Fatalf("retries %d", st.Router.Retries)
	}
	e0.dropAll.Store(false)
	for i := range 10 {
		resp, body := h.post(t, "/v1/completions", `{"model":"m","prompt":[1,2,3],"max_tokens":4}`, nil)
		if resp.StatusCode != 200 || resp.Header.Get(EndpointHeader) != "e0" {
			t.Fatalf("ordinary request %d after the poison one: %d from %q: %s", i, resp.StatusCode, resp.Header.Get(EndpointHeader), body)
		}
	}
	busy.Done()

	// An engine that drops everything is ejected after the consecutive-failure threshold.
	e0.dropAll.Store(true)
	busy = h.tracker.Dispatch("e1", 100000, 100000)
	defer busy.Done()
	for range 5 {
		h.post(t, "/v1/completions", `{"model":"m","prompt":[1,2,3]}`, nil)
	}
	if row := endpointRow(t, h, "e0"); row.Ready || !strings.HasPrefix(row.Suspect, ejectConsecutive) {
		t.Fatalf("engine dropping every request: %+v", row)
	}
	resp, _ = h.post(t, "/v1/completions", `{"model":"m","prompt":[1,2,3]}`, nil)
	if resp.StatusCode != 200 || resp.Header.Get(EndpointHeader) != "e1" {
		t.Fatalf("after the ejection: %d from %q", resp.StatusCode, resp.Header.Get(EndpointHeader))
	}
}

// /tokenize that hangs on one engine: the call times out once, is counted, and /tokenize goes
// to the other engines for a while; the engine itself keeps serving.
func TestTokenizeSkipsAnEngineWhoseTokenizeTimesOut(t *testing.T) {
	e0, e1 := newHangEngine(t, "e0"), newHangEngine(t, "e1")
	h := newHarness(t, hungConfig(), nil, e0.fakeEngine, e1.fakeEngine)
	e0.tokDelay.Store(int64(5 * time.Second))
	slow := 0
	for i := range 8 {
		start := time.Now()
		resp, body := h.post(t, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":"prompt %d","max_tokens":2}`, i), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		if time.Since(start) > 250*time.Millisecond {
			slow++
		}
	}
	if slow != 1 || e0.tokenizes.Load() != 1 {
		t.Fatalf("%d requests waited for the tokenize timeout, %d calls to the stalled /tokenize: want 1 and 1", slow, e0.tokenizes.Load())
	}
	if got := counted(t, h.srv.metrics.tokenizeTimeouts.WithLabelValues("e0")); got != 1 {
		t.Fatalf("tokenize timeouts %v", got)
	}
	if row := endpointRow(t, h, "e0"); !row.Ready {
		t.Fatalf("an engine with a slow /tokenize left routing: %+v", row)
	}
	// A call in flight for long has the requests behind it tokenize elsewhere at once, before
	// it times out.
	e1.tokDelay.Store(int64(5 * time.Second))
	time.Sleep(350 * time.Millisecond) // e0's skip ends; e1 is the slow one now
	e0.tokDelay.Store(0)
	before := e1.tokenizes.Load()
	go func() {
		// Until one call is stuck on e1 (the others are answered by e0 at once).
		for i := 0; e1.tokenizes.Load() == before && i < 100; i++ {
			resp, err := http.Post(h.http.URL+"/v1/completions", "application/json",
				strings.NewReader(fmt.Sprintf(`{"model":"m","prompt":"to stick %d","max_tokens":2}`, i)))
			if err == nil {
				resp.Body.Close()
			}
		}
	}()
	waitFor(t, "a call stuck on e1", func() bool { return e1.tokenizes.Load() == before+1 })
	time.Sleep(150 * time.Millisecond)
	for i := range 4 {
		start := time.Now()
		h.post(t, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":"behind it %d","max_tokens":2}`, i), nil)
		if took := time.Since(start); took > 250*time.Millisecond {
			t.Fatalf("request %d behind a stuck /tokenize call took %v", i, took)
		}
	}
	if n := e1.tokenizes.Load() - before; n != 1 {
		t.Fatalf("%d calls to a /tokenize with a call stuck for long", n)
	}
	if e0.tokenizes.Load() < 5 {
		t.Fatalf("e0 tokenized %d times: its skip did not end after its time", e0.tokenizes.Load())
	}
}

// When every engine is suspect, suspects are all there is: requests still go to them.
func TestAllEnginesSuspectStillRoutes(t *testing.T) {
	e0, e1 := newHangEngine(t, "e0"), newHangEngine(t, "e1")
	cfg := hungConfig()
	cfg.OutlierEjectionBase, cfg.OutlierEjectionMax = time.Minute, time.Minute
	h := newHarness(t, cfg, nil, e0.fakeEngine, e1.fakeEngine)
	for _, e := range []*hangEngine{e0, e1} {
		h.srv.outliers.eject(h.srv.outliers.route(e.name, e.URL), ejectTTFB)
	}
	resp, body := h.post(t, "/v1/completions", `{"model":"m","prompt":[1,2,3],"max_tokens":2}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("every engine suspect: %d %s", resp.StatusCode, body)
	}
	st := h.srv.Status()
	if st.ReadyEndpoints != 2 || st.Endpoints[0].Suspect == nil {
		t.Fatalf("status %+v", st.Endpoints)
	}
}

// Data-parallel ranks are routes of their own: a hung rank is ejected alone.
func TestHungRankEjectedAlone(t *testing.T) {
	e := newHangEngine(t, "dp")
	h := newHarness(t, hungConfig(), nil)
	h.srv.SetEndpoints([]discovery.Endpoint{{Name: "dp", URL: e.URL, Ready: true, DPRanks: 2}})
	h.srv.outliers.eject(h.srv.outliers.route("dp/dp0", e.URL), ejectTTFB)
	for range 4 {
		resp, _ := h.post(t, "/v1/completions", `{"model":"m","prompt":[1,2,3],"max_tokens":2}`, nil)
		if got := resp.Header.Get(EndpointHeader); got != "dp/dp1" {
			t.Fatalf("request went to %q", got)
		}
	}
}

// counted is a counter's value.
func counted(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
