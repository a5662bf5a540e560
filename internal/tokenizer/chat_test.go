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

package tokenizer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestChatToolsAsVLLMDumpsThem(t *testing.T) {
	tok := loadFixture(t, "qwen2_5")
	got, err := tok.RenderChat(ChatInput{
		Messages: []byte(`[
			{"role": "user", "content": "Weather in Paris?"},
			{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"C\"}"}}]},
			{"role": "tool", "tool_call_id": "c1", "content": "21"}
		]`),
		Tools:               []byte(`[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]`),
		AddGenerationPrompt: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		// model_dump order, description null since absent
		`{"type": "function", "function": {"name": "get_weather", "description": null, "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}`,
		// arguments decoded from their JSON string, so tojson writes an object in request order
		`{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}`,
		"<|im_start|>user\n<tool_response>\n21\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("render lacks %q:\n%s", want, got)
		}
	}
}

func TestChatContinueFinalMessage(t *testing.T) {
	tok := loadFixture(t, "qwen2_5")
	got, err := tok.RenderChat(ChatInput{
		Messages:             []byte(`[{"role": "user", "content": "Count"}, {"role": "assistant", "content": "1, 2, "}]`),
		ContinueFinalMessage: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Qwen's template keeps the message as is, so the cut keeps its trailing space.
	if !strings.HasSuffix(got, "<|im_start|>assistant\n1, 2, ") {
		t.Errorf("the render should stop right after the final message: %q", got)
	}
	// Llama 3's trims it, so the cut is after the stripped text.
	got, err = loadFixture(t, "llama3").RenderChat(ChatInput{
		Messages:             []byte(`[{"role": "user", "content": "Count"}, {"role": "assistant", "content": "1, 2, "}]`),
		ContinueFinalMessage: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got, "<|start_header_id|>assistant<|end_header_id|>\n\n1, 2,") {
		t.Errorf("the render should stop right after the stripped final message: %q", got)
	}
	_, err = tok.RenderChat(ChatInput{Messages: []byte(`[{"role": "user", "content": "x"}]`), AddGenerationPrompt: true, ContinueFinalMessage: true})
	if err == nil {
		t.Error("add_generation_prompt with continue_final_message must fail, as in vLLM")
	}
}

func TestChatTemplateOverrideKwargsAndClock(t *testing.T) {
	tok := loadFixture(t, "llama3")
	tok.chat.now = func() time.Time { return time.Date(2026, 3, 7, 9, 5, 0, 0, time.UTC) }
	got, err := tok.RenderChat(ChatInput{
		Messages:           []byte(`[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]`),
		ChatTemplate:       `{{ bos_token }}{{ strftime_now("%d %b %Y %-d %B %A %H:%M") }}|{{ messages[0].content }}|{{ flavour }}|{{ add_generation_prompt }}`,
		ChatTemplateKwargs: []byte(`{"flavour": "vanilla"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "<|begin_of_text|>07 Mar 2026 7 March Saturday 09:05|a\nb|vanilla|False"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestChatContentPartsForTemplatesThatLoopOverThem(t *testing.T) {
	tok := loadFixture(t, "llama3")
	got, err := tok.RenderChat(ChatInput{
		Messages:     []byte(`[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]`),
		ChatTemplate: `{% for m in messages %}{% for part in m['content'] %}[{{ part.text }}]{% endfor %}{% endfor %}`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != "[a][b]" {
		t.Errorf("got %q", got)
	}
}

func TestChatErrors(t *testing.T) {
	tok := loadFixture(t, "llama3")
	if _, err := tok.RenderChat(ChatInput{Messages: []byte(`[]`), ChatTemplate: `{{ raise_exception("no way") }}`}); err == nil || !strings.Contains(err.Error(), "no way") {
		t.Errorf("raise_exception: got %v", err)
	}
	if _, err := tok.RenderChat(ChatInput{Messages: []byte(`[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]`)}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("image content: got %v, want ErrUnsupported", err)
	}
	if _, err := tok.RenderChat(ChatInput{Messages: []byte(`{`)}); err == nil {
		t.Error("broken messages must fail")
	}
	bare, err := Load(mustRead(t, "testdata/llama3/tokenizer.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.RenderChat(ChatInput{Messages: []byte(`[]`)}); !errors.Is(err, ErrNoChatTemplate) {
		t.Errorf("no template: got %v", err)
	}
	if _, err := tok.RenderChat(ChatInput{Messages: []byte(`[]`), ChatTemplate: `{% for %}`}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a template the engine cannot parse: got %v, want ErrUnsupported", err)
	}
}

func TestChatSpecialTokensAreThoseSet(t *testing.T) {
	tok := loadFixture(t, "qwen2_5") // bos_token is null there
	got, err := tok.RenderChat(ChatInput{
		Messages:     []byte(`[]`),
		ChatTemplate: `{{ bos_token is defined }}|{{ eos_token }}|{{ additional_special_tokens[0] }}`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "False|<|im_end|>|<|im_start|>"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// A model directory's chat_template.jinja is the template transformers uses, over
// tokenizer_config.json's.
func TestLoadDirReadsChatTemplateFile(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "qwen2_5", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ChatTemplateFile), []byte("FILE:{{ messages[0]['content'] }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tok.RenderChat(ChatInput{Messages: []byte(`[{"role":"user","content":"hi"}]`)})
	if err != nil || got != "FILE:hi" {
		t.Fatalf("render %q %v: want chat_template.jinja's template", got, err)
	}
}
