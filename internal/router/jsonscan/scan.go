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

// Package jsonscan reads JSON in place: it checks the grammar of a text, walks an object's
// members and skips or reads their values, and hands back sub-slices of the input, with the
// byte offset of anything malformed. It accepts exactly the texts encoding/json accepts.
//
// It is written by hand because the router runs it on its hot path, over every request body
// and every /tokenize answer, each up to hundreds of kilobytes: encoding/json validates and
// then decodes (two passes, plus a copy of every string it decodes), where a scan here is one
// pass that allocates nothing but what the caller keeps.
package jsonscan

import "fmt"

// maxDepth is encoding/json's nesting limit: arrays and objects open at once, the outermost
// included.
const maxDepth = 10000

// Scanner is a cursor over one JSON text. After an error its position is unspecified.
type Scanner struct {
	buf   []byte
	pos   int
	depth int // arrays and objects open around pos
}

// New returns a scanner at the start of b.
func New(b []byte) Scanner { return Scanner{buf: b} }

// Pos is the offset of the next byte to read.
func (s *Scanner) Pos() int { return s.pos }

// SyntaxError is a text that is not JSON (or not the JSON the caller asked for), at the offset
// where reading stopped.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at offset %d: %s", e.Offset, e.Msg)
}

// Errorf reports a caller's own finding at the current position, in the form of the scanner's
// errors.
func (s *Scanner) Errorf(format string, a ...any) error {
	return &SyntaxError{Offset: s.pos, Msg: fmt.Sprintf(format, a...)}
}

func (s *Scanner) fail(msg string) error { return &SyntaxError{Offset: s.pos, Msg: msg} }

// SkipSpace moves past whitespace.
func (s *Scanner) SkipSpace() { s.pos = space(s.buf, s.pos) }

func space(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// Peek returns the next byte after whitespace without reading it; 0 at the end of the text.
func (s *Scanner) Peek() byte {
	s.SkipSpace()
	if s.pos >= len(s.buf) {
		return 0
	}
	return s.buf[s.pos]
}

// AtEnd reports whether only whitespace is left.
func (s *Scanner) AtEnd() bool {
	s.SkipSpace()
	return s.pos == len(s.buf)
}

// Skip reads one value of any kind after whitespace, checking its grammar, and returns its text.
// It stops right after the value, as json.Decoder does, so what follows is the caller's to judge.
func (s *Scanner) Skip() ([]byte, error) {
	s.SkipSpace()
	start := s.pos
	if err := s.value(); err != nil {
		return nil, err
	}
	return s.buf[start:s.pos], nil
}

// Object reads an object after whitespace. For each member it calls member with the member's
// name and the scanner at the value, which member must read (with Skip or a typed read), and
// stops at the first error member returns.
func (s *Scanner) Object(member func(name String) error) error {
	if s.Peek() != '{' {
		return s.fail("expected an object")
	}
	return s.object(member)
}

// value reads a value starting at pos. Callers have skipped the whitespace before it.
func (s *Scanner) value() error {
	if s.pos >= len(s.buf) {
		return s.fail("unexpected end of input")
	}
	switch c := s.buf[s.pos]; {
	case c == '"':
		_, err := s.str()
		return err
	case c == '{':
		return s.object(nil)
	case c == '[':
		return s.array()
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.fail("unexpected character")
}

// open enters the array or object whose bracket is at pos.
func (s *Scanner) open() error {
	if s.depth >= maxDepth {
		return s.fail("nesting too deep")
	}
	s.depth++
	s.pos++
	return nil
}

// object reads the object at pos; a nil member skips the values.
func (s *Scanner) object(member func(String) error) error {
	if err := s.open(); err != nil {
		return err
	}
	if s.Peek() == '}' {
		s.pos++
		s.depth--
		return nil
	}
	for {
		s.SkipSpace()
		name, err := s.str()
		if err != nil {
			return err
		}
		if s.Peek() != ':' {
			return s.fail("expected ':' after an object key")
		}
		s.pos++
		s.SkipSpace()
		if member != nil {
			err = member(name)
		} else {
			err = s.value()
		}
		if err != nil {
			return err
		}
		switch s.Peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			s.depth--
			return nil
		default:
			return s.fail("expected ',' or '}' in object")
		}
	}
}

func (s *Scanner) array() error {
	if err := s.open(); err != nil {
		return err
	}
	if s.Peek() == ']' {
		s.pos++
		s.depth--
		return nil
	}
	for {
		s.SkipSpace()
		if err := s.value(); err != nil {
			return err
		}
		switch s.Peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			s.depth--
			return nil
		default:
			return s.fail("expected ',' or ']' in array")
		}
	}
}

func (s *Scanner) literal(lit string) error {
	if len(s.buf)-s.pos < len(lit) || string(s.buf[s.pos:s.pos+len(lit)]) != lit {
		return s.fail("invalid literal")
	}
	s.pos += len(lit)
	return nil
}
