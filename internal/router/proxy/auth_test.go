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
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// keyEngine is a vLLM that records the Authorization of every call, by path.
type keyEngine struct {
	mu   sync.Mutex
	auth map[string][]string
}

func newKeyEngine(t *testing.T) (*keyEngine, *fakeEngine) {
	k := &keyEngine{auth: map[string][]string{}}
	mux := http.NewServeMux()
	record := func(r *http.Request) {
		k.mu.Lock()
		k.auth[r.URL.Path] = append(k.auth[r.URL.Path], r.Header.Get("Authorization"))
		k.mu.Unlock()
	}
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		_, _ = io.WriteString(w, `{"count":3,"tokens":[1,2,3]}`)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","parent":null}]}`)
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		_, _ = io.WriteString(w, `{"id":"x","object":"text_completion","choices":[{"text":"hi"}]}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return k, &fakeEngine{Server: srv, name: "e0"}
}

// seen returns the Authorization values path was called with.
func (k *keyEngine) seen(path string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.auth[path]...)
}

func writeKeys(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func openKeys(t *testing.T, path string) *KeyFile {
	t.Helper()
	f, err := OpenKeyFile(path, "test keys", logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestClientKeyRequired(t *testing.T) {
	dir := t.TempDir()
	keys := openKeys(t, writeKeys(t, dir, "keys", "old-key\nnew-key\n"))
	_, e0 := newKeyEngine(t)
	h := newHarness(t, Config{Auth: Auth{Clients: keys}}, nil, e0)
	body := `{"model":"m","prompt":"hello"}`

	for _, c := range []struct {
		auth, wantMsg string
	}{
		{"", "missing API key"},
		{"Bearer wrong", "invalid API key"},
		{"Basic b2xkLWtleQ==", "invalid API key"},
	} {
		resp, got := h.post(t, "/v1/completions", body, map[string]string{"Authorization": c.auth})
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("Authorization %q: status %d, want 401", c.auth, resp.StatusCode)
		}
		var e struct {
			Error map[string]any `json:"error"`
		}
		if err := json.Unmarshal([]byte(got), &e); err != nil {
			t.Fatalf("401 body %q: %v", got, err)
		}
		if e.Error["type"] != "invalid_request_error" || e.Error["code"] != "invalid_api_key" ||
			!strings.Contains(e.Error["message"].(string), c.wantMsg) {
			t.Errorf("Authorization %q: error %v", c.auth, e.Error)
		}
		if v, ok := e.Error["param"]; !ok || v != nil {
			t.Errorf("param: %v, want null", v)
		}
		if strings.Contains(got, "wrong") {
			t.Errorf("the 401 echoes the presented key: %s", got)
		}
	}
	for _, key := range []string{"old-key", "new-key"} {
		resp, got := h.post(t, "/v1/completions", body, map[string]string{"Authorization": "Bearer " + key})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("key %s: status %d: %s", key, resp.StatusCode, got)
		}
	}

	// The kubelet's probes carry no key; Prometheus, the operator's status poller and KEDA carry
	// none either, and read the admin handler.
	for _, url := range []string{h.http.URL + "/health", h.http.URL + "/ready",
		h.admin.URL + "/v1/status", h.admin.URL + "/v1/autoscale", h.admin.URL + "/health"} {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			t.Errorf("GET %s needs a key", url)
		}
	}
	// On the public handler every /v1/ path needs the key, the admin paths included (they are
	// not served there: with the key they are 404, see TestAdminPathsOnlyOnAdminHandler).
	for _, path := range []string{"/v1/models", "/v1/unknown", "/v1", "//v1/models", "/v1/status/../models",
		"/v1/status", "/v1/autoscale"} {
		resp, err := http.Get(h.http.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without a key: %d, want 401", path, resp.StatusCode)
		}
	}
}

func TestUpstreamAuthorization(t *testing.T) {
	dir := t.TempDir()
	engineKey := openKeys(t, writeKeys(t, dir, "engine", "engine-key\n"))
	clientKeys := openKeys(t, writeKeys(t, dir, "clients", "router-key\n"))
	for _, c := range []struct {
		name       string
		auth       Auth
		clientSent string
		want       string // what every engine call carries
	}{
		{"no keys: the client's passes through", Auth{}, "Bearer client-engine-key", "Bearer client-engine-key"},
		{"no keys, no client header", Auth{}, "", ""},
		{"engine key replaces the client's", Auth{Engine: engineKey}, "Bearer whatever", "Bearer engine-key"},
		{"router key: not forwarded", Auth{Clients: clientKeys}, "Bearer router-key", ""},
		{"both: the engine key", Auth{Clients: clientKeys, Engine: engineKey}, "Bearer router-key", "Bearer engine-key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			k, e0 := newKeyEngine(t)
			h := newHarness(t, Config{Auth: c.auth}, nil, e0)
			hdr := map[string]string{}
			if c.clientSent != "" {
				hdr["Authorization"] = c.clientSent
			}
			if resp, got := h.post(t, "/v1/completions", `{"model":"m","prompt":"hello"}`, hdr); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			req, _ := http.NewRequest(http.MethodGet, h.http.URL+"/v1/models", nil)
			if c.clientSent != "" {
				req.Header.Set("Authorization", c.clientSent)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			h.srv.models.refresh(context.Background())

			for _, path := range []string{"/v1/completions", "/tokenize"} {
				got := k.seen(path)
				if len(got) == 0 {
					t.Fatalf("%s was not called", path)
				}
				for _, a := range got {
					if a != c.want {
						t.Errorf("%s carried %q, want %q", path, a, c.want)
					}
				}
			}
			// /v1/models: the client's listing carries what proxied requests carry; the
			// router's own refresh has no client, so only the engine key.
			models := k.seen("/v1/models")
			if len(models) < 2 {
				t.Fatalf("/v1/models called %d times", len(models))
			}
			wantOwn := ""
			if c.auth.Engine != nil {
				wantOwn = "Bearer engine-key"
			}
			if models[len(models)-1] != wantOwn {
				t.Errorf("the router's model refresh carried %q, want %q", models[len(models)-1], wantOwn)
			}
			if !slices.Contains(models, c.want) {
				t.Errorf("the client's /v1/models carried %q, want %q", models, c.want)
			}
		})
	}
}

func TestKeyFileRotation(t *testing.T) {
	dir := t.TempDir()
	path := writeKeys(t, dir, "keys", "first\n")
	f := openKeys(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.Run(ctx, 10*time.Millisecond)

	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	writeKeys(t, dir, "keys", "first\nsecond\n")
	waitFor("the second key", func() bool { return f.Set().Allows("Bearer second") })
	if !f.Set().Allows("Bearer first") {
		t.Fatal("adding a key dropped the first")
	}
	writeKeys(t, dir, "keys", "second\n")
	waitFor("the first key to go", func() bool { return !f.Set().Allows("Bearer first") })

	// A file that goes empty or away keeps the last keys: a half-written Secret must not
	// open the router or lock everyone out.
	writeKeys(t, dir, "keys", "\n")
	time.Sleep(50 * time.Millisecond)
	if !f.Set().Allows("Bearer second") {
		t.Fatal("an empty key file dropped the keys")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if !f.Set().Allows("Bearer second") {
		t.Fatal("a missing key file dropped the keys")
	}
}

func TestOpenKeyFileRefusesNoKey(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenKeyFile(writeKeys(t, dir, "empty", " \n"), "client API keys", logr.Discard()); err == nil ||
		!strings.Contains(err.Error(), "holds no key") {
		t.Errorf("empty file: %v", err)
	}
	if _, err := OpenKeyFile(filepath.Join(dir, "missing"), "client API keys", logr.Discard()); err == nil {
		t.Error("a missing file opened")
	}
	if _, err := LoadAuth(context.Background(), filepath.Join(dir, "missing"), "", time.Second, logr.Discard()); err == nil {
		t.Error("LoadAuth with a missing file succeeded")
	}
}
