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
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestSkip(t *testing.T) {
	for _, c := range []struct{ in, raw, rest string }{
		{` {"a":[1,{"b":null}],"c":"x\"y"} ,`, `{"a":[1,{"b":null}],"c":"x\"y"}`, ` ,`},
		{`-1.5e+3]`, `-1.5e+3`, `]`},
		{`0123`, `0`, `123`}, // a leading zero ends the number, as for json.Decoder
		{`truex`, `true`, `x`},
		{`"\u00e9\/"`, `"\u00e9\/"`, ``},
		{"[ ]\n", `[ ]`, "\n"},
	} {
		s := New([]byte(c.in))
		raw, err := s.Skip()
		if err != nil || string(raw) != c.raw || c.in[s.Pos():] != c.rest {
			t.Errorf("%q: %q, rest %q, %v", c.in, raw, c.in[s.Pos():], err)
		}
	}
}

// The messages and offsets reach clients in the router's 400 answers.
func TestSkipErrors(t *testing.T) {
	for _, c := range []struct {
		in     string
		offset int
		msg    string
	}{
		{``, 0, "unexpected end of input"},
		{`  `, 2, "unexpected end of input"},
		{`{"a"}`, 4, "expected ':' after an object key"},
		{`{"a":}`, 5, "unexpected character"},
		{`{"a":1,}`, 7, "expected a string"},
		{`{"a":1 "b":2}`, 7, "expected ',' or '}' in object"},
		{`[1 2]`, 3, "expected ',' or ']' in array"},
		{`[1,]`, 3, "unexpected character"},
		{`tru`, 0, "invalid literal"},
		{`-`, 1, "invalid number"},
		{`1.`, 2, "invalid number"},
		{`1e+`, 3, "invalid number"},
		{`"\x"`, 1, "invalid escape"},
		{`"\`, 1, "unterminated escape"},
		{`"\u12zz"`, 1, "invalid \\u escape"},
		{`"\u12`, 1, "short \\u escape"},
		{"\"a\x01\"", 2, "control character in string"},
		{`"abc`, 4, "unterminated string"},
	} {
		s := New([]byte(c.in))
		_, err := s.Skip()
		var se *SyntaxError
		if !errors.As(err, &se) || se.Offset != c.offset || se.Msg != c.msg {
			t.Errorf("%q: %v, want %q at %d", c.in, err, c.msg, c.offset)
		}
	}
	s := New([]byte(`{"a":1} x`))
	_, _ = s.Skip()
	s.SkipSpace()
	if got := s.Errorf("unexpected data after %s", "it").Error(); got != "invalid JSON at offset 8: unexpected data after it" {
		t.Errorf("Errorf: %q", got)
	}
}

// The nesting limit is encoding/json's, counting every array and object open at once.
func TestDepth(t *testing.T) {
	nest := func(n int) []byte { return []byte(strings.Repeat("[", n) + strings.Repeat("]", n)) }
	for _, n := range []int{maxDepth, maxDepth + 1} {
		s := New(nest(n))
		_, err := s.Skip()
		var v any
		if (err == nil) != (json.Unmarshal(nest(n), &v) == nil) || (err == nil) != (n <= maxDepth) {
			t.Errorf("%d nested arrays: %v", n, err)
		}
	}
	// An object's members start one level down.
	for _, n := range []int{maxDepth - 1, maxDepth} {
		s := New([]byte(`{"a":` + string(nest(n)) + `}`))
		err := s.Object(func(String) error { _, err := s.Skip(); return err })
		if (err == nil) != (n < maxDepth) {
			t.Errorf("%d nested arrays in an object: %v", n, err)
		}
	}
	deep := []byte(strings.Repeat("[", maxDepth-1) + "[1]" + strings.Repeat("]", maxDepth-1))
	s := New(deep)
	for range maxDepth - 1 {
		s.Peek()
		if err := s.open(); err != nil {
			t.Fatal(err)
		}
	}
	if ids, ok := s.Uint32s(); !ok || len(ids) != 1 {
		t.Errorf("ids at the nesting limit: %v %v", ids, ok)
	}
	s = New(deep)
	for range maxDepth {
		s.Peek()
		_ = s.open()
	}
	if _, ok := s.Uint32s(); ok {
		t.Error("ids past the nesting limit read")
	}
}

func TestObject(t *testing.T) {
	s := New([]byte(` {"a":1, "b\u0065":"x" ,"c":{"d":[]},"\ud83d\ude00":null} `))
	var names []string
	var buf [8]byte
	err := s.Object(func(name String) error {
		names = append(names, string(name.Text(buf[:0])))
		_, err := s.Skip()
		return err
	})
	if err != nil || !slices.Equal(names, []string{"a", "be", "c", "😀"}) || !s.AtEnd() {
		t.Fatalf("%q %v", names, err)
	}
	for _, bad := range []string{`[]`, ``, `{"a":1,}`, `{"a" 1}`, `{1:2}`} {
		s := New([]byte(bad))
		if err := s.Object(func(String) error { _, err := s.Skip(); return err }); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// The member's error stops the walk.
	stop := errors.New("stop")
	s = New([]byte(`{"a":1,"b":2}`))
	n := 0
	if err := s.Object(func(String) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("%v after %d members", err, n)
	}
}

func TestText(t *testing.T) {
	for _, in := range []string{`"plain"`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\u20AC"`, `"\ud83d\ude00"`,
		`"\ud83d"`, `"\ud83dx"`, `"\ud83d\u0041"`, `"\ude00\ud83d"`, "\"caf\xe9\"", "\"\xed\xa0\x80\"", `"\u0000"`} {
		s := New([]byte(in))
		str, err := s.ReadString()
		var want string
		if jerr := json.Unmarshal([]byte(in), &want); err != nil || jerr != nil {
			t.Fatalf("%s: %v %v", in, err, jerr)
		}
		if got := str.Text(nil); string(got) != want {
			t.Errorf("%s: %q, encoding/json %q", in, got, want)
		}
	}
	// Nothing to resolve: the text is the input itself, not a copy.
	in := []byte(`"abc"`)
	s := New(in)
	str, _ := s.ReadString()
	if got := str.Text(nil); &got[0] != &in[1] {
		t.Error("plain string copied")
	}
}

func TestUint(t *testing.T) {
	for _, c := range []struct {
		in string
		v  uint64
		ok bool
	}{
		{" 0", 0, true}, {"42", 42, true}, {"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551616", 0, false}, {"99999999999999999999", 0, false},
		{"-1", 0, false}, {"1.0", 0, false}, {"1e2", 0, false}, {`"1"`, 0, false}, {"", 0, false},
	} {
		s := New([]byte(c.in))
		if v, ok := s.Uint(); v != c.v || ok != c.ok {
			t.Errorf("%q: %d %v", c.in, v, ok)
		}
	}
	s := New([]byte("01"))
	if v, ok := s.Uint(); !ok || v != 0 || s.AtEnd() {
		t.Error("01 is a 0 followed by junk")
	}
}

func TestUint32s(t *testing.T) {
	s := New([]byte(" [1, 2,3] "))
	if ids, ok := s.Uint32s(); !ok || !slices.Equal(ids, []uint32{1, 2, 3}) || !s.AtEnd() {
		t.Fatalf("%v %v", ids, ok)
	}
	for _, bad := range []string{`[[1,2]]`, `[1,"a"]`, `"text"`, `[-3]`, `[1,]`, `[01]`, `[4294967296]`, `[1.5]`, `[1e2]`, `[null]`, `[1`} {
		s := New([]byte(bad))
		if ids, ok := s.Uint32s(); ok {
			t.Errorf("%s read as %v", bad, ids)
		}
	}
	// Long arrays take the 8-bytes-at-a-time path (short ones the byte loop).
	rnd := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		ids := make([]uint32, 1+rnd.IntN(300))
		parts := make([]string, len(ids))
		for i := range ids {
			ids[i] = uint32(rnd.Uint64N(uint64(1) << (1 + rnd.IntN(32))))
			parts[i] = strconv.FormatUint(uint64(ids[i]), 10)
		}
		in := "[" + strings.Join(parts, []string{",", ", ", " , ", ",\n"}[round%4]) + "]"
		s := New([]byte(in))
		if got, ok := s.Uint32s(); !ok || !slices.Equal(got, ids) {
			t.Fatalf("round %d: %v, %d ids of %d", round, ok, len(got), len(ids))
		}
	}
}

// plainRun finds the same first special byte as a byte loop, wherever it falls in the words.
func TestPlainRun(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	specials := []byte{'"', '\\', 0x00, 0x1f, '\n'}
	plain := []byte{'a', ' ', 0x7f, 0x80, 0xff, 0x21, 0x5b, 0x5d, 0x23, 0x20}
	for round := 0; round < 5000; round++ {
		b := make([]byte, rnd.IntN(40))
		for i := range b {
			b[i] = plain[rnd.IntN(len(plain))]
			if rnd.IntN(12) == 0 {
				b[i] = specials[rnd.IntN(len(specials))]
			}
		}
		start := 0
		if len(b) > 0 {
			start = rnd.IntN(len(b))
		}
		want := start
		for want < len(b) && b[want] != '"' && b[want] != '\\' && b[want] >= 0x20 {
			want++
		}
		if got := plainRun(b, start); got != want {
			t.Fatalf("%q from %d: %d, want %d", b, start, got, want)
		}
	}
}

// The scans allocate nothing; a string's text only when it has escapes and no buffer fits it.
func TestAllocs(t *testing.T) {
	body := []byte(`{"model":"m","prompt":"` + strings.Repeat("a\\n", 100) + `","x":[1,{"y":-2.5e3}],"t":true}`)
	var buf [16]byte
	n := testing.AllocsPerRun(100, func() {
		s := New(body)
		if err := s.Object(func(name String) error {
			name.Text(buf[:0])
			_, err := s.Skip()
			return err
		}); err != nil || !s.AtEnd() {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("%v allocations per scan", n)
	}
}

func BenchmarkSkip100K(b *testing.B) {
	body := []byte(`{"model":"m","prompt":"` + strings.Repeat("doc7 ", 90000) + strings.Repeat("q1 ", 10000) +
		`","max_tokens":100,"stream":true}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		s := New(body)
		if _, err := s.Skip(); err != nil {
			b.Fatal(err)
		}
	}
}
