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

// Package tokenizer is the simulator's stand-in for a model tokenizer: deterministic, fast, with
// Llama-3-style special tokens and chat template, so that the router (through /tokenize) and the
// engine agree on token ids exactly, which is all prefix-cache routing needs.
//
// Text is split into pieces: a run of letters or digits together with at most one leading space,
// a run of other whitespace, or a single other character. A piece's id is a 64-bit FNV-1a hash of
// its UTF-8 bytes reduced into [0, SpecialBase). Different pieces may share an id (like merges in
// a real BPE vocabulary, nothing depends on uniqueness). Piece lengths average about 4-5 bytes of
// English, close to the ~4 characters per token of real tokenizers, so token counts are realistic.
//
// Ids map back to text through a bounded reverse table filled as text is tokenized, plus every word
// the text generator can emit; unknown ids detokenize to "<|id|>".
package tokenizer

import (
	"fmt"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Special token ids (Llama 3 numbering).
const (
	SpecialBase     = 128000
	BeginOfText     = 128000
	EndOfText       = 128001
	StartHeader     = 128006
	EndHeader       = 128007
	EndOfTurn       = 128009
	VocabSize       = 128256
	maxReverseTable = 1 << 20
)

var specialText = map[uint32]string{
	BeginOfText: "<|begin_of_text|>",
	EndOfText:   "<|end_of_text|>",
	StartHeader: "<|start_header_id|>",
	EndHeader:   "<|end_header_id|>",
	EndOfTurn:   "<|eot_id|>",
}

// Tokenizer is safe for concurrent use.
type Tokenizer struct {
	mu      sync.RWMutex
	reverse map[uint32]string
}

// New returns a tokenizer whose reverse table already knows the generator's words.
func New() *Tokenizer {
	t := &Tokenizer{reverse: make(map[uint32]string, len(words)+1024)}
	for _, w := range words {
		t.reverse[PieceID(" "+w)] = " " + w
	}
	return t
}

// PieceID is the id of one piece.
func PieceID(piece string) uint32 {
	const offset64, prime64 = 14695981039346656037, 1099511628211
	h := uint64(offset64)
	for i := 0; i < len(piece); i++ {
		h ^= uint64(piece[i])
		h *= prime64
	}
	return uint32(h % SpecialBase)
}

// Encode tokenizes text; with addBOS the sequence starts with <|begin_of_text|>.
// Special-token text inside the input is treated as plain text, as vLLM does for user content.
func (t *Tokenizer) Encode(text string, addBOS bool) []uint32 {
	out := make([]uint32, 0, len(text)/4+2)
	if addBOS {
		out = append(out, BeginOfText)
	}
	return t.appendText(out, text)
}

func (t *Tokenizer) appendText(out []uint32, text string) []uint32 {
	first := len(out)
	for i := 0; i < len(text); {
		n := pieceLen(text[i:])
		out = append(out, PieceID(text[i:i+n]))
		i += n
	}
	// Remember unseen pieces for Decode; the table is bounded so a long-running sim cannot grow
	// without limit on unique text.
	t.mu.RLock()
	missing := false
	for _, id := range out[first:] {
		if _, ok := t.reverse[id]; !ok {
			missing = true
			break
		}
	}
	full := len(t.reverse) >= maxReverseTable
	t.mu.RUnlock()
	if !missing || full {
		return out
	}
	t.mu.Lock()
	k := first
	for i := 0; i < len(text); k++ {
		n := pieceLen(text[i:])
		if _, ok := t.reverse[out[k]]; !ok && len(t.reverse) < maxReverseTable {
			t.reverse[out[k]] = text[i : i+n]
		}
		i += n
	}
	t.mu.Unlock()
	return out
}

// pieceLen returns the byte length of the first piece of s (len(s) > 0).
func pieceLen(s string) int {
	r, size := utf8.DecodeRuneInString(s)
	start := 0
	if r == ' ' && len(s) > 1 {
		r2, size2 := utf8.DecodeRuneInString(s[1:])
		if isWord(r2) {
			start, r, size = 1, r2, size2
		}
	}
	switch {
	case isWord(r):
		i := start + size
		for i < len(s) {
			r, n := utf8.DecodeRuneInString(s[i:])
			if !isWord(r) {
				break
			}
			i += n
		}
		return i
	case unicode.IsSpace(r):
		i := size
		for i < len(s) {
			r, n := utf8.DecodeRuneInString(s[i:])
			// Leave a final space to lead the next word, as BPE tokenizers do.
			if !unicode.IsSpace(r) || (r == ' ' && i+n < len(s) && isWordStart(s[i+n:])) {
				break
			}
			i += n
		}
		return i
	default:
		return size
	}
}

func isWord(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '\'' }

func isWordStart(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isWord(r)
}

// Decode renders ids as text.
func (t *Tokenizer) Decode(ids []uint32, skipSpecial bool) string {
	var b strings.Builder
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, id := range ids {
		if s, ok := specialText[id]; ok {
			if !skipSpecial {
				b.WriteString(s)
			}
			continue
		}
		if s, ok := t.reverse[id]; ok {
			b.WriteString(s)
			continue
		}
		fmt.Fprintf(&b, "<|%d|>", id)
	}
	return b.String()
}

// Message is one chat message; Content is the concatenated text of its parts.
type Message struct {
	Role    string
	Content string
}

// ChatOptions mirror the /tokenize and chat request fields that change the template output.
type ChatOptions struct {
	AddGenerationPrompt  bool
	ContinueFinalMessage bool
	AddSpecialTokens     bool // adds a second BOS, as vLLM does when asked (rarely wanted)
}

// ApplyChatTemplate renders messages with the Llama 3 template:
//
//	<|begin_of_text|>{ <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> }...
//	[<|start_header_id|>assistant<|end_header_id|>\n\n]   (add_generation_prompt)
//
// With ContinueFinalMessage the last message is left open (no <|eot_id|>) so the model continues it.
func (t *Tokenizer) ApplyChatTemplate(msgs []Message, opt ChatOptions) []uint32 {
	out := make([]uint32, 0, 64)
	if opt.AddSpecialTokens {
		out = append(out, BeginOfText)
	}
	out = append(out, BeginOfText)
	for i, m := range msgs {
		out = append(out, StartHeader)
		out = t.appendText(out, m.Role)
		out = append(out, EndHeader)
		out = t.appendText(out, "\n\n"+m.Content)
		if !(opt.ContinueFinalMessage && i == len(msgs)-1) {
			out = append(out, EndOfTurn)
		}
	}
	if opt.AddGenerationPrompt && !opt.ContinueFinalMessage {
		out = append(out, StartHeader)
		out = t.appendText(out, "assistant")
		out = append(out, EndHeader)
		out = t.appendText(out, "\n\n")
	}
	return out
}
