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

package proxy

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestTopLevel(t *testing.T) {
	f, err := topLevel([]byte(` {"model":"m","prompt":"a\"b\u00e9","n":-1.5e3,"x":[{"y":null},true,false],"model":"m2"} `))
	if err != nil {
		t.Fatal(err)
	}
	if string(f["model"]) != `"m2"` || string(f["prompt"]) != `"a\"b\u00e9"` || string(f["n"]) != "-1.5e3" ||
		string(f["x"]) != `[{"y":null},true,false]` {
		t.Fatalf("%q", f)
	}
	for _, bad := range []string{``, `[]`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":01}`, `{"a":1.}`, `{"a":"\x"}`,
		`{"a":"` + "\x01" + `"}`, `{"a":tru}`, `{"a":1} {}`, `{"a":[1,]}`, `{"a":"\u12"}`, `{"a":-}`, `{"a":1e}`} {
		if _, err := topLevel([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	if _, err := topLevel([]byte(`{"a":` + deep + `}`)); err == nil {
		t.Error("nesting deeper than encoding/json allows accepted")
	}
}

// topLevel accepts exactly what encoding/json accepts as an object, and finds the same members.
func FuzzTopLevel(f *testing.F) {
	for _, s := range []string{`{"model":"m","prompt":[1,2]}`, `{"a":{"b":[1.5e-3,"x\n"]},"c":null}`, `{}`, `{"a":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := topLevel(data)
		var want map[string]json.RawMessage
		werr := json.Unmarshal(data, &want)
		if werr == nil && want == nil {
			werr = json.Unmarshal([]byte("x"), &want) // "null" is not an object
		}
		if (err == nil) != (werr == nil) {
			t.Fatalf("topLevel err %v, encoding/json err %v", err, werr)
		}
		if err != nil {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%d members, encoding/json %d", len(got), len(want))
		}
		for k, v := range want {
			if string(got[k]) != string(v) {
				t.Fatalf("key %q: %q vs %q", k, got[k], v)
			}
		}
	})
}

// BenchmarkTopLevel100K scans a completion body with a ~100K-token (~500 KB) prompt.
func BenchmarkTopLevel100K(b *testing.B) {
	body := []byte(`{"model":"m","prompt":"` + strings.Repeat("doc7 ", 90000) + strings.Repeat("q1 ", 10000) +
		`","max_tokens":100,"stream":true}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := topLevel(body); err != nil {
			b.Fatal(err)
		}
	}
}

// The tie-break is a function of the tokens alone (the same on every replica and every call)
// and separates prompts that differ in any one token, wherever it is.
