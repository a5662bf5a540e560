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
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unicode/utf8"
)

var models = []string{"llama3", "qwen2_5"}

type expected struct {
	Model  string `json:"model"`
	Encode []struct {
		Text       string   `json:"text"`
		IDs        []uint32 `json:"ids"`
		IDsSpecial []uint32 `json:"ids_special"` // absent where equal to IDs
	} `json:"encode"`
	Chat []struct {
		Name                string          `json:"name"`
		Messages            json.RawMessage `json:"messages"`
		AddGenerationPrompt bool            `json:"add_generation_prompt"`
		Rendered            string          `json:"rendered"`
		IDs                 []uint32        `json:"ids"`
	} `json:"chat"`
}

func readExpected(t testing.TB, model string) *expected {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", model, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var e expected
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	return &e
}

func loadFixture(t testing.TB, model string) *Tokenizer {
	t.Helper()
	tok, err := LoadDir(filepath.Join("testdata", model))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// checkExpected asserts that tok reproduces every captured output of model.
func checkExpected(t *testing.T, tok *Tokenizer, model string) {
	e := readExpected(t, model)
	if len(e.Encode) == 0 || len(e.Chat) == 0 {
		t.Fatalf("%s: empty fixture", model)
	}
	for i, c := range e.Encode {
		if got := tok.Encode(c.Text, false); !slices.Equal(got, c.IDs) {
			t.Errorf("%s encode[%d] %.60q:\n got %v\nwant %v", model, i, c.Text, head(got), head(c.IDs))
		}
		wantSpecial := c.IDsSpecial
		if wantSpecial == nil { // written only where it differs
			wantSpecial = c.IDs
		}
		if got := tok.Encode(c.Text, true); !slices.Equal(got, wantSpecial) {
			t.Errorf("%s encode[%d] with special tokens %.60q:\n got %v\nwant %v", model, i, c.Text, head(got), head(wantSpecial))
		}
	}
	for i, c := range e.Chat {
		in := ChatInput{Messages: c.Messages, AddGenerationPrompt: c.AddGenerationPrompt}
		got, err := tok.RenderChat(in)
		if err != nil {
			t.Errorf("%s chat[%d] %s: %v", model, i, c.Name, err)
			continue
		}
		if got != c.Rendered {
			t.Errorf("%s chat[%d] %s render:\n got %q\nwant %q", model, i, c.Name, got, c.Rendered)
		}
		ids, err := tok.EncodeChat(in, false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, c.IDs) {
			t.Errorf("%s chat[%d] %s ids:\n got %v\nwant %v", model, i, c.Name, head(ids), head(c.IDs))
		}
	}
	t.Logf("%s: %d texts, %d chat renders match", model, len(e.Encode), len(e.Chat))
}

func head(ids []uint32) []uint32 {
	if len(ids) > 40 {
		return ids[:40]
	}
	return ids
}

func TestFixturesMatchReference(t *testing.T) {
	for _, m := range models {
		t.Run(m, func(t *testing.T) { checkExpected(t, loadFixture(t, m), m) })
	}
}

// TestFullTokenizers runs the same corpus against the unpruned files (hack/fetch-tokenizers.sh
// puts them in bin/tokenizers), which proves the pruning lost nothing that matters.
func TestFullTokenizers(t *testing.T) {
	dir := fullDir()
	if dir == "" {
		t.Skip("KVROUTER_TOKENIZER_FULL_DIR is not set")
	}
	for _, m := range models {
		t.Run(m, func(t *testing.T) {
			tok, err := LoadDir(filepath.Join(dir, m))
			if err != nil {
				t.Fatal(err)
			}
			checkExpected(t, tok, m)
		})
	}
}

func TestDecodeRoundTrips(t *testing.T) {
	for _, m := range models {
		tok := loadFixture(t, m)
		for i, c := range readExpected(t, m).Encode {
			if tok.nfc && !isNFC(c.Text) {
				continue // NFC changes the text; the ids decode to its composed form
			}
			if got := tok.Decode(tok.Encode(c.Text, false)); got != c.Text {
				t.Errorf("%s text %d: Decode(Encode(x)) = %q, want %q", m, i, got, c.Text)
			}
		}
	}
}

func isNFC(s string) bool {
	return utf8.ValidString(s) && normIsNFC(s)
}

// fullDir is KVROUTER_TOKENIZER_FULL_DIR, a relative path taken from the repository root (where
// hack/fetch-tokenizers.sh puts bin/tokenizers) rather than from this package's directory.
func fullDir() string {
	dir := os.Getenv("KVROUTER_TOKENIZER_FULL_DIR")
	if dir == "" || filepath.IsAbs(dir) {
		return dir
	}
	return filepath.Join("..", "..", dir)
}
