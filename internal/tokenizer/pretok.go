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
	"fmt"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// The Split patterns of the supported families, byte for byte as tokenizer.json spells them.
const (
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patternGPT2 is what ByteLevel with use_regex splits on.
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// Character classes as the patterns see them. \s is Unicode White_Space, which is what Oniguruma
// (HF's regex engine), regexp2 and unicode.IsSpace all mean by it.
const (
	clsL     = 1 << iota // \p{L}
	clsN                 // \p{N}
	clsS                 // \s
	clsCRLF              // \r or \n
	clsOther = 0
)

var (
	bmpOnce  sync.Once
	bmpClass []uint8 // class of every rune below 0x10000, built on first use
)

func buildBMP() {
	t := make([]uint8, 0x10000)
	for r := rune(0); r < 0x10000; r++ {
		t[r] = slowClass(r)
	}
	bmpClass = t
}

func slowClass(r rune) uint8 {
	switch {
	case r == '\r' || r == '\n':
		return clsS | clsCRLF
	case unicode.IsLetter(r):
		return clsL
	case unicode.IsNumber(r):
		return clsN
	case unicode.IsSpace(r):
		return clsS
	}
	return clsOther
}

// classAt returns the class and byte length of the rune at s[i]; s is valid UTF-8.
func classAt(s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		return bmpClass[r], n
	}
	return slowClass(r), n
}

var asciiClass = func() (t [128]uint8) {
	for c := 0; c < 128; c++ {
		t[c] = slowClass(rune(c))
	}
	return t
}()

type scanFunc func(s string, i int) int

// preTokenizer splits a section of text into words for the model.
type preTokenizer struct {
	scan           scanFunc          // hand-written scanner of one known pattern, or nil
	splits         []*regexp2.Regexp // otherwise each Split in order
	addPrefixSpace bool
}

func loadPreTokenizer(raw json.RawMessage) (*preTokenizer, error) {
	if !isSet(raw) {
		return nil, unsupported("no pre_tokenizer (byte-level BPE needs ByteLevel)")
	}
	var steps []json.RawMessage
	typ, err := typeOf(raw)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if typ == "Sequence" {
		var seq struct {
			Pretokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return nil, fmt.Errorf("pre_tokenizer: %w", err)
		}
		steps = seq.Pretokenizers
	} else {
		steps = []json.RawMessage{raw}
	}
	var patterns []string
	p := &preTokenizer{}
	byteLevel := false
	for i, step := range steps {
		typ, err := typeOf(step)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer: %w", err)
		}
		switch typ {
		case "Split":
			if byteLevel {
				return nil, unsupported("Split after ByteLevel")
			}
			var sp struct {
				Pattern struct {
					Regex  *string `json:"Regex"`
					String *string `json:"String"`
				} `json:"pattern"`
				Behavior string `json:"behavior"`
				Invert   bool   `json:"invert"`
			}
			if err := json.Unmarshal(step, &sp); err != nil {
				return nil, fmt.Errorf("pre_tokenizer: %w", err)
			}
			if sp.Pattern.Regex == nil {
				return nil, unsupported("Split on a string pattern")
			}
			if sp.Behavior != "Isolated" || sp.Invert {
				return nil, unsupported("Split behavior %q invert %v", sp.Behavior, sp.Invert)
			}
			patterns = append(patterns, *sp.Pattern.Regex)
		case "ByteLevel":
			if i != len(steps)-1 {
				return nil, unsupported("pre-tokenizer after ByteLevel")
			}
			var bl struct {
				AddPrefixSpace bool  `json:"add_prefix_space"`
				UseRegex       *bool `json:"use_regex"`
			}
			if err := json.Unmarshal(step, &bl); err != nil {
				return nil, fmt.Errorf("pre_tokenizer: %w", err)
			}
			byteLevel = true
			p.addPrefixSpace = bl.AddPrefixSpace
			if bl.UseRegex == nil || *bl.UseRegex {
				patterns = append(patterns, patternGPT2)
			}
		default:
			return nil, unsupported("pre_tokenizer %q", typ)
		}
	}
	if !byteLevel {
		return nil, unsupported("pre_tokenizer without ByteLevel")
	}
	if len(patterns) == 1 {
		p.scan = knownScanner(patterns[0])
	}
	if p.scan == nil {
		for _, pat := range patterns {
			re, err := compileHF(pat)
			if err != nil {
				return nil, unsupported("Split pattern %q: %v", pat, err)
			}
			p.splits = append(p.splits, re)
		}
	}
	if p.scan != nil || len(p.splits) > 0 {
		bmpOnce.Do(buildBMP)
	}
	return p, nil
}

func knownScanner(pattern string) scanFunc {
	switch pattern {
	case patternLlama3:
		return scanLlama3
	case patternQwen2:
		return scanQwen2
	case patternGPT2:
		return scanGPT2
	}
	return nil
}

// compileHF compiles a tokenizers pattern with regexp2, whose syntax (lookaround, \p{..}, inline
// flags) is the closest to Oniguruma's among pure-Go engines.
func compileHF(pattern string) (*regexp2.Regexp, error) {
	return regexp2.Compile(pattern, regexp2.None)
}

// split feeds every word of s to emit, in order.
func (p *preTokenizer) split(s string, dst []uint32, emit func([]uint32, string) []uint32) []uint32 {
	bmpOnce.Do(buildBMP)
	if p.scan != nil {
		for i := 0; i < len(s); {
			j := p.scan(s, i)
			dst = emit(dst, s[i:j])
			i = j
		}
		return dst
	}
	if len(p.splits) == 0 {
		return emit(dst, s)
	}
	return p.splitRegex(0, s, dst, emit)
}

func (p *preTokenizer) splitRegex(k int, s string, dst []uint32, emit func([]uint32, string) []uint32) []uint32 {
	if k == len(p.splits) {
		return emit(dst, s)
	}
	for _, piece := range regexPieces(p.splits[k], s) {
		dst = p.splitRegex(k+1, piece, dst, emit)
	}
	return dst
}

// regexPieces is HF's Split with the Isolated behaviour: every match is a piece, and so is every
// stretch between matches.
func regexPieces(re *regexp2.Regexp, s string) []string {
	// regexp2 reports rune offsets; map them back to bytes.
	offs := make([]int, 0, len(s)+1)
	for i := range s {
		offs = append(offs, i)
	}
	offs = append(offs, len(s))
	var out []string
	last := 0
	m, _ := re.FindStringMatch(s)
	for m != nil {
		start, end := offs[m.Index], offs[m.Index+m.Length]
		if start > last {
			out = append(out, s[last:start])
		}
		if end > start {
			out = append(out, s[start:end])
		}
		last = end
		m, _ = re.FindNextMatch(m)
	}
	if last < len(s) {
		out = append(out, s[last:])
	}
	return out
}

// The scanners return the end of the match that the pattern's leftmost-first alternation finds at
// s[i]; each of these patterns matches at every position, so the matches tile the text.

func scanLlama3(s string, i int) int { return scanLlamaLike(s, i, 3) }
func scanQwen2(s string, i int) int  { return scanLlamaLike(s, i, 1) }

func scanLlamaLike(s string, i int, maxDigits int) int {
	if s[i] == '\'' {
		if n := contraction(s, i+1, true); n > 0 {
			return i + 1 + n
		}
	}
	c, n := classAt(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clsL {
		return letters(s, i+n)
	}
	if c&(clsN|clsCRLF) == 0 && i+n < len(s) {
		if c2, n2 := classAt(s, i+n); c2 == clsL {
			return letters(s, i+n+n2)
		}
	}
	// \p{N}{1,3}
	if c == clsN {
		j := i + n
		for k := 1; k < maxDigits && j < len(s); k++ {
			c2, n2 := classAt(s, j)
			if c2 != clsN {
				break
			}
			j += n2
		}
		return j
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	if s[i] == ' ' && i+1 < len(s) {
		if c2, n2 := classAt(s, i+1); c2 == clsOther {
			return crlfs(s, others(s, i+1+n2))
		}
	}
	if c == clsOther {
		return crlfs(s, others(s, i+n))
	}
	// c is \s: \s*[\r\n]+ | \s+(?!\S) | \s+
	end, lastStart, lastNL := i, i, -1
	for end < len(s) {
		c2, n2 := classAt(s, end)
		if c2&clsS == 0 {
			break
		}
		if c2&clsCRLF != 0 {
			lastNL = end
		}
		lastStart = end
		end += n2
	}
	if lastNL >= 0 {
		return lastNL + 1
	}
	return spaceEnd(s, i, end, lastStart)
}

// spaceEnd resolves \s+(?!\S)|\s+ over the whitespace run s[i:end] whose last rune starts at
// lastStart: the run stops short of its last rune when a non-space follows, so that rune can lead
// the next word.
func spaceEnd(s string, i, end, lastStart int) int {
	if end == len(s) || lastStart == i {
		return end
	}
	return lastStart
}

func scanGPT2(s string, i int) int {
	if s[i] == '\'' {
		if n := contraction(s, i+1, false); n > 0 {
			return i + 1 + n
		}
	}
	j := i
	if s[i] == ' ' && i+1 < len(s) {
		j = i + 1
	}
	c, n := classAt(s, j)
	switch {
	case c == clsL:
		return letters(s, j+n)
	case c == clsN:
		return numbers(s, j+n)
	case c == clsOther:
		return others(s, j+n)
	}
	end, lastStart := i, i
	for end < len(s) {
		c2, n2 := classAt(s, end)
		if c2&clsS == 0 {
			break
		}
		lastStart = end
		end += n2
	}
	return spaceEnd(s, i, end, lastStart)
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d after the apostrophe at s[i-1] and returns its
// length past the apostrophe. Case-insensitively it follows Oniguruma's Unicode case folding, in
// which U+017F LATIN SMALL LETTER LONG S folds to s; no other letter of these folds from outside
// ASCII.
func contraction(s string, i int, fold bool) int {
	if i >= len(s) {
		return 0
	}
	c := s[i]
	if fold {
		if c == 0xC5 && i+1 < len(s) && s[i+1] == 0xBF { // ſ
			return 2
		}
		c |= 0x20 * b2u(c >= 'A' && c <= 'Z')
	}
	switch c {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if i+1 < len(s) && lowerIf(s[i+1], fold) == 'e' {
			return 2
		}
	case 'l':
		if i+1 < len(s) && lowerIf(s[i+1], fold) == 'l' {
			return 2
		}
	}
	return 0
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func lowerIf(c byte, fold bool) byte {
	if fold && c >= 'A' && c <= 'Z' {
		return c + 0x20
	}
	return c
}

func letters(s string, j int) int {
	for j < len(s) {
		c, n := classAt(s, j)
		if c != clsL {
			break
		}
		j += n
	}
	return j
}

func numbers(s string, j int) int {
	for j < len(s) {
		c, n := classAt(s, j)
		if c != clsN {
			break
		}
		j += n
	}
	return j
}

func others(s string, j int) int {
	for j < len(s) {
		c, n := classAt(s, j)
		if c != clsOther {
			break
		}
		j += n
	}
	return j
}

func crlfs(s string, j int) int {
	for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
		j++
	}
	return j
}
