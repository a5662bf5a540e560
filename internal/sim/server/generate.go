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

package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"net/http"
	"time"

	"github.com/kvrouter/kvrouter/internal/sim/engine"
)

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// commonParams are the sampling fields shared by both endpoints. Sampling itself is not modelled:
// temperature, top_p and friends are accepted and ignored.
type commonParams struct {
	Model         string          `json:"model"`
	MaxTokens     json.RawMessage `json:"max_tokens"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	Seed          *int64          `json:"seed"`
	N             *int            `json:"n"`
	CacheSalt     string          `json:"cache_salt"`
	VLLMXargs     map[string]any  `json:"vllm_xargs"`
	RequestID     string          `json:"request_id"`
	KVTransfer    json.RawMessage `json:"kv_transfer_params"`
}

func (p *commonParams) params() *commonParams { return p }

// generateRequest is the body of /v1/completions or /v1/chat/completions: the common fields, and
// what only one endpoint has.
type generateRequest interface {
	params() *commonParams
	// promptTokens is the prompt the engine runs: the completions prompt, or the chat messages
	// through the chat template.
	promptTokens(s *Server) ([]uint32, error)
	// maxTokens is the requested completion length as sent; nil when the request sets none.
	maxTokens() json.RawMessage
	chat() bool
}

type completionRequest struct {
	commonParams
	Prompt json.RawMessage `json:"prompt"`
}

func (r *completionRequest) promptTokens(s *Server) ([]uint32, error) {
	return s.encodePrompt(r.Prompt)
}

func (r *completionRequest) maxTokens() json.RawMessage { return r.MaxTokens }

func (r *completionRequest) chat() bool { return false }

type chatRequest struct {
	commonParams
	Messages            chatMessages    `json:"messages"`
	MaxCompletionTokens json.RawMessage `json:"max_completion_tokens"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	ContinueFinal       bool            `json:"continue_final_message"`
	AddSpecialTokens    *bool           `json:"add_special_tokens"`
	chatTemplateFields
}

func (r *chatRequest) promptTokens(s *Server) ([]uint32, error) {
	return s.chatTokens(chatArgs{msgs: r.Messages, tools: r.Tools, kwargs: r.ChatTemplateKwargs, template: r.ChatTemplate,
		addGen: boolOr(r.AddGenerationPrompt, true), cont: r.ContinueFinal, special: boolOr(r.AddSpecialTokens, false)})
}

// maxTokens prefers max_completion_tokens, OpenAI's replacement for the deprecated max_tokens.
func (r *chatRequest) maxTokens() json.RawMessage {
	if r.MaxCompletionTokens != nil && string(r.MaxCompletionTokens) != "null" {
		return r.MaxCompletionTokens
	}
	return r.MaxTokens
}

func (r *chatRequest) chat() bool { return true }

// encodePrompt decodes the completions prompt forms: a string, a list of ids, or a one-element
// list of either. Several prompts per request are not supported by the simulator.
func (s *Server) encodePrompt(raw json.RawMessage) ([]uint32, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("prompt is required")
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return s.tok.encode(str, true), nil
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil {
		if len(ids) == 0 {
			return nil, badRequest("prompt must not be empty")
		}
		return ids, nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil && len(strs) == 1 {
		return s.tok.encode(strs[0], true), nil
	}
	var idss [][]uint32
	if json.Unmarshal(raw, &idss) == nil && len(idss) == 1 && len(idss[0]) > 0 {
		return idss[0], nil
	}
	if len(strs) > 1 || len(idss) > 1 {
		return nil, badRequest("vllm-sim serves one prompt per request; send several requests instead")
	}
	return nil, badRequest("prompt must be a string, a list of token ids, or a one-element list of either")
}

// job is a validated generation request.
type job struct {
	req     *engine.Request
	stream  bool
	usage   bool
	model   string
	reason  string // finish reason at MaxTokens
	id      string
	created int64
	chat    bool
	promptN int
	// kv are the request's kv_transfer_params when the engine has a KV connector.
	kv *kvParams
}

// decodeJob reads and checks a generation request. Both endpoints share it because the order of
// the checks decides which error a request with several faults gets.
func (s *Server) decodeJob(r *http.Request, req generateRequest) (*job, error) {
	if err := decodeBody(r, req); err != nil {
		return nil, err
	}
	lora, err := s.resolveModel(req.params().Model)
	if err != nil {
		return nil, err
	}
	s.slowTokenizer()
	prompt, err := req.promptTokens(s)
	if err != nil {
		return nil, err
	}
	return s.prepare(req.params(), prompt, req.maxTokens(), lora, req.chat())
}

func (s *Server) prepare(p *commonParams, prompt []uint32, maxTokens json.RawMessage, lora string, chat bool) (*job, error) {
	if p.N != nil && *p.N != 1 {
		return nil, badRequest("vllm-sim supports n=1 only")
	}
	maxLen := s.eng.Config().MaxModelLen
	if len(prompt) >= maxLen {
		return nil, &apiError{status: http.StatusBadRequest, typ: "BadRequestError", param: "messages",
			msg: fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", maxLen, len(prompt))}
	}
	seed := seedFor(p.Seed, prompt)
	reason := "length"
	var n int
	switch {
	case maxTokens != nil && string(maxTokens) != "null":
		v, err := parseMaxTokens(maxTokens)
		if err != nil {
			return nil, err
		}
		if v.Sign() < 1 {
			return nil, &apiError{status: http.StatusBadRequest, typ: "BadRequestError", param: "max_tokens", msg: fmt.Sprintf("max_tokens must be at least 1, got %d.", v)}
		}
		// Compared in arbitrary precision, as vLLM's Python does: len(prompt)+n in an int
		// wraps for n near 2^63 and would let the request through.
		if v.Cmp(big.NewInt(int64(maxLen-len(prompt)))) > 0 {
			total := new(big.Int).Add(v, big.NewInt(int64(len(prompt))))
			return nil, &apiError{status: http.StatusBadRequest, typ: "BadRequestError", param: "max_tokens",
				msg: fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.", maxLen, total, len(prompt), v)}
		}
		n = int(v.Int64())
	case chat:
		// No limit: the simulated model stops on its own after a seed-determined length.
		n, reason = min(naturalLength(seed), maxLen-len(prompt)), "stop"
	default:
		n = min(16, maxLen-len(prompt)) // the OpenAI completions default
	}
	report := false
	if v, ok := p.VLLMXargs["kv_cache_report_mode"]; ok {
		switch v {
		case "full":
			report = true
		case "incremental":
		default:
			return nil, badRequest("kv_cache_report_mode must be \"incremental\" or \"full\"")
		}
	}
	model := p.Model
	if model == "" {
		model = s.opt.ServedModelNames[0]
	}
	prefix := "cmpl"
	if chat {
		prefix = "chatcmpl"
	}
	id := p.RequestID
	if id == "" {
		id = s.nextID(prefix)
	}
	j := &job{
		req:     &engine.Request{ID: id, Prompt: prompt, MaxTokens: n, Seed: seed, LoRA: lora, CacheSalt: p.CacheSalt, ReportFull: report},
		stream:  p.Stream,
		usage:   p.StreamOptions != nil && p.StreamOptions.IncludeUsage,
		model:   model,
		reason:  reason,
		id:      id,
		created: time.Now().Unix(),
		chat:    chat,
		promptN: len(prompt),
	}
	if err := s.prepareKV(j, p); err != nil {
		return nil, err
	}
	if !s.opt.PrefixCaching {
		// Without prefix caching no two requests share blocks: a unique salt gives every request
		// its own hash chain, which is exactly vLLM's behaviour from the router's point of view.
		j.req.CacheSalt = "nocache:" + id
	}
	return j, nil
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	s.generate(w, r, &completionRequest{})
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.generate(w, r, &chatRequest{})
}

// generate serves both generation endpoints; req is the empty body of the endpoint's kind.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, req generateRequest) {
	j, err := s.decodeJob(r, req)
	if err != nil {
		writeError(w, err)
		return
	}
	s.run(w, r, j)
}

func (s *Server) run(w http.ResponseWriter, r *http.Request, j *job) {
	if s.shouldFail() {
		writeError(w, fmt.Errorf("injected failure"))
		return
	}
	arrived := 0.0
	if j.kv != nil && j.kv.remotePrefill {
		s.mu.Lock()
		arrived = s.virtualNow()
		s.mu.Unlock()
		if err := s.pullKV(r.Context(), j); err != nil {
			if r.Context().Err() == nil {
				writeError(w, err)
			}
			return
		}
	}
	f, err := s.submit(j.req, j.reason, arrived)
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	if j.stream {
		s.stream(w, r, j, f)
		return
	}
	var out []uint32
	cached := 0
	for {
		select {
		case <-r.Context().Done():
			s.abort(j.req)
			return
		case d := <-f.ch:
			if d.err != nil {
				writeError(w, d.err)
				return
			}
			out = append(out, d.token)
			cached = d.cached
			if !d.last {
				continue
			}
			text := s.tok.decode(out, true)
			var choice map[string]any
			if j.chat {
				choice = map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text, "tool_calls": []any{}},
					"logprobs": nil, "finish_reason": j.reason, "stop_reason": nil}
			} else {
				choice = map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": j.reason, "stop_reason": nil, "prompt_logprobs": nil}
			}
			resp := map[string]any{
				"id": j.id, "object": objectName(j.chat, false), "created": j.created, "model": j.model,
				"choices": []any{choice}, "usage": usage(j.promptN, len(out), cached),
			}
			if j.req.HoldKV {
				resp["kv_transfer_params"] = s.heldParams(j.req.ID)
			}
			writeJSON(w, http.StatusOK, resp)
			return
		}
	}
}

func objectName(chat, chunk bool) string {
	switch {
	case chat && chunk:
		return "chat.completion.chunk"
	case chat:
		return "chat.completion"
	default:
		return "text_completion"
	}
}

func usage(prompt, completion, cached int) map[string]any {
	return map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
		"prompt_tokens_details": map[string]any{"cached_tokens": cached}}
}

// stream writes Server-Sent Events the way vLLM does: one chunk per token, the finish reason on
// the last token's chunk, an optional usage chunk with no choices, then "data: [DONE]".
func (s *Server) stream(w http.ResponseWriter, r *http.Request, j *job, f *flight) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	chunk := func(choice map[string]any) map[string]any {
		return map[string]any{"id": j.id, "object": objectName(j.chat, true), "created": j.created, "model": j.model, "choices": []any{choice}}
	}
	if j.chat && !send(chunk(map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}, "logprobs": nil, "finish_reason": nil})) {
		s.abort(j.req)
		return
	}
	n := 0
	for {
		select {
		case <-r.Context().Done():
			s.abort(j.req)
			return
		case d := <-f.ch:
			if d.err != nil {
				// Headers are gone; vLLM reports mid-stream errors as an error event.
				b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": d.err.Error(), "type": "InternalServerError", "param": nil, "code": 500}})
				fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
				return
			}
			n++
			text := s.tok.decode([]uint32{d.token}, true)
			var finish any
			if d.last {
				finish = j.reason
			}
			var c map[string]any
			if j.chat {
				c = chunk(map[string]any{"index": 0, "delta": map[string]any{"content": text}, "logprobs": nil, "finish_reason": finish, "stop_reason": nil})
			} else {
				c = chunk(map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": finish, "stop_reason": nil})
			}
			if !send(c) {
				if !d.last {
					s.abort(j.req)
				}
				return
			}
			if !d.last {
				continue
			}
			if j.usage {
				send(map[string]any{"id": j.id, "object": objectName(j.chat, true), "created": j.created, "model": j.model,
					"choices": []any{}, "usage": usage(j.promptN, n, d.cached)})
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			if flusher != nil {
				flusher.Flush()
			}
			return
		}
	}
}

// maxDigits bounds the integer literals parseMaxTokens reads exactly: anything longer is over any
// context length, and parsing megabytes of digits would be a poison request of its own.
const maxDigits = 40

// parseMaxTokens reads max_tokens (or max_completion_tokens) as vLLM's request model does after
// Python's json: an integer literal of any size, or a float (1e9, 8.0) when it has no fractional
// part. Anything else is a 400 naming the field.
func parseMaxTokens(raw json.RawMessage) (*big.Int, error) {
	bad := func(why string) error {
		return &apiError{status: http.StatusBadRequest, typ: "BadRequestError", param: "max_tokens",
			msg: fmt.Sprintf("max_tokens: %s, got %.40s", why, raw)}
	}
	var num json.Number
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&num); err != nil || num == "" {
		return nil, bad("Input should be a valid integer")
	}
	lit := num.String()
	if !bytes.ContainsAny([]byte(lit), ".eE") { // an integer literal: Python reads it exactly
		digits := len(lit)
		if lit[0] == '-' {
			digits--
		}
		if digits > maxDigits {
			v := new(big.Int).Exp(big.NewInt(10), big.NewInt(maxDigits), nil)
			if lit[0] == '-' {
				v.Neg(v)
			}
			return v, nil
		}
		v, ok := new(big.Int).SetString(lit, 10)
		if !ok {
			return nil, bad("Input should be a valid integer")
		}
		return v, nil
	}
	// A float, as Python's json reads it: a double, rounded the same way.
	f, err := num.Float64()
	switch {
	case err != nil || math.IsInf(f, 0) || math.IsNaN(f):
		return nil, bad("Input should be a finite number")
	case f != math.Trunc(f):
		return nil, bad("Input should be a valid integer, got a number with a fractional part")
	}
	v, _ := big.NewFloat(f).Int(nil)
	return v, nil
}
