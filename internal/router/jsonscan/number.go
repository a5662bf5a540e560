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
	"bytes"
	"encoding/binary"
	"math/bits"
)

// number reads a number starting at pos, whose first byte is known to be '-' or a digit.
func (s *Scanner) number() error {
	if s.buf[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(s.buf) && s.buf[s.pos] == '0':
		s.pos++ // a leading zero stands alone: "01" is a 0 followed by junk
	case s.digits() == 0:
		return s.fail("invalid number")
	}
	if s.pos < len(s.buf) && s.buf[s.pos] == '.' {
		s.pos++
		if s.digits() == 0 {
			return s.fail("invalid number")
		}
	}
	if s.pos < len(s.buf) && (s.buf[s.pos] == 'e' || s.buf[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.buf) && (s.buf[s.pos] == '+' || s.buf[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			return s.fail("invalid number")
		}
	}
	return nil
}

func (s *Scanner) digits() int {
	start := s.pos
	for s.pos < len(s.buf) && s.buf[s.pos] >= '0' && s.buf[s.pos] <= '9' {
		s.pos++
	}
	return s.pos - start
}

// Uint reads a number after whitespace that is a non-negative integer within uint64, written
// without fraction or exponent (the numbers encoding/json decodes into an unsigned integer).
// ok is false for anything else.
func (s *Scanner) Uint() (v uint64, ok bool) {
	s.SkipSpace()
	start := s.pos
	if s.pos >= len(s.buf) || s.buf[s.pos] < '0' || s.buf[s.pos] > '9' || s.number() != nil {
		return 0, false
	}
	for _, c := range s.buf[start:s.pos] {
		d := uint64(c - '0')
		if d > 9 {
			return 0, false // a fraction or an exponent
		}
		hi, lo := bits.Mul64(v, 10)
		if hi != 0 || lo+d < lo {
			return 0, false
		}
		v = lo + d
	}
	return v, true
}

// Uint32s reads an array after whitespace whose elements are all integers within uint32, as
// Uint reads them: a prompt's token ids. ok is false for anything else.
//
// The loop works on local copies of the buffer and position (the compiler keeps them in
// registers; through the scanner's fields every byte cost a load and a store), on the array's
// extent found by one vectorised search for its ']', so it needs no end-of-input checks
// beyond that slice.
func (s *Scanner) Uint32s() (ids []uint32, ok bool) {
	if s.Peek() != '[' || s.depth >= maxDepth {
		return nil, false
	}
	s.pos++
	end := bytes.IndexByte(s.buf[s.pos:], ']')
	if end < 0 {
		return nil, false
	}
	body := s.buf[s.pos : s.pos+end]
	// Size the result by counting separators (a vectorised scan) rather than by the byte
	// length, which over-allocates and zeroes ~3x more memory than the ids need.
	out := make([]uint32, 0, bytes.Count(body, []byte{','})+1)
	j := space(body, 0)
	if j == len(body) {
		s.pos += end + 1
		return out, true
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
			return nil, false
		}
		out = append(out, uint32(v))
		if j < len(body) && body[j] != ',' {
			j = space(body, j)
		}
		if j == len(body) {
			s.pos += end + 1
			return out, true
		}
		if body[j] != ',' {
			return nil, false
		}
		j = space(body, j+1)
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
