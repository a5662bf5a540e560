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

// Package tokenizer turns text and chat conversations into the token ids a vLLM engine computes
// for them, from the model's own tokenizer.json and tokenizer_config.json, so the router can hash
// prompt prefixes in process instead of asking an engine's /tokenize. It is shared by the router
// and vllm-sim, and imports no program.
//
// It is hand-written rather than taken from a library because it sits on the request hot path
// (prompts of 100K tokens at 100 requests a second) and must agree with Hugging Face `tokenizers`
// id for id: github.com/sugarme/tokenizer pre-tokenizes with Go's regexp, which cannot express the
// `\s+(?!\S)` lookahead every GPT-2-style pattern relies on, so it splits whitespace differently;
// github.com/daulet/tokenizers binds the Rust library and needs cgo. The known pre-tokenizer
// patterns are scanned by hand (pretok.go); any other pattern goes through regexp2, which is also
// the reference the scanners are fuzzed against.
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// ErrUnsupported wraps every "this tokenizer.json uses a feature we don't implement" error, so
// callers can tell it apart from a broken file and fall back to the engine's /tokenize.
var ErrUnsupported = errors.New("tokenizer: unsupported feature")

func unsupported(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, a...))
}

// Tokenizer is immutable after Load apart from its word cache, and safe for concurrent use.
type Tokenizer struct {
	model  *bpe
	pre    *preTokenizer
	nfc    bool
	added  *addedVocab
	prefix []uint32 // what the post-processor puts before the text when addSpecial
	suffix []uint32
	decode [][]byte // id -> the bytes the decoder makes of it
	size   int
	chat   *chatConfig
}

// Load builds a Tokenizer from the contents of tokenizer.json and tokenizer_config.json (the
// latter may be nil: no chat template, defaults).
func Load(tokenizerJSON, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t := &Tokenizer{}
	var err error
	// The cheap checks first, so a file we cannot handle is refused before the vocabulary loads.
	if t.nfc, err = loadNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, err = loadPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err = checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if isSet(f.Truncation) {
		return nil, unsupported("truncation in tokenizer.json")
	}
	if err = checkPadding(f.Padding); err != nil {
		return nil, err
	}
	if t.model, err = loadBPE(&f.Model); err != nil {
		return nil, err
	}
	if t.added, err = newAddedVocab(f.AddedTokens); err != nil {
		return nil, err
	}
	tokenID := func(s string) (uint32, bool) {
		for _, a := range f.AddedTokens {
			if a.Content == s {
				return a.ID, true
			}
		}
		id, ok := t.model.tokens[s]
		return id, ok
	}
	if t.prefix, t.suffix, err = loadPostProcessor(f.PostProcessor, tokenID); err != nil {
		return nil, err
	}
	t.buildDecode(f.AddedTokens)
	if t.chat, err = loadChatConfig(tokenizerConfigJSON); err != nil {
		return nil, err
	}
	// The string-keyed vocabularies served the load; encoding uses the tables built from them.
	t.model.tokens, t.model.vocab = nil, nil
	return t, nil
}

// LoadDir reads tokenizer.json and (if present) tokenizer_config.json from dir (a model directory
// or HF cache snapshot).
func LoadDir(dir string) (*Tokenizer, error) {
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	cj, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		cj = nil
	}
	tmpl, err := os.ReadFile(filepath.Join(dir, ChatTemplateFile))
	switch {
	case err == nil:
		if cj, err = WithChatTemplate(cj, tmpl); err != nil {
			return nil, err
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	return Load(tj, cj)
}

// ChatTemplateFile is where recent transformers save a model's chat template, beside (and in place
// of) tokenizer_config.json's chat_template; when both exist the file is the one transformers uses.
const ChatTemplateFile = "chat_template.jinja"

// WithChatTemplate returns tokenizer_config.json (nil: an empty one) with its chat_template
// replaced by the contents of chat_template.jinja.
func WithChatTemplate(tokenizerConfigJSON, template []byte) ([]byte, error) {
	cfg := map[string]json.RawMessage{}
	if len(tokenizerConfigJSON) > 0 {
		if err := json.Unmarshal(tokenizerConfigJSON, &cfg); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	t, err := json.Marshal(string(template))
	if err != nil {
		return nil, err
	}
	cfg["chat_template"] = t
	return json.Marshal(cfg)
}

// Encode tokenizes text as HF's tokenizer(text, add_special_tokens=addSpecial) does: added tokens
// (special or not) in the text are matched as tokens, as vLLM leaves split_special_tokens off.
func (t *Tokenizer) Encode(text string, addSpecial bool) []uint32 {
	return t.AppendEncode(nil, text, addSpecial)
}

// AppendEncode is Encode appending to dst; with a large enough dst and warm word cache it does not
// allocate.
func (t *Tokenizer) AppendEncode(dst []uint32, text string, addSpecial bool) []uint32 {
	if !utf8.ValidString(text) {
		// A Python str cannot hold invalid UTF-8, so there is no HF behaviour to match byte for
		// byte; each invalid byte becomes U+FFFD as Go's decoder reads it, which at least keeps
		// two routers agreeing with each other.
		text = sanitize(text)
	}
	if addSpecial {
		dst = append(dst, t.prefix...)
	}
	dst = t.added.split(text, dst, t.encodeSection)
	if addSpecial {
		dst = append(dst, t.suffix...)
	}
	return dst
}

// encodeSection handles text between added tokens: normalize, pre-tokenize, BPE.
func (t *Tokenizer) encodeSection(dst []uint32, s string) []uint32 {
	// QuickSpanString, unlike IsNormalString, does not allocate; it may stop short on text that
	// is in fact normal, which then only costs a copy.
	if t.nfc && norm.NFC.QuickSpanString(s) != len(s) {
		s = norm.NFC.String(s)
	}
	if t.added.normalized != nil {
		return t.added.splitNormalized(s, dst, t.encodePlain)
	}
	return t.encodePlain(dst, s)
}

func (t *Tokenizer) encodePlain(dst []uint32, s string) []uint32 {
	if s == "" {
		return dst
	}
	if t.pre.addPrefixSpace && s[0] != ' ' {
		s = " " + s
	}
	return t.pre.split(s, dst, t.model.encodeWord)
}

func sanitize(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for _, r := range s {
		b.WriteRune(r)
	}
	return b.String()
}

// Decode turns ids back into text as HF's decode(ids, skip_special_tokens=False) does with a
// ByteLevel decoder (no clean_up_tokenization_spaces); unknown ids are skipped.
func (t *Tokenizer) Decode(ids []uint32) string {
	var b []byte
	for _, id := range ids {
		if int(id) < len(t.decode) {
			b = append(b, t.decode[id]...)
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// VocabSize is the number of ids, added tokens included (the largest id plus one).
func (t *Tokenizer) VocabSize() int { return t.size }

func (t *Tokenizer) buildDecode(added []addedTokenJSON) {
	size := 0
	for _, id := range t.model.tokens {
		size = max(size, int(id)+1)
	}
	for _, a := range added {
		size = max(size, int(a.ID)+1)
	}
	t.size = size
	t.decode = make([][]byte, size)
	for s, id := range t.model.tokens {
		t.decode[id] = byteLevelDecode(s)
	}
	for _, a := range added {
		t.decode[a.ID] = byteLevelDecode(a.Content)
	}
}

// byteLevelDecode maps a token's characters back to bytes; a token with a character outside the
// byte-level alphabet is taken as its own UTF-8, as HF's ByteLevel decoder does.
func byteLevelDecode(s string) []byte {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		b, ok := charToByte(r)
		if !ok {
			return []byte(s)
		}
		out = append(out, b)
	}
	return out
}

type fileJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Truncation    json.RawMessage  `json:"truncation"`
	Padding       json.RawMessage  `json:"padding"`
	Model         modelJSON        `json:"model"`
}

type addedTokenJSON struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

func isSet(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

type typed struct {
	Type string `json:"type"`
}

func typeOf(raw json.RawMessage) (string, error) {
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", err
	}
	return t.Type, nil
}

func loadNormalizer(raw json.RawMessage) (nfc bool, err error) {
	if !isSet(raw) {
		return false, nil
	}
	typ, err := typeOf(raw)
	if err != nil {
		return false, fmt.Errorf("normalizer: %w", err)
	}
	switch typ {
	case "NFC":
		return true, nil
	case "Sequence":
		var seq struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return false, fmt.Errorf("normalizer: %w", err)
		}
		for _, n := range seq.Normalizers {
			sub, err := loadNormalizer(n)
			if err != nil {
				return false, err
			}
			nfc = nfc || sub
		}
		return nfc, nil
	}
	return false, unsupported("normalizer %q", typ)
}

// checkPadding accepts padding to the longest sequence of a batch, which leaves a single sequence
// as it is.
func checkPadding(raw json.RawMessage) error {
	if !isSet(raw) {
		return nil
	}
	var p struct {
		Strategy json.RawMessage `json:"strategy"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("padding: %w", err)
	}
	if strings.TrimSpace(string(p.Strategy)) != `"BatchLongest"` {
		return unsupported("padding strategy %s", p.Strategy)
	}
	return nil
}

func checkDecoder(raw json.RawMessage) error {
	if !isSet(raw) {
		return unsupported("no decoder")
	}
	typ, err := typeOf(raw)
	if err != nil {
		return fmt.Errorf("decoder: %w", err)
	}
	if typ != "ByteLevel" {
		return unsupported("decoder %q", typ)
	}
	return nil
}

// loadPostProcessor returns the ids added around a single sequence when addSpecial.
func loadPostProcessor(raw json.RawMessage, tokenID func(string) (uint32, bool)) (prefix, suffix []uint32, err error) {
	if !isSet(raw) {
		return nil, nil, nil
	}
	typ, err := typeOf(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("post_processor: %w", err)
	}
	switch typ {
	case "ByteLevel":
		return nil, nil, nil // trims offsets only
	case "Sequence":
		var seq struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return nil, nil, fmt.Errorf("post_processor: %w", err)
		}
		for _, p := range seq.Processors {
			pre, suf, err := loadPostProcessor(p, tokenID)
			if err != nil {
				return nil, nil, err
			}
			prefix = append(pre, prefix...)
			suffix = append(suffix, suf...)
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		var tp struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			} `json:"single"`
			SpecialTokens map[string]struct {
				IDs []uint32 `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := json.Unmarshal(raw, &tp); err != nil {
			return nil, nil, fmt.Errorf("post_processor: %w", err)
		}
		seen := false
		for _, item := range tp.Single {
			switch {
			case item.Sequence != nil:
				if seen || item.Sequence.ID != "A" {
					return nil, nil, unsupported("TemplateProcessing single template with sequence %q", item.Sequence.ID)
				}
				seen = true
			case item.SpecialToken != nil:
				st, ok := tp.SpecialTokens[item.SpecialToken.ID]
				var add []uint32
				if ok {
					add = st.IDs
				} else if id, ok := tokenID(item.SpecialToken.ID); ok {
					add = []uint32{id}
				} else {
					return nil, nil, fmt.Errorf("post_processor: unknown special token %q", item.SpecialToken.ID)
				}
				if seen {
					suffix = append(suffix, add...)
				} else {
					prefix = append(prefix, add...)
				}
			}
		}
		if !seen {
			return nil, nil, unsupported("TemplateProcessing without the sequence")
		}
		return prefix, suffix, nil
	}
	return nil, nil, unsupported("post_processor %q", typ)
}

func normIsNFC(s string) bool { return norm.NFC.IsNormalString(s) }
