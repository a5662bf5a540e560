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

package main

// End-to-end tests: real vllm-sim processes and a real router process, file discovery, loopback
// only (test/fleettest starts them; the binaries are built once in TestMain).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/routerapi"
	"github.com/kvrouter/kvrouter/test/fleettest"
)

func TestMain(m *testing.M) { fleettest.Main(m, "kvbench") }

// post sends a JSON body and returns the response with its body read.
func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// prompt is a long shared prefix plus a distinct question.
func prompt(prefix string, words int, q int) string {
	return strings.Repeat(prefix+" ", words) + fmt.Sprintf("question number %d please", q)
}

// fleetOf starts n engines named e0, e1, ...
func fleetOf(t *testing.T, n int, timeScale string) []*fleettest.Engine {
	var es []*fleettest.Engine
	for i := 0; i < n; i++ {
		es = append(es, fleettest.StartEngine(t, fmt.Sprintf("e%d", i), timeScale))
	}
	return es
}

func TestE2ESamePrefixSticks(t *testing.T) {
	fleettest.NeedBinaries(t)
	es := fleetOf(t, 4, "1")
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, es))
	r.WaitConnected(t, 4)
	holders := map[string]int{}
	for i := 0; i < 8; i++ {
		resp, body := post(t, r.URL+"/v1/completions", fleettest.Completion(prompt("alpha", 400, i), 4, false))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		holders[resp.Header.Get("X-Kvrouter-Endpoint")]++
		if i == 0 {
			// Let the first request's blocks arrive as events (predictions cover the gap
			// meanwhile; this makes the test about the exact index).
			time.Sleep(300 * time.Millisecond)
		}
	}
	if len(holders) != 1 {
		t.Fatalf("same-prefix requests spread over %v", holders)
	}
	st := r.Status(t)
	if st.Router.Decisions["prefix"] != 7 || st.Router.RoutedHitRate < 0.8 {
		t.Fatalf("router stats %+v", st.Router)
	}
	// Other prefixes go elsewhere (by load) rather than piling onto the holder.
	others := map[string]bool{}
	for i := 0; i < 6; i++ {
		resp, _ := post(t, r.URL+"/v1/completions", fleettest.Completion(prompt(fmt.Sprintf("topic%d", i), 300, 0), 4, false))
		others[resp.Header.Get("X-Kvrouter-Endpoint")] = true
	}
	if len(others) < 2 {
		t.Fatalf("cold prefixes all went to %v", others)
	}
	// The engines confirm what the router predicted: the fleet hit rate shows up in status.
	r.WaitStatus(t, "engine hit rate", func(st routerapi.Status) bool { return st.Fleet.HitRateValid && st.Fleet.HitRate > 0.3 })
}

func TestE2ESaturatedHolderReleased(t *testing.T) {
	fleettest.NeedBinaries(t)
	// Slowed down 5×, so a burst queues up on the holder.
	es := fleetOf(t, 3, "0.2")
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, es))
	r.WaitConnected(t, 3)
	resp, _ := post(t, r.URL+"/v1/completions", fleettest.Completion(prompt("beta", 800, 0), 2, false))
	holder := resp.Header.Get("X-Kvrouter-Endpoint")
	time.Sleep(300 * time.Millisecond)
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for i := 1; i <= 30; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each request also brings its own 400 words to prefill, so the burst builds a real
			// prefill queue on the holder (a burst of cheap suffixes batches there for free and
			// is rightly kept: see internal/router/policy's saturated).
			p := prompt("beta", 800, i) + strings.Repeat(fmt.Sprintf(" detail%d", i), 400)
			resp, err := http.Post(r.URL+"/v1/completions", "application/json", strings.NewReader(fleettest.Completion(p, 2, false)))
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			got[resp.Header.Get("X-Kvrouter-Endpoint")]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if got[holder] < 5 || len(got) < 2 {
		t.Fatalf("holder %s; burst went %v: want most on the holder and the overflow released", holder, got)
	}
	if st := r.Status(t); st.Router.Decisions["saturated"] == 0 {
		t.Fatalf("no saturated decision: %+v", st.Router.Decisions)
	}
}

func TestE2EChatCompletionsAndStreaming(t *testing.T) {
	fleettest.NeedBinaries(t)
	es := fleetOf(t, 2, "1")
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, es), "--model", "m", "--session-header", "X-Session")
	// The router answers /health before its first probe marks the engines ready; a request sent
	// in between gets a 503 (seen once in CI on a loaded machine).
	r.WaitConnected(t, 2)
	chat := `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hi"}],"max_tokens":8}`
	resp, body := post(t, r.URL+"/v1/chat/completions", chat)
	if resp.StatusCode != 200 || !strings.Contains(body, `"choices"`) || resp.Header.Get("X-Kvrouter-Endpoint") == "" {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", strings.Replace(chat, `"max_tokens":8`, `"max_tokens":8,"stream":true`, 1)},
		{"/v1/completions", fleettest.Completion("once upon a time", 8, true)},
	} {
		resp, err := http.Post(r.URL+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("%s: content type %q", c.path, resp.Header.Get("Content-Type"))
		}
		sc := bufio.NewScanner(resp.Body)
		events, done := 0, false
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "data: ") {
				events++
				done = done || line == "data: [DONE]"
			}
		}
		resp.Body.Close()
		if events < 3 || !done {
			t.Fatalf("%s: %d events, done %v", c.path, events, done)
		}
	}
	st := r.Status(t)
	if st.Router.TokenizeFailures != 0 || st.Router.PromptTokens == 0 {
		t.Fatalf("router %+v", st.Router)
	}
	if m, _ := http.Get(r.AdminURL + "/metrics"); m != nil {
		b, _ := io.ReadAll(m.Body)
		m.Body.Close()
		if !strings.Contains(string(b), "kvrouter_routing_decisions_total") {
			t.Fatal("metrics lack kvrouter_routing_decisions_total")
		}
	}
}

func TestE2EFailoverOnKilledEngine(t *testing.T) {
	fleettest.NeedBinaries(t)
	es := fleetOf(t, 3, "1")
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, es))
	r.WaitConnected(t, 3)
	resp, _ := post(t, r.URL+"/v1/completions", fleettest.Completion(prompt("gamma", 300, 0), 2, false))
	holder := resp.Header.Get("X-Kvrouter-Endpoint")
	time.Sleep(300 * time.Millisecond)
	for _, e := range es {
		if e.Name == holder {
			e.Proc.Kill()
		}
	}
	// The next same-prefix request picks the dead holder, fails to connect, and is retried.
	for i := 1; i <= 5; i++ {
		resp, body := post(t, r.URL+"/v1/completions", fleettest.Completion(prompt("gamma", 300, i), 2, false))
		if resp.StatusCode != 200 || resp.Header.Get("X-Kvrouter-Endpoint") == holder {
			t.Fatalf("request %d after killing %s: %d from %q: %s", i, holder, resp.StatusCode,
				resp.Header.Get("X-Kvrouter-Endpoint"), body)
		}
	}
	st := r.WaitStatus(t, "dead engine unready", func(st routerapi.Status) bool {
		for _, e := range st.Endpoints {
			if e.Name == holder {
				return !e.Ready
			}
		}
		return false
	})
	if st.Router.Retries < 1 || st.ReadyEndpoints != 2 {
		t.Fatalf("retries %d ready %d", st.Router.Retries, st.ReadyEndpoints)
	}
}

func TestE2EBadInput(t *testing.T) {
	fleettest.NeedBinaries(t)
	es := fleetOf(t, 1, "1")
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, es), "--model", "m", "--max-body-bytes", "4096")
	for _, c := range []struct {
		name, path, body string
		code             int
	}{
		{"malformed JSON", "/v1/completions", `{"model": "m", "prompt": `, 400},
		{"missing model", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, 400},
		{"unknown model", "/v1/completions", `{"model":"gpt-9","prompt":"x"}`, 404},
		{"body too large", "/v1/completions", fleettest.Completion(strings.Repeat("x", 5000), 1, false), 413},
	} {
		resp, body := post(t, r.URL+c.path, c.body)
		var e struct {
			Error struct {
				Message, Type string
				Code          int
			}
		}
		if resp.StatusCode != c.code || json.Unmarshal([]byte(body), &e) != nil || e.Error.Message == "" || e.Error.Code != c.code {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, body)
		}
	}
	// No ready endpoint: 503 with Retry-After.
	unready := filepath.Join(t.TempDir(), "unready.yaml")
	_ = os.WriteFile(unready, []byte("endpoints:\n  - name: e0\n    url: "+es[0].URL+"\n    ready: false\n"), 0o644)
	r2 := fleettest.StartRouter(t, unready, "--model", "m", "--no-kv-events")
	resp, body := post(t, r2.URL+"/v1/completions", fleettest.Completion("x", 1, false))
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, `"error"`) {
		t.Fatalf("no ready endpoint: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if rr, _ := http.Get(r2.URL + "/ready"); rr == nil || rr.StatusCode != 503 {
		t.Fatal("/ready not 503 without ready endpoints")
	}
}

func TestE2ERouterRestartRebuildsIndexFromReplay(t *testing.T) {
	fleettest.NeedBinaries(t)
	es := fleetOf(t, 3, "1")
	file := fleettest.WriteEndpoints(t, es)
	r := fleettest.StartRouter(t, file)
	r.WaitConnected(t, 3)
	resp, _ := post(t, r.URL+"/v1/completions", fleettest.Completion(prompt("delta", 500, 0), 2, false))
	holder := resp.Header.Get("X-Kvrouter-Endpoint")
	r.WaitStatus(t, "events indexed", func(st routerapi.Status) bool { return st.Index != nil && st.Index.Entries > 0 })
	r.Proc.Kill()

	// A new router has no predictions and saw no live event: only replay can tell it.
	r2 := fleettest.StartRouter(t, file, "--predict-ttl", "1ms")
	r2.WaitStatus(t, "index rebuilt from replay", func(st routerapi.Status) bool { return st.Index != nil && st.Index.Entries > 20 })
	resp, body := post(t, r2.URL+"/v1/completions", fleettest.Completion(prompt("delta", 500, 1), 2, false))
	if resp.StatusCode != 200 || resp.Header.Get("X-Kvrouter-Endpoint") != holder {
		t.Fatalf("after restart went to %q (holder %s): %s", resp.Header.Get("X-Kvrouter-Endpoint"), holder, body)
	}
	if st := r2.Status(t); st.Router.Decisions["prefix"] != 1 {
		t.Fatalf("decisions %+v", st.Router.Decisions)
	}
}

func TestE2EEndpointsFileChangeWithoutRestart(t *testing.T) {
	fleettest.NeedBinaries(t)
	es := fleetOf(t, 2, "1")
	file := fleettest.WriteEndpoints(t, es[:1])
	r := fleettest.StartRouter(t, file)
	r.WaitStatus(t, "one endpoint", func(st routerapi.Status) bool { return st.ReadyEndpoints == 1 })
	tmp := fleettest.WriteEndpoints(t, es)
	data, _ := os.ReadFile(tmp)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r.WaitStatus(t, "two endpoints", func(st routerapi.Status) bool { return st.ReadyEndpoints == 2 })
}

// A replica added under load gets traffic as soon as it is ready, although it holds no prefix.
func TestE2EFreshEndpointGetsTraffic(t *testing.T) {
	fleettest.NeedBinaries(t)
	es := fleetOf(t, 3, "0.2")
	file := fleettest.WriteEndpoints(t, es[:2])
	r := fleettest.StartRouter(t, file)
	r.WaitConnected(t, 2)
	var mu sync.Mutex
	counts := map[string]int{}
	phase := 0 // 0: two engines, 1: the third is listed
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Two shared-prefix groups with long distinct questions (like the shared-prefix workload):
	// the holders' queues of uncached prefill grow with the load.
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := prompt(fmt.Sprintf("group%d", w%2), 600, 0) + strings.Repeat(fmt.Sprintf(" q%d-%d", w, i), 200)
				resp, err := http.Post(r.URL+"/v1/completions", "application/json", strings.NewReader(fleettest.Completion(p, 2, false)))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				if phase == 1 {
					counts[resp.Header.Get("X-Kvrouter-Endpoint")]++
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	data, _ := os.ReadFile(fleettest.WriteEndpoints(t, es))
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r.WaitStatus(t, "third endpoint ready", func(st routerapi.Status) bool { return st.ReadyEndpoints == 3 })
	mu.Lock()
	phase = 1
	mu.Unlock()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	total := 0
	for _, n := range counts {
		total += n
	}
	if total < 10 || counts["e2"]*6 < total {
		t.Fatalf("after scale-up the new engine got %d of %d requests (%v)", counts["e2"], total, counts)
	}
	t.Logf("after scale-up: %v", counts)
}
