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

package kvevents

import (
	"encoding/binary"
	"fmt"
	"math"
)

// reader is a minimal streaming msgpack reader over one payload. It is hand-written, not a
// library decoder, because generic decoders (vmihailenco/msgpack into structs or `any`) use
// reflection and box every token id: at a million blocks per second that is tens of millions
// of allocations per second. This reader allocates nothing; callers append into reused slices.
// Every read checks bounds and reports errors through r.err, so bad input cannot panic.
type reader struct {
	buf []byte
	pos int
	err error
}

// msgpack type classes returned by peek.
const (
	tNil = iota
	tBool
	tInt // negative or positive integer
	tFloat
	tStr
	tBin
	tArray
	tMap
	tExt
	tInvalid
)

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format+" at byte %d", append([]any{ErrMalformed}, append(args, r.pos)...)...)
	}
}

func (r *reader) peek() int {
	if r.err != nil {
		return tInvalid
	}
	if r.pos >= len(r.buf) {
		r.fail("truncated")
		return tInvalid
	}
	c := r.buf[r.pos]
	switch {
	case c <= 0x7f || c >= 0xe0:
		return tInt
	case c <= 0x8f:
		return tMap
	case c <= 0x9f:
		return tArray
	case c <= 0xbf:
		return tStr
	}
	switch c {
	case 0xc0:
		return tNil
	case 0xc2, 0xc3:
		return tBool
	case 0xc4, 0xc5, 0xc6:
		return tBin
	case 0xc7, 0xc8, 0xc9, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return tExt
	case 0xca, 0xcb:
		return tFloat
	case 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3:
		return tInt
	case 0xd9, 0xda, 0xdb:
		return tStr
	case 0xdc, 0xdd:
		return tArray
	case 0xde, 0xdf:
		return tMap
	}
	return tInvalid // 0xc1 is never used
}

func (r *reader) byte1() byte {
	if r.pos >= len(r.buf) {
		r.fail("truncated")
		return 0
	}
	c := r.buf[r.pos]
	r.pos++
	return c
}

func (r *reader) take(n int) []byte {
	if n < 0 || n > len(r.buf)-r.pos {
		r.fail("length %d past end", n)
		r.pos = len(r.buf)
		return nil
	}
	b := r.buf[r.pos : r.pos+n]
	r.pos += n
	return b
}

func (r *reader) uintN(n int) uint64 {
	b := r.take(n)
	switch len(b) {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.BigEndian.Uint16(b))
	case 4:
		return uint64(binary.BigEndian.Uint32(b))
	case 8:
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

// nilNext consumes a nil and reports true if the next value is nil.
func (r *reader) nilNext() bool {
	if r.err == nil && r.pos < len(r.buf) && r.buf[r.pos] == 0xc0 {
		r.pos++
		return true
	}
	return false
}

// container reads an array or map header and checks the count against the bytes left (every
// element takes at least one byte), so a hostile header cannot trigger a huge allocation.
func (r *reader) container(want int) int {
	c := r.byte1()
	if r.err != nil {
		return 0
	}
	var n uint64
	switch {
	case want == tArray && c >= 0x90 && c <= 0x9f:
		n = uint64(c & 0x0f)
	case want == tMap && c >= 0x80 && c <= 0x8f:
		n = uint64(c & 0x0f)
	case want == tArray && c == 0xdc, want == tMap && c == 0xde:
		n = r.uintN(2)
	case want == tArray && c == 0xdd, want == tMap && c == 0xdf:
		n = r.uintN(4)
	default:
		r.pos--
		if want == tArray {
			r.fail("want array, got 0x%02x", c)
		} else {
			r.fail("want map, got 0x%02x", c)
		}
		return 0
	}
	per := uint64(1)
	if want == tMap {
		per = 2
	}
	if n*per > uint64(len(r.buf)-r.pos) {
		r.fail("%d elements cannot fit in %d bytes", n, len(r.buf)-r.pos)
		return 0
	}
	return int(n)
}

func (r *reader) arrayLen() int { return r.container(tArray) }
func (r *reader) mapLen() int   { return r.container(tMap) }

// int reads any msgpack integer. neg reports a negative value (v is then its int64 bits).
func (r *reader) int() (v uint64, neg bool) {
	c := r.byte1()
	if r.err != nil {
		return 0, false
	}
	switch {
	case c <= 0x7f:
		return uint64(c), false
	case c >= 0xe0:
		return uint64(int64(int8(c))), true
	}
	switch c {
	case 0xcc:
		return r.uintN(1), false
	case 0xcd:
		return r.uintN(2), false
	case 0xce:
		return r.uintN(4), false
	case 0xcf:
		return r.uintN(8), false
	case 0xd0:
		s := int64(int8(r.uintN(1)))
		return uint64(s), s < 0
	case 0xd1:
		s := int64(int16(r.uintN(2)))
		return uint64(s), s < 0
	case 0xd2:
		s := int64(int32(r.uintN(4)))
		return uint64(s), s < 0
	case 0xd3:
		s := int64(r.uintN(8))
		return uint64(s), s < 0
	}
	r.pos--
	r.fail("want integer, got 0x%02x", c)
	return 0, false
}

// smallInt reads an integer that must fit an int (block sizes, ranks, group indexes).
func (r *reader) smallInt() int {
	v, neg := r.int()
	if neg || v > math.MaxInt32 {
		r.fail("integer %d out of range", int64(v))
		return 0
	}
	return int(v)
}

func (r *reader) float() float64 {
	switch r.peek() {
	case tFloat:
		if r.byte1() == 0xca {
			return float64(math.Float32frombits(uint32(r.uintN(4))))
		}
		return math.Float64frombits(r.uintN(8))
	case tInt:
		v, neg := r.int()
		if neg {
			return float64(int64(v))
		}
		return float64(v)
	}
	r.fail("want float")
	return 0
}

// str reads a string's bytes (aliasing the payload).
func (r *reader) str() []byte {
	c := r.byte1()
	if r.err != nil {
		return nil
	}
	switch {
	case c >= 0xa0 && c <= 0xbf:
		return r.take(int(c & 0x1f))
	case c == 0xd9:
		return r.take(int(r.uintN(1)))
	case c == 0xda:
		return r.take(int(r.uintN(2)))
	case c == 0xdb:
		return r.take(int(r.uintN(4)))
	}
	r.pos--
	r.fail("want string, got 0x%02x", c)
	return nil
}

// strOrBin reads a string or binary value's bytes.
func (r *reader) strOrBin() []byte {
	if r.peek() != tBin {
		return r.str()
	}
	switch r.byte1() {
	case 0xc4:
		return r.take(int(r.uintN(1)))
	case 0xc5:
		return r.take(int(r.uintN(2)))
	default:
		return r.take(int(r.uintN(4)))
	}
}

// hash reads an engine block hash in any of its wire forms, normalised to uint64: unsigned and
// negative integers keep their 64 bits; bytes give their last 8 bytes big-endian (the value
// vLLM's int mode sends), shorter ones left-padded.
func (r *reader) hash() uint64 {
	switch r.peek() {
	case tInt:
		v, _ := r.int()
		return v
	case tBin, tStr:
		b := r.strOrBin()
		if len(b) > 8 {
			b = b[len(b)-8:]
		}
		var v uint64
		for _, c := range b {
			v = v<<8 | uint64(c)
		}
		return v
	}
	r.fail("want block hash")
	return 0
}

// skip skips one value of any type, nested ones included. It is iterative (a pending count
// instead of recursion) so deeply nested hostile input cannot exhaust the stack.
func (r *reader) skip() {
	pending := 1
	for pending > 0 && r.err == nil {
		pending--
		c := r.byte1()
		if r.err != nil {
			return
		}
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c <= 0x8f:
			pending += 2 * int(c&0x0f)
		case c <= 0x9f:
			pending += int(c & 0x0f)
		case c <= 0xbf:
			r.take(int(c & 0x1f))
		default:
			switch c {
			case 0xc4, 0xd9:
				r.take(int(r.uintN(1)))
			case 0xc5, 0xda:
				r.take(int(r.uintN(2)))
			case 0xc6, 0xdb:
				r.take(int(r.uintN(4)))
			case 0xc7:
				r.take(int(r.uintN(1)) + 1)
			case 0xc8:
				r.take(int(r.uintN(2)) + 1)
			case 0xc9:
				r.take(int(r.uintN(4)) + 1)
			case 0xca:
				r.take(4)
			case 0xcb:
				r.take(8)
			case 0xcc, 0xd0:
				r.take(1)
			case 0xcd, 0xd1:
				r.take(2)
			case 0xce, 0xd2:
				r.take(4)
			case 0xcf, 0xd3:
				r.take(8)
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
				r.take(1 + 1<<(c-0xd4))
			case 0xdc, 0xdd, 0xde, 0xdf:
				r.pos--
				if c == 0xdc || c == 0xdd {
					pending += r.arrayLen()
				} else {
					pending += 2 * r.mapLen()
				}
			default:
				r.pos--
				r.fail("invalid type byte 0x%02x", c)
			}
		}
		if pending > len(r.buf)-r.pos {
			r.fail("nesting exceeds payload")
		}
	}
}
