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

package tokenize

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkTokenize8K measures the router's side of tokenizing an 8K-token prompt: a call to
// an engine stub that answers instantly with 8,192 ids (round trip + JSON decode; the engine's
// own tokenizer time comes on top), against a cache hit.
func BenchmarkTokenize8K(b *testing.B) {
	toks := make([]uint32, 8192)
	for i := range toks {
		toks[i] = uint32(i * 7919 % 151000)
	}
	answer, _ := json.Marshal(map[string]any{"count": len(toks), "tokens": toks})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(answer)
	}))
	defer srv.Close()
	for _, cached := range []bool{false, true} {
		name := "call"
		if cached {
			name = "cache-hit"
		}
		b.Run(name, func(b *testing.B) {
			c := New(srv.Client(), 5*time.Second, 1<<22)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				p := fmt.Sprint("prompt ", i)
				if cached {
					p = "the same prompt"
				}
				if _, err := c.Completion(context.Background(), srv.URL, CompletionRequest{Prompt: p}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecode100K is the decode of a 100K-token /tokenize answer (~600 KB, vllm-sim's and
// vLLM's key order: count, max_model_len, token_strs, tokens), the router's largest per-request
// parse at the sizing point.
func BenchmarkDecode100K(b *testing.B) {
	toks := make([]uint32, 100_000)
	for i := range toks {
		toks[i] = uint32(i * 7919 % 151000)
	}
	answer, _ := json.Marshal(map[string]any{"count": len(toks), "max_model_len": 131072, "token_strs": nil, "tokens": toks})
	b.SetBytes(int64(len(answer)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r, err := decodeResponse(answer)
		if err != nil || len(r.Tokens) != len(toks) {
			b.Fatal(err)
		}
	}
}
