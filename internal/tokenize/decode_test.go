package tokenize

import (
	"encoding/json"
	"slices"
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
		// Declined by the fast path, still valid JSON: decoded by encoding/json.
		{`{"count":1,"tokens":[7],"tok\u0065n_strs":["x"]}`, 1, []uint32{7}},
	}
	for _, c := range cases {
		r, err := decodeResponse([]byte(c.in))
		if err != nil || r.Count != c.count || !slices.Equal(r.Tokens, c.toks) {
			t.Errorf("%s: %+v %v", c.in, r, err)
		}
	}
	for _, bad := range []string{``, `{`, `{"tokens":[1,]}`, `{"tokens":[-1]}`, `{"tokens":[4294967296]}`,
		`{"tokens":[1.5]}`, `{"tokens":"x"}`, `{"tokens":[1]} x`, `[1,2]`, `{"tokens":[01]}`} {
		if r, err := decodeResponse([]byte(bad)); err == nil {
			t.Errorf("%q accepted: %+v", bad, r)
		}
	}
}

// The fast path agrees with encoding/json on what both accept.
func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"count":3,"tokens":[1,2,3]}`))
	f.Add([]byte(`{"tokens":[ 1 ,2],"x":[{"y":null}]}`))
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

func TestParseIDs(t *testing.T) {
	if ids, ok := ParseIDs([]byte(" [1, 2,3] ")); !ok || !slices.Equal(ids, []uint32{1, 2, 3}) {
		t.Fatalf("%v %v", ids, ok)
	}
	for _, bad := range []string{`[[1,2]]`, `[1,"a"]`, `"text"`, `[1] [2]`, `[-3]`} {
		if _, ok := ParseIDs([]byte(bad)); ok {
			t.Errorf("%s accepted", bad)
		}
	}
}
