package tokenize

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
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

// uints reads an array of non-negative integers that fit in uint32. The loop works on local
// copies of the buffer and position (the compiler keeps them in registers; through the scanner's
// fields every byte cost a load and a store), on the array's extent found by one vectorised
// search for its ']', so it needs no end-of-input checks beyond that slice.
func (s *scanner) uints() ([]uint32, error) {
	if err := s.expect('['); err != nil {
		return nil, err
	}
	end := bytes.IndexByte(s.b[s.i:], ']')
	if end < 0 {
		return nil, errFast
	}
	body := s.b[s.i : s.i+end]
	// Size the result by counting separators (a vectorised scan) rather than by the byte
	// length, which over-allocates and zeroes ~3x more memory than the ids need.
	out := make([]uint32, 0, bytes.Count(body, []byte{','})+1)
	j := skipSpace(body, 0)
	if j == len(body) {
		s.i += end + 1
		return out, nil
	}
	for {
		start := j
		var v uint64
		if n := digits8(body, j); n > 0 && n < 8 {
			v, j = swarValue(body, j, n), j+n
		} else {
			for ; j < len(body); j++ {
				d := body[j] - '0'
				if d > 9 {
					break
				}
				v = v*10 + uint64(d)
			}
		}
		// At most 10 digits (so v cannot have wrapped), no leading zero, within uint32.
		if n := j - start; n == 0 || n > 10 || (n > 1 && body[start] == '0') || v > 1<<32-1 {
			return nil, errFast
		}
		out = append(out, uint32(v))
		if j < len(body) && body[j] != ',' {
			j = skipSpace(body, j)
		}
		if j == len(body) {
			s.i += end + 1
			return out, nil
		}
		if body[j] != ',' {
			return nil, errFast
		}
		j = skipSpace(body, j+1)
	}
}

// digits8 returns how many of the 8 bytes at b[j:] are leading ASCII digits (8: all of them),
// or 0 when fewer than 8 bytes remain. Finding the number's length without a branch per digit
// matters: a loop that exits after a data-dependent count of digits mispredicts once per id.
func digits8(b []byte, j int) int {
	if j+8 > len(b) {
		return 0
	}
	x := binary.LittleEndian.Uint64(b[j:])
	// Each byte becomes 0x33 iff it is '0'..'9': high nibble 3, and still 3 after adding 6.
	// (A carry out of a byte >= 0xFA only disturbs the bytes after it, never the first
	// non-digit's position.)
	f := x&0xF0F0F0F0F0F0F0F0 | (x+0x0606060606060606)&0xF0F0F0F0F0F0F0F0>>4
	return bits.TrailingZeros64(f^0x3333333333333333) >> 3
}

// swarValue converts the n (1..7) ASCII digits at b[j:] at once: the digits are shifted to the
// top of a word (the bytes below become leading zeros), then pairs, quads and octets of digits
// are combined with three multiplies.
func swarValue(b []byte, j, n int) uint64 {
	x := binary.LittleEndian.Uint64(b[j:]) << (8 * (8 - n)) & 0x0F0F0F0F0F0F0F0F
	x = x * (10<<8 + 1) >> 8 & 0x00FF00FF00FF00FF
	x = x * (100<<16 + 1) >> 16 & 0x0000FFFF0000FFFF
	return x * (10000<<32 + 1) >> 32
}

func skipSpace(b []byte, j int) int {
	for j < len(b) {
		switch b[j] {
		case ' ', '\t', '\n', '\r':
			j++
		default:
			return j
		}
	}
	return j
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
