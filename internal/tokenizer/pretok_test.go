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
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// referencePattern is a scanner's pattern as Oniguruma reads it, spelled for regexp2: the
// case-insensitive contractions are written out with U+017F, which Unicode case folding (and so
// Oniguruma) equates with s and regexp2's per-rune lowering does not.
func referencePattern(p string) string {
	return strings.Replace(p, `(?i:'s|'t|'re|'ve|'m|'ll|'d)`, `'(?:[sSſ]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])`, 1)
}

var references sync.Map // pattern -> *regexp2.Regexp

func referenceRegexp(p string) *regexp2.Regexp {
	if re, ok := references.Load(p); ok {
		return re.(*regexp2.Regexp)
	}
	re := regexp2.MustCompile(referencePattern(p), regexp2.None)
	references.Store(p, re)
	return re
}

var scanners = []struct {
	name    string
	pattern string
	scan    scanFunc
}{
	{"llama3", patternLlama3, scanLlama3},
	{"qwen2", patternQwen2, scanQwen2},
	{"gpt2", patternGPT2, scanGPT2},
}

func scanPieces(scan scanFunc, s string) []string {
	bmpOnce.Do(buildBMP)
	var out []string
	for i := 0; i < len(s); {
		j := scan(s, i)
		if j <= i {
			panic("scanner made no progress")
		}
		out = append(out, s[i:j])
		i = j
	}
	return out
}

// pretokSeeds are the texts the fuzz target starts from and the differential test always runs.
var pretokSeeds = []string{
	"", " ", "  ", "\n", " \n ", "a  b", "a \n\n b", "  \n  x", "x   ", "\t\tx", "\r\n\r\n",
	"Hello, world!", "I'm", "I'M", "'ll'LL'Ll", "'ſ", "'ſx", "''s", "' s", "it's'", "don't",
	"1234567", "١٢٣٤", "½²", "x1y22z333", " 12", " .x", " ..\n\n", ".,;\r\n\r\nx", "(a)", "((a",
	"你好世界", "e\u0301", " \u0301x", "\u00a0x", "\u00a0\u00a0x", "\u3000 x", "\u2028x", "\u0085x",
	"a\u0085\"b", "\ufeffx", "🙂🙃", "👨\u200d👩\u200d👧", "\xff\xfe", "a\xc3", "\xe4\xb8x", "<|im_start|>",
	"func f() {\n\treturn 1\n}\n", "    x = 1\n        y", "end.\n", "\v\fx", "\r", "\r\rx",
}

func diffPretok(t *testing.T, s string) {
	t.Helper()
	s = sanitizeForScan(s)
	for _, sc := range scanners {
		want := regexPieces(referenceRegexp(sc.pattern), s)
		got := scanPieces(sc.scan, s)
		if !slices.Equal(got, want) {
			t.Fatalf("%s pattern on %q:\n got %q\nwant %q", sc.name, s, got, want)
		}
	}
}

// sanitizeForScan does what AppendEncode does before pre-tokenizing.
func sanitizeForScan(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return sanitize(s)
}

func TestScannersMatchRegexp2(t *testing.T) {
	for _, s := range pretokSeeds {
		diffPretok(t, s)
	}
	for _, m := range models {
		for _, c := range readExpected(t, m).Encode {
			diffPretok(t, c.Text)
		}
	}
}

// FuzzPretokenize checks the hand-written scanners against regexp2 running the patterns
// themselves, on arbitrary bytes (invalid UTF-8 is replaced first, as AppendEncode does).
func FuzzPretokenize(f *testing.F) {
	for _, s := range pretokSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		diffPretok(t, s)
	})
}

// HF's regex engine (Oniguruma) counts U+0085 as \s and U+FEFF as not; JavaScript, and so the
// transformers.js fixtures, the other way round, which is why the captured corpus avoids both.
func TestWhitespaceIsOnigurumas(t *testing.T) {
	cases := map[string][]string{
		"a\u0085\"b": {"a", "\u0085", "\"b"},
		"a \ufeffb":  {"a", " \ufeff", "b"},
		"x\u2028y":   {"x", "\u2028y"}, // a space that is not \r or \n leads the word
		"'ſx":        {"'ſ", "x"},
	}
	for in, want := range cases {
		if got := scanPieces(scanLlama3, in); !slices.Equal(got, want) {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}
