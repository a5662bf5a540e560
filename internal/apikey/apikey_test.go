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

package apikey

import (
	"slices"
	"testing"
)

func TestAllows(t *testing.T) {
	s := NewSet([]string{"old-key", "", "new-key"})
	if s.Len() != 2 {
		t.Fatalf("Len = %d, want 2 (the empty key is dropped)", s.Len())
	}
	for _, c := range []struct {
		header string
		want   bool
	}{
		{"Bearer old-key", true},
		{"Bearer new-key", true},
		{"bearer new-key", true},
		{"BEARER  new-key ", true},
		{"Bearer other", false},
		{"Bearer old-key2", false},
		{"Bearer ", false},
		{"Bearer", false},
		{"Basic b2xkLWtleQ==", false},
		{"old-key", false},
		{"", false},
	} {
		if got := s.Allows(c.header); got != c.want {
			t.Errorf("Allows(%q) = %v, want %v", c.header, got, c.want)
		}
	}
	if (Set{}).Allows("Bearer ") || (Set{}).Allows("Bearer x") {
		t.Error("the empty set allows a key")
	}
}

func TestParse(t *testing.T) {
	got := Parse([]byte("  first \n\n\tsecond\r\n"))
	if want := []string{"first", "second"}; !slices.Equal(got, want) {
		t.Fatalf("Parse = %q, want %q", got, want)
	}
	if got := Parse([]byte("\n \n")); len(got) != 0 {
		t.Fatalf("Parse of blank lines = %q", got)
	}
}
