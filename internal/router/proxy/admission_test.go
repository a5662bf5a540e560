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
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvrouter/kvrouter/internal/router/admission"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/routerapi"
)

// shedBody checks a 429 the way an OpenAI client reads it: status, Retry-After, and the error
// object, and returns its message.
func shedBody(t *testing.T, resp *http.Response, body string) string {
	t.Helper()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429 (%s)", resp.StatusCode, body)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > admission.MaxRetryAfter {
		t.Fatalf("Retry-After %q, want whole seconds in [1, %d]", resp.Header.Get("Retry-After"), admission.MaxRetryAfter)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	var e struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    int     `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == nil {
		t.Fatalf("not an OpenAI error body: %q (%v)", body, err)
	}
	if e.Error.Type != "rate_limit_exceeded" || e.Error.Code != 429 || e.Error.Param != nil || e.Error.Message == "" {
		t.Fatalf("error object %+v", *e.Error)
	}
	return e.Error.Message
}

// A request beyond a queue bound is answered 429 before tokenization, and nothing reaches an
// engine.
func TestShedBeforeTokenizeWithoutEngineCall(t *testing.T) {
	e0, e1 := newFakeEngine(t, "e0"), newFakeEngine(t, "e1")
	h := newHarness(t, Config{Admission: admission.Config{QueueCap: 2}}, nil, e0, e1)
	// Two requests wait for a first token on each engine: both are at the cap.
	for _, ep := range []string{"e0", "e0", "e1", "e1"} {
		defer h.tracker.Dispatch(ep, 100, 200).Done()
	}
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		body := `{"model":"m","prompt":"hello there","stream":true}`
		if strings.Contains(path, "chat") {
			body = `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
		}
		resp, b := h.post(t, path, body, nil)
		msg := shedBody(t, resp, b)
		if !strings.Contains(msg, "overloaded") || strings.Contains(msg, "hello") {
			t.Fatalf("message %q: should say why and never echo the prompt", msg)
		}
	}
	if n := e0.requests.Load() + e1.requests.Load(); n != 0 {
		t.Fatalf("shed requests reached an engine %d times", n)
	}
	if n := e0.tokenizes.Load() + e1.tokenizes.Load(); n != 0 {
		t.Fatalf("shed requests were tokenized %d times", n)
	}

	st := h.srv.Status()
	if st.Admission == nil || st.Admission.Shed["queue/interactive"] != 2 || st.Admission.FleetQueued != 4 ||
		st.Admission.QueueCap != 2 || st.Admission.TTFTBoundSeconds != admission.DefaultTTFTBound.Seconds() {
		t.Fatalf("admission status %+v", st.Admission)
	}
	// The demand turned away is demand the autoscaler must see.
	var a routerapi.Autoscale
	r, err := http.Get(h.admin.URL + "/v1/autoscale")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(r.Body).Decode(&a)
	r.Body.Close()
	if a.ShedRequests != 2 || a.WaitingRequests != 2 {
		t.Fatalf("autoscale %+v, want the 2 shed requests counted as waiting (no scrape yet)", a)
	}
	if n := counterValue(t, h.srv.shedMetric.WithLabelValues("queue", "interactive")); n != 2 {
		t.Fatalf("kvrouter_requests_shed_total{reason=queue,priority=interactive} = %v", n)
	}
	if n := counterValue(t, h.srv.metrics.requests.WithLabelValues("", "429")); n != 2 {
		t.Fatalf(`kvrouter_requests_total{endpoint="",code="429"} = %v`, n)
	}
}

// With a calibrated latency model the bound is on the request's predicted TTFT on the engine the
// policy chose: its own prefill counts, so a short queue can still be too long for a long prompt.
func TestShedOnPredictedTTFTAfterRouting(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{Admission: admission.Config{TTFTBound: time.Second}}, nil, e0)
	// TTFT = 0.5 s + 0.1 ms per token of prefill work.
	h.srv.policyMu.Lock()
	for i := range 40 {
		x := (i % 10) * 5000
		h.srv.policy.ObserveTTFT("e0", x, 0.5+float64(x)*1e-4)
	}
	h.srv.policyMu.Unlock()

	// 2000 tokens (the fake tokenizer counts bytes): 0.7 s predicted, admitted.
	resp, b := h.post(t, "/v1/completions", `{"model":"m","prompt":"`+strings.Repeat("a", 2000)+`"}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("short prompt: %d %s", resp.StatusCode, b)
	}
	// 10000 tokens: 1.5 s predicted. The queue alone (one request without prefill left, 0.5 s)
	// passes the check before tokenizing; the request's own prefill, known once tokenized,
	// does not. (With nothing queued it would be admitted: there would be no queue to bound.)
	defer h.tracker.Dispatch("e0", 0, 0).Done()
	resp, b = h.post(t, "/v1/completions", `{"model":"m","prompt":"`+strings.Repeat("b", 10000)+`"}`, nil)
	msg := shedBody(t, resp, b)
	if !strings.Contains(msg, "time to first token 1.5s") || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("message %q, Retry-After %s", msg, resp.Header.Get("Retry-After"))
	}
	if n := e0.requests.Load(); n != 1 {
		t.Fatalf("engine saw %d requests, want only the admitted one", n)
	}
	if n := e0.tokenizes.Load(); n != 2 {
		t.Fatalf("tokenized %d times, want 2", n)
	}
	if st := h.srv.Status(); st.Admission.Shed["ttft/interactive"] != 1 {
		t.Fatalf("shed counts %+v", st.Admission.Shed)
	}
}

// Batch requests are shed at a fraction of the bounds interactive ones are held to.
func TestPriorityHeader(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{Admission: admission.Config{QueueCap: 2}}, nil, e0)
	defer h.tracker.Dispatch("e0", 100, 200).Done() // one queued: half the cap
	body := `{"model":"m","prompt":"hi"}`
	resp, b := h.post(t, "/v1/completions", body, map[string]string{PriorityHeader: "batch"})
	shedBody(t, resp, b)
	resp, b = h.post(t, "/v1/completions", body, map[string]string{PriorityHeader: "interactive"})
	if resp.StatusCode != 200 {
		t.Fatalf("interactive: %d %s", resp.StatusCode, b)
	}
	resp, b = h.post(t, "/v1/completions", body, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("no header (interactive): %d %s", resp.StatusCode, b)
	}
	resp, b = h.post(t, "/v1/completions", body, map[string]string{PriorityHeader: "urgent"})
	if resp.StatusCode != 400 {
		t.Fatalf("unknown priority: %d %s", resp.StatusCode, b)
	}
	if typ, msg := decodeError(t, b); typ != invalidRequest || !strings.Contains(msg, PriorityHeader) {
		t.Fatalf("unknown priority: %s %q", typ, msg)
	}
	if st := h.srv.Status(); st.Admission.Shed["queue/batch"] != 1 || len(st.Admission.Shed) != 1 {
		t.Fatalf("shed counts %+v", st.Admission.Shed)
	}
}

// Turned off, nothing is shed however long the queues.
func TestAdmissionDisabled(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{DisableAdmission: true, Admission: admission.Config{QueueCap: 1}}, nil, e0)
	defer h.tracker.Dispatch("e0", 100, 200).Done()
	hdr := map[string]string{PriorityHeader: "whatever"} // meaningless, so not read
	if resp, b := h.post(t, "/v1/completions", `{"model":"m","prompt":"hi"}`, hdr); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if st := h.srv.Status(); st.Admission != nil {
		t.Fatalf("admission status while off: %+v", st.Admission)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// The policy does not see the queues admission bounds: when its choice (here the prefix holder)
// is beyond a bound and another engine is not, the request goes to the other rather than
// being shed.
func TestShedOnlyWhenNoEngineCanTakeIt(t *testing.T) {
	e0, e1 := newFakeEngine(t, "e0"), newFakeEngine(t, "e1")
	idx := &fakeIndex{holds: map[string]int{"e0": 8}}
	h := newHarness(t, Config{Policy: policy.Config{Kind: policy.PrefixOnly},
		Admission: admission.Config{QueueCap: 2}}, idx, e0, e1)
	for range 2 {
		defer h.tracker.Dispatch("e0", 100, 200).Done()
	}
	body := `{"model":"m","prompt":"` + strings.Repeat("x", 64) + `"}`
	resp, b := h.post(t, "/v1/completions", body, nil)
	if resp.StatusCode != 200 || resp.Header.Get(EndpointHeader) != "e1" {
		t.Fatalf("holder full, e1 free: %d from %q (%s)", resp.StatusCode, resp.Header.Get(EndpointHeader), b)
	}
	if n := e0.requests.Load(); n != 0 {
		t.Fatalf("the full holder got %d requests", n)
	}
	// Both full: shed.
	for range 2 {
		defer h.tracker.Dispatch("e1", 100, 200).Done()
	}
	resp, b = h.post(t, "/v1/completions", body, nil)
	shedBody(t, resp, b)
	if st := h.srv.Status(); st.Admission.Shed["queue/interactive"] != 1 {
		t.Fatalf("shed counts %+v: want the one shed request counted once", st.Admission.Shed)
	}
}
