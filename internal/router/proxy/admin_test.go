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
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/policy"
)

// TestAdminPathsOnlyOnAdminHandler: /metrics, /v1/status and /v1/autoscale are served on the
// admin handler, without a client key, and answer 404 on the public one even to a client that
// holds the key; inference is not served on the admin handler. The probes answer on both.
func TestAdminPathsOnlyOnAdminHandler(t *testing.T) {
	keys := openKeys(t, writeKeys(t, t.TempDir(), "keys", "client-key\n"))
	for _, c := range []struct {
		name string
		auth Auth
	}{{"no client key", Auth{}}, {"client key required", Auth{Clients: keys}}} {
		t.Run(c.name, func(t *testing.T) {
			e0 := newFakeEngine(t, "e0")
			reg := prometheus.NewRegistry()
			s := New(Config{Auth: c.auth, Policy: policy.Config{BlockSize: 4}}, logr.Discard(), nil, nil, loadsignal.NewTracker(), reg)
			s.SetEndpoints([]discovery.Endpoint{{Name: "e0", URL: e0.URL, Ready: true}})
			public := httptest.NewServer(s.Handler())
			t.Cleanup(public.Close)
			admin := httptest.NewServer(s.AdminHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
			t.Cleanup(admin.Close)

			do := func(method, url, auth string) (int, string) {
				t.Helper()
				body := ""
				if method == http.MethodPost {
					body = `{"model":"m","prompt":"hello","max_tokens":1}`
				}
				req, err := http.NewRequest(method, url, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			clientAuth := ""
			if c.auth.Clients != nil {
				clientAuth = "Bearer client-key"
			}

			for _, path := range []string{"/metrics", "/v1/status", "/v1/autoscale", "/debug/pprof/"} {
				if code, _ := do(http.MethodGet, public.URL+path, clientAuth); code != http.StatusNotFound {
					t.Errorf("public GET %s: %d, want 404", path, code)
				}
			}
			for path, want := range map[string]string{
				"/metrics":      "kvrouter_",
				"/v1/status":    `"readyEndpoints": 1`,
				"/v1/autoscale": `"endpoints": 1`,
			} {
				code, body := do(http.MethodGet, admin.URL+path, "")
				if code != http.StatusOK || !strings.Contains(body, want) {
					t.Errorf("admin GET %s without a key: %d, want 200 with %q:\n%.300s", path, code, want, body)
				}
			}
			for _, path := range []string{"/health", "/ready"} {
				for _, base := range []string{public.URL, admin.URL} {
					if code, _ := do(http.MethodGet, base+path, ""); code != http.StatusOK {
						t.Errorf("GET %s%s: %d, want 200", base, path, code)
					}
				}
			}
			if code, _ := do(http.MethodPost, public.URL+"/v1/completions", clientAuth); code != http.StatusOK {
				t.Errorf("public POST /v1/completions: %d, want 200", code)
			}
			for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
				if code, _ := do(http.MethodPost, admin.URL+path, clientAuth); code != http.StatusNotFound {
					t.Errorf("admin POST %s: %d, want 404", path, code)
				}
			}
			if code, _ := do(http.MethodGet, admin.URL+"/v1/models", clientAuth); code != http.StatusNotFound {
				t.Errorf("admin GET /v1/models: %d, want 404", code)
			}
			if n := e0.requests.Load(); n != 1 {
				t.Errorf("the engine served %d completions, want 1 (the public one)", n)
			}
		})
	}
}
