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

	"github.com/cespare/xxhash/v2"
)

// ExtraKeysDigest folds one block's raw extra-key tuple (an element of Event.ExtraKeys) into a
// 64-bit digest for content keys. Equal tuples give equal digests whatever msgpack widths encoded
// them. vLLM puts the LoRA name first in every LoRA block's tuple; the index keys the LoRA name
// separately (the router knows it per request), so a leading item equal to lora is dropped. An
// empty tuple, nil, or a tuple holding only the LoRA name gives 0, the digest of "no extra keys".
// Malformed input gives a digest of what could be read; it can only cause a missed match.
func ExtraKeysDigest(raw []byte, lora string) uint64 {
	if len(raw) == 0 {
		return 0
	}
	r := reader{buf: raw}
	if r.peek() != tArray {
		return 0
	}
	n := r.arrayLen()
	if n > 0 && lora != "" && r.peek() == tStr {
		save := r.pos
		if string(r.str()) != lora {
			r.pos = save
		} else {
			n--
		}
	}
	if n == 0 || r.err != nil {
		return 0
	}
	var d xxhash.Digest
	d.Reset()
	for i := 0; i < n && r.err == nil; i++ {
		digestItem(&d, &r, 0)
	}
	return nonZero(d.Sum64())
}

// SaltDigest is the digest of the extra-key tuple (cache_salt,) that vLLM attaches to a salted
// request's first block: SaltDigest(s) == ExtraKeysDigest(msgpack([s]), "").
func SaltDigest(salt string) uint64 {
	if salt == "" {
		return 0
	}
	var d xxhash.Digest
	d.Reset()
	writeHeader(&d, 's', uint64(len(salt)))
	_, _ = d.WriteString(salt)
	return nonZero(d.Sum64())
}

func nonZero(v uint64) uint64 {
	if v == 0 {
		return 1
	}
	return v
}

func writeHeader(d *xxhash.Digest, kind byte, v uint64) {
	var b [9]byte
	b[0] = kind
	binary.LittleEndian.PutUint64(b[1:], v)
	_, _ = d.Write(b[:])
}

// digestItem writes one value as (kind, length-or-value, bytes): canonical, so "ab","c" and
// "a","bc" differ, and an int written as int8 or uint64 digests the same.
func digestItem(d *xxhash.Digest, r *reader, depth int) {
	switch r.peek() {
	case tNil:
		r.skip()
		writeHeader(d, 'n', 0)
	case tBool:
		writeHeader(d, 'b', uint64(r.byte1()&1))
	case tInt:
		v, _ := r.int()
		writeHeader(d, 'i', v)
	case tFloat:
		f := r.float()
		writeHeader(d, 'f', uint64(int64(f*1e6)))
	case tStr:
		s := r.str()
		writeHeader(d, 's', uint64(len(s)))
		_, _ = d.Write(s)
	case tBin:
		s := r.strOrBin()
		writeHeader(d, 'y', uint64(len(s)))
		_, _ = d.Write(s)
	case tArray:
		n := r.arrayLen()
		writeHeader(d, 'a', uint64(n))
		for i := 0; i < n && r.err == nil; i++ {
			if depth > 8 { // extra keys nest two deep at most; deeper is junk
				r.skip()
				continue
			}
			digestItem(d, r, depth+1)
		}
	default:
		r.skip()
		writeHeader(d, '?', 0)
	}
}
