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

package jsonscan

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// String is a string as it is written in the text, between its quotes.
type String struct {
	Raw     []byte
	escaped bool
}

// Text returns the string's value as encoding/json decodes it: escapes resolved, and invalid
// UTF-8 and unpaired surrogates replaced by U+FFFD. It is Raw itself when Raw has nothing to
// resolve, else it is appended to buf (a caller's stack buffer keeps it off the heap).
func (s String) Text(buf []byte) []byte {
	if !s.escaped && utf8.Valid(s.Raw) {
		return s.Raw
	}
	return AppendUnescaped(buf, s.Raw)
}

// ReadString reads a string after whitespace.
func (s *Scanner) ReadString() (String, error) {
	s.SkipSpace()
	return s.str()
}

// str reads the string whose opening quote is at pos.
func (s *Scanner) str() (String, error) {
	if s.pos >= len(s.buf) || s.buf[s.pos] != '"' {
		return String{}, s.fail("expected a string")
	}
	s.pos++
	start, escaped := s.pos, false
	for s.pos < len(s.buf) {
		// Prompts are long runs of plain characters: skip them 8 bytes at a time.
		s.pos = plainRun(s.buf, s.pos)
		if s.pos >= len(s.buf) {
			break
		}
		c := s.buf[s.pos]
		switch {
		case c == '"':
			s.pos++
			return String{Raw: s.buf[start : s.pos-1], escaped: escaped}, nil
		case c == '\\':
			if err := s.escape(); err != nil {
				return String{}, err
			}
			escaped = true
		case c < 0x20:
			return String{}, s.fail("control character in string")
		default:
			s.pos++
		}
	}
	return String{}, s.fail("unterminated string")
}

// escape checks the escape sequence whose backslash is at pos and moves past it.
func (s *Scanner) escape() error {
	if s.pos+1 >= len(s.buf) {
		return s.fail("unterminated escape")
	}
	switch s.buf[s.pos+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.pos += 2
	case 'u':
		if s.pos+6 > len(s.buf) {
			return s.fail("short \\u escape")
		}
		if hex4(s.buf[s.pos+2:s.pos+6]) < 0 {
			return s.fail("invalid \\u escape")
		}
		s.pos += 6
	default:
		return s.fail("invalid escape")
	}
	return nil
}

// hex4 is the value of four hex digits, or -1.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// AppendUnescaped appends the value of the string written as raw (its text between the quotes,
// as String.Raw) to dst, as encoding/json decodes it. A malformed escape in raw, which a
// scanner would have refused, is copied as it stands.
func AppendUnescaped(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		switch c := raw[i]; {
		case c == '\\' && i+1 < len(raw):
			n, r := unescape(raw[i:])
			if n == 0 {
				dst = append(dst, c)
				i++
				continue
			}
			dst = utf8.AppendRune(dst, r)
			i += n
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:]) // utf8.RuneError for an invalid byte
			dst = utf8.AppendRune(dst, r)
			i += n
		}
	}
	return dst
}

// unescape decodes the escape sequence at the start of b: its length (0: malformed) and rune.
// A surrogate pair written as two \u escapes is one rune; a surrogate without its pair is
// U+FFFD, as in encoding/json.
func unescape(b []byte) (int, rune) {
	switch b[1] {
	case '"', '\\', '/':
		return 2, rune(b[1])
	case 'b':
		return 2, '\b'
	case 'f':
		return 2, '\f'
	case 'n':
		return 2, '\n'
	case 'r':
		return 2, '\r'
	case 't':
		return 2, '\t'
	case 'u':
		if len(b) < 6 {
			return 0, 0
		}
		r := hex4(b[2:6])
		if r < 0 {
			return 0, 0
		}
		if !utf16.IsSurrogate(r) {
			return 6, r
		}
		if len(b) >= 12 && b[6] == '\\' && b[7] == 'u' {
			if pair := utf16.DecodeRune(r, hex4(b[8:12])); pair != utf8.RuneError {
				return 12, pair
			}
		}
		return 6, utf8.RuneError
	}
	return 0, 0
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// plainRun returns the index of the first byte at or after i that ends a run of plain string
// content: a quote, a backslash or a control character (or len(b)). It tests 8 bytes per step
// with word arithmetic (a byte-at-a-time loop cost ~2 ns per byte, ~1 ms per 100K-token prompt).
// The zero-byte tests can flag bytes after a true match (borrows), never before one, so the
// first flagged byte is exact.
func plainRun(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q, bs := x^('"'*lsb), x^('\\'*lsb)
		m := ((x-0x20*lsb) & ^x | (q-lsb) & ^q | (bs-lsb) & ^bs) & msb
		if m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}
