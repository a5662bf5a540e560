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
	"encoding/json"
	"fmt"
	"io"
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
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"

	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/epp"
	"github.com/kvrouter/kvrouter/internal/router/epp/epptest"
	"github.com/kvrouter/kvrouter/internal/router/epp/protocol"
	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/proxy"
	"github.com/kvrouter/kvrouter/internal/routerapi"
)

// engine is a minimal vLLM on loopback: /tokenize (one token per byte of the prompt or
// messages), /v1/models, completions and chat that answer whole or stream `chunks` SSE events
// `gap` apart. It records which data-parallel rank each request asked for.
type engine struct {
	*httptest.Server
	name     string
	chunks   int
	gap      time.Duration
	requests atomic.Int32
	mu       sync.Mutex
	ranks    []string // X-Data-Parallel-Rank of each request
	lastBody string
	lastAuth string
	lastDest string // the picker's destination header, as the gateway forwarded it
	// lastPrefiller is the routing-sidecar header of a split request, as the gateway forwarded it.
	lastPrefiller string
	// prefillFails plays a pd-sidecar whose prefill leg failed: the request is served whole,
	// and the answer names no prefill engine. Otherwise a request naming a prefiller is
	// answered as a sidecar that split it answers (X-Kvrouter-Prefill-Endpoint).
	prefillFails atomic.Bool
	modelHits    atomic.Int32
}

func newEngine(t *testing.T, name string) *engine {
	e := &engine{name: name, chunks: 4, gap: 2 * time.Millisecond}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
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
		e.modelHits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"m","object":"model","parent":null,"owned_by":%q}]}`, e.name)
	})
	gen := func(w http.ResponseWriter, r *http.Request) {
		e.requests.Add(1)
		b, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.ranks = append(e.ranks, r.Header.Get("X-Data-Parallel-Rank"))
		e.lastBody, e.lastAuth, e.lastDest = string(b), r.Header.Get("Authorization"), r.Header.Get(protocol.DestinationKey)
		e.lastPrefiller = r.Header.Get(proxy.PrefillerHeader)
		e.mu.Unlock()
		var req struct {
			Stream bool `json:"stream"`
		}
		_ = json.Unmarshal(b, &req)
		if pf := r.Header.Get(proxy.PrefillerHeader); pf != "" && !e.prefillFails.Load() {
			w.Header().Set(proxy.PrefillEndpointHeader, pf)
		}
		rank := r.Header.Get("X-Data-Parallel-Rank")
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"x","object":"text_completion","choices":[{"text":"hello from %s rank %q"}]}`, e.name, rank)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := 0; i < e.chunks; i++ {
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"%s-%s-t%d\"}]}\n\n", e.name, rank, i)
			fl.Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(e.gap):
			}
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
	mux.HandleFunc("POST /v1/completions", gen)
	mux.HandleFunc("POST /v1/chat/completions", gen)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	e.Server = httptest.NewServer(mux)
	t.Cleanup(e.Close)
	return e
}

// addr is the engine's host:port, as a gateway names it.
func (e *engine) addr() string { return strings.TrimPrefix(e.URL, "http://") }

func (e *engine) lastRank() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ranks) == 0 {
		return "none"
	}
	return e.ranks[len(e.ranks)-1]
}

// index is a stand-in for the prefix index: a prompt's holder is a function of its content
// keys, so that different prompts are held by different routes (or none), the same way for
// every router built over the same sources. It records predictions and settlements.
type index struct {
	srcs []kvindex.SourceID

	mu        sync.Mutex
	predicted []kvindex.SourceID
	settled   []kvindex.SourceID
}

func (x *index) AppendLookupKeys(out []kvindex.EndpointMatch, keys []kvindex.Key) []kvindex.EndpointMatch {
	if len(keys) < 2 {
		return out
	}
	var h kvindex.Key
	for _, k := range keys {
		h ^= k
	}
	i := int(uint64(h) % uint64(len(x.srcs)+1))
	if i == len(x.srcs) {
		return out // nobody holds it
	}
	b := len(keys) - 1
	m := kvindex.EndpointMatch{Source: x.srcs[i], AnyBlocks: b, PredictedBlocks: b}
	m.Blocks[kvevents.MediumGPU] = b
	return append(out, m)
}

func (x *index) PredictPendingKeys(src kvindex.SourceID, _ []kvindex.Key) {
	x.mu.Lock()
	x.predicted = append(x.predicted, src)
	x.mu.Unlock()
}

func (x *index) SettleKeys(src kvindex.SourceID, _ []kvindex.Key) {
	x.mu.Lock()
	x.settled = append(x.settled, src)
	x.mu.Unlock()
}

func (x *index) RemoveEndpoint(string) {}
func (x *index) Stats() kvindex.Stats  { return kvindex.Stats{} }

func (x *index) counts() (predicted, settled map[string]int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	predicted, settled = map[string]int{}, map[string]int{}
	for _, s := range x.predicted {
		predicted[fmt.Sprintf("%s/%d", s.Endpoint, s.Rank)]++
	}
	for _, s := range x.settled {
		settled[fmt.Sprintf("%s/%d", s.Endpoint, s.Rank)]++
	}
	return predicted, settled
}

// router is a proxy.Server over endpoints, with what the tests read of it.
type router struct {
	srv     *proxy.Server
	tracker *loadsignal.Tracker
	reg     *prometheus.Registry
	idx     *index
}

func newRouter(t *testing.T, cfg proxy.Config, eps []discovery.Endpoint, withIndex bool) *router {
	t.Helper()
	if cfg.Policy.BlockSize == 0 {
		cfg.Policy.BlockSize = 4
	}
	if cfg.Model == "" {
		cfg.Model = "m"
	}
	r := &router{tracker: loadsignal.NewTracker(), reg: prometheus.NewRegistry()}
	var idx proxy.Index
	if withIndex {
		r.idx = &index{}
		for _, e := range eps {
			for k := 0; k < e.Ranks(); k++ {
				r.idx.srcs = append(r.idx.srcs, kvindex.SourceID{Endpoint: e.Name, Rank: k})
			}
		}
		idx = r.idx
	}
	r.srv = proxy.New(cfg, logr.Discard(), idx, nil, r.tracker, r.reg)
	r.srv.SetEndpoints(eps)
	return r
}

func endpointsOf(engines ...*engine) []discovery.Endpoint {
	var eps []discovery.Endpoint
	for _, e := range engines {
		eps = append(eps, discovery.Endpoint{Name: e.name, URL: e.URL, Ready: true})
	}
	return eps
}

// row is the router's /v1/status row of an endpoint.
func (r *router) row(t *testing.T, name string) routerapi.Endpoint {
	t.Helper()
	for _, e := range r.srv.Status().Endpoints {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("no endpoint %q in the status", name)
	return routerapi.Endpoint{}
}

// metric is the value of a counter or gauge series of the router's registry (0 if absent).
func (r *router) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return value(m)
		}
	}
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// picker is an EPP serving r on loopback: ext_proc (and health) on addr, health alone on
// healthAddr. It stops when the test ends.
type picker struct {
	addr, healthAddr string
	conn             *grpc.ClientConn
}

func startPicker(t *testing.T, r *router) *picker {
	t.Helper()
	// Fallbacks on: most tests follow the gateway down the list.
	e := epp.New(r.srv, logr.Discard(), r.reg, epp.Options{ShutdownGrace: 2 * time.Second, HealthInterval: 20 * time.Millisecond, Fallbacks: true})
	return servePicker(t, e)
}

func servePicker(t *testing.T, e *epp.Server) *picker {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := e.Serve(ctx, lis); err != nil {
			t.Errorf("ext_proc server: %v", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := e.ServeHealth(ctx, hlis); err != nil {
			t.Errorf("health server: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	p := &picker{addr: lis.Addr().String(), healthAddr: hlis.Addr().String()}
	_, conn, err := epptest.Dial(p.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p.conn = conn
	return p
}

// client is an Envoy-like client of the picker in the given request body mode.
func (p *picker) client(mode epptest.Mode) *epptest.Client {
	c := epptest.NewClient(p.conn)
	c.RequestMode = mode
	c.ChunkBytes = 7 // several chunks for every body
	return c
}

// gateway is an HTTP gateway in front of the picker.
func (p *picker) gateway(t *testing.T, mode epptest.Mode) *httptest.Server {
	t.Helper()
	g := httptest.NewServer(&epptest.Gateway{Client: p.client(mode)})
	t.Cleanup(g.Close)
	return g
}

// post sends a request and returns its response with the body read.
func post(t *testing.T, url, body string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func completion(prompt string, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "stream": stream, "max_tokens": 16})
	return string(b)
}

func chat(content string, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": content}},
		"stream": stream})
	return string(b)
}

func tokenIDs(ids []int, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": "m", "prompt": ids, "stream": stream, "max_tokens": 8})
	return string(b)
}
