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

package live

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/kvrouter/kvrouter/internal/bench/sse"
)

// tick is a clock that advances one second per reading: readStream reads it once per data chunk,
// so the times it records say which chunk they belong to.
func tick() func() float64 {
	t := 0.0
	return func() float64 { t++; return t }
}

func TestFixtures(t *testing.T) {
	cases := []struct {
		file          string
		text          string
		chunks        int
		tokens        int
		source        string
		prompt        int
		cached        int
		finish        string
		first, end    float64 // chunk numbers (1-based) of the first output and of the last choice
		wantErr       string
		tokenIDsTotal int
	}{
		{file: "vllm-completions.sse", text: " Paris, the capital and", chunks: 5, tokens: 5, source: SourceUsage, prompt: 6,
			finish: "length", first: 1, end: 5},
		// vLLM counts the EOS token in usage; its chunk carries no text.
		{file: "vllm-chat.sse", text: "Hello! How can I help?", chunks: 7, tokens: 8, source: SourceUsage, prompt: 42, cached: 32,
			finish: "stop", first: 2, end: 9},
		// Reasoning deltas are output; one chunk carries two token ids; usage comes on every chunk.
		{file: "vllm-chat-reasoning-tokenids.sse", text: "\n\n4.", chunks: 6, tokens: 7, source: SourceUsage, prompt: 15,
			finish: "stop", first: 2, end: 7, tokenIDsTotal: 7},
		{file: "vllm-error-midstream.sse", chunks: 2, wantErr: "EngineCore encountered an issue"},
		{file: "openai-chat.sse", text: "Bonjour! Comment puis-je vous aider ?", chunks: 8, tokens: 8, source: SourceUsage, prompt: 19,
			finish: "stop", first: 2, end: 10},
		// CRLF, a ping comment between chunks, and no usage: tokens are counted from chunks.
		{file: "llamacpp-python-chat.sse", text: " The sky is blue", chunks: 4, tokens: 4, source: SourceChunks,
			finish: "stop", first: 2, end: 6},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", "sse", c.file))
			if err != nil {
				t.Fatal(err)
			}
			// Whole, and one byte per read as a slow network delivers it.
			for _, oneByte := range []bool{false, true} {
				var body io.Reader = strings.NewReader(string(raw))
				if oneByte {
					body = iotest.OneByteReader(body)
				}
				s, err := readStream(body, tick(), 0)
				if c.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), c.wantErr) {
						t.Fatalf("err %v, want %q", err, c.wantErr)
					}
					if s.chunks != c.chunks {
						t.Fatalf("%d output chunks before the error, want %d", s.chunks, c.chunks)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				n, src := s.outputTokens()
				if s.text.String() != c.text || s.chunks != c.chunks || n != c.tokens || src != c.source || s.finish != c.finish {
					t.Fatalf("text %q chunks %d tokens %d (%s) finish %q; want %q %d %d (%s) %q",
						s.text.String(), s.chunks, n, src, s.finish, c.text, c.chunks, c.tokens, c.source, c.finish)
				}
				prompt, cached := 0, 0
				if s.usage != nil {
					prompt = s.usage.PromptTokens
					if s.usage.PromptTokensDetails != nil {
						cached = s.usage.PromptTokensDetails.CachedTokens
					}
				}
				if prompt != c.prompt || cached != c.cached {
					t.Fatalf("prompt %d cached %d, want %d %d", prompt, cached, c.prompt, c.cached)
				}
				if s.first != c.first || s.end != c.end || !(s.first <= s.lastOut && s.lastOut <= s.end) {
					t.Fatalf("first %g last output %g end %g, want first %g end %g", s.first, s.lastOut, s.end, c.first, c.end)
				}
				if len(s.itl) != c.chunks-1 {
					t.Fatalf("%d ITL samples for %d chunks", len(s.itl), c.chunks)
				}
				if c.tokenIDsTotal > 0 && (!s.sawTokenIDs || s.tokenIDs != c.tokenIDsTotal) {
					t.Fatalf("token ids %d (seen %v), want %d", s.tokenIDs, s.sawTokenIDs, c.tokenIDsTotal)
				}
			}
		})
	}
}

func TestTokenSourceFallbacks(t *testing.T) {
	// Token ids and no usage: the ids count, including the chunk that carries two.
	in := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"token_ids\":[1]}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"bc\"},\"token_ids\":[2,3]}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\",\"token_ids\":[]}]}\n\ndata: [DONE]\n\n"
	s, err := readStream(strings.NewReader(in), tick(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, src := s.outputTokens(); n != 3 || src != SourceTokenIDs || s.chunks != 2 || len(s.itl) != 1 {
		t.Fatalf("%d tokens from %s, %d chunks, %d gaps", n, src, s.chunks, len(s.itl))
	}
	// A usage chunk that says 0 completion tokens does not override what was seen.
	in = "data: {\"choices\":[{\"text\":\"x\"}]}\n\ndata: {\"choices\":[{\"text\":\"y\",\"finish_reason\":\"length\"}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":0}}\n\ndata: [DONE]\n\n"
	s, err = readStream(strings.NewReader(in), tick(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, src := s.outputTokens(); n != 2 || src != SourceChunks {
		t.Fatalf("%d tokens from %s", n, src)
	}
}

func TestStreamEdgeCases(t *testing.T) {
	cases := []struct {
		name, in string
		chunks   int
		wantErr  string
	}{
		{"data without the space, CR endings", "data:{\"choices\":[{\"text\":\"a\"}]}\r\rdata:[DONE]\r\r", 1, ""},
		{"multi-line data is one JSON value", "data: {\"choices\":\ndata: [{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n", 1, ""},
		{"comments and other fields are skipped", ": keepalive\nid: 1\nretry: 100\ndata: {\"choices\":[{\"text\":\"a\",\"finish_reason\":\"stop\"}]}\n\n", 1, ""},
		{"nothing after DONE is read", "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\ndata: not json\n\n", 1, ""},
		{"tool call deltas are output", "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\"}}]}}]}\n\ndata: [DONE]\n\n", 1, ""},
		{"flat vLLM error object", "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"object\":\"error\",\"message\":\"boom\",\"type\":\"InternalServerError\",\"code\":500}\n\n", 1, "boom"},
		{"error as a string", "data: {\"error\":\"overloaded\"}\n\n", 0, "overloaded"},
		{"error event type", "event: error\ndata: upstream reset\n\n", 0, "upstream reset"},
		{"bad JSON", "data: {\"choices\":\n\n", 0, "bad stream chunk"},
		{"no output at all", "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: [DONE]\n\n", 0, "without output"},
		{"cut off mid-answer", "data: {\"choices\":[{\"text\":\"a\"}]}\n\n", 1, "cut off"},
		{"final event without blank line is dropped", "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\",\"finish_reason\":\"stop\"}]}\n", 1, "cut off"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := readStream(strings.NewReader(c.in), tick(), 0)
			if c.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("err %v, want %q", err, c.wantErr)
			}
			if s.chunks != c.chunks {
				t.Fatalf("%d chunks, want %d", s.chunks, c.chunks)
			}
		})
	}
}

func TestStreamLineBound(t *testing.T) {
	in := "data: {\"choices\":[{\"text\":\"" + strings.Repeat("x", 2000) + "\"}]}\n\n"
	_, err := readStream(strings.NewReader(in), tick(), 1024)
	if !errors.Is(err, sse.ErrTooLong) || !strings.Contains(err.Error(), "1024") {
		t.Fatalf("err %v, want a bound error naming 1024 bytes", err)
	}
}
