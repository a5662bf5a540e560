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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/kvrouter/kvrouter/internal/bench/sse"
)

// Endpoint is the OpenAI-compatible API a run drives.
type Endpoint string

const (
	// Completions is /v1/completions: the prompt as text, output in choices[].text.
	Completions Endpoint = "completions"
	// Chat is /v1/chat/completions: the prompt as user messages, output in choices[].delta.
	Chat Endpoint = "chat"
)

// ParseEndpoint reads the --endpoint flag.
func ParseEndpoint(s string) (Endpoint, error) {
	switch Endpoint(s) {
	case Completions, Chat:
		return Endpoint(s), nil
	}
	return "", fmt.Errorf("endpoint %q: want completions or chat", s)
}

// Path is the endpoint's URL path.
func (e Endpoint) Path() string {
	if e == Chat {
		return "/v1/chat/completions"
	}
	return "/v1/completions"
}

// Where a request's output token count came from, best first.
const (
	// SourceUsage: the server's usage.completion_tokens.
	SourceUsage = "usage"
	// SourceTokenIDs: the number of token ids the server streamed (vLLM's return_token_ids).
	SourceTokenIDs = "token_ids"
	// SourceChunks: the number of chunks that carried output, when the server said neither.
	SourceChunks = "chunks"
)

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// streamChunk is one data event of either endpoint. Pointers tell absent fields from empty ones.
type streamChunk struct {
	Object  string `json:"object"`
	Message string `json:"message"` // with object "error" (vLLM's flat error form)
	Choices []struct {
		Text  *string `json:"text"`
		Delta *struct {
			Content          *string         `json:"content"`
			ReasoningContent *string         `json:"reasoning_content"`
			Reasoning        *string         `json:"reasoning"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		TokenIDs     []int64 `json:"token_ids"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage          `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// streamed is what one response stream said, with the times (seconds, from the run's clock) at
// which it said it.
type streamed struct {
	text strings.Builder
	// first is the arrival of the first chunk carrying output; lastOut that of the latest one;
	// end that of the latest chunk with a choice (output or a finish reason), where vllm bench
	// serve ends a request's latency.
	first, lastOut, end float64
	itl                 []float64
	chunks              int
	tokenIDs            int
	sawTokenIDs         bool
	usage               *usage
	finish              string
	done                bool
}

// outputTokens is the request's output length and where it came from.
func (s *streamed) outputTokens() (int, string) {
	switch {
	case s.usage != nil && s.usage.CompletionTokens > 0:
		return s.usage.CompletionTokens, SourceUsage
	case s.sawTokenIDs && s.tokenIDs > 0:
		return s.tokenIDs, SourceTokenIDs
	default:
		return s.chunks, SourceChunks
	}
}

// errorMessage reads an "error" member, which servers write as an object with a message (OpenAI,
// vLLM) or as a bare string.
func errorMessage(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	}
	if json.Unmarshal(raw, &o) == nil && (o.Message != "" || o.Type != "") {
		return strings.TrimSpace(o.Type + ": " + o.Message)
	}
	return "unparsed error object"
}

// readStream consumes one event stream. now is the run's clock; maxBytes bounds an event.
func readStream(body io.Reader, now func() float64, maxBytes int) (*streamed, error) {
	s := &streamed{}
	rd := sse.NewReader(body, maxBytes)
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return s, fmt.Errorf("reading the stream: %w", err)
		}
		if ev.Type == "error" {
			return s, fmt.Errorf("error event: %s", clip(ev.Data))
		}
		if ev.Type != "message" {
			continue
		}
		data := strings.TrimSpace(ev.Data)
		if data == "[DONE]" {
			s.done = true
			break
		}
		if data == "" {
			continue
		}
		var c streamChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return s, fmt.Errorf("bad stream chunk (%d bytes): %w", len(data), err)
		}
		if m := errorMessage(c.Error); m != "" {
			return s, fmt.Errorf("error in stream: %s", clip(m))
		}
		if c.Object == "error" {
			return s, fmt.Errorf("error in stream: %s", clip(c.Message))
		}
		t := now()
		if c.Usage != nil {
			s.usage = c.Usage
		}
		if len(c.Choices) > 0 {
			s.end = t
		}
		out := false
		for _, ch := range c.Choices {
			if ch.Text != nil && *ch.Text != "" {
				s.text.WriteString(*ch.Text)
				out = true
			}
			if d := ch.Delta; d != nil {
				for _, p := range []*string{d.Content, d.ReasoningContent, d.Reasoning} {
					if p != nil && *p != "" {
						out = true
					}
				}
				if d.Content != nil {
					s.text.WriteString(*d.Content)
				}
				if len(d.ToolCalls) > 0 && string(d.ToolCalls) != "null" && string(d.ToolCalls) != "[]" {
					out = true
				}
			}
			if ch.TokenIDs != nil {
				s.sawTokenIDs = true
				s.tokenIDs += len(ch.TokenIDs)
				if len(ch.TokenIDs) > 0 {
					out = true
				}
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				s.finish = *ch.FinishReason
			}
		}
		if !out {
			continue
		}
		// One inter-token gap per chunk, whatever it carries: vllm bench serve's ITL.
		if s.chunks == 0 {
			s.first = t
		} else {
			s.itl = append(s.itl, t-s.lastOut)
		}
		s.lastOut = t
		s.chunks++
	}
	if s.chunks == 0 {
		return s, errors.New("stream ended without output")
	}
	if !s.done && s.finish == "" {
		return s, errors.New("stream cut off: no finish_reason and no [DONE]")
	}
	return s, nil
}

// clip keeps server messages short in logs and reports.
func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
