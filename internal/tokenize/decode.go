package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// decodeResponse reads /tokenize's answer. It is written by hand because it is the router's
// hottest decode: a 100K-token prompt comes back as ~600 KB of integers, which encoding/json
// decodes at roughly 0.4 µs per token (tens of milliseconds of router CPU per request, several
// cores at 100 requests/s); this scanner does it at a few ns per token. It accepts exactly the
// JSON grammar for the object's keys and values it skips, and any failure falls back to
// encoding/json, so an unexpected but valid answer still decodes.
func decodeResponse(data []byte) (response, error) {
	if r, err := fastDecode(data); err == nil {
		return r, nil
	}
	var r response
	if err := json.Unmarshal(data, &r); err != nil {
		return response{}, err
	}
	return r, nil
}

var errFast = errors.New("fast path declined")

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) atEnd() bool {
	s.ws()
	return s.i == len(s.b)
}

func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return errFast
	}
	s.i++
	return nil
}

// str reads a string without escapes (keys of this API have none); escapes decline the fast path.
func (s *scanner) str() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			v := string(s.b[start:s.i])
			s.i++
			return v, nil
		case '\\':
			return "", errFast
		}
		if s.b[s.i] < 0x20 {
			return "", errFast
		}
		s.i++
	}
	return "", errFast
}

// uints reads an array of non-negative integers that fit in uint32.
func (s *scanner) uints() ([]uint32, error) {
	if err := s.expect('['); err != nil {
		return nil, err
	}
	// Size the result by counting separators (a vectorised scan) rather than by the byte
	// length, which over-allocates and zeroes ~3x more memory than the ids need.
	end := bytes.IndexByte(s.b[s.i:], ']')
	if end < 0 {
		return nil, errFast
	}
	out := make([]uint32, 0, bytes.Count(s.b[s.i:s.i+end], []byte{','})+1)
	if s.peek() == ']' {
		s.i++
		return out, nil
	}
	for {
		s.ws()
		start := s.i
		var v uint64
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			v = v*10 + uint64(s.b[s.i]-'0')
			if v > 1<<32-1 {
				return nil, errFast
			}
			s.i++
		}
		if s.i == start || (s.b[start] == '0' && s.i-start > 1) {
			return nil, errFast
		}
		out = append(out, uint32(v))
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return out, nil
		default:
			return nil, errFast
		}
	}
}

// skip skips one value of any kind by delegating to encoding/json on its extent.
func (s *scanner) skip() error {
	s.ws()
	dec := json.NewDecoder(bytes.NewReader(s.b[s.i:]))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return errFast
	}
	s.i += int(dec.InputOffset())
	return nil
}

func fastDecode(data []byte) (response, error) {
	s := &scanner{b: data}
	var r response
	if err := s.expect('{'); err != nil {
		return r, err
	}
	if s.peek() == '}' {
		s.i++
		if !s.atEnd() {
			return r, errFast
		}
		return r, nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return r, err
		}
		if err := s.expect(':'); err != nil {
			return r, err
		}
		switch key {
		case "tokens":
			if r.Tokens, err = s.uints(); err != nil {
				return r, err
			}
		case "count":
			n, err := s.uints1()
			if err != nil {
				return r, err
			}
			r.Count = n
		default:
			// encoding/json matches field names case-insensitively; leave such keys to it.
			if strings.EqualFold(key, "tokens") || strings.EqualFold(key, "count") {
				return r, errFast
			}
			if err := s.skip(); err != nil {
				return r, err
			}
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			if !s.atEnd() {
				return r, errFast // trailing data
			}
			return r, nil
		default:
			return r, errFast
		}
	}
}

// uints1 reads one non-negative integer.
func (s *scanner) uints1() (int, error) {
	s.ws()
	start := s.i
	v := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		v = v*10 + int(s.b[s.i]-'0')
		if v > 1<<40 {
			return 0, fmt.Errorf("count too large")
		}
		s.i++
	}
	if s.i == start {
		return 0, errFast
	}
	return v, nil
}

// ParseIDs reads a JSON array of token ids ([1,2,3]) with the same fast scanner, for prompts
// that clients send as ids. ok is false for anything else (including [[...]] batches).
func ParseIDs(raw []byte) (ids []uint32, ok bool) {
	s := &scanner{b: raw}
	ids, err := s.uints()
	if err != nil || !s.atEnd() {
		return nil, false
	}
	return ids, true
}
