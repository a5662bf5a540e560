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

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/test/fleettest"
)

// TestE2EAdminPort runs the router binary and checks which listener serves what: metrics, the
// status the operator reads and KEDA's signal answer 200 on --admin-addr and 404 on --port, while
// inference and the model list answer on --port only.
func TestE2EAdminPort(t *testing.T) {
	fleettest.NeedBinaries(t)
	e0 := fleettest.StartEngine(t, "e0", "1")
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, []*fleettest.Engine{e0}))
	r.WaitConnected(t, 1)

	if code, body := send(t, http.MethodPost, r.URL+"/v1/completions", fleettest.Completion(prompt("admin", 50, 0), 2, false), ""); code != http.StatusOK {
		t.Fatalf("public POST /v1/completions: %d %s", code, body)
	}
	for path, want := range map[string]string{
		"/metrics":      "kvrouter_routing_decisions_total",
		"/v1/status":    `"readyEndpoints": 1`,
		"/v1/autoscale": `"waitingRequests"`,
	} {
		if code, body := send(t, http.MethodGet, r.AdminURL+path, "", ""); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("admin GET %s: %d, want 200 with %q:\n%.300s", path, code, want, body)
		}
		if code, _ := send(t, http.MethodGet, r.URL+path, "", ""); code != http.StatusNotFound {
			t.Errorf("public GET %s: %d, want 404", path, code)
		}
	}
	if code, _ := send(t, http.MethodGet, r.URL+"/v1/models", "", ""); code != http.StatusOK {
		t.Errorf("public GET /v1/models: %d, want 200", code)
	}
	for _, c := range []struct{ method, path string }{{http.MethodPost, "/v1/completions"}, {http.MethodGet, "/v1/models"}} {
		body := ""
		if c.method == http.MethodPost {
			body = fleettest.Completion("x", 1, false)
		}
		if code, _ := send(t, c.method, r.AdminURL+c.path, body, ""); code != http.StatusNotFound {
			t.Errorf("admin %s %s: %d, want 404", c.method, c.path, code)
		}
	}
}
