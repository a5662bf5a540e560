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
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/policy"
)

func reportPercentiles(b *testing.B, durs []time.Duration, prefix string) {
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds())/1e6, prefix+"p50-ms")
	b.ReportMetric(float64(durs[len(durs)*99/100].Nanoseconds())/1e6, prefix+"p99-ms")
}

// BenchmarkRoutingDecision is the routing target: an 8K-token prompt (tokens given) over 16
// endpoints, through the router's decide path (load snapshot, readiness, exact-index lookup with
// keys computed from the tokens, policy). Endpoint i holds the first 32·(i+1) blocks of the
// prompt (i.e. up to all 512), and some have load, so nothing ends early.
func BenchmarkRoutingDecision(b *testing.B) {
	const blockSize, nEnd, nBlocks = 16, 16, 512
	prompt := make([]uint32, nBlocks*blockSize)
	for i := range prompt {
		prompt[i] = uint32(i*7919) % 151000
	}
	ix := kvindex.New(kvindex.Config{BlockSize: blockSize})
	var eps []discovery.Endpoint
	tr := loadsignal.NewTracker()
	for e := 0; e < nEnd; e++ {
		name := fmt.Sprintf("engine-%02d", e)
		eps = append(eps, discovery.Endpoint{Name: name, URL: "http://127.0.0.1:1", Ready: true})
		n := 32 * (e + 1)
		ev := kvevents.Event{Kind: kvevents.KindBlockStored, BlockSize: blockSize, TokenIDs: prompt[:n*blockSize]}
		for j := 0; j < n; j++ {
			ev.BlockHashes = append(ev.BlockHashes, uint64(e)<<32|uint64(j)+1)
		}
		ix.Apply(kvindex.SourceID{Endpoint: name}, &kvevents.Batch{Events: []kvevents.Event{ev}})
		for k := 0; k < e%4; k++ {
			tr.Dispatch(name, 2000, 3000)
		}
	}
	s := New(Config{Policy: policy.Config{Kind: policy.Auto, BlockSize: blockSize}}, logr.Discard(), ix, nil, tr, nil)
	s.SetEndpoints(eps)
	t := s.tbl.Load()
	req := policy.Request{PromptTokens: len(prompt), Tokenized: true, MaxTokens: 200, TieBreak: 1}
	keys := kvindex.RequestKeys(nil, prompt, blockSize, kvindex.KeyParams{})
	if d, _ := s.decide(t, req, keys); d.Endpoint == "" || d.CachedTokens == 0 {
		b.Fatalf("decision %+v", d)
	}
	durs := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		// Keys are computed per request, as the handler does (once, for lookup and predict).
		keys = kvindex.RequestKeys(keys[:0], prompt, blockSize, kvindex.KeyParams{})
		s.decide(t, req, keys)
		durs = append(durs, time.Since(t0))
	}
	b.StopTimer()
	reportPercentiles(b, durs, "")
}

// BenchmarkPolicyPick is the policy alone over 16 endpoints.
func BenchmarkPolicyPick(b *testing.B) {
	p := policy.New(policy.Config{})
	eps := make([]policy.Endpoint, 16)
	for i := range eps {
		eps[i] = policy.Endpoint{Name: fmt.Sprint("e", i), Ready: true,
			Load: policy.Load{InFlight: i % 5, QueuedPrefillTokens: 1000 * (i % 7)}, Cached: policy.Cached{GPU: 512 * i}}
	}
	req := policy.Request{PromptTokens: 8192, Tokenized: true, MaxTokens: 200}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		req.TieBreak = uint64(i)
		p.Pick(req, eps)
	}
}

// BenchmarkProxyOverhead compares a non-streaming completion sent straight to an engine with the
// same request through the router (tokenize on the engine, lookup, pick, forward). The engine
// is an in-process stub that answers at once, so the difference is the router's cost.
// Sub-benchmarks: "text" (the router calls /tokenize: unique prompts, no cache hit) and "ids"
// (token-id prompts: no tokenize call).
func BenchmarkProxyOverhead(b *testing.B) {
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/tokenize":
			_, _ = io.WriteString(w, `{"count":4,"tokens":[1,2,3,4]}`)
		case "/v1/models":
			_, _ = io.WriteString(w, `{"data":[{"id":"m"}]}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"x","object":"text_completion","choices":[{"text":"ok"}]}`)
		}
	}))
	defer eng.Close()
	tr := loadsignal.NewTracker()
	ix := kvindex.New(kvindex.Config{BlockSize: 16})
	s := New(Config{Model: "m", Policy: policy.Config{BlockSize: 16}}, logr.Discard(), ix, nil, tr, nil)
	s.SetEndpoints([]discovery.Endpoint{{Name: "e0", URL: eng.URL, Ready: true}})
	rt := httptest.NewServer(s.Handler())
	defer rt.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	call := func(url, body string) time.Duration {
		t0 := time.Now()
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(t0)
	}
	for _, mode := range []string{"text", "ids"} {
		b.Run(mode, func(b *testing.B) {
			direct := make([]time.Duration, 0, b.N)
			routed := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				body := fmt.Sprintf(`{"model":"m","prompt":"request %d about something","max_tokens":1}`, i)
				if mode == "ids" {
					body = fmt.Sprintf(`{"model":"m","prompt":[%d,2,3,4,5,6,7,8],"max_tokens":1}`, i)
				}
				direct = append(direct, call(eng.URL+"/v1/completions", body))
				routed = append(routed, call(rt.URL+"/v1/completions", body))
			}
			b.StopTimer()
			slices.Sort(direct)
			slices.Sort(routed)
			n := len(direct)
			b.ReportMetric(float64((routed[n/2]-direct[n/2]).Nanoseconds())/1e6, "added-p50-ms")
			b.ReportMetric(float64((routed[n*99/100]-direct[n*99/100]).Nanoseconds())/1e6, "added-p99-ms")
			b.ReportMetric(float64(direct[n/2].Nanoseconds())/1e6, "direct-p50-ms")
			b.ReportMetric(float64(routed[n*99/100].Nanoseconds())/1e6, "routed-p99-ms")
		})
	}
}
