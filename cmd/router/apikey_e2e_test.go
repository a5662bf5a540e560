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

// API keys end to end: vllm-sim engines started with --api-key (as vLLM is), the router with
// its own key file and the engines' key, loopback only.

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/routerapi"
	"github.com/kvrouter/kvrouter/test/fleettest"
)

// send makes one request with an optional Authorization header and returns the status and body.
func send(t *testing.T, method, url, body, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
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

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	// Write-then-rename, as the kubelet swaps a Secret volume's files: a reader never sees half.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// tokenized waits until the router has tokenized a prompt and checks it reports no tokenizer
// degradation: its own /tokenize calls get through the engines' key check.
func tokenized(t *testing.T, r *fleettest.Router) {
	t.Helper()
	st := r.WaitStatus(t, "tokenized prompts", func(st routerapi.Status) bool { return st.Router.PromptTokens > 0 })
	if st.Router.TokenizeFailures != 0 {
		t.Fatalf("the router's /tokenize calls failed %d times", st.Router.TokenizeFailures)
	}
	for _, d := range st.Degradations {
		if d.Type == "TokenizerUnavailable" {
			t.Fatalf("tokenizer degraded: %s", d.Message)
		}
	}
}

func TestE2EAPIKeys(t *testing.T) {
	fleettest.NeedBinaries(t)
	const engineKey, routerKey, nextKey = "engine-key-0d4c", "router-key-91aa", "router-key-next-77f2"
	e0 := fleettest.StartEngine(t, "e0", "1", "--api-key", engineKey)
	dir := t.TempDir()
	clientKeys, engineKeyFile := filepath.Join(dir, "keys"), filepath.Join(dir, "engine-key")
	writeFile(t, clientKeys, routerKey+"\n")
	writeFile(t, engineKeyFile, engineKey+"\n")
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, []*fleettest.Engine{e0}),
		"--api-key-file", clientKeys, "--engine-api-key-file", engineKeyFile)
	req := fleettest.Completion(prompt("keyed", 100, 0), 4, false)

	By := func(s string) { t.Log(s) }
	By("without a key, or with a wrong one, the router answers 401 the way OpenAI does")
	for _, auth := range []string{"", "Bearer " + engineKey, "Bearer nope"} {
		code, body := send(t, http.MethodPost, r.URL+"/v1/completions", req, auth)
		if code != http.StatusUnauthorized {
			t.Fatalf("Authorization %q: %d %s", auth, code, body)
		}
		var e struct {
			Error struct{ Type, Code string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != "invalid_api_key" || e.Error.Type != "invalid_request_error" {
			t.Fatalf("401 body %s (%v)", body, err)
		}
	}

	By("with its key, the request is routed on its tokens and the engine accepts the router's engine key")
	for _, stream := range []bool{false, true} {
		code, body := send(t, http.MethodPost, r.URL+"/v1/completions", fleettest.Completion(prompt("keyed", 100, 1), 4, stream), "Bearer "+routerKey)
		if code != http.StatusOK {
			t.Fatalf("stream=%v with the router key: %d %s", stream, code, body)
		}
	}
	if code, body := send(t, http.MethodGet, r.URL+"/v1/models", "", "Bearer "+routerKey); code != http.StatusOK || !strings.Contains(body, `"m"`) {
		t.Fatalf("/v1/models with the router key: %d %s", code, body)
	}
	tokenized(t, r)

	By("the engine itself refuses a request without its key, and the router's key")
	for _, auth := range []string{"", "Bearer " + routerKey} {
		if code, body := send(t, http.MethodPost, e0.URL+"/v1/completions", req, auth); code != http.StatusUnauthorized {
			t.Fatalf("direct to the engine with %q: %d %s", auth, code, body)
		}
	}

	By("probes need no key; metrics, the status the operator reads and KEDA's signal are on the admin port only, with no key")
	for _, path := range []string{"/health", "/ready"} {
		if code, _ := send(t, http.MethodGet, r.URL+path, "", ""); code != http.StatusOK {
			t.Fatalf("GET %s without a key: %d", path, code)
		}
	}
	for _, path := range []string{"/health", "/ready", "/metrics", "/v1/status", "/v1/autoscale"} {
		if code, _ := send(t, http.MethodGet, r.AdminURL+path, "", ""); code != http.StatusOK {
			t.Fatalf("admin GET %s without a key: %d", path, code)
		}
	}
	for _, path := range []string{"/metrics", "/v1/status", "/v1/autoscale"} {
		if code, _ := send(t, http.MethodGet, r.URL+path, "", "Bearer "+routerKey); code != http.StatusNotFound {
			t.Fatalf("public GET %s with the router key: %d, want 404", path, code)
		}
	}

	By("rotation: a second key is accepted next to the first, then the first is retired, without a restart")
	writeFile(t, clientKeys, routerKey+"\n"+nextKey+"\n")
	waitCode(t, r.URL, req, "Bearer "+nextKey, http.StatusOK)
	if code, body := send(t, http.MethodPost, r.URL+"/v1/completions", req, "Bearer "+routerKey); code != http.StatusOK {
		t.Fatalf("the old key during rotation: %d %s", code, body)
	}
	writeFile(t, clientKeys, nextKey+"\n")
	waitCode(t, r.URL, req, "Bearer "+routerKey, http.StatusUnauthorized)
	if code, body := send(t, http.MethodPost, r.URL+"/v1/completions", req, "Bearer "+nextKey); code != http.StatusOK {
		t.Fatalf("the new key after rotation: %d %s", code, body)
	}
	if r.Proc.Exited() {
		t.Fatal("the router exited during rotation")
	}
}

// waitCode polls until a completion with auth gets code (a key file is re-read every second).
func waitCode(t *testing.T, base, body, auth string, code int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, b := send(t, http.MethodPost, base+"/v1/completions", body, auth)
		if got == code {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %d (%s), want %d", auth, got, b, code)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestE2EEngineKeyPassedThrough(t *testing.T) {
	fleettest.NeedBinaries(t)
	const engineKey = "engine-key-5be0"
	keyed := fleettest.StartEngine(t, "e0", "1", "--api-key", engineKey)
	open := fleettest.StartEngine(t, "e1", "1")

	t.Log("no key anywhere: open")
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, []*fleettest.Engine{open}))
	fleettest.WaitOK(t, r.URL+"/ready")
	if code, body := send(t, http.MethodPost, r.URL+"/v1/completions", fleettest.Completion(prompt("open", 50, 0), 2, false), ""); code != http.StatusOK {
		t.Fatalf("no keys: %d %s", code, body)
	}

	t.Log("a key only the engine checks: the client's Authorization reaches it unchanged, /tokenize included")
	r = fleettest.StartRouter(t, fleettest.WriteEndpoints(t, []*fleettest.Engine{keyed}))
	// /health answers before the endpoints file is read: a request then finds no engine.
	fleettest.WaitOK(t, r.URL+"/ready")
	req := fleettest.Completion(prompt("passthrough", 100, 0), 2, false)
	if code, body := send(t, http.MethodPost, r.URL+"/v1/completions", req, "Bearer "+engineKey); code != http.StatusOK {
		t.Fatalf("with the engine's key: %d %s", code, body)
	}
	tokenized(t, r)
	if code, body := send(t, http.MethodPost, r.URL+"/v1/completions", fleettest.Completion(prompt("passthrough", 100, 1), 2, false), ""); code != http.StatusUnauthorized ||
		!strings.Contains(body, "Unauthorized") {
		t.Fatalf("without a key: %d %s, want the engine's own 401", code, body)
	}
}
