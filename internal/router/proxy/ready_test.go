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
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// /ready stays 503, with the gate's reason, while the ready gate holds it (the start-up replay),
// even with a ready engine; then it follows the engines again.
func TestReadyGate(t *testing.T) {
	var open atomic.Bool
	gate := func() (bool, string) { return open.Load(), "kv events: waiting for the start-up replay of 1 source(s)" }
	h := newHarness(t, Config{ReadyGate: gate}, nil, newFakeEngine(t, "e0"))
	get := func() (int, string) {
		t.Helper()
		r, err := http.Get(h.http.URL + "/ready")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "start-up replay") {
		t.Fatalf("gate closed: /ready %d %q", code, body)
	}
	open.Store(true)
	if code, body := get(); code != http.StatusOK {
		t.Fatalf("gate open: /ready %d %q", code, body)
	}
	// The gate does not make a router without a ready engine ready.
	h2 := newHarness(t, Config{ReadyGate: gate}, nil)
	r, _ := http.Get(h2.http.URL + "/ready")
	r.Body.Close()
	if r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("no engine, gate open: /ready %d", r.StatusCode)
	}
}
