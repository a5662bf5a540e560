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
	"testing"
	"time"
)

// Token events are counted on SSE separators (LF or CRLF), including one split across two reads;
// the final [DONE] event carries no token; streams too short to time report nothing.
func TestITLMeter(t *testing.T) {
	t0 := time.Unix(100, 0)
	var m itlMeter
	m.add([]byte("data: {\"t\":0}\n\ndata: {\"t\":1}\n"), t0)
	m.add([]byte("\ndata: {\"t\":2}\n\n"), t0.Add(40*time.Millisecond))
	m.add([]byte("data: {\"t\":3}\n\n"), t0.Add(60*time.Millisecond))
	m.add([]byte("data: [DONE]\n\n"), t0.Add(60*time.Millisecond))
	gap, ok := m.mean()
	// Five events, four tokens, three gaps over 60 ms.
	if !ok || gap != 20*time.Millisecond {
		t.Fatalf("mean gap %v ok=%v, want 20ms", gap, ok)
	}
	// CRLF separators count the same.
	var crlf itlMeter
	for i := 0; i < 4; i++ {
		crlf.add([]byte("data: {}\r\n\r\n"), t0.Add(time.Duration(i)*10*time.Millisecond))
	}
	crlf.add([]byte("data: [DONE]\r\n\r\n"), t0.Add(30*time.Millisecond))
	if gap, ok := crlf.mean(); !ok || gap != 10*time.Millisecond {
		t.Fatalf("CRLF stream: gap %v ok=%v, want 10ms", gap, ok)
	}
	var short itlMeter
	short.add([]byte("data: {\"t\":0}\n\ndata: [DONE]\n\n"), t0)
	if _, ok := short.mean(); ok {
		t.Fatal("a one-token stream was timed")
	}
}
