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

// End-to-end tests of the in-process tokenizer: vllm-sim engines tokenize with a real
// tokenizer.json fixture, the router with its own copy (or another model's, or a doctored one),
// and the router's index, computed from its own ids, must meet the engines' KV events.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/tokenize"
	"github.com/kvrouter/kvrouter/internal/routerapi"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
	"github.com/kvrouter/kvrouter/internal/tokenizer/tokenizertest"
	"github.com/kvrouter/kvrouter/test/fleettest"
)

// tokFleet starts n engines tokenizing with the fixture in dir.
func tokFleet(t *testing.T, n int, dir string) []*fleettest.Engine {
	var es []*fleettest.Engine
	for i := 0; i < n; i++ {
		es = append(es, fleettest.StartEngine(t, fmt.Sprintf("e%d", i), "1", "--tokenizer", dir))
	}
	return es
}

func tokenizerStatus(t *testing.T, st routerapi.Status) routerapi.Tokenizer {
	t.Helper()
	if st.Tokenizer == nil {
		t.Fatalf("no tokenizer block in status %+v", st)
	}
	return *st.Tokenizer
}

func degradation(st routerapi.Status, typ string) (routerapi.Degradation, bool) {
	for _, d := range st.Degradations {
		if d.Type == typ {
			return d, true
		}
	}
	return routerapi.Degradation{}, false
}

// engineTokens asks an engine's /tokenize; body is a /tokenize request.
func engineTokens(t *testing.T, e *fleettest.Engine, body string) []uint32 {
	t.Helper()
	resp, b := post(t, e.URL+"/tokenize", body)
	if resp.StatusCode != 200 {
		t.Fatalf("/tokenize: %d %s", resp.StatusCode, b)
	}
	var out struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal([]byte(b), &out); err != nil {
		t.Fatal(err)
	}
	return out.Tokens
}

func chatBody(messages string, maxTokens int) string {
	return fmt.Sprintf(`{"model":"m","messages":%s,"max_tokens":%d}`, messages, maxTokens)
}

// sharedPrefixText is a prompt long enough for many blocks, with words a pruned fixture may
// split into several tokens.
func sharedPrefixText(topic string, q int) string {
	return strings.Repeat("The router keeps "+topic+" prefixes on the engine that holds them. ", 30) + fmt.Sprintf("Question %d?", q)
}

func TestE2ELocalTokenizerMatchesEngines(t *testing.T) {
	fleettest.NeedBinaries(t)
	dir := tokenizertest.Dir(t, "llama3")
	es := tokFleet(t, 2, dir)
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, es), "--tokenizer", "local", "--tokenizer-dir", dir,
		"--tokenizer-verify-fraction", "1")
	r.WaitConnected(t, 2)
	r.WaitStatus(t, "in-process tokenizer verified", func(st routerapi.Status) bool {
		ts := tokenizerStatus(t, st)
		return ts.Source == "local" && ts.Verified
	})

	// The test's own copy of the tokenizer, the router's and the engines' agree on the
	// requests' prompts, in each form the router reads.
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	text := "Tokens in process: <|eot_id|> special, café 日本 🙂 and   spaces\n\tend"
	messages := `[{"role":"system","content":"Be brief."},{"role":"user","content":"Why route on the KV cache?"}]`
	tb, _ := json.Marshal(map[string]any{"model": "m", "prompt": text})
	if got, want := tok.Encode(text, true), engineTokens(t, es[0], string(tb)); !slices.Equal(got, want) {
		t.Fatalf("completion: in process %v, engine %v", got, want)
	}
	got, err := tok.EncodeChat(tokenizer.ChatInput{Messages: json.RawMessage(messages), AddGenerationPrompt: true}, false)
	if want := engineTokens(t, es[0], `{"model":"m","messages":`+messages+`}`); err != nil || !slices.Equal(got, want) {
		t.Fatalf("chat: in process %v (%v), engine %v", got, err, want)
	}

	listBody, _ := json.Marshal(map[string]any{"model": "m", "prompt": []string{text}, "max_tokens": 2})
	for _, req := range []struct{ path, body string }{
		{"/v1/completions", fleettest.Completion(text, 2, false)},
		{"/v1/completions", string(listBody)},
		{"/v1/chat/completions", chatBody(messages, 2)},
	} {
		if resp, b := post(t, r.URL+req.path, req.body); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", req.path, resp.StatusCode, b)
		}
	}
	// Each request was also tokenized on an engine (fraction 1) and compared.
	st := r.WaitStatus(t, "the requests verified", func(st routerapi.Status) bool {
		return tokenizerStatus(t, st).Verifications >= uint64(len(tokenize.StartSample)+3)
	})
	if ts := tokenizerStatus(t, st); ts.Mismatches != 0 || ts.LocalRequests != 3 || ts.Source != "local" {
		t.Fatalf("tokenizer %+v", ts)
	}

	// A shared prefix goes back to the engine holding it: the index, keyed by the router's own
	// ids, meets the blocks the engine announced from its.
	for _, kind := range []string{"completion", "chat"} {
		holders := map[string]int{}
		for q := 0; q < 4; q++ {
			body := fleettest.Completion(sharedPrefixText(kind, q), 2, false)
			path := "/v1/completions"
			if kind == "chat" {
				m, _ := json.Marshal([]map[string]string{{"role": "user", "content": sharedPrefixText(kind, q)}})
				body, path = chatBody(string(m), 2), "/v1/chat/completions"
			}
			resp, b := post(t, r.URL+path, body)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
			}
			holders[resp.Header.Get("X-Kvrouter-Endpoint")]++
			if q == 0 {
				time.Sleep(300 * time.Millisecond) // the first request's blocks arrive as events
			}
		}
		if len(holders) != 1 {
			t.Fatalf("%s: shared-prefix requests spread over %v", kind, holders)
		}
	}
	st = r.Status(t)
	if st.Router.Decisions["prefix"] < 6 || st.Router.TokenizeFailures != 0 {
		t.Fatalf("router %+v", st.Router)
	}
	fleettest.CheckConsistent(t, r, es)
}

func TestE2ELocalTokenizerStartMismatchFallsBack(t *testing.T) {
	fleettest.NeedBinaries(t)
	es := tokFleet(t, 2, tokenizertest.Dir(t, "llama3"))
	// Another model's tokenizer: the start check must catch it.
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, es), "--tokenizer-dir", tokenizertest.Dir(t, "qwen2_5"))
	r.WaitConnected(t, 2)
	st := r.WaitStatus(t, "start check mismatch", func(st routerapi.Status) bool {
		return tokenizerStatus(t, st).Mismatches > 0
	})
	ts := tokenizerStatus(t, st)
	d, ok := degradation(st, "TokenizerMismatch")
	if ts.Source != "engine" || ts.Verified || !ok || !strings.Contains(d.Message, "start check") {
		t.Fatalf("tokenizer %+v, degradations %+v", ts, st.Degradations)
	}
	holders := map[string]int{}
	for q := 0; q < 4; q++ {
		resp, b := post(t, r.URL+"/v1/completions", fleettest.Completion(sharedPrefixText("fallback", q), 2, false))
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		holders[resp.Header.Get("X-Kvrouter-Endpoint")]++
		if q == 0 {
			time.Sleep(300 * time.Millisecond)
		}
	}
	st = r.Status(t)
	if len(holders) != 1 || st.Router.Decisions["prefix"] < 3 || tokenizerStatus(t, st).LocalRequests != 0 {
		t.Fatalf("holders %v, router %+v, tokenizer %+v", holders, st.Router, st.Tokenizer)
	}
	if !strings.Contains(r.Proc.Output(), "disagrees with the engines") {
		t.Fatal("mismatch not logged")
	}
}

// rareText tokenizes, with the llama3 fixture, to at least one id that the start sample never
// produces.
const rareText = "A quokka and a zyzzyva walk into a xylophone bar."

// doctoredTokenizer writes a copy of the fixture in dir with the vocabulary ids of two tokens
// swapped: one that rareText needs and the start sample does not, and one neither uses. The
// copy agrees with the original on the start sample and disagrees on rareText.
func doctoredTokenizer(t *testing.T, dir string) string {
	t.Helper()
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sample := map[uint32]bool{}
	for _, c := range tokenize.StartSample {
		var ids []uint32
		if c.Chat {
			ids, err = tok.EncodeChat(tokenizer.ChatInput{Messages: c.Messages, AddGenerationPrompt: true}, false)
			if err != nil {
				t.Fatal(err)
			}
		} else {
			ids = tok.Encode(c.Prompt, c.AddSpecialTokens)
		}
		for _, id := range ids {
			sample[id] = true
		}
	}
	rare := map[uint32]bool{}
	for _, id := range tok.Encode(rareText, true) {
		rare[id] = true
	}
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]json.RawMessage
	var model map[string]json.RawMessage
	var vocab map[string]uint32
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(file["model"], &model); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(model["vocab"], &vocab); err != nil {
		t.Fatal(err)
	}
	var from, to string
	keys := make([]string, 0, len(vocab))
	for k := range vocab {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		id := vocab[k]
		switch {
		case from == "" && rare[id] && !sample[id]:
			from = k
		case to == "" && !rare[id] && !sample[id]:
			to = k
		}
	}
	if from == "" || to == "" {
		t.Fatalf("no token of %q outside the start sample in the fixture", rareText)
	}
	vocab[from], vocab[to] = vocab[to], vocab[from]
	must := func(b []byte, err error) json.RawMessage {
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	model["vocab"] = must(json.Marshal(vocab))
	file["model"] = must(json.Marshal(model))
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "tokenizer.json"), must(json.Marshal(file)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "tokenizer_config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestE2ELocalTokenizerVerificationCatchesRareMismatch(t *testing.T) {
	fleettest.NeedBinaries(t)
	dir := tokenizertest.Dir(t, "llama3")
	doctored := doctoredTokenizer(t, dir)
	es := tokFleet(t, 1, dir)
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, es), "--tokenizer-dir", doctored, "--tokenizer-verify-fraction", "1")
	r.WaitConnected(t, 1)
	r.WaitStatus(t, "start check passed", func(st routerapi.Status) bool { return tokenizerStatus(t, st).Source == "local" })

	if resp, b := post(t, r.URL+"/v1/completions", fleettest.Completion("An ordinary prompt.", 2, false)); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if resp, b := post(t, r.URL+"/v1/completions", fleettest.Completion(rareText, 2, false)); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	st := r.WaitStatus(t, "verification mismatch", func(st routerapi.Status) bool { return tokenizerStatus(t, st).Mismatches > 0 })
	ts := tokenizerStatus(t, st)
	d, ok := degradation(st, "TokenizerMismatch")
	if ts.Source != "engine" || !ts.Verified || ts.LastMismatch == nil || !ok || !strings.Contains(d.Message, "sampled for verification") {
		t.Fatalf("tokenizer %+v, degradations %+v", ts, st.Degradations)
	}
	// Neither the status nor the log quotes the prompt.
	if strings.Contains(d.Message, "quokka") || strings.Contains(r.Proc.Output(), "quokka") {
		t.Fatal("prompt text in the degradation or the log")
	}
	// Served on: tokenized on the engine now.
	if resp, _ := post(t, r.URL+"/v1/completions", fleettest.Completion(rareText, 2, false)); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if st := r.Status(t); tokenizerStatus(t, st).LocalRequests != 2 {
		t.Fatalf("tokenized in process after the mismatch: %+v", st.Tokenizer)
	}
}

// In --mode epp the picker decides through the same steps: prompts the gateway hands it are
// tokenized in process, verified, and routed to their prefix's holder.
func TestE2ELocalTokenizerInEPPMode(t *testing.T) {
	fleettest.NeedBinaries(t)
	dir := tokenizertest.Dir(t, "llama3")
	es := tokFleet(t, 2, dir)
	r := fleettest.StartEPPRouter(t, fleettest.WriteEndpoints(t, es), "--admission=false", "--tokenizer-dir", dir,
		"--tokenizer-verify-fraction", "1")
	r.WaitConnected(t, 2)
	r.WaitStatus(t, "in-process tokenizer verified", func(st routerapi.Status) bool { return tokenizerStatus(t, st).Source == "local" })
	g := fleettest.StartGateway(t, r.EPPAddr)
	for q := 0; q < 4; q++ {
		m, _ := json.Marshal([]map[string]string{{"role": "user", "content": sharedPrefixText("epp", q)}})
		if resp, b := post(t, g.URL+"/v1/chat/completions", chatBody(string(m), 2)); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		if q == 0 {
			time.Sleep(300 * time.Millisecond)
		}
	}
	st := r.WaitStatus(t, "the requests verified", func(st routerapi.Status) bool {
		return tokenizerStatus(t, st).Verifications >= uint64(len(tokenize.StartSample)+4)
	})
	if ts := tokenizerStatus(t, st); ts.LocalRequests != 4 || ts.Mismatches != 0 || st.Router.Decisions["prefix"] < 3 {
		t.Fatalf("tokenizer %+v, router %+v", ts, st.Router)
	}
}
