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
	"reflect"
	"testing"
)

// The request's small fields are read without encoding/json where that is safe; what they
// decode to, and whether they are refused, must not change.
func TestDecodeSmallMatchesEncodingJSON(t *testing.T) {
	values := []string{`"m"`, `"meta-llama/Llama-3.1-8B-Instruct"`, `"a\"b"`, `"caf\u00e9"`, `"café"`, "\"\xff\"", `""`,
		`"tab	"`, `"\/"`, `true`, `false`, `0`, `-0`, `7`, `-12`, `1e3`, `1.5`, `123456789012345678`,
		`1234567890123456789`, `99999999999999999999`, `[1]`, `{}`, `"8"`, `tru`}
	for _, v := range values {
		for _, newDst := range []func() any{
			func() any { return new(string) }, func() any { return new(*string) }, func() any { return new(bool) },
			func() any { return new(*bool) }, func() any { return new(*int) },
		} {
			got, want := newDst(), newDst()
			gerr, werr := decodeSmall([]byte(v), got), json.Unmarshal([]byte(v), want)
			if (gerr == nil) != (werr == nil) {
				t.Errorf("%s into %T: error %v, encoding/json %v", v, got, gerr, werr)
				continue
			}
			if gerr == nil && !reflect.DeepEqual(got, want) {
				t.Errorf("%s into %T: %v, encoding/json %v", v, got, reflect.ValueOf(got).Elem(), reflect.ValueOf(want).Elem())
			}
		}
	}
}
