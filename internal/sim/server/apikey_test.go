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
	"net/http"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/sim/engine"
)

func TestAPIKeyGuardsAllButPublicRoutes(t *testing.T) {
	f := start(t, func(_ *engine.Config, o *Options) { o.APIKeys = []string{"k1", "k2"} })
	call := func(method, path, auth string) int {
		t.Helper()
		var body *strings.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"model":"sim-model","prompt":"hi","max_tokens":1}`)
		} else {
			body = strings.NewReader("")
		}
		req, _ := http.NewRequest(method, f.url+path, body)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/v1/completions"}, {http.MethodGet, "/v1/models"}, {http.MethodPost, "/tokenize"},
		{http.MethodGet, "/kv_event_sources"}, {http.MethodGet, "/sim/faults"},
	} {
		if got := call(c.method, c.path, ""); got != http.StatusUnauthorized {
			t.Errorf("%s %s without a key: %d, want 401", c.method, c.path, got)
		}
		if got := call(c.method, c.path, "Bearer nope"); got != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong key: %d, want 401", c.method, c.path, got)
		}
		for _, k := range []string{"Bearer k1", "bearer k2"} {
			if got := call(c.method, c.path, k); got != http.StatusOK {
				t.Errorf("%s %s with %q: %d, want 200", c.method, c.path, k, got)
			}
		}
	}
	for _, path := range []string{"/health", "/ping", "/version", "/metrics"} {
		if got := call(http.MethodGet, path, ""); got != http.StatusOK {
			t.Errorf("GET %s without a key: %d, want 200 (public in vLLM)", path, got)
		}
	}
	if code, body := post(t, f.url+"/v1/completions", `{"model":"sim-model","prompt":"hi"}`); code != http.StatusUnauthorized || body["error"] != "Unauthorized" {
		t.Errorf("401 body %v, want vLLM's {\"error\": \"Unauthorized\"}", body)
	}
}
