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

package server

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/internal/sim/engine"
)

// Requests whose max_tokens could never run, or is not an integer, are refused with vLLM's 400
// (type BadRequestError, param max_tokens) and never reach the engine; several of them at once
// leave the engine serving. Before, 2^63-1 wrapped the context check and overflowed the
// delivery channel's size, killing the connection.
func TestPoisonMaxTokens(t *testing.T) {
	f := start(t, nil) // max model len 4096
	const ctxMsg = "This model's maximum context length is 4096 tokens. However, you requested "
	for _, c := range []struct {
		field, value, msg string
	}{
		{"max_tokens", "9223372036854775807", ctxMsg},
		{"max_tokens", "18446744073709551616", ctxMsg},
		{"max_tokens", "1" + strings.Repeat("0", 5000), ctxMsg},
		{"max_tokens", "1e9", ctxMsg + "1000000"},
		{"max_tokens", "1e400", "finite"},
		{"max_tokens", "4097", ctxMsg},
		{"max_tokens", "-1", "max_tokens must be at least 1, got -1."},
		{"max_tokens", "-9223372036854775808", "max_tokens must be at least 1"},
		{"max_tokens", "0", "max_tokens must be at least 1, got 0."},
		{"max_tokens", "1.5", "fractional part"},
		{"max_tokens", "true", "valid integer"},
		{"max_tokens", `[8]`, "valid integer"},
		{"max_completion_tokens", "9223372036854775807", ctxMsg},
		{"max_completion_tokens", "2.5", "fractional part"},
	} {
		path, body := "/v1/completions", fmt.Sprintf(`{"prompt":"hi","%s":%s}`, c.field, c.value)
		if c.field == "max_completion_tokens" {
			path, body = "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"hi"}],"%s":%s}`, c.field, c.value)
		}
		status, resp := post(t, f.url+path, body)
		e, _ := resp["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if status != 400 || e["type"] != "BadRequestError" || e["param"] != "max_tokens" || !strings.Contains(msg, c.msg) {
			t.Errorf("%s=%.40s: %d %v", c.field, c.value, status, resp)
		}
	}
	// Integral floats are integers to vLLM (Python's json reads 8.0 and 1e1 as floats, pydantic
	// takes them as ints); null means unset.
	for _, v := range []string{"8.0", "1e1", "null"} {
		if status, resp := post(t, f.url+"/v1/completions", `{"prompt":"hi","max_tokens":`+v+`}`); status != 200 {
			t.Errorf("max_tokens %s: %d %v", v, status, resp)
		}
	}
	// Poison requests in parallel with ordinary ones: every poison gets its 400, every
	// ordinary request its answer.
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, want := `{"prompt":"hi","max_tokens":9223372036854775807}`, 400
			if i%2 == 1 {
				body, want = `{"prompt":"hello there","max_tokens":4}`, 200
			}
			if status, resp := post(t, f.url+"/v1/completions", body); status != want {
				errs <- fmt.Sprintf("%s: %d %v", body, status, resp)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// The largest max_tokens that fits runs to the context length and no further.
	status, resp := post(t, f.url+"/v1/completions", `{"prompt":"hi","max_tokens":4000}`)
	if status != 200 {
		t.Fatalf("max_tokens 4000: %d %v", status, resp)
	}
}

// The simulator's own routes (/sim/*) and /reset_prefix_cache are not served unless asked for:
// a deployed engine has none of them (vLLM serves /reset_prefix_cache only in dev mode), and
// whoever reaches the port could otherwise inject faults or list the cache's blocks.
func TestSimRoutesOffByDefault(t *testing.T) {
	routes := []struct{ method, path string }{
		{http.MethodGet, "/sim/faults"}, {http.MethodPost, "/sim/faults"}, {http.MethodGet, "/sim/stats"},
		{http.MethodGet, "/sim/cache"}, {http.MethodPost, "/reset_prefix_cache"},
	}
	call := func(url, method, path string) int {
		t.Helper()
		req, _ := http.NewRequest(method, url+path, strings.NewReader(`{}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		name           string
		simAPI, devAPI bool
		served         map[string]bool
	}{
		{"default", false, false, map[string]bool{}},
		{"dev mode", false, true, map[string]bool{"/reset_prefix_cache": true}},
		{"sim api", true, false, map[string]bool{"/sim/faults": true, "/sim/stats": true, "/sim/cache": true, "/reset_prefix_cache": true}},
	} {
		f := start(t, func(_ *engine.Config, o *Options) { o.SimAPI, o.ResetPrefixCache = c.simAPI, c.devAPI })
		for _, r := range routes {
			got := call(f.url, r.method, r.path)
			if served := got != http.StatusNotFound; served != c.served[r.path] {
				t.Errorf("%s: %s %s answered %d", c.name, r.method, r.path, got)
			}
		}
	}
}
