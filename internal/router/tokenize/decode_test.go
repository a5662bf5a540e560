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

package tokenize

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestDecodeResponse(t *testing.T) {
	cases := []struct {
		in    string
		count int
		toks  []uint32
	}{
		{`{"count":3,"max_model_len":4096,"tokens":[1,22,4294967295],"token_strs":null}`, 3, []uint32{1, 22, 4294967295}},
		{` { "tokens" : [ 0 , 5 ] , "count" : 2 , "extra": {"a":[1,{"b":"c\"d"}]} } `, 2, []uint32{0, 5}},
		{`{"count":0,"tokens":[]}`, 0, []uint32{}},
		// Escaped keys name the same members.
		{`{"count":1,"tokens":[7],"tok\u0065n_strs":["x"]}`, 1, []uint32{7}},
		{`{"c\u006funt":1,"tok\u0065ns":[7]}`, 1, []uint32{7}},
		// Declined by the fast path, still valid JSON: decoded by encoding/json.
		{`{"Count":2,"TOKENS":[7,8],"tokens":null}`, 2, nil},
	}
	for _, c := range cases {
		r, err := decodeResponse([]byte(c.in))
		if err != nil || r.Count != c.count || !slices.Equal(r.Tokens, c.toks) {
			t.Errorf("%s: %+v %v", c.in, r, err)
		}
	}
	for _, bad := range []string{``, `{`, `{"tokens":[1,]}`, `{"tokens":[-1]}`, `{"tokens":[4294967296]}`,
		`{"tokens":[1.5]}`, `{"tokens":"x"}`, `{"tokens":[1]} x`, `[1,2]`, `{"tokens":[01]}`, `{"count":01}`, `{"count":-}`} {
		if r, err := decodeResponse([]byte(bad)); err == nil {
			t.Errorf("%q accepted: %+v", bad, r)
		}
	}
}

// Escaped keys are unescaped before they are matched, so they keep the fast path.
func TestFastDecodeEscapedKeys(t *testing.T) {
	r, err := fastDecode([]byte(`{"c\u006funt":1,"tok\u0065ns":[7],"x\ty":{}}`))
	if err != nil || r.Count != 1 || !slices.Equal(r.Tokens, []uint32{7}) {
		t.Fatalf("%+v %v", r, err)
	}
}

// The fast path agrees with encoding/json on what both accept.
func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"count":3,"tokens":[1,2,3]}`))
	f.Add([]byte(`{"tokens":[ 1 ,2],"x":[{"y":null}]}`))
	f.Add([]byte(`{"count":4,"tokens":[1234567,12345678,4294967295,0,7, 65]}`))
	f.Add([]byte(`{"tokens":[151000,151001,0012345,1]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ferr := fastDecode(data)
		var std response
		serr := json.Unmarshal(data, &std)
		if ferr == nil && serr == nil && (fast.Count != std.Count || !slices.Equal(fast.Tokens, std.Tokens)) {
			t.Fatalf("fast %+v std %+v", fast, std)
		}
		if ferr == nil && serr != nil {
			t.Fatalf("fast path accepted what encoding/json rejects: %v", serr)
		}
	})
}

// Long arrays take the 8-bytes-at-a-time path (short ones the byte loop): ids of every digit
// count, with and without spaces, agree with encoding/json, and malformed ids inside a long
// array are still rejected.
func TestDecodeLongArrays(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		ids := make([]uint32, 1+rnd.IntN(300))
		for i := range ids {
			ids[i] = uint32(rnd.Uint64N(uint64(1) << (1 + rnd.IntN(32))))
		}
		sep := []string{",", ", ", " , ", ",\n"}[round%4]
		var b strings.Builder
		b.WriteString(`{"count":` + strconv.Itoa(len(ids)) + `,"tokens":[`)
		for i, id := range ids {
			if i > 0 {
				b.WriteString(sep)
			}
			b.WriteString(strconv.FormatUint(uint64(id), 10))
		}
		b.WriteString(`]}`)
		r, err := fastDecode([]byte(b.String()))
		if err != nil || !slices.Equal(r.Tokens, ids) {
			t.Fatalf("round %d: %v, %d ids decoded of %d", round, err, len(r.Tokens), len(ids))
		}
	}
	long := strings.Repeat("123456,", 20)
	for _, bad := range []string{long + "0123456,1]", long + "12a456,1]", long + "4294967296,1]",
		long + "99999999999,1]", long + "1 2,3]", long + ",1]", long + "1,]"} {
		if r, err := fastDecode([]byte(`{"tokens":[` + bad + `}`)); err == nil {
			t.Errorf("%q accepted: %d ids", bad, len(r.Tokens))
		}
	}
}
