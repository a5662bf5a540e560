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
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/proxy"
	"github.com/kvrouter/kvrouter/internal/tokenizer/tokenizertest"
)

func TestTokenizerFlags(t *testing.T) {
	o, err := parseFlags([]string{"--endpoints-file", "x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if tk := o.tokenizer; tk.mode != "auto" || tk.revision != "main" || tk.verifyFraction != 0.01 || tk.dir != "" {
		t.Fatalf("defaults %+v", tk)
	}
	o, err = parseFlags(strings.Fields("--endpoints-file x --model org/model --tokenizer local --tokenizer-revision v2 "+
		"--hf-endpoint http://mirror --tokenizer-verify-fraction 0"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if tk := o.tokenizer; tk.repo(o.model) != "org/model" || tk.hfEndpoint != "http://mirror" || tk.configFraction() != -1 {
		t.Fatalf("%+v", tk)
	}
	// A served model name is no repository: nothing to download unless told.
	if (&tokenizerOptions{}).repo("llama-8b") != "" || (&tokenizerOptions{model: "a/b"}).repo("llama-8b") != "a/b" {
		t.Fatal("repository from a served model name")
	}
	for _, bad := range [][]string{
		{"--endpoints-file", "x", "--tokenizer", "remote"},
		{"--endpoints-file", "x", "--tokenizer", "local"}, // nothing to load
		{"--endpoints-file", "x", "--tokenizer-verify-fraction", "1.5"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// syncBuffer is a log sink the loader's goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The loader downloads from a Hub with the engines' token, and a refusal is logged and shown in
// status with what to do, never with the token; it retries until the Hub serves the files.
func TestLoadTokenizerFromHub(t *testing.T) {
	dir := tokenizertest.Dir(t, "llama3")
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	cj, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	open := false
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ok := open
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer hf_secret" || !ok {
			http.Error(w, "gated", http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/meta-llama/Llama-3.1-8B-Instruct/resolve/main/tokenizer.json":
			_, _ = w.Write(tj)
		case "/meta-llama/Llama-3.1-8B-Instruct/resolve/main/tokenizer_config.json":
			_, _ = w.Write(cj)
		default:
			http.NotFound(w, r)
		}
	}))
	defer hub.Close()

	srv := proxy.New(proxy.Config{Tokenizer: proxy.TokenizerLocal}, logr.Discard(), nil, nil, loadsignal.NewTracker(), prometheus.NewRegistry())
	o := &tokenizerOptions{mode: proxy.TokenizerLocal, revision: "main", hfEndpoint: hub.URL}
	env := func(k string) (string, bool) {
		if k == "HF_TOKEN" {
			return "hf_secret", true
		}
		return "", false
	}
	logs := &syncBuffer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		loadTokenizer(t.Context(), o, "meta-llama/Llama-3.1-8B-Instruct", srv, env, newLoggerTo(logs, "info"))
	}()
	waitUntil(t, "the refusal reported", func() bool { return strings.Contains(srv.Status().Tokenizer.Reason, "401") })
	if out := logs.String(); !strings.Contains(out, "401") || strings.Contains(out, "hf_secret") {
		t.Fatalf("log: %s", out)
	}
	if r := srv.Status().Tokenizer.Reason; strings.Contains(r, "hf_secret") || !strings.Contains(r, "refused") {
		t.Fatalf("reason %q", r)
	}
	mu.Lock()
	open = true
	mu.Unlock()
	<-done // the next try (a second later) loads it
	ts := srv.Status().Tokenizer
	if ts.Origin != "hub:meta-llama/Llama-3.1-8B-Instruct@main" || ts.Source != "local" {
		t.Fatalf("tokenizer %+v", ts)
	}
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With HF_HOME on the engines' model cache volume, the router reads the tokenizer the engines
// downloaded and asks the Hub for nothing.
func TestLoadTokenizerFromHFCache(t *testing.T) {
	home := t.TempDir()
	m := filepath.Join(home, "hub", "models--org--model")
	snap := filepath.Join(m, "snapshots", "abc123")
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(tokenizertest.Dir(t, "llama3"), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(snap, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(m, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m, "refs", "main"), []byte("abc123"), 0o644); err != nil {
		t.Fatal(err)
	}
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the Hub was asked for %s", r.URL.Path)
		http.NotFound(w, r)
	}))
	defer hub.Close()
	srv := proxy.New(proxy.Config{Tokenizer: proxy.TokenizerLocal}, logr.Discard(), nil, nil, loadsignal.NewTracker(), prometheus.NewRegistry())
	o := &tokenizerOptions{mode: proxy.TokenizerLocal, model: "org/model", revision: "main", hfEndpoint: hub.URL}
	env := func(k string) (string, bool) {
		if k == "HF_HOME" {
			return home, true
		}
		return "", false
	}
	loadTokenizer(t.Context(), o, "served-name", srv, env, logr.Discard())
	if ts := srv.Status().Tokenizer; ts.Origin != snap || ts.Source != "local" {
		t.Fatalf("tokenizer %+v", ts)
	}
}
