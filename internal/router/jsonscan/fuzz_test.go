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
	"encoding/json"
	"slices"
	"testing"
)

// Skip reads exactly the value json.Decoder reads first, and fails exactly when it fails.
func FuzzSkip(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":null}],"c":"x\"y"}`, ` -1.5e+3 ]`, `0123`, `truex`, `"\ud83d\ude00"`,
		`[1,]`, `{"a" 1}`, "\"a\x01\"", `[[[]]]{}`, `"\u12zz"`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New(data)
		raw, err := s.Skip()
		dec := json.NewDecoder(bytes.NewReader(data))
		var want json.RawMessage
		werr := dec.Decode(&want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("Skip: %v; json.Decoder: %v", err, werr)
		}
		if err == nil && (!bytes.Equal(raw, want) || int64(s.Pos()) != dec.InputOffset()) {
			t.Fatalf("Skip read %q up to %d; json.Decoder %q up to %d", raw, s.Pos(), want, dec.InputOffset())
		}
	})
}

// A string's text is what json.Unmarshal decodes, for the data as it stands and in quotes.
func FuzzString(f *testing.F) {
	for _, s := range []string{`"plain"`, `a\"b\\c\/d\b\f\n\r\t`, `\u00e9\u20AC`, `\ud83d\ude00`, `\ud83d`,
		`\ud83d\u0041`, "caf\xe9", "\xed\xa0\x80", `\u0000`, `\x`, `"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		AppendUnescaped(nil, data) // malformed escapes included: no panic
		for _, in := range [][]byte{data, append(append([]byte{'"'}, data...), '"')} {
			s := New(in)
			str, err := s.ReadString()
			ok := err == nil && s.AtEnd()
			var want string
			werr := json.Unmarshal(in, &want)
			if ok != (werr == nil) {
				t.Fatalf("%q: ReadString %v (at end: %v); json.Unmarshal %v", in, err, s.AtEnd(), werr)
			}
			if ok && string(str.Text(nil)) != want {
				t.Fatalf("%q: text %q; json.Unmarshal %q", in, str.Text(nil), want)
			}
		}
	})
}

// Uint and Uint32s read what json.Unmarshal reads into a uint64 and a []uint32, and refuse
// the rest, bar JSON's null, which encoding/json takes as "leave the zero value".
func FuzzNumbers(f *testing.F) {
	for _, s := range []string{`0`, ` 42 `, `18446744073709551616`, `-1`, `1.0`, `1e2`, `01`, `[1, 2,3]`,
		`[4294967295,4294967296]`, `[1234567,12345678,0,7, 65]`, `[]`, `[1,]`, `[01]`, `[null]`, `[1]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		hasNull := bytes.Contains(data, []byte("null"))

		s := New(data)
		v, ok := s.Uint()
		ok = ok && s.AtEnd()
		var u uint64
		uerr := json.Unmarshal(data, &u)
		if ok && (uerr != nil || u != v) {
			t.Fatalf("Uint read %d; json.Unmarshal %d, %v", v, u, uerr)
		}
		if !ok && uerr == nil && !hasNull {
			t.Fatalf("Uint refused what json.Unmarshal reads as %d", u)
		}

		s = New(data)
		ids, ok := s.Uint32s()
		ok = ok && s.AtEnd()
		var want []uint32
		werr := json.Unmarshal(data, &want)
		if ok && (werr != nil || !slices.Equal(ids, want)) {
			t.Fatalf("Uint32s read %v; json.Unmarshal %v, %v", ids, want, werr)
		}
		if !ok && werr == nil && !hasNull {
			t.Fatalf("Uint32s refused what json.Unmarshal reads as %v", want)
		}
	})
}
