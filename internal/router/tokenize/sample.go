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

import "encoding/json"

// SampleCase is one request of the router's start check: tokenized in process and by an engine,
// the two must agree before the router trusts its own tokenizer.
type SampleCase struct {
	// Name says which case disagreed, in status and logs (the sample is ours, not a user's).
	Name string
	Chat bool
	// Completion form.
	Prompt           string
	AddSpecialTokens bool
	// Chat form, with the generation prompt added as chat requests do by default.
	Messages json.RawMessage
}

// StartSample is the start check's sample. It covers what tends to differ between tokenizer
// implementations: the pre-tokenizer's splits (spaces, digits, punctuation, newlines, non-ASCII),
// byte fallback for rare scripts and emoji, the special tokens of the common chat formats written
// in the text (parsed as special tokens on the engine: whichever the model does not know are
// plain text on both sides), the BOS the completions path adds, and the chat template.
var StartSample = []SampleCase{
	{Name: "english", Prompt: "The quick brown fox jumps over the lazy dog. It's 3:45pm; isn't it?", AddSpecialTokens: true},
	{Name: "whitespace-and-digits", Prompt: "  two leading spaces,\ttab\nnewline\n\n  indented 1234567890 3.14159 1e-9   trailing  ", AddSpecialTokens: true},
	{Name: "non-ascii", Prompt: "café naïve Zürich — 日本語のテキスト, 한국어, русский текст, emoji 🙂🚀 and math ∑∫√", AddSpecialTokens: true},
	{Name: "special-tokens", Prompt: "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|im_start|>system\nYou are helpful.<|im_end|>\n<|endoftext|>", AddSpecialTokens: false},
	{Name: "code", Prompt: "func main() {\n\tfmt.Println(\"hello, world\") // greet\n\treturn\n}\n", AddSpecialTokens: false},
	{Name: "chat", Chat: true, Messages: json.RawMessage(`[{"role":"system","content":"You are a concise assistant."},` +
		`{"role":"user","content":"What is a KV cache?"},{"role":"assistant","content":"Keys and values kept per token."},` +
		`{"role":"user","content":"And prefix caching, in one sentence?"}]`)},
}
