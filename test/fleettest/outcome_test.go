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

package fleettest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Each way an answer can go is classified as docs/reliability.md defines it.
func TestClassify(t *testing.T) {
	const chunk = `data: {"choices":[{"text":"a","finish_reason":null}]}` + "\n\n"
	const last = `data: {"choices":[{"text":"b","finish_reason":"length"}]}` + "\n\n"
	cut := func(w http.ResponseWriter, body string) {
		_, _ = io.WriteString(w, body)
		w.(http.Flusher).Flush()
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			c.Close()
		}
	}
	sse := func(w http.ResponseWriter) { w.Header().Set("Content-Type", "text/event-stream") }
	cases := []struct {
		name   string
		stream bool
		want   int // WantTokens
		serve  func(w http.ResponseWriter)
		out    Outcome
	}{
		{"whole answer", false, 2, func(w http.ResponseWriter) {
			_, _ = io.WriteString(w, `{"choices":[{"text":"ab","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}`)
		}, Completed},
		{"whole answer of the wrong length", false, 3, func(w http.ResponseWriter) {
			_, _ = io.WriteString(w, `{"choices":[{"text":"ab","finish_reason":"length"}],"usage":{"completion_tokens":2}}`)
		}, Lost},
		{"JSON error", false, 0, func(w http.ResponseWriter) {
			w.WriteHeader(503)
			_, _ = io.WriteString(w, `{"error":{"message":"no engine is ready","type":"server_error","code":503}}`)
		}, ClearError},
		{"error status without an error body", false, 0, func(w http.ResponseWriter) {
			w.WriteHeader(502)
			_, _ = io.WriteString(w, `Bad Gateway`)
		}, Lost},
		{"whole answer cut", false, 0, func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "500")
			cut(w, `{"choices":[`)
		}, Lost},
		{"200 without a choice", false, 0, func(w http.ResponseWriter) { _, _ = io.WriteString(w, `{}`) }, Lost},
		{"stream", true, 2, func(w http.ResponseWriter) {
			sse(w)
			_, _ = io.WriteString(w, chunk+last+"data: [DONE]\n\n")
		}, Completed},
		{"chat stream", true, 1, func(w http.ResponseWriter) {
			sse(w)
			_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"role":"assistant","content":""}}]}`+"\n\n"+
				`data: {"choices":[{"delta":{"content":""},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
		}, Completed},
		{"stream with an error event", true, 0, func(w http.ResponseWriter) {
			sse(w)
			_, _ = io.WriteString(w, chunk+`data: {"error":{"message":"the engine stream broke off","code":502}}`+"\n\n")
		}, ClearError},
		{"stream cut after an error event", true, 0, func(w http.ResponseWriter) {
			sse(w)
			cut(w, chunk+`data: {"error":{"message":"x","code":500}}`+"\n\n")
		}, ClearError},
		{"stream cut", true, 0, func(w http.ResponseWriter) { sse(w); cut(w, chunk) }, Lost},
		{"stream ended without [DONE]", true, 0, func(w http.ResponseWriter) { sse(w); _, _ = io.WriteString(w, chunk+last) }, Lost},
		{"stream without a finish reason", true, 0, func(w http.ResponseWriter) {
			sse(w)
			_, _ = io.WriteString(w, chunk+"data: [DONE]\n\n")
		}, Lost},
		{"stream of the wrong length", true, 3, func(w http.ResponseWriter) {
			sse(w)
			_, _ = io.WriteString(w, chunk+last+"data: [DONE]\n\n")
		}, Lost},
		{"stream as JSON", true, 0, func(w http.ResponseWriter) {
			_, _ = io.WriteString(w, `{"choices":[{"text":"ab","finish_reason":"length"}]}`)
		}, Lost},
		{"closed without an answer", false, 0, func(w http.ResponseWriter) {
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
		}, Unanswered},
		{"hang", false, 0, func(http.ResponseWriter) { time.Sleep(300 * time.Millisecond) }, Lost},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { c.serve(w) }))
			defer srv.Close()
			r := Do(context.Background(), srv.Client(), srv.URL, Request{Path: "/v1/completions", Body: []byte(`{}`),
				Stream: c.stream, WantTokens: c.want}, 100*time.Millisecond)
			if r.Outcome != c.out {
				t.Fatalf("%v (%s), want %v", r.Outcome, r.Reason, c.out)
			}
		})
	}
	// Nothing listening: refused, which Load resends.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	if r := Do(context.Background(), http.DefaultClient, url, Request{Path: "/"}, time.Second); r.Outcome != Refused {
		t.Fatalf("closed port: %v (%s)", r.Outcome, r.Reason)
	}
}

// Load counts every request it sends once, resends refused ones, and Tally reports them.
func TestLoadCountsAndResends(t *testing.T) {
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if served.Add(1)%3 == 0 {
			w.WriteHeader(500)
			_, _ = io.WriteString(w, `{"error":{"message":"injected","code":500}}`)
			return
		}
		_, _ = fmt.Fprint(w, `{"choices":[{"text":"x","finish_reason":"length"}],"usage":{"completion_tokens":4}}`)
	}))
	defer srv.Close()
	l := &Load{URL: srv.URL, Workers: 1, Work: func(int) Request {
		return Request{Path: "/v1/completions", Body: []byte(`{}`), WantTokens: 4}
	}}
	l.Start()
	time.Sleep(200 * time.Millisecond)
	tally := l.Stop()
	n := int(served.Load())
	if tally.Total() != n || tally.Count(ClearError) != n/3 || tally.Count(Lost) != 0 {
		t.Fatalf("server saw %d, tally %s", n, tally)
	}
	if s := tally.String(); !strings.Contains(s, "injected") {
		t.Fatalf("reasons missing from %q", s)
	}
}
