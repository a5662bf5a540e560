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

package server

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/sim/engine"
	hftok "github.com/kvrouter/kvrouter/internal/tokenizer"
	"github.com/kvrouter/kvrouter/internal/tokenizer/tokenizertest"
)

// startReal starts an engine tokenizing with the llama3 fixture, as --tokenizer does.
func startReal(t *testing.T) (fixture, *hftok.Tokenizer) {
	t.Helper()
	tok, err := LoadTokenizer(tokenizertest.Dir(t, "llama3"))
	if err != nil {
		t.Fatal(err)
	}
	f := start(t, func(c *engine.Config, o *Options) {
		o.RealTokenizer, c.OutputVocab = tok, outputVocab(tok)
	})
	return f, tok
}

func tokenIDs(t *testing.T, v any) []uint32 {
	t.Helper()
	b, _ := json.Marshal(v)
	var out []uint32
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRealTokenizerTokenize(t *testing.T) {
	f, tok := startReal(t)
	text := "Hello <|eot_id|> world, café 🙂"
	for _, add := range []bool{true, false} {
		b, _ := json.Marshal(map[string]any{"prompt": text, "add_special_tokens": add})
		code, m := post(t, f.url+"/tokenize", string(b))
		if code != 200 || !slices.Equal(tokenIDs(t, m["tokens"]), tok.Encode(text, add)) {
			t.Fatalf("add_special_tokens=%v: %d %v, want %v", add, code, m["tokens"], tok.Encode(text, add))
		}
	}
	msgs := `[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]`
	want, err := tok.EncodeChat(hftok.ChatInput{Messages: json.RawMessage(msgs), AddGenerationPrompt: true}, false)
	if err != nil {
		t.Fatal(err)
	}
	code, m := post(t, f.url+"/tokenize", `{"messages":`+msgs+`}`)
	if code != 200 || !slices.Equal(tokenIDs(t, m["tokens"]), want) {
		t.Fatalf("chat: %d %v, want %v", code, m["tokens"], want)
	}
	// continue_final_message leaves the last message open, without the generation prompt.
	want, err = tok.EncodeChat(hftok.ChatInput{Messages: json.RawMessage(msgs), ContinueFinalMessage: true}, false)
	if err != nil {
		t.Fatal(err)
	}
	code, m = post(t, f.url+"/tokenize", `{"messages":`+msgs+`,"add_generation_prompt":false,"continue_final_message":true}`)
	if code != 200 || !slices.Equal(tokenIDs(t, m["tokens"]), want) {
		t.Fatalf("continue_final_message: %d %v, want %v", code, m["tokens"], want)
	}
}

func TestRealTokenizerGeneratesValidIDs(t *testing.T) {
	f, tok := startReal(t)
	vocab := outputVocab(tok)
	if len(vocab) < 16 {
		t.Fatalf("output vocabulary of %d ids", len(vocab))
	}
	code, m := post(t, f.url+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":12,"seed":7}`)
	if code != 200 {
		t.Fatalf("%d %v", code, m)
	}
	usage := m["usage"].(map[string]any)
	prompt := tok.Encode("Once upon a time", true)
	if int(usage["prompt_tokens"].(float64)) != len(prompt) {
		t.Fatalf("prompt_tokens %v, want %d", usage["prompt_tokens"], len(prompt))
	}
	text := m["choices"].([]any)[0].(map[string]any)["text"].(string)
	if text == "" {
		t.Fatal("no text")
	}
	// The text is the decoding of ids from the output vocabulary: it re-encodes to ids all
	// below the vocabulary size, none of them special (the fixture's special ids are 128000+).
	for _, id := range tok.Encode(text, false) {
		if int(id) >= tok.VocabSize() || id >= 128000 {
			t.Fatalf("generated text %q holds id %d", text, id)
		}
	}
	code, m = post(t, f.url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4}`)
	if code != 200 || m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"] == "" {
		t.Fatalf("chat: %d %v", code, m)
	}
}

func TestRealTokenizerTemplateErrorIs400(t *testing.T) {
	f, _ := startReal(t)
	code, m := post(t, f.url+"/tokenize", `{"messages":[{"role":"user","content":"Hi"}],"chat_template":"{{ raise_exception('no') }}"}`)
	if code != 400 {
		t.Fatalf("%d %v", code, m)
	}
}
