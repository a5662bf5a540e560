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
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvrouter/kvrouter/internal/router/disagg"
	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/routerapi"
)

// pdEngine is a vLLM with the KV connector: a request asking for a remote decode is answered
// with one token and kv_transfer_params naming this engine; a request carrying those params
// streams the answer as any request does. Answers are the same whichever engine gives them.
type pdEngine struct {
	*httptest.Server
	name string
	role string

	mu     sync.Mutex
	bodies []map[string]any
	// prefillers is the routing-sidecar header of each request, as the engine got it.
	prefillers []string

	// Faults of the prefill leg: an HTTP status, an answer without params, a hang.
	prefillStatus   int
	prefillNoParams bool
	prefillHang     time.Duration
	// refuseAll answers every other request with this status.
	refuseAll int
	// decodeDelay holds a decode leg's first byte, as a KV pull does.
	decodeDelay time.Duration
}

func newPDEngine(t *testing.T, name, role string) *pdEngine {
	e := &pdEngine{name: name, role: role}
	mux := http.NewServeMux()
	handleByteTokensAndModels(mux)
	mux.HandleFunc("POST /v1/completions", e.complete)
	e.Server = httptest.NewServer(mux)
	t.Cleanup(e.Close)
	return e
}

func (e *pdEngine) complete(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	e.mu.Lock()
	e.bodies = append(e.bodies, body)
	e.prefillers = append(e.prefillers, r.Header.Get(PrefillerHeader))
	status, noParams, hang, pull, refuse := e.prefillStatus, e.prefillNoParams, e.prefillHang, e.decodeDelay, e.refuseAll
	e.mu.Unlock()
	params, _ := body["kv_transfer_params"].(map[string]any)
	if refuse != 0 && (params == nil || params["do_remote_decode"] != true) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(refuse)
		fmt.Fprintf(w, `{"error":{"message":"refused by %s","type":"BadRequestError","param":null,"code":%d}}`, e.name, refuse)
		return
	}
	if params != nil && params["do_remote_decode"] == true {
		if hang > 0 {
			select {
			case <-r.Context().Done():
			case <-time.After(hang):
			}
			return
		}
		if status != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":{"message":"refused by %s","type":"BadRequestError","param":null,"code":%d}}`, e.name, status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if noParams {
			_, _ = io.WriteString(w, `{"id":"p","choices":[{"text":"x"}]}`)
			return
		}
		fmt.Fprintf(w, `{"id":"p","choices":[{"text":"x"}],"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,`+
			`"remote_engine_id":"%s","remote_block_ids":[1,2,3],"remote_host":"127.0.0.1","remote_port":5600,"remote_request_id":"r-%s","tp_size":1}}`,
			e.name, e.name)
		return
	}
	if params != nil && params["do_remote_prefill"] == true && pull > 0 {
		time.Sleep(pull)
	}
	if body["stream"] != true {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","choices":[{"text":"t0t1t2"}]}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for i := range 3 {
		fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"t%d\"}]}\n\n", i)
		w.(http.Flusher).Flush()
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// seen is the bodies the engine was sent.
func (e *pdEngine) seen() []map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]map[string]any(nil), e.bodies...)
}

func newPDHarness(t *testing.T, cfg Config, idx Index, engines ...*pdEngine) *harness {
	t.Helper()
	if cfg.Policy.BlockSize == 0 {
		cfg.Policy.BlockSize = 4
	}
	tr := loadsignal.NewTracker()
	s := New(cfg, logr.Discard(), idx, nil, tr, prometheus.NewRegistry())
	var eps []discovery.Endpoint
	for _, e := range engines {
		eps = append(eps, discovery.Endpoint{Name: e.name, URL: e.URL, Ready: true, Role: e.role})
	}
	s.SetEndpoints(eps)
	h := &harness{srv: s, tracker: tr, http: httptest.NewServer(s.Handler()), admin: httptest.NewServer(s.AdminHandler(nil))}
	t.Cleanup(h.http.Close)
	t.Cleanup(h.admin.Close)
	return h
}

const pdStream = `{"model":"m","prompt":"the quick brown fox jumps over the lazy dog","stream":true,"max_tokens":5,"stream_options":{"include_usage":true}}`

const wantStream = "data: {\"choices\":[{\"text\":\"t0\"}]}\n\ndata: {\"choices\":[{\"text\":\"t1\"}]}\n\ndata: {\"choices\":[{\"text\":\"t2\"}]}\n\ndata: [DONE]\n\n"

func hasParams(b map[string]any) bool { _, ok := b["kv_transfer_params"]; return ok }

func TestPDSplitSendsBothLegs(t *testing.T) {
	p, d := newPDEngine(t, "p0", discovery.RolePrefill), newPDEngine(t, "d0", discovery.RoleDecode)
	idx := &fakeIndex{holds: map[string]int{}}
	h := newPDHarness(t, Config{PD: PDConfig{Mode: disagg.Always}}, idx, p, d)
	resp, body := h.post(t, "/v1/completions", pdStream, nil)
	if resp.StatusCode != 200 || body != wantStream {
		t.Fatalf("client got %d %q, want the decode stream", resp.StatusCode, body)
	}
	if resp.Header.Get(EndpointHeader) != "d0" || resp.Header.Get(PrefillEndpointHeader) != "p0" {
		t.Fatalf("headers: endpoint %q prefill %q", resp.Header.Get(EndpointHeader), resp.Header.Get(PrefillEndpointHeader))
	}
	ps, ds := p.seen(), d.seen()
	if len(ps) != 1 || len(ds) != 1 {
		t.Fatalf("legs: prefill %d, decode %d requests", len(ps), len(ds))
	}
	pl := ps[0]
	if pl["stream"] != false || pl["max_tokens"] != 1.0 || pl["stream_options"] != nil || pl["prompt"] == nil {
		t.Fatalf("prefill leg body: %v", pl)
	}
	if _, set := pl["max_completion_tokens"]; set {
		t.Fatalf("prefill leg got a max_completion_tokens the client did not set: %v", pl)
	}
	wantP := map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
		"remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
	if got, _ := json.Marshal(pl["kv_transfer_params"]); string(got) != mustJSON(t, wantP) {
		t.Fatalf("prefill leg kv_transfer_params: %s", got)
	}
	dl := ds[0]
	if dl["stream"] != true || dl["max_tokens"] != 5.0 || dl["stream_options"] == nil || dl["prompt"] != pl["prompt"] {
		t.Fatalf("decode leg body is not the client's: %v", dl)
	}
	kv, _ := dl["kv_transfer_params"].(map[string]any)
	if kv["remote_engine_id"] != "p0" || kv["remote_request_id"] != "r-p0" || kv["do_remote_prefill"] != true {
		t.Fatalf("decode leg kv_transfer_params are not the prefill answer's: %v", kv)
	}
	// Both engines had the prompt's blocks predicted (the decode engine holds them once pulled).
	idx.mu.Lock()
	got := map[string]bool{}
	for _, src := range idx.predicted {
		got[src.Endpoint] = true
	}
	idx.mu.Unlock()
	if !got["p0"] || !got["d0"] {
		t.Fatalf("predicted on %v, want both engines", got)
	}
	// The load of both legs is released.
	for _, n := range []string{"p0", "d0"} {
		if st := h.tracker.Stats(n); st.InFlight != 0 || st.QueuedPrefillTokens != 0 {
			t.Fatalf("%s still charged: %+v", n, st)
		}
	}
	// The decode leg's first token taught the transfer line; the prefill leg was timed.
	for name, m := range map[string]prometheus.Histogram{"transfer": h.srv.pd.transfer, "prefill leg": h.srv.pd.prefillLeg} {
		var out dto.Metric
		if err := m.Write(&out); err != nil || out.GetHistogram().GetSampleCount() != 1 {
			t.Fatalf("%s observations: %v %v", name, out.GetHistogram().GetSampleCount(), err)
		}
	}
	// The planner ran on the router's clock: the leg committed to p0 counts in its duty.
	h.srv.policyMu.Lock()
	duty := h.srv.pd.est.PrefillDuty("p0", h.srv.now().Sub(h.srv.pd.epoch).Seconds())
	h.srv.policyMu.Unlock()
	if !(duty > 0) {
		t.Fatalf("prefill duty of p0 after a split request: %v (the planner got no clock)", duty)
	}
	st := h.srv.Status()
	if st.Disaggregation == nil || st.Disaggregation.SplitRequests != 1 || st.Disaggregation.SplitShare != 1 ||
		st.Disaggregation.Mode != "Always" {
		t.Fatalf("status: %+v", st.Disaggregation)
	}
	if st.Endpoints[0].Role != discovery.RoleDecode || st.Endpoints[1].Role != discovery.RolePrefill {
		t.Fatalf("endpoint roles: %+v", st.Endpoints)
	}

	// max_completion_tokens is capped too when the client set it; a min_tokens above the one
	// token is dropped from the prefill leg (the engine would refuse it), kept in the decode leg.
	_, _ = h.post(t, "/v1/completions", `{"model":"m","prompt":"another prompt here","max_completion_tokens":9,"min_tokens":4}`, nil)
	if pl := p.seen()[1]; pl["max_completion_tokens"] != 1.0 || pl["max_tokens"] != 1.0 || pl["min_tokens"] != nil {
		t.Fatalf("prefill leg of a max_completion_tokens request: %v", pl)
	}
	if dl := d.seen()[1]; dl["max_completion_tokens"] != 9.0 || dl["stream"] != nil || dl["min_tokens"] != 4.0 {
		t.Fatalf("decode leg of a max_completion_tokens request: %v", dl)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPDModes(t *testing.T) {
	long := `{"model":"m","prompt":"` + strings.Repeat("a long prompt ", 200) + `","stream":true}`
	short := `{"model":"m","prompt":"hi","stream":true}`
	for _, tc := range []struct {
		name        string
		cfg         PDConfig
		body        string
		split       bool
		decodeLoads int     // streams already decoding on the decode engine (negative: and two waiting)
		decodeHolds int     // blocks of the prompt the decode engine holds (index)
		decodeKV    float64 // the decode engine's scraped KV usage with the waiting requests
	}{
		{"never", PDConfig{Mode: disagg.Never}, long, false, 0, 0, 0},
		{"always-short", PDConfig{Mode: disagg.Always}, short, true, 0, 0, 0},
		{"threshold-short", PDConfig{Mode: disagg.Threshold, ThresholdTokens: 100}, short, false, 0, 0, 0},
		{"threshold-long", PDConfig{Mode: disagg.Threshold, ThresholdTokens: 100}, long, true, 0, 0, 0},
		// Auto: an idle decode engine serves it whole (the transfer would cost more than it
		// saves); one with streams decoding would stall them for the prefill: split. A short
		// prompt stalls them too little to pay for the transfer and the hop, and a long one
		// the decode engine holds already costs it almost no prefill: both stay whole.
		{"auto-idle", PDConfig{WholeOn: WholeOnDecode}, long, false, 0, 0, 0},
		{"auto-busy", PDConfig{WholeOn: WholeOnDecode}, long, true, 8, 0, 0},
		{"auto-busy-short", PDConfig{WholeOn: WholeOnDecode}, short, false, 8, 0, 0},
		{"auto-busy-cached", PDConfig{WholeOn: WholeOnDecode}, long, false, 8, 1000, 0},
		// A decode engine whose own queue waits for memory would hold the decode leg there too;
		// requests waiting on one with room in its cache (decode legs pulling their KV cache)
		// do not make it full.
		{"auto-busy-decode-full", PDConfig{WholeOn: WholeOnDecode}, long, false, -8, 0, 0.9},
		{"auto-busy-decode-waiting", PDConfig{WholeOn: WholeOnDecode}, long, true, -8, 0, 0.3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, d := newPDEngine(t, "p0", discovery.RolePrefill), newPDEngine(t, "d0", discovery.RoleDecode)
			var idx Index
			if tc.decodeHolds > 0 {
				idx = &fakeIndex{holds: map[string]int{"d0": tc.decodeHolds}}
			}
			h := newPDHarness(t, Config{PD: tc.cfg}, idx, p, d)
			for range abs(tc.decodeLoads) {
				h.tracker.Dispatch("d0", 0, 10).FirstToken()
			}
			if tc.decodeLoads < 0 {
				h.tracker.RecordScrape("d0", loadsignal.EngineMetrics{Running: float64(-tc.decodeLoads), Waiting: 2,
					KVUsage: tc.decodeKV}, time.Now())
			}
			resp, body := h.post(t, "/v1/completions", tc.body, nil)
			if resp.StatusCode != 200 || body != wantStream {
				t.Fatalf("%d %q", resp.StatusCode, body)
			}
			split := resp.Header.Get(PrefillEndpointHeader) == "p0"
			if split != tc.split {
				t.Fatalf("split %v, want %v (prefill saw %d, decode %d)", split, tc.split, len(p.seen()), len(d.seen()))
			}
			for _, e := range []*pdEngine{p, d} {
				for _, b := range e.seen() {
					if hasParams(b) != split {
						t.Fatalf("%s got kv_transfer_params %v on a split=%v request", e.name, b["kv_transfer_params"], split)
					}
				}
			}
			ds := h.srv.Status().Disaggregation
			if (ds.SplitRequests == 1) != tc.split || ds.SplitRequests+ds.WholeRequests != 1 {
				t.Fatalf("counts: %+v", ds)
			}
		})
	}
}

func TestPDPrefillFailureServesWhole(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(p *pdEngine)
	}{
		{"5xx", func(p *pdEngine) { p.prefillStatus = 503 }},
		{"no-params", func(p *pdEngine) { p.prefillNoParams = true }},
		{"timeout", func(p *pdEngine) { p.prefillHang = 10 * time.Second }},
		{"down", func(p *pdEngine) { p.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, d := newPDEngine(t, "p0", discovery.RolePrefill), newPDEngine(t, "d0", discovery.RoleDecode)
			cfg := Config{PD: PDConfig{Mode: disagg.Always, WholeOn: WholeOnDecode},
				TTFBWatchdogFloor: 100 * time.Millisecond, TTFBWatchdogCap: 200 * time.Millisecond}
			h := newPDHarness(t, cfg, nil, p, d)
			tc.fault(p)
			start := time.Now()
			resp, body := h.post(t, "/v1/completions", pdStream, nil)
			if resp.StatusCode != 200 || body != wantStream {
				t.Fatalf("client got %d %q, want the whole answer", resp.StatusCode, body)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("fallback took %v", took)
			}
			if resp.Header.Get(PrefillEndpointHeader) != "" || resp.Header.Get(EndpointHeader) != "d0" {
				t.Fatalf("headers %v", resp.Header)
			}
			ds := d.seen()
			if len(ds) != 1 || hasParams(ds[0]) {
				t.Fatalf("decode engine got %v, want the client's request whole", ds)
			}
			if st := h.srv.Status().Disaggregation; st.Fallbacks != 1 {
				t.Fatalf("fallbacks %d", st.Fallbacks)
			}
			if v := counterValue(t, h.srv.pd.fallbacks.WithLabelValues(legPrefill)); v != 1 {
				t.Fatalf("kvrouter_pd_fallbacks_total{leg=prefill} = %v", v)
			}
			if st := h.tracker.Stats("p0"); st.InFlight != 0 {
				t.Fatalf("prefill engine still charged: %+v", st)
			}
		})
	}
}

// A prefill leg the prefill engine refuses as bad is served whole: the leg's body is the
// router's, not the client's, and a request that is really bad gets the engine's own refusal
// from the whole attempt.
func TestPDPrefillRefusalServesWhole(t *testing.T) {
	for _, code := range []int{400, 413, 422} {
		p, d := newPDEngine(t, "p0", discovery.RolePrefill), newPDEngine(t, "d0", discovery.RoleDecode)
		p.prefillStatus = code
		h := newPDHarness(t, Config{PD: PDConfig{Mode: disagg.Always, WholeOn: WholeOnDecode}}, nil, p, d)
		resp, body := h.post(t, "/v1/completions", pdStream, nil)
		if resp.StatusCode != 200 || body != wantStream {
			t.Fatalf("prefill leg refused with %d: client got %d %q, want the whole answer", code, resp.StatusCode, body)
		}
		if ds := d.seen(); len(ds) != 1 || hasParams(ds[0]) || resp.Header.Get(PrefillEndpointHeader) != "" {
			t.Fatalf("prefill leg refused with %d: decode engine got %v, headers %v", code, ds, resp.Header)
		}
		if h.srv.pd.fallPrefill.Load() != 1 {
			t.Fatalf("prefill leg refused with %d: %d prefill fallbacks, want 1", code, h.srv.pd.fallPrefill.Load())
		}
	}
	// A request the engines refuse whole too gets their answer, as in an aggregated fleet.
	p, d := newPDEngine(t, "p0", discovery.RolePrefill), newPDEngine(t, "d0", discovery.RoleDecode)
	h := newPDHarness(t, Config{PD: PDConfig{Mode: disagg.Always, WholeOn: WholeOnDecode}}, nil, p, d)
	p.prefillStatus = 400
	d.refuseAll = 400
	resp, body := h.post(t, "/v1/completions", pdStream, nil)
	if resp.StatusCode != 400 {
		t.Fatalf("a request refused by every engine: %d %q, want 400", resp.StatusCode, body)
	}
	if _, msg := decodeError(t, body); msg != "refused by d0" {
		t.Fatalf("error %q, want the whole attempt's", msg)
	}
}

func TestPDDecodeUnreachableRetriedWhole(t *testing.T) {
	p, d := newPDEngine(t, "p0", discovery.RolePrefill), newPDEngine(t, "d0", discovery.RoleDecode)
	// A decode engine that refuses connections: the retry goes whole to another engine.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + ln.Addr().String()
	ln.Close()
	cfg := Config{PD: PDConfig{Mode: disagg.Always}, Policy: configBlock4()}
	tr := loadsignal.NewTracker()
	s := New(cfg, logr.Discard(), nil, nil, tr, prometheus.NewRegistry())
	s.SetEndpoints([]discovery.Endpoint{{Name: "p0", URL: p.URL, Ready: true, Role: discovery.RolePrefill},
		{Name: "d0", URL: deadURL, Ready: true, Role: discovery.RoleDecode}})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	h := &harness{srv: s, http: srv, tracker: tr}
	resp, body := h.post(t, "/v1/completions", pdStream, nil)
	if resp.StatusCode != 200 || body != wantStream {
		t.Fatalf("client got %d %q", resp.StatusCode, body)
	}
	ps := p.seen()
	if len(ps) != 2 || !hasParams(ps[0]) || hasParams(ps[1]) || ps[1]["stream"] != true {
		t.Fatalf("prefill engine got %v: want the prefill leg, then the client's request whole", ps)
	}
	if resp.Header.Get(EndpointHeader) != "p0" || resp.Header.Get(PrefillEndpointHeader) != "" {
		t.Fatalf("headers %v", resp.Header)
	}
	if s.pd.fallDecode.Load() != 1 {
		t.Fatalf("decode fallbacks %d", s.pd.fallDecode.Load())
	}
	_ = d
}

// A client cannot drive the connector: its routing-sidecar header reaches no engine (an
// engine's pd-sidecar would act on it), nor do its own kv_transfer_params (an engine would hold
// the blocks for a remote decode, or pull from where they say), in either leg or whole.
func TestPDClientCannotDriveTheConnector(t *testing.T) {
	own := `{"model":"m","prompt":"the quick brown fox jumps over the lazy dog","stream":true,` +
		`"kv_transfer_params":{"do_remote_decode":true,"remote_host":"192.0.2.1"}}`
	for _, mode := range []disagg.Mode{disagg.Always, disagg.Never} {
		p, d := newPDEngine(t, "p0", discovery.RolePrefill), newPDEngine(t, "d0", discovery.RoleDecode)
		h := newPDHarness(t, Config{PD: PDConfig{Mode: mode, WholeOn: WholeOnDecode}}, nil, p, d)
		resp, body := h.post(t, "/v1/completions", own, map[string]string{PrefillerHeader: "192.0.2.1:80"})
		if resp.StatusCode != 200 || body != wantStream {
			t.Fatalf("%s: %d %q", mode, resp.StatusCode, body)
		}
		for _, e := range []*pdEngine{p, d} {
			e.mu.Lock()
			for _, v := range e.prefillers {
				if v != "" {
					t.Errorf("%s: %s got the client's %s %q", mode, e.name, PrefillerHeader, v)
				}
			}
			for _, b := range e.bodies {
				kv, _ := b["kv_transfer_params"].(map[string]any)
				if kv["remote_host"] == "192.0.2.1" {
					t.Errorf("%s: %s got the client's kv_transfer_params", mode, e.name)
				}
			}
			e.mu.Unlock()
		}
		if ds := d.seen(); len(ds) != 1 || hasParams(ds[0]) != (mode == disagg.Always) {
			t.Fatalf("%s: decode engine got %v", mode, ds)
		}
	}
}

// A decode leg's first token waits for the KV pull: the TTFB watchdog allows the learned
// transfer time for it, rather than eject an idle decode engine as hung and redo the request.
func TestPDDecodeDeadlineAllowsTheTransfer(t *testing.T) {
	p, d := newPDEngine(t, "p0", discovery.RolePrefill), newPDEngine(t, "d0", discovery.RoleDecode)
	d.decodeDelay = 500 * time.Millisecond
	cfg := Config{PD: PDConfig{Mode: disagg.Always}, TTFBWatchdogFloor: 100 * time.Millisecond, TTFBWatchdogCap: 10 * time.Second}
	h := newPDHarness(t, cfg, nil, p, d)
	// Transfers have been measured at 0.1 s per block: the prompt's 10 blocks take about 1 s.
	h.srv.policyMu.Lock()
	for range 50 {
		h.srv.pd.est.ObserveTransfer(5, 0.5)
		h.srv.pd.est.ObserveTransfer(20, 2)
	}
	h.srv.policyMu.Unlock()
	resp, body := h.post(t, "/v1/completions", pdStream, nil)
	if resp.StatusCode != 200 || body != wantStream {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if resp.Header.Get(EndpointHeader) != "d0" || resp.Header.Get(PrefillEndpointHeader) != "p0" || h.srv.pd.fallDecode.Load() != 0 {
		t.Fatalf("the decode leg was given up on: served by %q (prefill %q), %d decode fallbacks",
			resp.Header.Get(EndpointHeader), resp.Header.Get(PrefillEndpointHeader), h.srv.pd.fallDecode.Load())
	}
}

func TestPDUnsplitFleetUntouched(t *testing.T) {
	a, b := newPDEngine(t, "a", ""), newPDEngine(t, "b", "")
	h := newPDHarness(t, Config{PD: PDConfig{Mode: disagg.Always}}, nil, a, b)
	for range 4 {
		resp, body := h.post(t, "/v1/completions", pdStream, nil)
		if resp.StatusCode != 200 || body != wantStream || resp.Header.Get(PrefillEndpointHeader) != "" {
			t.Fatalf("%d %q %v", resp.StatusCode, body, resp.Header)
		}
	}
	for _, e := range []*pdEngine{a, b} {
		for _, body := range e.seen() {
			if hasParams(body) {
				t.Fatalf("%s got kv_transfer_params in an aggregated fleet", e.name)
			}
		}
	}
	if d := h.srv.Status().Disaggregation; d != nil {
		t.Fatalf("status shows disaggregation in an aggregated fleet: %+v", d)
	}
	// Decode-role engines alone do not split either: nothing to prefill on.
	d0 := newPDEngine(t, "d0", discovery.RoleDecode)
	h = newPDHarness(t, Config{PD: PDConfig{Mode: disagg.Always}}, nil, d0)
	if resp, _ := h.post(t, "/v1/completions", pdStream, nil); resp.Header.Get(PrefillEndpointHeader) != "" || hasParams(d0.seen()[0]) {
		t.Fatalf("split without a prefill engine")
	}
}

func TestPDPickerNamesPrefiller(t *testing.T) {
	p, d := newPDEngine(t, "p0", discovery.RolePrefill), newPDEngine(t, "d0", discovery.RoleDecode)
	h := newPDHarness(t, Config{PD: PDConfig{Mode: disagg.Always}}, nil, p, d)
	f, ref := h.srv.Pick(context.Background(), PickInput{Method: http.MethodPost, Path: "/v1/completions",
		Header: http.Header{}, Body: []byte(pdStream)})
	if ref != nil {
		t.Fatalf("refused: %d %s", ref.Status, ref.Body)
	}
	if f.Destinations[0] != urlHostPort(d.URL) || f.SetHeaders.Get(PrefillerHeader) != urlHostPort(p.URL) {
		t.Fatalf("destinations %v, prefiller %q", f.Destinations, f.SetHeaders.Get(PrefillerHeader))
	}
	if f.Endpoint() != "d0" || f.PrefillEndpoint() != "p0" {
		t.Fatalf("endpoint %q prefill %q", f.Endpoint(), f.PrefillEndpoint())
	}
	if h.tracker.Stats("p0").InFlight != 1 || h.tracker.Stats("d0").InFlight != 1 {
		t.Fatal("each leg is charged to its engine")
	}
	// The prompt's prefill is the prefill engine's queue, not the decode engine's too.
	if pq, dq := h.tracker.Stats("p0").QueuedPrefillTokens, h.tracker.Stats("d0").QueuedPrefillTokens; pq < 10 || dq > 1 {
		t.Fatalf("queued prefill tokens: prefill engine %d, decode engine %d", pq, dq)
	}
	f.ResponseHeaders(200)
	f.ResponseBody([]byte("data: x\n\n"), false)
	if h.tracker.Stats("p0").InFlight != 0 {
		t.Fatal("the prefill leg is still charged after the decode leg's first byte")
	}
	f.ResponseBody(nil, true)
	if h.tracker.Stats("d0").InFlight != 0 {
		t.Fatal("the decode leg is still charged after the end")
	}
	// Never: no header.
	h = newPDHarness(t, Config{PD: PDConfig{Mode: disagg.Never}}, nil, p, d)
	f, _ = h.srv.Pick(context.Background(), PickInput{Method: http.MethodPost, Path: "/v1/completions",
		Header: http.Header{}, Body: []byte(pdStream)})
	if f.SetHeaders.Get(PrefillerHeader) != "" {
		t.Fatalf("whole request named a prefiller")
	}
	f.Done()
}

func TestPDSidecar(t *testing.T) {
	p, d := newPDEngine(t, "p0", discovery.RolePrefill), newPDEngine(t, "d0", "")
	s := New(Config{Policy: configBlock4()}, logr.Discard(), nil, nil, loadsignal.NewTracker(), prometheus.NewRegistry())
	s.SetEndpoints([]discovery.Endpoint{{Name: "local", URL: d.URL, Ready: true}})
	srv := httptest.NewServer(s.SidecarHandler())
	defer srv.Close()
	h := &harness{srv: s, http: srv}
	// Without the header: the request goes to the engine as it came.
	resp, body := h.post(t, "/v1/completions", pdStream, nil)
	if resp.StatusCode != 200 || body != wantStream || len(p.seen()) != 0 || hasParams(d.seen()[0]) {
		t.Fatalf("plain request: %d %q", resp.StatusCode, body)
	}
	// With it: prefill there, decode here.
	resp, body = h.post(t, "/v1/completions", pdStream, map[string]string{PrefillerHeader: urlHostPort(p.URL)})
	if resp.StatusCode != 200 || body != wantStream {
		t.Fatalf("split request: %d %q", resp.StatusCode, body)
	}
	ps, ds := p.seen(), d.seen()
	if len(ps) != 1 || ps[0]["max_tokens"] != 1.0 || ps[0]["stream"] != false || !hasParams(ps[0]) {
		t.Fatalf("prefill leg: %v", ps)
	}
	if kv, _ := ds[1]["kv_transfer_params"].(map[string]any); kv["remote_engine_id"] != "p0" || ds[1]["stream"] != true {
		t.Fatalf("decode leg: %v", ds[1])
	}
	// A prefill engine that fails: served whole here.
	p.mu.Lock()
	p.prefillStatus = 500
	p.mu.Unlock()
	resp, body = h.post(t, "/v1/completions", pdStream, map[string]string{PrefillerHeader: urlHostPort(p.URL)})
	if resp.StatusCode != 200 || body != wantStream || hasParams(d.seen()[2]) {
		t.Fatalf("fallback: %d %q", resp.StatusCode, body)
	}
	// Other paths pass through.
	r, err := http.Get(srv.URL + "/v1/models")
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("models: %v %v", r, err)
	}
	r.Body.Close()
	// The sidecar is no relay: only an engine's ip:port is a prefill engine.
	before := len(d.seen())
	for _, bad := range []string{"not an address", "example.com:80", "evil.example/x?:80", "169.254.169.254:80",
		"[fe80::1%eth0]:80", "0.0.0.0:80", "224.0.0.1:80", "127.0.0.1:0", "127.0.0.1:http"} {
		resp, _ = h.post(t, "/v1/completions", pdStream, map[string]string{PrefillerHeader: bad})
		if resp.StatusCode != 400 {
			t.Fatalf("prefiller %q: %d, want 400", bad, resp.StatusCode)
		}
	}
	if len(d.seen()) != before || len(p.seen()) != 2 {
		t.Fatalf("a refused prefiller header reached an engine")
	}
}

func TestPDAutoscaleByRole(t *testing.T) {
	p, d1, d2 := newPDEngine(t, "p0", discovery.RolePrefill), newPDEngine(t, "d1", discovery.RoleDecode), newPDEngine(t, "d2", discovery.RoleDecode)
	h := newPDHarness(t, Config{}, nil, p, d1, d2)
	h.tracker.Dispatch("p0", 10, 100)
	h.tracker.Dispatch("d1", 10, 30)
	get := func(q string) (int, routerapi.Autoscale) {
		r, err := http.Get(h.admin.URL + "/v1/autoscale" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var a routerapi.Autoscale
		_ = json.NewDecoder(r.Body).Decode(&a)
		return r.StatusCode, a
	}
	if c, a := get(""); c != 200 || a.Endpoints != 3 || a.TokensInFlight != 130 {
		t.Fatalf("fleet: %d %+v", c, a)
	}
	if c, a := get("?role=prefill"); c != 200 || a.Endpoints != 1 || a.TokensInFlight != 100 {
		t.Fatalf("prefill: %d %+v", c, a)
	}
	if c, a := get("?role=decode"); c != 200 || a.Endpoints != 2 || a.TokensInFlight != 30 {
		t.Fatalf("decode: %d %+v", c, a)
	}
	if c, _ := get("?role=both"); c != 400 {
		t.Fatalf("unknown role: %d", c)
	}
	pools := h.srv.Status().Disaggregation.Pools
	if pools["prefill"].Engines != 1 || pools["decode"].ReadyEngines != 2 || pools["prefill"].InFlight != 1 {
		t.Fatalf("pools %+v", pools)
	}
}

// configBlock4 is the tests' policy: 4-token blocks.
func configBlock4() policy.Config { return policy.Config{BlockSize: 4} }

// The split decision evaluates its options without moving the policy: round-robin advances
// once per request, for the placement chosen, whether the request is split or whole.
func TestPDRoundRobinAdvancesOncePerRequest(t *testing.T) {
	rr := policy.Config{Kind: policy.RoundRobin, BlockSize: 4}
	// Never split (the threshold is out of reach) but priced every time: the whole requests
	// take turns over the three engines, one each per round.
	p0, d0, d1 := newPDEngine(t, "p0", discovery.RolePrefill), newPDEngine(t, "d0", discovery.RoleDecode), newPDEngine(t, "d1", discovery.RoleDecode)
	h := newPDHarness(t, Config{Policy: rr, PD: PDConfig{Mode: disagg.Threshold, ThresholdTokens: 1 << 20}}, nil, p0, d0, d1)
	served := map[string]int{}
	for range 6 {
		resp, body := h.post(t, "/v1/completions", pdStream, nil)
		if resp.StatusCode != 200 || body != wantStream || resp.Header.Get(PrefillEndpointHeader) != "" {
			t.Fatalf("%d %q %v", resp.StatusCode, body, resp.Header)
		}
		served[resp.Header.Get(EndpointHeader)]++
	}
	if served["p0"] != 2 || served["d0"] != 2 || served["d1"] != 2 {
		t.Fatalf("whole requests served %v, want two on each engine", served)
	}
	// Always split: the prefill legs take turns over the prefill pool.
	p0, p1, d0 := newPDEngine(t, "p0", discovery.RolePrefill), newPDEngine(t, "p1", discovery.RolePrefill), newPDEngine(t, "d0", discovery.RoleDecode)
	h = newPDHarness(t, Config{Policy: rr, PD: PDConfig{Mode: disagg.Always}}, nil, p0, p1, d0)
	var legs []string
	for range 4 {
		resp, _ := h.post(t, "/v1/completions", pdStream, nil)
		legs = append(legs, resp.Header.Get(PrefillEndpointHeader))
	}
	if legs[0] == legs[1] || legs[0] != legs[2] || legs[1] != legs[3] || legs[0] == "" {
		t.Fatalf("prefill legs on %v, want them alternating over p0 and p1", legs)
	}
}

func abs(n int) int { return max(n, -n) }
