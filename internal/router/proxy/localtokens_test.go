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
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/tokenize"
	"github.com/kvrouter/kvrouter/internal/routerapi"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// fakeLocal tokenizes as fakeEngine's /tokenize does (one token per byte of the prompt, of the
// messages' JSON for a chat), except where told to differ.
type fakeLocal struct {
	differOn string // text containing this tokenizes differently
	chatErr  error  // EncodeChat fails
	panicOn  string // text containing this panics
}

func (f fakeLocal) Encode(text string, _ bool) []uint32 {
	if f.panicOn != "" && strings.Contains(text, f.panicOn) {
		panic("boom")
	}
	toks := make([]uint32, len(text))
	for i := range text {
		toks[i] = uint32(text[i])
	}
	if f.differOn != "" && strings.Contains(text, f.differOn) && len(toks) > 0 {
		toks[len(toks)-1]++
	}
	return toks
}

func (f fakeLocal) EncodeChat(in tokenizer.ChatInput, addSpecial bool) ([]uint32, error) {
	if f.chatErr != nil {
		return nil, f.chatErr
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(in.Messages, &msgs); err != nil {
		return nil, err
	}
	var text string
	for _, m := range msgs {
		text += string(m)
	}
	return f.Encode(text, addSpecial), nil
}

func tokenizerOf(t *testing.T, h *harness) routerapi.Tokenizer {
	t.Helper()
	st := h.srv.Status()
	if st.Tokenizer == nil {
		t.Fatal("no tokenizer block in status")
	}
	return *st.Tokenizer
}

func hasDegradation(st routerapi.Status, typ string) (routerapi.Degradation, bool) {
	for _, d := range st.Degradations {
		if d.Type == typ {
			return d, true
		}
	}
	return routerapi.Degradation{}, false
}

func TestLocalTokenizerAutoUsedAfterStartCheck(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{TokenizerVerifyFraction: 1}, &fakeIndex{}, e0)
	if ts := tokenizerOf(t, h); ts.Source != "engine" || ts.Mode != TokenizerAuto {
		t.Fatalf("before a tokenizer is loaded: %+v", ts)
	}
	h.srv.SetLocalTokenizer(t.Context(), fakeLocal{}, "testdir")
	waitFor(t, "start check passed", func() bool { ts := tokenizerOf(t, h); return ts.Source == "local" && ts.Verified })
	calls := e0.tokenizes.Load()

	for _, r := range []struct{ path, body string }{
		{"/v1/completions", `{"model":"m","prompt":"hello there"}`},
		{"/v1/completions", `{"model":"m","prompt":["a list","of prompts"]}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
	} {
		if resp, body := h.post(t, r.path, r.body, nil); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", r.path, resp.StatusCode, body)
		}
	}
	ts := tokenizerOf(t, h)
	if ts.LocalRequests != 3 || ts.Origin != "testdir" || ts.Mismatches != 0 {
		t.Fatalf("tokenizer %+v", ts)
	}
	// Every request was sampled (fraction 1): an engine tokenized each too, off the request
	// path, and agreed.
	waitFor(t, "verifications", func() bool {
		return tokenizerOf(t, h).Verifications >= uint64(3+len(tokenize.StartSample))
	})
	if got := e0.tokenizes.Load() - calls; got != 3 {
		t.Fatalf("engine /tokenize calls after the start check: %d, want the 3 verifications", got)
	}
	if st := h.srv.Status(); st.Router.PromptTokens == 0 {
		t.Fatalf("requests were not routed as tokenized: %+v", st.Router)
	}
}

func TestLocalTokenizerStartMismatchFallsBackToEngine(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{}, &fakeIndex{}, e0)
	// Differs on the start sample's chat case only.
	h.srv.SetLocalTokenizer(t.Context(), fakeLocal{differOn: "prefix caching"}, "testdir")
	waitFor(t, "mismatch", func() bool { return tokenizerOf(t, h).Mismatches == 1 })
	ts := tokenizerOf(t, h)
	if ts.Source != "engine" || ts.Verified || ts.LastMismatch == nil || !strings.Contains(ts.Reason, "mismatch") {
		t.Fatalf("tokenizer %+v", ts)
	}
	d, ok := hasDegradation(h.srv.Status(), "TokenizerMismatch")
	if !ok || !strings.Contains(d.Message, `"chat"`) || !strings.Contains(d.Message, "e0") {
		t.Fatalf("degradation %+v (%v)", d, ok)
	}
	if strings.Contains(d.Message, "prefix caching") || strings.Contains(d.Message, "KV cache") {
		t.Fatalf("degradation quotes the text: %q", d.Message)
	}
	calls := e0.tokenizes.Load()
	if resp, _ := h.post(t, "/v1/completions", `{"model":"m","prompt":"hello"}`, nil); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if e0.tokenizes.Load() != calls+1 || tokenizerOf(t, h).LocalRequests != 0 {
		t.Fatal("request not tokenized on the engine after a start mismatch")
	}
}

func TestLocalTokenizerVerificationMismatchIsSticky(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{TokenizerVerifyFraction: 1}, &fakeIndex{}, e0)
	h.srv.SetLocalTokenizer(t.Context(), fakeLocal{differOn: "xylophone"}, "testdir")
	waitFor(t, "start check passed", func() bool { return tokenizerOf(t, h).Source == "local" })
	if resp, _ := h.post(t, "/v1/completions", `{"model":"m","prompt":"a rare xylophone"}`, nil); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	waitFor(t, "mismatch", func() bool { return tokenizerOf(t, h).Mismatches == 1 })
	st := h.srv.Status()
	d, ok := hasDegradation(st, "TokenizerMismatch")
	if !ok || st.Tokenizer.Source != "engine" || !strings.Contains(d.Message, "completions request") {
		t.Fatalf("status %+v %+v", st.Tokenizer, st.Degradations)
	}
	if strings.Contains(d.Message, "xylophone") {
		t.Fatalf("degradation quotes the prompt: %q", d.Message)
	}
	// Sticky: text the two agree on still goes to the engine.
	calls := e0.tokenizes.Load()
	h.post(t, "/v1/completions", `{"model":"m","prompt":"plain"}`, nil)
	if e0.tokenizes.Load() != calls+1 || tokenizerOf(t, h).LocalRequests != 1 {
		t.Fatal("in-process tokenizer still used after a mismatch")
	}
	// Another tokenizer is another question.
	h.srv.SetLocalTokenizer(t.Context(), fakeLocal{}, "fixed")
	waitFor(t, "new tokenizer in use", func() bool { return tokenizerOf(t, h).Source == "local" })
	if _, still := hasDegradation(h.srv.Status(), "TokenizerMismatch"); still {
		t.Fatal("mismatch of the replaced tokenizer still reported")
	}
}

func TestLocalTokenizerPerRequestFallback(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{Tokenizer: TokenizerLocal, TokenizerVerifyFraction: -1}, &fakeIndex{}, e0)
	// --tokenizer local: in use at once, before the start check has passed. The failures come
	// after it did, or the start check would rightly demote the tokenizer.
	loc := &switchable{}
	loc.cur.Store(&fakeLocal{})
	h.srv.SetLocalTokenizer(t.Context(), loc, "testdir")
	if tokenizerOf(t, h).Source != "local" {
		t.Fatal("--tokenizer local not in use at once")
	}
	waitFor(t, "start check passed", func() bool { return tokenizerOf(t, h).Verified })
	loc.cur.Store(&fakeLocal{chatErr: fmt.Errorf("template: %w", tokenizer.ErrUnsupported), panicOn: "explode"})

	calls := e0.tokenizes.Load()
	h.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
	h.post(t, "/v1/completions", `{"model":"m","prompt":"please explode"}`, nil)
	h.post(t, "/v1/completions", `{"model":"m","prompt":"fine"}`, nil)
	ts := tokenizerOf(t, h)
	if e0.tokenizes.Load() != calls+2 || ts.LocalRequests != 1 || ts.Source != "local" || ts.Mismatches != 0 {
		t.Fatalf("engine calls %d, tokenizer %+v: want the unsupported chat and the panic on the engine, the rest local",
			e0.tokenizes.Load()-calls, ts)
	}
	if st := h.srv.Status(); st.Router.TokenizeFailures != 0 {
		t.Fatalf("fallbacks counted as failures: %+v", st.Router)
	}
}

// switchable lets a test change what the tokenizer does after the start check.
type switchable struct{ cur atomic.Pointer[fakeLocal] }

func (s *switchable) Encode(text string, add bool) []uint32 { return s.cur.Load().Encode(text, add) }
func (s *switchable) EncodeChat(in tokenizer.ChatInput, add bool) ([]uint32, error) {
	return s.cur.Load().EncodeChat(in, add)
}

func TestLocalTokenizerEngineModeIgnoresIt(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{Tokenizer: TokenizerEngine}, &fakeIndex{}, e0)
	h.srv.SetLocalTokenizer(t.Context(), fakeLocal{}, "testdir")
	h.post(t, "/v1/completions", `{"model":"m","prompt":"hello"}`, nil)
	ts := tokenizerOf(t, h)
	if ts.Source != "engine" || ts.LocalRequests != 0 || ts.Origin != "" || e0.tokenizes.Load() != 1 {
		t.Fatalf("tokenizer %+v, engine calls %d", ts, e0.tokenizes.Load())
	}
}

func TestLocalTokenizerWaitsForAnEngine(t *testing.T) {
	h := newHarness(t, Config{}, &fakeIndex{})
	h.srv.SetLocalTokenizer(t.Context(), fakeLocal{}, "testdir")
	if ts := tokenizerOf(t, h); ts.Source != "engine" || !strings.Contains(ts.Reason, "pending") {
		t.Fatalf("without an engine to compare with: %+v", ts)
	}
	e0 := newFakeEngine(t, "e0")
	h.srv.SetEndpoints([]discovery.Endpoint{{Name: e0.name, URL: e0.URL, Ready: true}})
	waitFor(t, "start check passed once an engine came", func() bool { return tokenizerOf(t, h).Source == "local" })
}

func TestFirstDifference(t *testing.T) {
	for _, c := range []struct {
		a, b []uint32
		want int
	}{{nil, nil, -1}, {[]uint32{1, 2}, []uint32{1, 2}, -1}, {[]uint32{1, 2}, []uint32{1, 3}, 1},
		{[]uint32{1}, []uint32{1, 2}, 1}, {[]uint32{1, 2}, nil, 0}} {
		if got := firstDifference(c.a, c.b); got != c.want {
			t.Errorf("firstDifference(%v, %v) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// The endpoint picker (EPP mode) decides through the same steps: its requests are tokenized in
// process too, and the body it holds may be reused once Pick returns.
func TestLocalTokenizerInPick(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{Model: "m", TokenizerVerifyFraction: 1}, &fakeIndex{}, e0)
	h.srv.SetLocalTokenizer(t.Context(), fakeLocal{}, "testdir")
	waitFor(t, "start check passed", func() bool { return tokenizerOf(t, h).Source == "local" })
	calls := e0.tokenizes.Load()
	body := []byte(`{"model":"m","prompt":"hello from the gateway"}`)
	f, ref := h.srv.Pick(context.Background(), PickInput{Method: http.MethodPost, Path: "/v1/completions",
		Header: http.Header{}, Body: body})
	if ref != nil {
		t.Fatalf("refused: %d %s", ref.Status, ref.Body)
	}
	for i := range body {
		body[i] = 'x' // the gateway's buffer, reused
	}
	f.ResponseHeaders(200)
	f.ResponseBody(nil, true)
	f.Done()
	waitFor(t, "verification", func() bool { return tokenizerOf(t, h).Verifications == uint64(len(tokenize.StartSample)+1) })
	if ts := tokenizerOf(t, h); ts.LocalRequests != 1 || ts.Mismatches != 0 || e0.tokenizes.Load() != calls+1 {
		t.Fatalf("tokenizer %+v, engine calls %d", ts, e0.tokenizes.Load()-calls)
	}
}

// A model without a chat template (or one this tokenizer cannot render) is still trusted with
// completions: its chat requests go to the engines one by one.
func TestLocalTokenizerWithoutChatTemplate(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{TokenizerVerifyFraction: -1}, &fakeIndex{}, e0)
	h.srv.SetLocalTokenizer(t.Context(), fakeLocal{chatErr: tokenizer.ErrNoChatTemplate}, "base-model")
	waitFor(t, "start check passed", func() bool { return tokenizerOf(t, h).Source == "local" })
	calls := e0.tokenizes.Load()
	h.post(t, "/v1/completions", `{"model":"m","prompt":"hello"}`, nil)
	h.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
	if ts := tokenizerOf(t, h); ts.LocalRequests != 1 || e0.tokenizes.Load() != calls+1 {
		t.Fatalf("tokenizer %+v, engine calls %d", ts, e0.tokenizes.Load()-calls)
	}
}

// A request carrying a chat template of its own (which would run in the router, unbounded) is
// tokenized on an engine, as is one whose chat_template_kwargs name a template, and a chat with
// assistant reasoning; the model's own template stays in process.
func TestLocalTokenizerLeavesRequestTemplatesToEngines(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{Tokenizer: TokenizerLocal, TokenizerVerifyFraction: -1}, &fakeIndex{}, e0)
	h.srv.SetLocalTokenizer(t.Context(), fakeLocal{}, "testdir")
	waitFor(t, "start check passed", func() bool { return tokenizerOf(t, h).Verified })

	calls := e0.tokenizes.Load()
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"chat_template":"{{ range(10000000000) | length }}"}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"chat_template":"{{ 1 }}"}}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"ok","reasoning_content":"r"},{"role":"user","content":"and?"}]}`,
	} {
		if resp, out := h.post(t, "/v1/chat/completions", body, nil); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
	}
	h.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false}}`, nil)
	ts := tokenizerOf(t, h)
	if got := e0.tokenizes.Load() - calls; got != 3 || ts.LocalRequests != 1 {
		t.Fatalf("engine /tokenize calls %d, local %d: want the two request templates and the reasoning on the engine, the kwargs-only request local", got, ts.LocalRequests)
	}
}
