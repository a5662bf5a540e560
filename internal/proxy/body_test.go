package proxy

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
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
		for k, v := range want {
			// encoding/json unescapes keys and replaces invalid UTF-8; topLevel keeps the bytes.
			if strings.ContainsRune(k, '\\') || strings.ContainsRune(k, utf8.RuneError) {
				continue
			}
			if string(got[k]) != string(v) {
				t.Fatalf("key %q: %q vs %q", k, got[k], v)
			}
		}
	})
}
