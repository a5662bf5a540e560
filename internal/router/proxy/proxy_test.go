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
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/kvstream"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/routerapi"
)

// fakeEngine is a minimal vLLM: /tokenize (one token per prompt byte), /v1/models, and
// completions that stream `chunks` SSE events `gap` apart.
type fakeEngine struct {
	*httptest.Server
	name       string
	requests   atomic.Int32
	tokenizes  atomic.Int32
	cancelled  atomic.Int32
	lastAuth   atomic.Value
	lastBody   atomic.Value
	chunks     int
	gap        time.Duration
	breakAfter int  // >0: drop the connection after this many chunks
	noTokenize bool // /tokenize answers 500
}

func newFakeEngine(t *testing.T, name string) *fakeEngine {
	f := &fakeEngine{name: name, chunks: 3}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		f.tokenizes.Add(1)
		if f.noTokenize {
			http.Error(w, "tokenizer exploded", 500)
			return
		}
		var body struct {
			Prompt   string            `json:"prompt"`
			Messages []json.RawMessage `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		text := body.Prompt
		for _, m := range body.Messages {
			text += string(m)
		}
		toks := make([]uint32, len(text))
		for i := range text {
			toks[i] = uint32(text[i])
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"count": len(toks), "tokens": toks})
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","parent":null},{"id":"my-lora","object":"model","parent":"m"}]}`)
	})
	gen := func(w http.ResponseWriter, r *http.Request) {
		f.requests.Add(1)
		f.lastAuth.Store(r.Header.Get("Authorization"))
		b, _ := io.ReadAll(r.Body)
		f.lastBody.Store(string(b))
		var req struct {
			Stream bool `json:"stream"`
		}
		_ = json.Unmarshal(b, &req)
		if !req.Stream && f.breakAfter > 0 {
			// A whole answer that breaks off half way.
			w.Header().Set("Content-Length", "1000")
			_, _ = io.WriteString(w, `{"id":"x",`)
			w.(http.Flusher).Flush()
			if hj, _, err := http.NewResponseController(w).Hijack(); err == nil {
				hj.Close()
			}
			return
		}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"x","object":"text_completion","choices":[{"text":"hello from %s"}]}`, f.name)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := 0; i < f.chunks; i++ {
			if f.breakAfter > 0 && i == f.breakAfter {
				hj, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					hj.Close()
				}
				return
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"t%d\"}]}\n\n", i)
			fl.Flush()
			select {
			case <-r.Context().Done():
				f.cancelled.Add(1)
				return
			case <-time.After(f.gap):
			}
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
	mux.HandleFunc("POST /v1/completions", gen)
	mux.HandleFunc("POST /v1/chat/completions", gen)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "vllm:num_requests_waiting{engine=\"0\"} 2\nvllm:num_requests_running{engine=\"0\"} 1\n")
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

// fakeIndex says which endpoints hold how many blocks of any prompt.
type fakeIndex struct {
	mu        sync.Mutex
	holds     map[string]int // endpoint → GPU blocks
	predicted []kvindex.SourceID
	settled   []kvindex.SourceID
	removed   []string
}

func (x *fakeIndex) AppendLookupKeys(out []kvindex.EndpointMatch, _ []kvindex.Key) []kvindex.EndpointMatch {
	x.mu.Lock()
	defer x.mu.Unlock()
	for ep, b := range x.holds {
		m := kvindex.EndpointMatch{Source: kvindex.SourceID{Endpoint: ep}, AnyBlocks: b, PredictedBlocks: b}
		m.Blocks[kvevents.MediumGPU] = b
		out = append(out, m)
	}
	return out
}
func (x *fakeIndex) PredictPendingKeys(src kvindex.SourceID, _ []kvindex.Key) {
	x.mu.Lock()
	x.predicted = append(x.predicted, src)
	x.mu.Unlock()
}
func (x *fakeIndex) SettleKeys(src kvindex.SourceID, _ []kvindex.Key) {
	x.mu.Lock()
	x.settled = append(x.settled, src)
	x.mu.Unlock()
}
func (x *fakeIndex) RemoveEndpoint(ep string) {
	x.mu.Lock()
	x.removed = append(x.removed, ep)
	x.mu.Unlock()
}
func (x *fakeIndex) Stats() kvindex.Stats { return kvindex.Stats{Keys: 1} }

type harness struct {
	srv  *Server
	http *httptest.Server
	// admin serves AdminHandler: /v1/status, /v1/autoscale, /metrics.
	admin   *httptest.Server
	tracker *loadsignal.Tracker
}

// handleByteTokensAndModels serves an engine's /tokenize (one token per byte of the prompt) and
// /v1/models (model "m") on mux.
func handleByteTokensAndModels(mux *http.ServeMux) {
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Prompt string `json:"prompt"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		toks := make([]uint32, len(body.Prompt))
		for i := range body.Prompt {
			toks[i] = uint32(body.Prompt[i])
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"count": len(toks), "tokens": toks})
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","parent":null}]}`)
	})
}

func newHarness(t *testing.T, cfg Config, idx Index, engines ...*fakeEngine) *harness {
	t.Helper()
	var eps []discovery.Endpoint
	for _, e := range engines {
		eps = append(eps, discovery.Endpoint{Name: e.name, URL: e.URL, Ready: true})
	}
	return startHarness(t, cfg, idx, eps)
}

// startHarness serves a router for eps (all ready) on loopback, closed when the test ends.
func startHarness(t *testing.T, cfg Config, idx Index, eps []discovery.Endpoint) *harness {
	t.Helper()
	if cfg.Policy.BlockSize == 0 {
		cfg.Policy.BlockSize = 4
	}
	tr := loadsignal.NewTracker()
	s := New(cfg, logr.Discard(), idx, nil, tr, prometheus.NewRegistry())
	s.SetEndpoints(eps)
	h := &harness{srv: s, tracker: tr, http: httptest.NewServer(s.Handler()), admin: httptest.NewServer(s.AdminHandler(nil))}
	t.Cleanup(h.http.Close)
	t.Cleanup(h.admin.Close)
	return h
}

func (h *harness) post(t *testing.T, path, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func decodeError(t *testing.T, body string) (typ, msg string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" || e.Error.Code == 0 {
		t.Fatalf("not an OpenAI error: %q (%v)", body, err)
	}
	return e.Error.Type, e.Error.Message
}

func TestBadInput(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{MaxBodyBytes: 1000}, nil, e0)
	cases := []struct {
		name, path, body string
		code             int
	}{
		{"malformed", "/v1/completions", `{"model":`, 400},
		{"not an object", "/v1/completions", `[1,2]`, 400},
		{"missing model", "/v1/completions", `{"prompt":"hi"}`, 400},
		{"missing prompt", "/v1/completions", `{"model":"m"}`, 400},
		{"messages not a list", "/v1/chat/completions", `{"model":"m","messages":"hi"}`, 400},
		{"unknown model", "/v1/completions", `{"model":"nope","prompt":"hi"}`, 404},
		{"too large", "/v1/completions", `{"model":"m","prompt":"` + strings.Repeat("x", 2000) + `"}`, 413},
	}
	for _, c := range cases {
		resp, body := h.post(t, c.path, c.body, nil)
		if resp.StatusCode != c.code {
			t.Errorf("%s: status %d, want %d (%s)", c.name, resp.StatusCode, c.code, body)
			continue
		}
		decodeError(t, body)
	}
	if n := e0.requests.Load(); n != 0 {
		t.Fatalf("bad requests reached the engine %d times", n)
	}
	// Wrong method and unknown path.
	resp, err := http.Get(h.http.URL + "/v1/completions")
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET completions: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
}

func TestNoReadyEndpoint503(t *testing.T) {
	h := newHarness(t, Config{Model: "m", RetryAfter: 3}, nil)
	resp, body := h.post(t, "/v1/completions", `{"model":"m","prompt":"hi"}`, nil)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "3" {
		t.Fatalf("status %d retry-after %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	decodeError(t, body)
	r, _ := http.Get(h.http.URL + "/ready")
	if r.StatusCode != 503 {
		t.Fatalf("/ready %d with no endpoint", r.StatusCode)
	}
	r.Body.Close()
	st := h.srv.Status()
	if len(st.Degradations) == 0 || st.Degradations[len(st.Degradations)-1].Type != "NoReadyEndpoint" {
		t.Fatalf("degradations %+v", st.Degradations)
	}
	// Admission limit.
	e0 := newFakeEngine(t, "e0")
	h2 := newHarness(t, Config{Policy: policy.Config{MaxInFlight: 1}}, nil, e0)
	k := h2.tracker.Dispatch("e0", 1, 1)
	defer k.Done()
	resp, body = h2.post(t, "/v1/completions", `{"model":"m","prompt":"hi"}`, nil)
	if resp.StatusCode != 503 || !strings.Contains(body, "admission") {
		t.Fatalf("admission limit: %d %s", resp.StatusCode, body)
	}
}

func TestProxyPassThroughHeadersAndAuth(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{ReportModeFull: true}, nil, e0)
	resp, body := h.post(t, "/v1/completions", `{"model":"m","prompt":"hello","vllm_xargs":{"a":1}}`,
		map[string]string{"Authorization": "Bearer sk-test"})
	if resp.StatusCode != 200 || !strings.Contains(body, "hello from e0") {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get(EndpointHeader); got != "e0" {
		t.Fatalf("%s = %q", EndpointHeader, got)
	}
	if got := e0.lastAuth.Load(); got != "Bearer sk-test" {
		t.Fatalf("Authorization not passed through: %q", got)
	}
	var sent map[string]json.RawMessage
	_ = json.Unmarshal([]byte(e0.lastBody.Load().(string)), &sent)
	if string(sent["vllm_xargs"]) != `{"a":1,"kv_cache_report_mode":"full"}` {
		t.Fatalf("vllm_xargs %s", sent["vllm_xargs"])
	}
	// LoRA adapters the engines list are accepted.
	if resp, _ := h.post(t, "/v1/chat/completions", `{"model":"my-lora","messages":[{"role":"user","content":"x"}]}`, nil); resp.StatusCode != 200 {
		t.Fatalf("lora model: %d", resp.StatusCode)
	}
	st := h.srv.Status()
	if st.Router.Requests != 2 || st.Router.PromptTokens == 0 {
		t.Fatalf("router stats %+v", st.Router)
	}
	waitFor(t, "load released after the response", func() bool { return h.tracker.Stats("e0").InFlight == 0 })
}

func TestStreamingFlushesEachChunk(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	e0.chunks, e0.gap = 3, 300*time.Millisecond
	h := newHarness(t, Config{}, nil, e0)
	start := time.Now()
	resp, err := http.Post(h.http.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","prompt":"hi","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get(EndpointHeader) != "e0" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("headers %v", resp.Header)
	}
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.Contains(line, "t0") {
		t.Fatalf("first line %q %v", line, err)
	}
	if el := time.Since(start); el > 250*time.Millisecond {
		t.Fatalf("first chunk after %v: not flushed through", el)
	}
	rest, _ := io.ReadAll(rd)
	if !strings.Contains(string(rest), "[DONE]") || !strings.Contains(string(rest), "t2") {
		t.Fatalf("rest %q", rest)
	}
	// A stream's first chunk feeds the latency model, its gaps the decode model.
	if m := h.srv.policy.Model("e0"); m == nil || m.Observations() != 1 {
		t.Fatal("TTFT not observed")
	}
	m := h.srv.policy.DecodeModel("e0")
	if m == nil || m.Observations() != 1 {
		t.Fatal("inter-token latency not observed")
	}
	st := h.srv.Status()
	if eps := st.Endpoints; len(eps) != 1 || eps[0].ITLModel == nil || eps[0].ITLModel.Observations != 1 {
		t.Fatalf("status does not show the decode model: %+v", eps)
	}
	if f := st.Fleet.ITLModel; f == nil || f.Observations != 1 {
		t.Fatalf("status does not show the fleet's decode line: %+v", st.Fleet)
	}
}

// A streamed answer's length feeds the policy's output share, against the request's own
// max_tokens (capped) or the default (uncapped); a whole answer feeds nothing.
func TestStreamedOutputFeedsOutputShare(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	e0.chunks = 4
	h := newHarness(t, Config{}, nil, e0)
	send := func(body string) {
		t.Helper()
		resp, err := http.Post(h.http.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	n := 40
	for range n {
		send(`{"model":"m","prompt":"hi","stream":true,"max_tokens":16}`)
	}
	send(`{"model":"m","prompt":"hi","stream":true}`)
	send(`{"model":"m","prompt":"hi","max_tokens":16}`)
	waitFor(t, "answers observed", func() bool {
		h.srv.policyMu.Lock()
		defer h.srv.policyMu.Unlock()
		_, capped := h.srv.policy.OutputShare(true)
		_, uncapped := h.srv.policy.OutputShare(false)
		return capped == n && uncapped == 1
	})
	h.srv.policyMu.Lock()
	share, _ := h.srv.policy.OutputShare(true)
	h.srv.policyMu.Unlock()
	if want := 4.0 / 16; math.Abs(share-want) > 0.01 {
		t.Fatalf("capped output share %.3f, want %.3f (4 tokens of 16)", share, want)
	}
}

func TestClientCancelPropagates(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	e0.chunks, e0.gap = 100, 50*time.Millisecond
	h := newHarness(t, Config{}, nil, e0)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.http.URL+"/v1/completions",
		strings.NewReader(`{"model":"m","prompt":"hi","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = bufio.NewReader(resp.Body).ReadString('\n')
	cancel()
	resp.Body.Close()
	waitFor(t, "engine request cancelled after the client left", func() bool { return e0.cancelled.Load() > 0 })
	waitFor(t, "load released after cancel", func() bool { return h.tracker.Stats("e0").InFlight == 0 })
}

func TestMidStreamBreakIsACleanError(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	e0.chunks, e0.breakAfter = 5, 2
	h := newHarness(t, Config{}, nil, e0)
	resp, body := h.post(t, "/v1/completions", `{"model":"m","prompt":"hi","stream":true}`, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "t1") || !strings.Contains(body, `"error"`) ||
		strings.Contains(body, "[DONE]") {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if e0.requests.Load() != 1 {
		t.Fatal("a request that had sent bytes was retried")
	}
	// A whole (non-streamed) answer that breaks off must not reach the client as if complete.
	resp, err := http.Post(h.http.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hi"}`))
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("a truncated JSON answer was delivered as complete")
	}
	waitFor(t, "load released after an aborted answer", func() bool { return h.tracker.Stats("e0").InFlight == 0 })
}

func TestRetryOnConnectionFailure(t *testing.T) {
	live := newFakeEngine(t, "live")
	// A port nothing listens on.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURL := "http://" + ln.Addr().String()
	ln.Close()
	h := newHarness(t, Config{}, nil, live)
	h.srv.SetEndpoints([]discovery.Endpoint{{Name: "dead", URL: deadURL, Ready: true}, {Name: "live", URL: live.URL, Ready: true}})
	// Make the dead engine the obvious choice: the live one looks busy.
	k := h.tracker.Dispatch("live", 100000, 100000)
	defer k.Done()
	resp, body := h.post(t, "/v1/completions", `{"model":"m","prompt":[1,2,3,4,5,6,7,8]}`, nil)
	if resp.StatusCode != 200 || resp.Header.Get(EndpointHeader) != "live" {
		t.Fatalf("status %d endpoint %q body %s", resp.StatusCode, resp.Header.Get(EndpointHeader), body)
	}
	st := h.srv.Status()
	if st.Router.Retries != 1 {
		t.Fatalf("retries %d", st.Router.Retries)
	}
	// The dead engine is kept out for a while: the next request goes straight to live.
	for _, e := range st.Endpoints {
		if e.Name == "dead" && (e.Ready || e.NotReadyReason != "connect-failures") {
			t.Fatalf("dead endpoint %+v", e)
		}
	}
	h.post(t, "/v1/completions", `{"model":"m","prompt":[1,2,3]}`, nil)
	if st := h.srv.Status(); st.Router.Retries != 1 {
		t.Fatal("second request tried the dead engine again")
	}
	// With no fallback at all the client gets a 502.
	h.srv.SetEndpoints([]discovery.Endpoint{{Name: "dead2", URL: deadURL, Ready: true}})
	resp, body = h.post(t, "/v1/completions", `{"model":"m","prompt":[1]}`, nil)
	if resp.StatusCode != 502 {
		t.Fatalf("single dead engine: %d %s", resp.StatusCode, body)
	}
	decodeError(t, body)
}

func TestTokenizerFailureRoutesByLoadAndIsReported(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	e0.noTokenize = true
	idx := &fakeIndex{holds: map[string]int{"e0": 10}}
	h := newHarness(t, Config{}, idx, e0)
	resp, _ := h.post(t, "/v1/completions", `{"model":"m","prompt":"hello"}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	st := h.srv.Status()
	if st.Router.TokenizeFailures != 1 || st.Router.Decisions["load"] != 1 {
		t.Fatalf("router %+v", st.Router)
	}
	found := false
	for _, d := range st.Degradations {
		found = found || d.Type == "TokenizerUnavailable"
	}
	if !found {
		t.Fatalf("degradations %+v", st.Degradations)
	}
	if len(idx.predicted) != 0 {
		t.Fatal("an untokenized request made predictions")
	}
	// Token-id prompts need no tokenizer.
	h.post(t, "/v1/completions", `{"model":"m","prompt":[1,2,3,4,5,6,7,8,9]}`, nil)
	if st := h.srv.Status(); st.Router.TokenizeFailures != 1 {
		t.Fatal("token ids were sent to /tokenize")
	}
}

func TestRoutesToPrefixHolderAndPredicts(t *testing.T) {
	e0, e1, e2 := newFakeEngine(t, "e0"), newFakeEngine(t, "e1"), newFakeEngine(t, "e2")
	idx := &fakeIndex{holds: map[string]int{"e1": 40}}
	h := newHarness(t, Config{}, idx, e0, e1, e2)
	prompt := strings.Repeat("p", 170)
	for i := 0; i < 5; i++ {
		resp, _ := h.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"`+prompt+`"}]}`, nil)
		if resp.Header.Get(EndpointHeader) != "e1" {
			t.Fatalf("request %d went to %s", i, resp.Header.Get(EndpointHeader))
		}
	}
	if len(idx.predicted) != 5 || idx.predicted[0].Endpoint != "e1" {
		t.Fatalf("predictions %+v", idx.predicted)
	}
	// Each prediction is settled once its request has started.
	waitFor(t, "predictions settled", func() bool {
		idx.mu.Lock()
		defer idx.mu.Unlock()
		return len(idx.settled) == 5 && idx.settled[4].Endpoint == "e1"
	})
	st := h.srv.Status()
	if st.Router.Decisions["prefix"] != 5 || st.Router.RoutedHitRate <= 0.5 {
		t.Fatalf("router %+v", st.Router)
	}
	// Identical prompts are tokenized once (cache) and removed endpoints leave the index.
	if n := e0.tokenizes.Load() + e1.tokenizes.Load() + e2.tokenizes.Load(); n != 1 {
		t.Fatalf("%d tokenize calls for 5 identical prompts", n)
	}
	h.srv.SetEndpoints([]discovery.Endpoint{{Name: "e0", URL: e0.URL, Ready: true}})
	if len(idx.removed) != 2 {
		t.Fatalf("removed %v", idx.removed)
	}
}

func TestStatusAutoscaleReady(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{}, nil, e0)
	sc := &loadsignal.Scraper{Tracker: h.tracker, Targets: h.srv.ScrapeTargets}
	sc.Round(context.Background())
	k := h.tracker.Dispatch("e0", 10, 110)
	defer k.Done()
	var a routerapi.Autoscale
	r, err := http.Get(h.admin.URL + "/v1/autoscale")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(r.Body).Decode(&a)
	r.Body.Close()
	if a != (routerapi.Autoscale{WaitingRequests: 2, TokensInFlight: 110, Endpoints: 1}) {
		t.Fatalf("autoscale %+v", a)
	}
	var st routerapi.Status
	r, _ = http.Get(h.admin.URL + "/v1/status")
	_ = json.NewDecoder(r.Body).Decode(&st)
	r.Body.Close()
	if len(st.Endpoints) != 1 || st.Endpoints[0].Engine == nil || st.Endpoints[0].Engine.Waiting != 2 ||
		st.Endpoints[0].InFlight != 1 || st.Policy != "Auto" || st.ReadyEndpoints != 1 {
		t.Fatalf("status %+v", st)
	}
	r, _ = http.Get(h.http.URL + "/ready")
	if r.StatusCode != 200 {
		t.Fatalf("/ready %d", r.StatusCode)
	}
	r.Body.Close()
	r, _ = http.Get(h.http.URL + "/v1/models")
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 || !strings.Contains(string(b), `"my-lora"`) || r.Header.Get(EndpointHeader) != "e0" {
		t.Fatalf("/v1/models %d %s", r.StatusCode, b)
	}
}

func TestDataParallelRanksBecomeRoutes(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	var ranks sync.Map
	e0.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ranks.Store(r.Header.Get(dpRankHeader), true)
		_, _ = io.WriteString(w, `{}`)
	})
	h := newHarness(t, Config{Model: "m"}, nil)
	h.srv.SetEndpoints([]discovery.Endpoint{{Name: "e0", URL: e0.URL, DPRanks: 2, Ready: true}})
	seen := map[string]bool{}
	for i := 0; i < 20; i++ {
		resp, _ := h.post(t, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":[%d]}`, i), nil)
		seen[resp.Header.Get(EndpointHeader)] = true
	}
	if !seen["e0/dp0"] || !seen["e0/dp1"] {
		t.Fatalf("routes %v", seen)
	}
	if _, ok := ranks.Load("1"); !ok {
		t.Fatal("rank header not sent")
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSessionHeaderKeepsASessionTogether(t *testing.T) {
	var engines []*fakeEngine
	for i := 0; i < 4; i++ {
		engines = append(engines, newFakeEngine(t, fmt.Sprint("e", i)))
	}
	h := newHarness(t, Config{SessionHeader: "X-Session"}, nil, engines...)
	for s := 0; s < 4; s++ {
		home := ""
		for i := 0; i < 5; i++ {
			resp, _ := h.post(t, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":[%d,%d]}`, s, i),
				map[string]string{"X-Session": fmt.Sprint("user-", s)})
			got := resp.Header.Get(EndpointHeader)
			if home == "" {
				home = got
			} else if got != home {
				t.Fatalf("session %d moved from %s to %s on an idle fleet", s, home, got)
			}
			waitFor(t, "load released", func() bool { return h.tracker.Stats(got).InFlight == 0 })
		}
	}
}

func TestReadBodyUsesContentLength(t *testing.T) {
	for _, n := range []int{0, 1, 1000} {
		body := strings.Repeat("x", n)
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		got, err := readBody(httptest.NewRecorder(), r, 2000)
		if err != nil || string(got) != body {
			t.Fatalf("n=%d: %d bytes, %v", n, len(got), err)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat("x", 3000)))
	if _, err := readBody(httptest.NewRecorder(), r, 2000); err == nil {
		t.Fatal("body over the limit read without error")
	}
}

type fakeStreams []kvstream.SourceStatus

func (f fakeStreams) Status() []kvstream.SourceStatus { return f }

func TestEventsDegradedInStatus(t *testing.T) {
	e0, e1 := newFakeEngine(t, "e0"), newFakeEngine(t, "e1")
	streams := fakeStreams{
		{Source: kvindex.SourceID{Endpoint: "e0"}, Connected: true, Batches: 5},
		{Source: kvindex.SourceID{Endpoint: "e1"}, Connected: true, Partial: true, Gaps: 1, ReplayFailures: 1},
	}
	s := New(Config{}, logr.Discard(), nil, streams, loadsignal.NewTracker(), nil)
	s.SetEndpoints([]discovery.Endpoint{
		{Name: "e0", URL: e0.URL, KVEvents: "tcp://127.0.0.1:1", Ready: true},
		{Name: "e1", URL: e1.URL, KVEvents: "tcp://127.0.0.1:2", Ready: true},
	})
	st := s.Status()
	if st.Endpoints[1].Events == nil || !st.Endpoints[1].Events.Partial || st.Endpoints[1].Events.ReplayFailures != 1 {
		t.Fatalf("events %+v", st.Endpoints[1].Events)
	}
	var found bool
	for _, d := range st.Degradations {
		found = found || (d.Type == "EventsDegraded" && strings.Contains(d.Message, "e1"))
	}
	if !found {
		t.Fatalf("degradations %+v", st.Degradations)
	}
	streams[1].Partial = false
	for _, d := range s.Status().Degradations {
		if d.Type == "EventsDegraded" {
			t.Fatalf("healthy streams reported degraded: %+v", d)
		}
	}
}
