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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
	"unicode/utf8"
)

// inference holds the fields of an OpenAI request the router reads; the body itself is passed
// through untouched (unless vllm_xargs is injected).
type inference struct {
	Model               string          `json:"model"`
	Stream              bool            `json:"stream"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
	CacheSalt           string          `json:"cache_salt"`
	// Tokenization options forwarded to /tokenize so it templates exactly as serving will.
	AddSpecialTokens     *bool           `json:"add_special_tokens"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage *bool           `json:"continue_final_message"`
	ChatTemplate         *string         `json:"chat_template"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
	Tools                json.RawMessage `json:"tools"`

	// body is what the engine is sent.
	body []byte
	// lora is the adapter the model names ("" for a base model), part of the cache keys.
	lora string
	// authorization is what the router's /tokenize call for this request sends (auth.go).
	authorization string
	// transferParams: the body has a kv_transfer_params member. A client's is removed
	// (withoutTransferParams), and then rewritten is set: body is not the client's, so a front
	// end that forwards the client's own bytes must send body instead.
	transferParams, rewritten bool
}

// maxCountedTokens bounds the output limit the router prices a request at. The engine refuses
// a limit past its context (a 400 the client sees); the router only adds the limit into the work
// it keeps per engine, where a limit near 2^63 would wrap the sums negative while the request is
// in flight. No model's context comes near 2^24 tokens.
const maxCountedTokens = 1 << 24

// maxTokens is the request's output limit, 0 when it sets none, at most maxCountedTokens.
func (req *inference) maxTokens() int {
	n := 0
	switch {
	case req.MaxCompletionTokens != nil:
		n = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		n = *req.MaxTokens
	}
	return min(n, maxCountedTokens)
}

// receiveBody reads the request body. A client trickling its body (slowloris) would hold the
// handler for ever: the read is bounded, and the deadline lifted once the body is in, so that
// the connection's reads, which notice a client leaving mid-stream, go on for as long as the
// answer takes.
func (s *Server) receiveBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyReadTimeout)) // the network's clock, not s.now
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	_ = rc.SetReadDeadline(time.Time{})
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return body, nil
	case errors.As(err, &tooBig):
		return nil, s.tooLarge()
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &apiError{status: http.StatusRequestTimeout, typ: invalidRequest,
			msg:    fmt.Sprintf("request body not received within %v", s.cfg.BodyReadTimeout),
			header: http.Header{"Connection": {"close"}}}
	}
	return nil, badRequest("", "cannot read request body: "+err.Error())
}

// tooLarge is the 413 of a body over MaxBodyBytes.
func (s *Server) tooLarge() *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, typ: invalidRequest,
		msg: fmt.Sprintf("request body exceeds %d bytes", s.cfg.MaxBodyBytes)}
}

// readBody reads the request body up to limit, sized from Content-Length when the client gave
// one (io.ReadAll would grow and copy a 500 KB body several times).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	if r.ContentLength <= 0 || r.ContentLength > limit {
		return io.ReadAll(rd)
	}
	buf := make([]byte, r.ContentLength+1) // +1 to see EOF without growing
	n, err := io.ReadFull(rd, buf)
	switch err {
	case io.ErrUnexpectedEOF, io.EOF:
		return buf[:n], nil
	case nil:
		// More than Content-Length: the server would have cut it; read on to report it.
		rest, err := io.ReadAll(rd)
		return append(buf[:n], rest...), err
	}
	return nil, err
}

// parseRequest reads what the router needs of a request and checks it as far as an engine
// would refuse it: a body it could not read, no model or prompt, or a model it does not serve.
func (s *Server) parseRequest(ctx context.Context, header http.Header, kind apiKind, body []byte) (inference, error) {
	req, err := parseBody(kind, body)
	if err != nil {
		return req, err
	}
	lora, known := s.models.lookup(ctx, req.Model)
	if !known {
		return req, &apiError{status: http.StatusNotFound, typ: invalidRequest, param: "model",
			msg: fmt.Sprintf("the model %q does not exist", req.Model)}
	}
	req.lora = lora
	if req.transferParams {
		// The sidecar (which parses with parseBody alone) passes them on: they come from
		// the router there.
		if req.body, err = withoutTransferParams(req.body); err != nil {
			return req, badRequest(kvTransferParams, err.Error())
		}
		req.rewritten = true
	}
	if s.cfg.ReportModeFull {
		if req.body, err = injectReportMode(req.body); err != nil {
			return req, badRequest("vllm_xargs", err.Error())
		}
	}
	req.authorization = s.cfg.Auth.upstreamAuthorization(header.Get("Authorization"))
	return req, nil
}

// parseBody reads the body's fields and checks that it has what its API requires.
func parseBody(kind apiKind, body []byte) (inference, error) {
	fields, err := topLevel(body)
	if err != nil {
		return inference{}, badRequest("", "request body is not valid JSON: "+err.Error())
	}
	req, err := parseInference(fields)
	if err != nil {
		return req, err
	}
	req.body = body
	_, req.transferParams = fields[kvTransferParams]
	switch {
	case req.Model == "":
		return req, badRequest("model", "you must provide a model parameter")
	case kind == kindCompletion && len(req.Prompt) == 0:
		return req, badRequest("prompt", "you must provide a prompt")
	case kind == kindChat && (len(req.Messages) == 0 || req.Messages[0] != '['):
		return req, badRequest("messages", "messages must be an array")
	}
	return req, nil
}

// parseInference reads the fields the router needs from the body's top-level members. Large
// values (prompt, messages, tools) stay raw sub-slices of the body; small ones are decoded.
func parseInference(fields map[string][]byte) (inference, error) {
	var req inference
	raw := func(k string) json.RawMessage {
		v := fields[k]
		if v == nil || string(v) == "null" {
			return nil
		}
		return v
	}
	for _, f := range []struct {
		key string
		dst any
	}{
		{"model", &req.Model}, {"stream", &req.Stream}, {"max_tokens", &req.MaxTokens},
		{"max_completion_tokens", &req.MaxCompletionTokens}, {"cache_salt", &req.CacheSalt},
		{"add_special_tokens", &req.AddSpecialTokens}, {"add_generation_prompt", &req.AddGenerationPrompt},
		{"continue_final_message", &req.ContinueFinalMessage}, {"chat_template", &req.ChatTemplate},
	} {
		if v := raw(f.key); v != nil {
			if err := decodeSmall(v, f.dst); err != nil {
				return req, badRequest(f.key, fmt.Sprintf("invalid %s: %v", f.key, err))
			}
		}
	}
	req.Prompt, req.Messages = raw("prompt"), raw("messages")
	req.ChatTemplateKwargs, req.Tools = raw("chat_template_kwargs"), raw("tools")
	return req, nil
}

// rewriteBody applies edit to the members of a request body and encodes the result: the one
// place the router changes what a client sent (report mode, the disaggregation legs).
func rewriteBody(body []byte, edit func(m map[string]json.RawMessage) error) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("request body is not a JSON object: %v", err)
	}
	if err := edit(m); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// injectReportMode sets vllm_xargs.kv_cache_report_mode = "full", keeping any other xargs.
func injectReportMode(body []byte) ([]byte, error) {
	return rewriteBody(body, func(m map[string]json.RawMessage) error {
		xargs := map[string]json.RawMessage{}
		if raw, ok := m["vllm_xargs"]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &xargs); err != nil {
				return fmt.Errorf("vllm_xargs must be an object")
			}
		}
		if _, set := xargs["kv_cache_report_mode"]; !set {
			xargs["kv_cache_report_mode"] = json.RawMessage(`"full"`)
		}
		raw, err := json.Marshal(xargs)
		m["vllm_xargs"] = raw
		return err
	})
}

// decodeSmall decodes a small field's value into dst as encoding/json would. The values every
// request carries (a plain model name, a boolean, an integer) are read directly: through
// encoding/json's reflection they cost more than the rest of the parse of a short prompt.
// Anything else (escapes, other types, errors) goes to encoding/json.
func decodeSmall(v []byte, dst any) error {
	switch d := dst.(type) {
	case *string:
		if s, ok := plainString(v); ok {
			*d = s
			return nil
		}
	case **string:
		if s, ok := plainString(v); ok {
			*d = &s
			return nil
		}
	case *bool:
		if b, ok := plainBool(v); ok {
			*d = b
			return nil
		}
	case **bool:
		if b, ok := plainBool(v); ok {
			*d = &b
			return nil
		}
	case **int:
		if n, ok := plainInt(v); ok {
			*d = &n
			return nil
		}
	}
	return json.Unmarshal(v, dst)
}

// plainString is a JSON string without escapes or control characters, in valid UTF-8 (which
// encoding/json would otherwise replace), unquoted.
func plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	in := v[1 : len(v)-1]
	for _, c := range in {
		if c < 0x20 || c == '\\' || c == '"' {
			return "", false
		}
	}
	if !utf8.Valid(in) {
		return "", false
	}
	return string(in), true
}

func plainBool(v []byte) (bool, bool) {
	switch string(v) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// plainInt is a JSON integer (no fraction or exponent) that fits an int.
func plainInt(v []byte) (int, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	for i, c := range v {
		if (c < '0' || c > '9') && !(i == 0 && c == '-' && len(v) > 1) {
			return 0, false
		}
	}
	n, err := strconv.Atoi(string(v))
	return n, err == nil
}
