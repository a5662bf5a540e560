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
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeEngine tokenizes one token per byte of the prompt, or one per message for chat.
func fakeEngine(t *testing.T, calls *atomic.Int32, delay time.Duration) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/tokenize" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		calls.Add(1)
		time.Sleep(delay)
		var body map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		var toks []uint32
		if p, ok := body["prompt"]; ok {
			var s string
			_ = json.Unmarshal(p, &s)
			for i := range s {
				toks = append(toks, uint32(s[i]))
			}
		} else {
			var msgs []map[string]any
			if err := json.Unmarshal(body["messages"], &msgs); err != nil {
				http.Error(w, "bad messages", 400)
				return
			}
			for range msgs {
				toks = append(toks, 7)
			}
			if string(body["add_generation_prompt"]) == "true" {
				toks = append(toks, 9)
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"count": len(toks), "tokens": toks, "max_model_len": 4096})
	}))
}

func TestCompletionAndChat(t *testing.T) {
	var calls atomic.Int32
	srv := fakeEngine(t, &calls, 0)
	defer srv.Close()
	c := New(srv.Client(), time.Second, 0)
	toks, err := c.Completion(context.Background(), srv.URL, CompletionRequest{Model: "m", Prompt: "abc"})
	if err != nil || len(toks) != 3 || toks[0] != 'a' {
		t.Fatalf("completion %v %v", toks, err)
	}
	// The client's JSON string passed through, escapes and all, with the other fields spliced in.
	no := false
	toks, err = c.Completion(context.Background(), srv.URL, CompletionRequest{Model: "m", RawPrompt: json.RawMessage(`"a\u0062c"`), AddSpecialTokens: &no})
	if err != nil || string([]byte{byte(toks[0]), byte(toks[1]), byte(toks[2])}) != "abc" {
		t.Fatalf("raw prompt %v %v", toks, err)
	}
	toks, err = c.Completion(context.Background(), srv.URL, CompletionRequest{RawPrompt: json.RawMessage(`"xy"`)})
	if err != nil || len(toks) != 2 {
		t.Fatalf("raw prompt alone %v %v", toks, err)
	}
	yes := true
	toks, err = c.Chat(context.Background(), srv.URL, ChatRequest{Model: "m",
		Messages: json.RawMessage(`[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]`), AddGenerationPrompt: &yes})
	if err != nil || len(toks) != 3 || toks[2] != 9 {
		t.Fatalf("chat %v %v", toks, err)
	}
}

func TestFailuresAreErrTokenize(t *testing.T) {
	var calls atomic.Int32
	slow := fakeEngine(t, &calls, 300*time.Millisecond)
	defer slow.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no tokenizer", http.StatusNotFound)
	}))
	defer bad.Close()
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"count": 5, "tokens": [1]}`))
	}))
	defer garbage.Close()
	c := New(nil, 50*time.Millisecond, 16)
	for name, url := range map[string]string{"timeout": slow.URL, "404": bad.URL, "inconsistent": garbage.URL,
		"unreachable": "http://127.0.0.1:1"} {
		if _, err := c.Completion(context.Background(), url, CompletionRequest{Prompt: name}); !errors.Is(err, ErrTokenize) {
			t.Errorf("%s: err %v, want ErrTokenize", name, err)
		}
	}
}

func TestCacheAndCoalescing(t *testing.T) {
	var calls atomic.Int32
	srv := fakeEngine(t, &calls, 50*time.Millisecond)
	defer srv.Close()
	// Budget 16 tokens: entries of up to 4 tokens; "same", "a", "b" fit... until they don't.
	c := New(srv.Client(), time.Second, 16)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Completion(context.Background(), srv.URL, CompletionRequest{Prompt: "same"}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("8 concurrent identical requests made %d calls", n)
	}
	if _, err := c.Completion(context.Background(), srv.URL, CompletionRequest{Prompt: "same"}); err != nil || calls.Load() != 1 {
		t.Fatalf("cached request called the engine (%d calls, %v)", calls.Load(), err)
	}
	// 4 + 4 + 4 + 4 tokens fill the budget; a fifth entry evicts the oldest ("same").
	for _, p := range []string{"aaaa", "bbbb", "cccc", "dddd", "same"} {
		if _, err := c.Completion(context.Background(), srv.URL, CompletionRequest{Prompt: p}); err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 6 {
		t.Fatalf("after eviction %d calls, want 6", n)
	}
	// An entry over a quarter of the budget is not cached.
	for i := 0; i < 2; i++ {
		if _, err := c.Completion(context.Background(), srv.URL, CompletionRequest{Prompt: "too long to keep"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 8 {
		t.Fatalf("oversized entry cached: %d calls", n)
	}
	// A caller that gives up does not fail the others sharing the call.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Completion(ctx, srv.URL, CompletionRequest{Prompt: "fresh"}); err != nil {
		t.Fatalf("shared call died with a cancelled caller: %v", err)
	}
}
