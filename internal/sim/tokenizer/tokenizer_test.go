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
	"slices"
	"testing"
)

func TestEncodeDeterministicAndRoundTrips(t *testing.T) {
	tok := New()
	text := "Hello, world!  The KV-cache   router's 42 blocks\n\nnext line"
	a := tok.Encode(text, true)
	b := New().Encode(text, true)
	if !slices.Equal(a, b) {
		t.Fatal("two tokenizers disagree on the same text")
	}
	if a[0] != BeginOfText {
		t.Fatalf("first token %d, want BOS", a[0])
	}
	if got := tok.Decode(a[1:], false); got != text {
		t.Fatalf("round trip = %q", got)
	}
	if got := tok.Decode(a, true); got != text {
		t.Fatalf("skip-special round trip = %q", got)
	}
	// About 4 bytes per token for English prose.
	prose := "The quick brown fox jumps over the lazy dog and keeps running through the forest."
	if n := len(tok.Encode(prose, false)); n < len(prose)/7 || n > len(prose)/3 {
		t.Fatalf("%d tokens for %d bytes", n, len(prose))
	}
	for _, id := range a {
		if id >= VocabSize {
			t.Fatalf("id %d out of vocabulary", id)
		}
	}
}

func TestPrefixStability(t *testing.T) {
	tok := New()
	// A shared prefix yields a shared token prefix (what makes prefix caching work across requests),
	// up to the piece that straddles the boundary.
	a := tok.Encode("You are a helpful assistant. Question one", true)
	b := tok.Encode("You are a helpful assistant. Another question", true)
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	if n < 7 {
		t.Fatalf("only %d shared tokens", n)
	}
}

func TestChatTemplate(t *testing.T) {
	tok := New()
	msgs := []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi there"}}
	gen := tok.ApplyChatTemplate(msgs, ChatOptions{AddGenerationPrompt: true})
	want := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>" +
		"<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>" +
		"<|start_header_id|>assistant<|end_header_id|>\n\n"
	if got := tok.Decode(gen, false); got != want {
		t.Fatalf("template = %q", got)
	}
	plain := tok.ApplyChatTemplate(msgs, ChatOptions{})
	if !slices.Equal(plain, gen[:len(plain)]) || len(plain) >= len(gen) {
		t.Fatal("generation prompt must only append")
	}
	cont := tok.ApplyChatTemplate(msgs, ChatOptions{ContinueFinalMessage: true})
	if cont[len(cont)-1] == EndOfTurn {
		t.Fatal("continue_final_message must leave the last turn open")
	}
}

func TestGeneratedTextRetokenizes(t *testing.T) {
	tok := New()
	g1, g2 := NewGenerator(7), NewGenerator(7)
	var ids []uint32
	text := ""
	for i := 0; i < 50; i++ {
		id, w := g1.Next()
		id2, _ := g2.Next()
		if id != id2 {
			t.Fatal("same seed, different stream")
		}
		ids = append(ids, id)
		text += w
	}
	if !slices.Equal(tok.Encode(text, false), ids) {
		t.Fatal("generated text does not re-tokenize to the generated ids")
	}
	if tok.Decode(ids, false) != text {
		t.Fatal("generated ids do not decode to the generated text")
	}
	if a, _ := NewGenerator(8).Next(); a == ids[0] {
		if b, _ := NewGenerator(9).Next(); b == ids[0] {
			t.Fatal("seeds do not change the stream")
		}
	}
}
