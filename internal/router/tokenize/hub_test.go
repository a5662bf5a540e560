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

package tokenize

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeHub serves files of one repository at one revision, to bearer token `token` only when
// token is set.
type fakeHub struct {
	*httptest.Server
	mu    sync.Mutex
	paths []string
	auths []string
}

func newFakeHub(t *testing.T, token string, files map[string]string) *fakeHub {
	h := &fakeHub{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.paths = append(h.paths, r.URL.EscapedPath())
		h.auths = append(h.auths, r.Header.Get("Authorization"))
		h.mu.Unlock()
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "Access to model org/model is restricted", http.StatusUnauthorized)
			return
		}
		body, ok := files[r.URL.Path]
		if !ok {
			http.Error(w, "Entry not found", http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(h.Close)
	return h
}

func TestHubFetchSendsTokenAndReadsBothFiles(t *testing.T) {
	h := newFakeHub(t, "s3cret", map[string]string{
		"/org/model/resolve/v1.0/tokenizer.json":        `{"model":{}}`,
		"/org/model/resolve/v1.0/tokenizer_config.json": `{"chat_template":"x"}`,
	})
	tj, cj, err := Hub{Endpoint: h.URL + "/", Repo: "org/model", Revision: "v1.0", Token: "s3cret"}.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if string(tj) != `{"model":{}}` || string(cj) != `{"chat_template":"x"}` {
		t.Fatalf("got %q, %q", tj, cj)
	}
	for _, a := range h.auths {
		if a != "Bearer s3cret" {
			t.Fatalf("Authorization %q", a)
		}
	}
}

func TestHubFetchConfigIsOptional(t *testing.T) {
	h := newFakeHub(t, "", map[string]string{"/org/model/resolve/main/tokenizer.json": `{}`})
	tj, cj, err := Hub{Endpoint: h.URL, Repo: "org/model"}.Fetch(context.Background())
	if err != nil || string(tj) != `{}` || cj != nil {
		t.Fatalf("%q %q %v", tj, cj, err)
	}
	if h.auths[0] != "" {
		t.Fatal("an Authorization header without a token")
	}
}

func TestHubFetchErrorsSayWhatToDoWithoutTheToken(t *testing.T) {
	files := map[string]string{"/org/model/resolve/main/tokenizer.json": `{}`}
	gated := newFakeHub(t, "right", files)
	_, _, err := Hub{Endpoint: gated.URL, Repo: "org/model"}.Fetch(context.Background())
	if !errors.Is(err, ErrHubDenied) || !strings.Contains(err.Error(), "HF_TOKEN") || !strings.Contains(err.Error(), "401") {
		t.Fatalf("no token: %v", err)
	}
	_, _, err = Hub{Endpoint: gated.URL, Repo: "org/model", Token: "wrong-token"}.Fetch(context.Background())
	if !errors.Is(err, ErrHubDenied) || !strings.Contains(err.Error(), "refused") || strings.Contains(err.Error(), "wrong-token") {
		t.Fatalf("wrong token: %v", err)
	}
	_, _, err = Hub{Endpoint: gated.URL, Repo: "org/other", Revision: "dev", Token: "right"}.Fetch(context.Background())
	if !errors.Is(err, ErrHubNotFound) || !strings.Contains(err.Error(), "org/other") || !strings.Contains(err.Error(), "dev") {
		t.Fatalf("missing repo: %v", err)
	}
	if strings.Contains(err.Error(), "right") {
		t.Fatalf("token in the error: %v", err)
	}
}

func TestHubFetchSizeCap(t *testing.T) {
	h := newFakeHub(t, "", map[string]string{"/org/model/resolve/main/tokenizer.json": strings.Repeat("x", 100)})
	_, _, err := Hub{Endpoint: h.URL, Repo: "org/model", MaxBytes: 10}.Fetch(context.Background())
	if err == nil || !strings.Contains(err.Error(), "larger than 10 bytes") {
		t.Fatalf("got %v", err)
	}
}

func TestResolveDir(t *testing.T) {
	write := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plain := t.TempDir()
	write(filepath.Join(plain, TokenizerFile))
	if d, err := ResolveDir(plain, "org/model", ""); err != nil || d != plain {
		t.Fatalf("model directory: %q %v", d, err)
	}

	// An HF cache (HF_HOME's hub/): the snapshot the ref names wins over another one.
	cache := t.TempDir()
	m := filepath.Join(cache, "hub", "models--org--model")
	for _, snap := range []string{"aaa", "bbb"} {
		write(filepath.Join(m, "snapshots", snap, TokenizerFile))
		write(filepath.Join(m, "snapshots", snap, TokenizerConfigFile))
	}
	write(filepath.Join(m, "refs", "main"))
	if err := os.WriteFile(filepath.Join(m, "refs", "main"), []byte("aaa\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := ResolveDir(cache, "org/model", "main"); err != nil || d != filepath.Join(m, "snapshots", "aaa") {
		t.Fatalf("cache: %q %v", d, err)
	}
	if d, err := ResolveDir(cache, "org/model", "bbb"); err != nil || d != filepath.Join(m, "snapshots", "bbb") {
		t.Fatalf("cache at a commit: %q %v", d, err)
	}
	if _, err := ResolveDir(cache, "org/absent", "main"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("absent model: %v", err)
	}
	// A revision asked for by name that the cache lacks is not replaced by another snapshot.
	if _, err := ResolveDir(cache, "org/model", "v2"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("absent revision: %v", err)
	}
	if _, err := ResolveDir(cache, "org/model", "../../x"); err == nil {
		t.Fatal("a revision that climbs out of the cache was accepted")
	}
	// A snapshot still downloading (tokenizer.json without tokenizer_config.json) is not ready.
	half := t.TempDir()
	hm := filepath.Join(half, "hub", "models--org--model")
	write(filepath.Join(hm, "snapshots", "ccc", TokenizerFile))
	write(filepath.Join(hm, "refs", "main"))
	if err := os.WriteFile(filepath.Join(hm, "refs", "main"), []byte("ccc"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveDir(half, "org/model", "main"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("half-downloaded snapshot: %v", err)
	}
	write(filepath.Join(hm, "snapshots", "ccc", TokenizerConfigFile))
	if d, err := ResolveDir(half, "org/model", "main"); err != nil || d != filepath.Join(hm, "snapshots", "ccc") {
		t.Fatalf("downloaded snapshot: %q %v", d, err)
	}
}

// A repository's chat_template.jinja replaces tokenizer_config.json's template, and the token does
// not follow a redirect to another host.
func TestHubFetchChatTemplateFileAndRedirect(t *testing.T) {
	var cdnAuth atomic.Value
	cdnAuth.Store("unset")
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cdnAuth.Store(r.Header.Get("Authorization"))
		_, _ = w.Write([]byte(`{"model":{"type":"BPE"}}`))
	}))
	t.Cleanup(cdn.Close)
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/org/model/resolve/main/tokenizer.json":
			http.Redirect(w, r, cdn.URL+"/blob", http.StatusFound)
		case "/org/model/resolve/main/tokenizer_config.json":
			_, _ = w.Write([]byte(`{"chat_template":"old","bos_token":"<s>"}`))
		case "/org/model/resolve/main/chat_template.jinja":
			_, _ = w.Write([]byte("{{ messages }}"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(hub.Close)
	_, cfg, err := Hub{Endpoint: hub.URL, Repo: "org/model", Token: "hf_secret"}.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := cdnAuth.Load().(string); got != "" {
		t.Errorf("the redirect target got Authorization %q", got)
	}
	var c map[string]string
	if err := json.Unmarshal(cfg, &c); err != nil {
		t.Fatal(err)
	}
	if c["chat_template"] != "{{ messages }}" || c["bos_token"] != "<s>" {
		t.Errorf("config %v: want chat_template.jinja's template and the rest kept", c)
	}
}
