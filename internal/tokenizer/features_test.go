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
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fixtureJSON returns a model's fixture tokenizer.json as a generic tree, to derive variants from.
func fixtureJSON(t *testing.T, model string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", model, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func loadVariant(t *testing.T, m map[string]any) (*Tokenizer, error) {
	t.Helper()
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return Load(raw, nil)
}

func mustVariant(t *testing.T, m map[string]any) *Tokenizer {
	t.Helper()
	tok, err := loadVariant(t, m)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestUnsupportedFeaturesAreErrUnsupported(t *testing.T) {
	cases := map[string]func(m map[string]any){
		"Unigram model":   func(m map[string]any) { m["model"].(map[string]any)["type"] = "Unigram" },
		"WordPiece model": func(m map[string]any) { m["model"].(map[string]any)["type"] = "WordPiece" },
		"byte_fallback":   func(m map[string]any) { m["model"].(map[string]any)["byte_fallback"] = true },
		"subword prefix":  func(m map[string]any) { m["model"].(map[string]any)["continuing_subword_prefix"] = "##" },
		"dropout":         func(m map[string]any) { m["model"].(map[string]any)["dropout"] = 0.1 },
		"Lowercase":       func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Lowercase"} },
		"NFKC in Sequence": func(m map[string]any) {
			m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFKC"}}}
		},
		"Metaspace":         func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁"} },
		"Whitespace":        func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Whitespace"} },
		"no pre_tokenizer":  func(m map[string]any) { m["pre_tokenizer"] = nil },
		"Split Removed":     func(m map[string]any) { setSplit(m, "behavior", "Removed") },
		"Split inverted":    func(m map[string]any) { setSplit(m, "invert", true) },
		"Split on a string": func(m map[string]any) { setSplit(m, "pattern", map[string]any{"String": " "}) },
		"bad Split regex":   func(m map[string]any) { setSplit(m, "pattern", map[string]any{"Regex": "(?<"}) },
		"Metaspace decoder": func(m map[string]any) { m["decoder"] = map[string]any{"type": "Metaspace"} },
		"no decoder":        func(m map[string]any) { m["decoder"] = nil },
		"RobertaProcessing": func(m map[string]any) { m["post_processor"] = map[string]any{"type": "RobertaProcessing"} },
		"truncation":        func(m map[string]any) { m["truncation"] = map[string]any{"max_length": 512} },
		"fixed padding":     func(m map[string]any) { m["padding"] = map[string]any{"strategy": map[string]any{"Fixed": 512}} },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			m := fixtureJSON(t, "llama3")
			mutate(m)
			_, err := loadVariant(t, m)
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("got %v, want an ErrUnsupported", err)
			}
		})
	}
	m := fixtureJSON(t, "llama3")
	m["padding"] = map[string]any{"strategy": "BatchLongest", "direction": "Right", "pad_id": 0}
	if _, err := loadVariant(t, m); err != nil {
		t.Errorf("padding to the batch's longest leaves one sequence alone: got %v", err)
	}
	if _, err := Load([]byte("{"), nil); err == nil || errors.Is(err, ErrUnsupported) {
		t.Errorf("broken JSON: got %v, want a plain error", err)
	}
}

func setSplit(m map[string]any, key string, v any) {
	pre := m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)
	pre[0].(map[string]any)[key] = v
}

// A Split pattern without a hand-written scanner goes through regexp2 and tokenizes the same.
func TestUnknownPatternFallsBackToRegexp2(t *testing.T) {
	for _, model := range models {
		m := fixtureJSON(t, model)
		pre := m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)
		pat := pre["pattern"].(map[string]any)
		pat["Regex"] = "(?:" + pat["Regex"].(string) + ")"
		tok := mustVariant(t, m)
		if tok.pre.scan != nil || len(tok.pre.splits) != 1 {
			t.Fatalf("%s: the rewritten pattern should not match a scanner", model)
		}
		ref := loadFixture(t, model)
		for _, c := range readExpected(t, model).Encode {
			if strings.Contains(c.Text, "ſ") {
				continue // regexp2 does not fold ſ to s; see referencePattern
			}
			if got, want := tok.Encode(c.Text, false), ref.Encode(c.Text, false); !slices.Equal(got, want) {
				t.Fatalf("%s %q: regexp2 path %v, scanner %v", model, c.Text, got, want)
			}
		}
	}
}

// GPT-2 style files pre-tokenize with a plain ByteLevel; its pattern has a scanner too.
func TestByteLevelWithRegex(t *testing.T) {
	m := fixtureJSON(t, "qwen2_5")
	m["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	tok := mustVariant(t, m)
	if tok.pre.scan == nil {
		t.Fatal("the GPT-2 pattern should use its scanner")
	}
	var want []uint32
	for _, w := range []string{"Hello", " world", " ", " 123", " it", "'s"} {
		want = tok.model.encodeWord(want, w)
	}
	if got := tok.Encode("Hello world  123 it's", false); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// Llama 3.1 and later files add BOS with a TemplateProcessing inside a Sequence.
func TestTemplateProcessingAddsBOS(t *testing.T) {
	m := fixtureJSON(t, "llama3")
	m["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{
		map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
		map[string]any{"type": "TemplateProcessing",
			"single": []any{
				map[string]any{"SpecialToken": map[string]any{"id": "<|begin_of_text|>", "type_id": 0}},
				map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
			},
			"special_tokens": map[string]any{"<|begin_of_text|>": map[string]any{"id": "<|begin_of_text|>", "ids": []any{128000}, "tokens": []any{"<|begin_of_text|>"}}},
		},
	}}
	tok := mustVariant(t, m)
	plain := tok.Encode("Hello world", false)
	if got := tok.Encode("Hello world", true); !slices.Equal(got, append([]uint32{128000}, plain...)) {
		t.Fatalf("addSpecial: got %v, want BOS then %v", got, plain)
	}
	if got := tok.Encode("", true); !slices.Equal(got, []uint32{128000}) {
		t.Fatalf("empty text with addSpecial: got %v", got)
	}
}

// The flags of added tokens, as HF's AddedVocabulary applies them.
func TestAddedTokenFlags(t *testing.T) {
	m := fixtureJSON(t, "qwen2_5")
	m["normalizer"] = map[string]any{"type": "NFC"}
	added := m["added_tokens"].([]any)
	add := func(id int, content string, flags map[string]bool) {
		tok := map[string]any{"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": false}
		for k, v := range flags {
			tok[k] = v
		}
		added = append(added, tok)
	}
	add(160000, "<L>", map[string]bool{"lstrip": true})
	add(160001, "<R>", map[string]bool{"rstrip": true})
	add(160002, "<W>", map[string]bool{"single_word": true})
	add(160003, "é", map[string]bool{"normalized": true})
	add(160004, "<LR>", map[string]bool{"lstrip": true, "rstrip": true})
	m["added_tokens"] = added
	tok := mustVariant(t, m)
	enc := func(s string) []uint32 { return tok.Encode(s, false) }
	cases := []struct {
		in   string
		want []uint32
	}{
		{"a  <L> b", slices.Concat(enc("a"), []uint32{160000}, enc(" b"))},
		{"a <R>  b", slices.Concat(enc("a "), []uint32{160001}, enc("b"))},
		{"a \t<LR>\n b", slices.Concat(enc("a"), []uint32{160004}, enc("b"))},
		{"a <W> b", slices.Concat(enc("a "), []uint32{160002}, enc(" b"))},
		{"cafe\u0301!", slices.Concat(enc("caf"), []uint32{160003}, enc("!"))},
		{"<|im_start|><L>", []uint32{151644, 160000}},
	}
	for _, c := range cases {
		if got := enc(c.in); !slices.Equal(got, c.want) {
			t.Errorf("%q: got %v, want %v", c.in, got, c.want)
		}
	}
	if got := enc("a<W> b"); slices.Contains(got, 160002) {
		t.Errorf("a<W> b: got %v, a single-word token glued to a word is text", got)
	}
}

func TestInvalidUTF8IsReplaced(t *testing.T) {
	tok := loadFixture(t, "qwen2_5")
	if got, want := tok.Encode("a\xffb", false), tok.Encode("a\uFFFDb", false); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestAppendEncodeAppends(t *testing.T) {
	tok := loadFixture(t, "llama3")
	dst := []uint32{1, 2, 3}
	got := tok.AppendEncode(dst, "Hello world", false)
	if !slices.Equal(got, slices.Concat([]uint32{1, 2, 3}, tok.Encode("Hello world", false))) {
		t.Fatalf("got %v", got)
	}
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. Ünïcödé, 你好. ", 50)
	for _, m := range models {
		tok := loadFixture(t, m)
		buf := make([]uint32, 0, 4096)
		tok.AppendEncode(buf, text, false) // warm the word cache
		if n := testing.AllocsPerRun(20, func() { buf = tok.AppendEncode(buf[:0], text, false) }); n != 0 {
			t.Errorf("%s: AppendEncode with a warm cache and room in dst allocates %v times", m, n)
		}
	}
}

func TestVocabSize(t *testing.T) {
	for model, want := range map[string]int{"llama3": 128256, "qwen2_5": 151665} {
		if got := loadFixture(t, model).VocabSize(); got != want {
			t.Errorf("%s: VocabSize() = %d, want %d", model, got, want)
		}
	}
}

func TestDecodeSpecialAndPartialBytes(t *testing.T) {
	tok := loadFixture(t, "qwen2_5")
	if got := tok.Decode([]uint32{151644}); got != "<|im_start|>" {
		t.Errorf("special token decodes to %q", got)
	}
	ids := tok.Encode("🙂", false)
	if len(ids) < 2 {
		t.Skip("emoji is one token")
	}
	if got := tok.Decode(ids[:1]); !strings.Contains(got, "\uFFFD") {
		t.Errorf("a partial character decodes to %q, want a replacement character", got)
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := loadFixture(t, "llama3")
	e := readExpected(t, "llama3")
	done := make(chan bool)
	for g := 0; g < 4; g++ {
		go func() {
			defer func() { done <- true }()
			for _, c := range e.Encode {
				if got := tok.Encode(c.Text, false); !slices.Equal(got, c.IDs) {
					t.Errorf("concurrent encode of %.40q differs", c.Text)
					return
				}
			}
			for _, c := range e.Chat {
				ids, err := tok.EncodeChat(ChatInput{Messages: c.Messages, AddGenerationPrompt: c.AddGenerationPrompt}, false)
				if err != nil || !slices.Equal(ids, c.IDs) {
					t.Errorf("concurrent chat %s differs (%v)", c.Name, err)
					return
				}
			}
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
