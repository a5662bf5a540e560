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
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A whole answer is written when it ends, but one of unknown length may be a stream by another
// name: its first part must reach the client while the engine still holds the rest back.
func TestRelayFlushesAnswersOfUnknownLength(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","parent":null}]}`)
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "whole") {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "11")
			_, _ = io.WriteString(w, `{"id":"x"}`+"\n")
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson") // no Content-Length: chunked
		_, _ = io.WriteString(w, "{\"part\":1}\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "{\"part\":2}\n")
	})
	engine := httptest.NewServer(mux)
	defer engine.Close()
	defer close(release)
	h := newHarness(t, Config{}, nil, &fakeEngine{name: "e0", Server: engine})

	resp, err := http.Post(h.http.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":[1,2,3]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		first <- line
	}()
	select {
	case line := <-first:
		if line != "{\"part\":1}\n" {
			t.Fatalf("first part %q", line)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the first part of an answer of unknown length was held back until the answer ended")
	}

	// An answer with a length arrives whole, with it.
	resp2, err := http.Post(h.http.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"whole"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if string(b) != `{"id":"x"}`+"\n" || resp2.ContentLength != 11 || resp2.Header.Get(EndpointHeader) != "e0" {
		t.Fatalf("whole answer %q, length %d, headers %v", b, resp2.ContentLength, resp2.Header)
	}
}
