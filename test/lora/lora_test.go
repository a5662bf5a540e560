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

// Package lora checks end to end that the router keeps each LoRA adapter's requests on the
// engines that have it loaded: real vllm-sim engines with LoRA on and one adapter slot each
// (vLLM's default --max-loras 1), two adapters, the real router. -short skips it.
package lora

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/proxy"
	"github.com/kvrouter/kvrouter/internal/routerapi"
	"github.com/kvrouter/kvrouter/test/fleettest"
)

func TestMain(m *testing.M) { fleettest.Main(m) }

func TestRequestsOfAnAdapterStayWithIt(t *testing.T) {
	fleettest.NeedBinaries(t)
	var es []*fleettest.Engine
	for i := range 4 {
		es = append(es, fleettest.StartEngine(t, fmt.Sprintf("e%d", i), "10",
			"--enable-lora", "--max-loras", "1", "--lora-modules", "sql=/adapters/sql", "chat=/adapters/chat"))
	}
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, es))
	r.WaitConnected(t, len(es))

	// One client per adapter, each sending its requests one after the other: the load stays
	// within every bound, so where the requests go is the adapters' doing. Every prompt is
	// unique, so no prefix holds them anywhere.
	const perAdapter = 16
	served := map[string]map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, adapter := range []string{"sql", "chat"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perAdapter {
				prompt := fmt.Sprintf("%s request %d: %s", adapter, i, strings.Repeat(fmt.Sprintf("word%d%s ", i, adapter), 40))
				ep, err := complete(r.URL, adapter, prompt)
				if err != nil {
					t.Errorf("%s request %d: %v", adapter, i, err)
					return
				}
				mu.Lock()
				if served[adapter] == nil {
					served[adapter] = map[string]int{}
				}
				served[adapter][ep]++
				mu.Unlock()
				// Spread over several of the router's scrapes (200 ms): the first requests are
				// routed before any scrape has reported the engines' adapter slots, the later
				// ones with them.
				time.Sleep(40 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	top := map[string]string{}
	for adapter, eps := range served {
		n, best := 0, 0
		for ep, c := range eps {
			n += c
			if c > best {
				best, top[adapter] = c, ep
			}
		}
		if n != perAdapter {
			t.Fatalf("%s: %d requests served, want %d", adapter, n, perAdapter)
		}
		// Round-robin would give each engine a quarter; one adapter slot per engine makes any
		// spread cost adapter swaps.
		if float64(best) < 0.75*perAdapter {
			t.Errorf("%s spread over the engines: %v", adapter, eps)
		}
	}
	if len(top) != 2 || top["sql"] == top["chat"] {
		t.Errorf("both adapters mostly on one engine with a single adapter slot: %v", served)
	}
	// What the router weighed is on /v1/status: every engine's one slot, scraped, and each
	// adapter believed loaded on some engine.
	r.WaitStatus(t, "every engine's adapter slots and both adapters loaded", func(st routerapi.Status) bool {
		loaded := map[string]bool{}
		for _, e := range st.Endpoints {
			if e.LoRA == nil || e.LoRA.Slots != 1 || e.LoRA.Error != "" {
				return false
			}
			for _, a := range e.LoRA.Loaded {
				loaded[a] = true
			}
		}
		return len(st.Endpoints) == 4 && loaded["sql"] && loaded["chat"]
	})
}

// complete sends one completion for model through the router and returns the engine that
// served it.
func complete(url, model, prompt string) (string, error) {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": 24})
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	var out struct{ Model string }
	if err := json.Unmarshal(data, &out); err != nil || out.Model != model {
		return "", fmt.Errorf("answer for model %q, want %q (%v)", out.Model, model, err)
	}
	return resp.Header.Get(proxy.EndpointHeader), nil
}
