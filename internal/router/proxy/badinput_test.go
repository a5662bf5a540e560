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
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// More bad input than TestBadInput: wrong types, oversized and huge-but-legal bodies, invalid
// UTF-8, truncated and trickled bodies, and a wrong content type. Each gets a clear answer, and
// nothing the router refuses reaches an engine.
func TestBadInputMore(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{MaxBodyBytes: 8 << 20}, nil, e0)
	for _, c := range []struct{ name, path, body, param string }{
		{"model not a string", "/v1/completions", `{"model":5,"prompt":"x"}`, "model"},
		{"stream not a bool", "/v1/completions", `{"model":"m","prompt":"x","stream":"yes"}`, "stream"},
		{"max_tokens a string", "/v1/completions", `{"model":"m","prompt":"x","max_tokens":"10"}`, "max_tokens"},
		{"max_tokens fractional", "/v1/chat/completions", `{"model":"m","messages":[],"max_tokens":1.5}`, "max_tokens"},
		{"messages an object", "/v1/chat/completions", `{"model":"m","messages":{"role":"user"}}`, "messages"},
		{"prompt null", "/v1/completions", `{"model":"m","prompt":null}`, "prompt"},
		{"trailing garbage", "/v1/completions", `{"model":"m","prompt":"x"} {}`, ""},
		{"not JSON at all", "/v1/completions", `model=m&prompt=x`, ""},
	} {
		resp, body := h.post(t, c.path, c.body, nil)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, body)
			continue
		}
		decodeError(t, body)
		if c.param != "" && !strings.Contains(body, `"param":"`+c.param+`"`) {
			t.Errorf("%s: error does not name %s: %s", c.name, c.param, body)
		}
	}
	if n := e0.requests.Load(); n != 0 {
		t.Fatalf("refused requests reached the engine %d times", n)
	}

	// An escaped key is the same member (as for the engine's JSON reader).
	if resp, body := h.post(t, "/v1/completions", `{"mod\u0065l":"m","prompt":"x"}`, nil); resp.StatusCode != 200 {
		t.Errorf("escaped model key: %d %s", resp.StatusCode, body)
	}
	// Invalid UTF-8 is the engine's to judge (encoding/json and the router accept it): the
	// bytes reach it untouched.
	raw := "{\"model\":\"m\",\"prompt\":\"caf\xe9 \xff\"}"
	if resp, body := h.post(t, "/v1/completions", raw, nil); resp.StatusCode != 200 || e0.lastBody.Load() != raw {
		t.Errorf("invalid UTF-8: %d %s; engine got %q", resp.StatusCode, body, e0.lastBody.Load())
	}
	// A wrong content type is not an error: the body is JSON, and the engine gets it as such.
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"x"}`))
	req.Header.Set("Content-Type", "text/plain")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("text/plain body: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// A huge token-id prompt within the limit (1M ids, ~7 MB) is read, routed and forwarded.
	var b strings.Builder
	b.WriteString(`{"model":"m","max_tokens":1,"prompt":[`)
	for i := range 1 << 20 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, i%128000)
	}
	b.WriteString("]}")
	before := e0.requests.Load()
	if resp, body := h.post(t, "/v1/completions", b.String(), nil); resp.StatusCode != 200 || e0.requests.Load() != before+1 {
		t.Errorf("1M-id prompt (%d bytes): %d %.200s", b.Len(), resp.StatusCode, body)
	}
	// Past the limit: 413, nothing forwarded.
	small := newHarness(t, Config{MaxBodyBytes: 1 << 20}, nil, e0)
	before = e0.requests.Load()
	if resp, body := small.post(t, "/v1/completions", b.String(), nil); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("over the limit: %d %.200s", resp.StatusCode, body)
	} else {
		decodeError(t, body)
	}
	if e0.requests.Load() != before {
		t.Error("an oversized body reached the engine")
	}
}

// rawRequest writes head and then body to the server over a raw connection, half-closes it if
// closeWrite, and reads the response (with a deadline of wait).
func rawRequest(t *testing.T, addr, head, body string, closeWrite bool, wait time.Duration) (*http.Response, string, time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := io.WriteString(c, head+body); err != nil {
		t.Fatal(err)
	}
	if closeWrite {
		_ = c.(*net.TCPConn).CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response within %v: %v", wait, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), time.Since(start)
}

// A body cut short (the client half-closes before Content-Length bytes) is a 400; a body
// trickled slower than BodyReadTimeout is a 408 once the timeout passes. Neither is forwarded.
func TestTruncatedAndSlowBodies(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{BodyReadTimeout: 300 * time.Millisecond}, nil, e0)
	addr := h.http.Listener.Addr().String()
	head := "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
	part := `{"model":"m","prompt":"`

	resp, body, _ := rawRequest(t, addr, head, part, true, 5*time.Second)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("truncated body: %d %s", resp.StatusCode, body)
	} else {
		decodeError(t, body)
	}
	resp, body, took := rawRequest(t, addr, head, part, false, 5*time.Second)
	if resp.StatusCode != http.StatusRequestTimeout || took > 3*time.Second {
		t.Errorf("stalled body: %d after %v: %s", resp.StatusCode, took, body)
	} else {
		decodeError(t, body)
	}
	if n := e0.requests.Load(); n != 0 {
		t.Fatalf("incomplete bodies reached the engine %d times", n)
	}
	// The deadline covers the body only: a stream may then take longer than it.
	e0.chunks, e0.gap = 4, 200*time.Millisecond
	r, b := h.post(t, "/v1/completions", `{"model":"m","prompt":"x","stream":true}`, nil)
	if r.StatusCode != 200 || !strings.HasSuffix(b, "data: [DONE]\n\n") || strings.Contains(b, "error") {
		t.Errorf("a stream longer than the body timeout: %d %q", r.StatusCode, b)
	}
}
