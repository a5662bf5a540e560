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
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
)

// reference is what an engine (vLLM's pydantic models; here encoding/json into a map, which is
// exact about key names and takes the last of repeated keys like Python's json) reads from a
// request body, for the fields the router routes by.
type reference struct {
	fields map[string]json.RawMessage
	req    inference
	status int // what the router must answer with no engine behind it: 400, 404 or 503
}

func decodeReference(kind apiKind, body []byte) reference {
	var ref reference
	if err := json.Unmarshal(body, &ref.fields); err != nil || ref.fields == nil {
		ref.status = http.StatusBadRequest
		return ref
	}
	get := func(k string, dst any) bool {
		v, ok := ref.fields[k]
		if !ok || string(v) == "null" {
			return true
		}
		return json.Unmarshal(v, dst) == nil
	}
	r := &ref.req
	ok := get("model", &r.Model) && get("stream", &r.Stream) && get("max_tokens", &r.MaxTokens) &&
		get("max_completion_tokens", &r.MaxCompletionTokens) && get("cache_salt", &r.CacheSalt) &&
		get("add_special_tokens", &r.AddSpecialTokens) && get("add_generation_prompt", &r.AddGenerationPrompt) &&
		get("continue_final_message", &r.ContinueFinalMessage) && get("chat_template", &r.ChatTemplate)
	nonNull := func(k string) json.RawMessage {
		if v := ref.fields[k]; string(v) != "null" {
			return v
		}
		return nil
	}
	r.Prompt, r.Messages = nonNull("prompt"), nonNull("messages")
	switch {
	case !ok, r.Model == "",
		kind == kindCompletion && r.Prompt == nil,
		kind == kindChat && (r.Messages == nil || r.Messages[0] != '['):
		ref.status = http.StatusBadRequest
	case r.Model != "m":
		ref.status = http.StatusNotFound
	default:
		ref.status = http.StatusServiceUnavailable // accepted; no engine to send it to
	}
	return ref
}

// FuzzParseRequest drives the router's whole parse of /v1/completions and /v1/chat/completions
// bodies (the handler, with no engine behind it) and checks it against encoding/json: no panic;
// every body gets an OpenAI-style error whose code is its status; the status is 400 exactly for
// the bodies an engine could not read or that lack a model, prompt or messages, 404 for an
// unknown model, and 503 (no engine ready) for the rest; and for those accepted, the fields the
// router routes by (model, stream, token limits, cache salt, prompt or messages, token-id
// prompts) are what encoding/json reads.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"hello"}`,
		`{"model":"m","prompt":[1,2,3],"max_tokens":4,"stream":true}`,
		`{"model":"m","prompt":[[7,8],[9]],"cache_salt":"s"}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":3}`,
		`{"model":"m","messages":"hi"}`,
		`{"mod\u0065l":"m","prompt":"x"}`,
		`{"model":"m","model":"n","prompt":"x","stream":"yes"}`,
		`{"model":5,"prompt":"x"}`,
		`{"model":"m","prompt":"x","max_tokens":1.5}`,
		`{"model":"m","prompt":[4294967296]}`,
		`{"model":"m","prompt":"` + "\xff\xfe" + `"}`,
		`{"model":"m","prompt":`,
		`[]`, `null`, ``,
	} {
		f.Add(byte(0), []byte(s))
		f.Add(byte(1), []byte(s))
	}
	s := New(Config{Model: "m"}, logr.Discard(), nil, nil, loadsignal.NewTracker(), prometheus.NewRegistry())
	h := s.Handler()
	f.Fuzz(func(t *testing.T, k byte, body []byte) {
		kind, path := kindCompletion, "/v1/completions"
		if k%2 == 1 {
			kind, path = kindChat, "/v1/chat/completions"
		}
		ref := decodeReference(kind, body)

		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
		var e struct {
			Error *struct {
				Message string `json:"message"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == nil || e.Error.Message == "" || e.Error.Code != rec.Code {
			t.Fatalf("status %d with body %q: not an OpenAI error", rec.Code, rec.Body.Bytes())
		}
		if rec.Code != ref.status {
			t.Fatalf("router answered %d (%s), encoding/json reading says %d", rec.Code, e.Error.Message, ref.status)
		}
		if ref.status != http.StatusServiceUnavailable {
			return
		}

		fields, err := topLevel(body)
		if err != nil {
			t.Fatalf("accepted, yet topLevel fails: %v", err)
		}
		got, err := parseInference(fields)
		if err != nil {
			t.Fatalf("accepted, yet parseInference fails: %v", err)
		}
		want := ref.req
		eqInt := func(a, b *int) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
		if got.Model != want.Model || got.Stream != want.Stream || got.CacheSalt != want.CacheSalt ||
			!eqInt(got.MaxTokens, want.MaxTokens) || !eqInt(got.MaxCompletionTokens, want.MaxCompletionTokens) ||
			!bytes.Equal(got.Prompt, want.Prompt) || !bytes.Equal(got.Messages, want.Messages) {
			t.Fatalf("router read %+v, encoding/json %+v", got, want)
		}
		if kind != kindCompletion {
			return
		}
		ids, ok := promptIDs(got.Prompt)
		var flat []uint32
		var batch [][]uint32
		switch {
		case json.Unmarshal(want.Prompt, &flat) == nil && len(flat) > 0:
			if !ok || !slices.Equal(ids, flat) {
				t.Fatalf("prompt ids %v (%v), encoding/json %v", ids, ok, flat)
			}
		case json.Unmarshal(want.Prompt, &batch) == nil && len(batch) > 0 && len(batch[0]) > 0:
			if !ok || !slices.Equal(ids, batch[0]) {
				t.Fatalf("prompt ids %v (%v), encoding/json's first prompt %v", ids, ok, batch[0])
			}
		case ok:
			t.Fatalf("prompt %q read as ids %v, which encoding/json does not", want.Prompt, ids)
		}
	})
}
