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
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvrouter/kvrouter/internal/apikey"
)

// maxBody bounds request bodies; real prompts fit easily.
const maxBody = 64 << 20

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": "0.26.0+vllm-sim"})
	})
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	mux.HandleFunc("GET /kv_event_sources", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"sources": s.opt.KVEventSources})
	})
	if s.opt.ResetPrefixCache || s.opt.SimAPI {
		mux.HandleFunc("POST /reset_prefix_cache", s.handleReset)
	}
	if s.opt.SimAPI {
		mux.HandleFunc("GET /sim/faults", s.handleGetFaults)
		mux.HandleFunc("POST /sim/faults", s.handleSetFaults)
		mux.HandleFunc("GET /sim/stats", s.handleStats)
		mux.HandleFunc("GET /sim/cache", s.handleCache)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{}))
	return requireAPIKey(apikey.NewSet(s.opt.APIKeys), mux)
}

// apiError is vLLM's ErrorResponse (OpenAI's error shape).
type apiError struct {
	status int
	typ    string
	msg    string
	param  string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, a ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "BadRequestError", msg: fmt.Sprintf(format, a...)}
}

func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{status: http.StatusInternalServerError, typ: "InternalServerError", msg: err.Error()}
	}
	var param any
	if ae.param != "" {
		param = ae.param
	}
	writeJSON(w, ae.status, map[string]any{"error": map[string]any{
		"message": ae.msg, "type": ae.typ, "param": param, "code": ae.status,
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func decodeBody(r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		return badRequest("reading request body: %v", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return badRequest("invalid JSON body: %v", err)
	}
	return nil
}

// resolveModel maps a request's model name to the LoRA adapter it selects ("" for the base
// model). An empty name means the base model, as in vLLM.
func (s *Server) resolveModel(name string) (lora string, err error) {
	if name == "" {
		return "", nil
	}
	for _, n := range s.opt.ServedModelNames {
		if n == name {
			return "", nil
		}
	}
	if _, ok := s.opt.LoRAModules[name]; ok {
		return name, nil
	}
	return "", &apiError{status: http.StatusNotFound, typ: "NotFoundError", param: "model",
		msg: fmt.Sprintf("The model `%s` does not exist.", name)}
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	created := time.Now().Unix()
	maxLen := s.eng.Config().MaxModelLen
	var data []map[string]any
	for _, n := range s.opt.ServedModelNames {
		data = append(data, map[string]any{"id": n, "object": "model", "created": created, "owned_by": "vllm",
			"root": s.opt.ModelPath, "parent": nil, "max_model_len": maxLen, "permission": []any{}})
	}
	names := make([]string, 0, len(s.opt.LoRAModules))
	for n := range s.opt.LoRAModules {
		names = append(names, n)
	}
	sort.Strings(names) // a stable listing; vLLM lists adapters in the order they were loaded
	for _, n := range names {
		data = append(data, map[string]any{"id": n, "object": "model", "created": created, "owned_by": "vllm",
			"root": s.opt.LoRAModules[n], "parent": s.opt.ServedModelNames[0], "max_model_len": maxLen, "permission": []any{}})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// chatMessage accepts string content or an array of content parts (text parts are concatenated).
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

func (m chatMessage) text() (string, error) {
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", badRequest("message content must be a string or an array of content parts")
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return "", badRequest("content part %d: type %q is not supported by vllm-sim (text only)", i, p.Type)
		}
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

func (s *Server) chatTokens(c chatArgs) ([]uint32, error) {
	if len(c.msgs.list) == 0 {
		return nil, badRequest("messages must not be empty")
	}
	if c.addGen && c.cont {
		return nil, badRequest("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
	}
	return s.tok.chat(c)
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

func (s *Server) slowTokenizer() {
	s.mu.Lock()
	d := s.faults.TokenizeDelay
	s.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
	}
}

type tokenizeRequest struct {
	Model               string       `json:"model"`
	Prompt              *string      `json:"prompt"`
	Messages            chatMessages `json:"messages"`
	AddSpecialTokens    *bool        `json:"add_special_tokens"`
	AddGenerationPrompt *bool        `json:"add_generation_prompt"`
	ContinueFinal       bool         `json:"continue_final_message"`
	ReturnTokenStrs     bool         `json:"return_token_strs"`
	chatTemplateFields
}

// chatTemplateFields are the request fields only a real chat template reads.
type chatTemplateFields struct {
	Tools              json.RawMessage `json:"tools"`
	ChatTemplate       *string         `json:"chat_template"`
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if _, err := s.resolveModel(req.Model); err != nil {
		writeError(w, err)
		return
	}
	s.slowTokenizer()
	if s.tokenizeShouldFail() {
		writeError(w, fmt.Errorf("injected tokenizer failure"))
		return
	}
	var toks []uint32
	switch {
	case req.Messages.given():
		var err error
		toks, err = s.chatTokens(chatArgs{msgs: req.Messages, tools: req.Tools, kwargs: req.ChatTemplateKwargs, template: req.ChatTemplate,
			addGen: boolOr(req.AddGenerationPrompt, true), cont: req.ContinueFinal, special: boolOr(req.AddSpecialTokens, false)})
		if err != nil {
			writeError(w, err)
			return
		}
	case req.Prompt != nil:
		toks = s.tok.encode(*req.Prompt, boolOr(req.AddSpecialTokens, true))
	default:
		writeError(w, badRequest("either prompt or messages is required"))
		return
	}
	resp := map[string]any{"count": len(toks), "max_model_len": s.eng.Config().MaxModelLen, "tokens": toks, "token_strs": nil}
	if req.ReturnTokenStrs {
		strs := make([]string, len(toks))
		for i, t := range toks {
			strs[i] = s.tok.decode([]uint32{t}, false)
		}
		resp["token_strs"] = strs
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string   `json:"model"`
		Tokens []uint32 `json:"tokens"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if _, err := s.resolveModel(req.Model); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": s.tok.decode(req.Tokens, false)})
}

func (s *Server) handleReset(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	ok := s.eng.ResetPrefixCache()
	s.mu.Unlock()
	if !ok {
		writeError(w, &apiError{status: http.StatusConflict, typ: "ConflictError", msg: "prefix cache cannot be reset while requests hold KV blocks"})
		return
	}
	select {
	case s.wake <- struct{}{}: // publish AllBlocksCleared
	default:
	}
	w.WriteHeader(http.StatusOK)
}

type faultsJSON struct {
	FailFraction           *float64 `json:"failFraction,omitempty"`
	TokenizeDelayMs        *int     `json:"tokenizeDelayMs,omitempty"`
	TokenizeFailFraction   *float64 `json:"tokenizeFailFraction,omitempty"`
	EventDelayMs           *int     `json:"eventDelayMs,omitempty"`
	ReplayDown             *bool    `json:"replayDown,omitempty"`
	KVTransferFailFraction *float64 `json:"kvTransferFailFraction,omitempty"`
	KVTransferDelayMs      *int     `json:"kvTransferDelayMs,omitempty"`
	DropNextBatches        int      `json:"dropNextBatches,omitempty"`
	Restart                bool     `json:"restart,omitempty"`
}

func (s *Server) handleGetFaults(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	f := s.faults
	s.mu.Unlock()
	tok, ev := int(f.TokenizeDelay/time.Millisecond), int(f.EventDelay/time.Millisecond)
	out := faultsJSON{FailFraction: &f.FailFraction, TokenizeDelayMs: &tok,
		TokenizeFailFraction: &f.TokenizeFailFraction, EventDelayMs: &ev, ReplayDown: &f.ReplayDown}
	if s.kv != nil {
		kd := int(f.KVTransferDelay / time.Millisecond)
		out.KVTransferFailFraction, out.KVTransferDelayMs = &f.KVTransferFailFraction, &kd
	}
	writeJSON(w, http.StatusOK, out)
}

// handleSetFaults changes fault injection at run time (sim-only endpoint).
func (s *Server) handleSetFaults(w http.ResponseWriter, r *http.Request) {
	var req faultsJSON
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"failFraction", req.FailFraction}, {"tokenizeFailFraction", req.TokenizeFailFraction}, {"kvTransferFailFraction", req.KVTransferFailFraction}} {
		if f.v != nil && (*f.v < 0 || *f.v > 1) {
			writeError(w, badRequest("%s must be within [0, 1]", f.name))
			return
		}
	}
	if (req.DropNextBatches > 0 || req.EventDelayMs != nil || req.ReplayDown != nil) && s.opt.Publisher == nil {
		writeError(w, badRequest("KV events are not enabled on this engine"))
		return
	}
	if (req.KVTransferFailFraction != nil || req.KVTransferDelayMs != nil) && s.kv == nil {
		writeError(w, badRequest("KV transfer is not configured on this engine (--kv-transfer-config)"))
		return
	}
	if req.KVTransferDelayMs != nil && *req.KVTransferDelayMs < 0 {
		writeError(w, badRequest("kvTransferDelayMs must not be negative"))
		return
	}
	s.mu.Lock()
	if req.FailFraction != nil {
		s.faults.FailFraction = *req.FailFraction
	}
	if req.TokenizeDelayMs != nil {
		s.faults.TokenizeDelay = time.Duration(*req.TokenizeDelayMs) * time.Millisecond
	}
	if req.TokenizeFailFraction != nil {
		s.faults.TokenizeFailFraction = *req.TokenizeFailFraction
	}
	if req.KVTransferFailFraction != nil {
		s.faults.KVTransferFailFraction = *req.KVTransferFailFraction
	}
	if req.KVTransferDelayMs != nil {
		s.faults.KVTransferDelay = time.Duration(*req.KVTransferDelayMs) * time.Millisecond
	}
	if req.ReplayDown != nil {
		s.faults.ReplayDown = *req.ReplayDown
		s.opt.Publisher.SetReplayDown(*req.ReplayDown)
	}
	if req.EventDelayMs != nil {
		s.faults.EventDelay = time.Duration(*req.EventDelayMs) * time.Millisecond
		s.opt.Publisher.SetDelay(s.faults.EventDelay)
	}
	s.mu.Unlock()
	if req.DropNextBatches > 0 {
		s.opt.Publisher.DropNext(req.DropNextBatches)
	}
	if req.Restart {
		if err := s.Restart(); err != nil {
			writeError(w, err)
			return
		}
	}
	s.handleGetFaults(w, r)
}

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	st := s.eng.Stats()
	now := s.eng.Now()
	s.mu.Unlock()
	out := map[string]any{"engine": st, "virtualTime": now}
	if s.opt.Publisher != nil {
		out["publisher"] = s.opt.Publisher.Stats()
	}
	writeJSON(w, http.StatusOK, out)
}

// shouldFail draws the fail-a-fraction fault.
func (s *Server) shouldFail() bool { return s.draw(func(f Faults) float64 { return f.FailFraction }) }

// tokenizeShouldFail draws the failing-tokenizer fault.
func (s *Server) tokenizeShouldFail() bool {
	return s.draw(func(f Faults) float64 { return f.TokenizeFailFraction })
}

func (s *Server) draw(fraction func(Faults) float64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := fraction(s.faults)
	return p > 0 && s.rng.Float64() < p
}

// CacheState is GET /sim/cache: the block hashes the engine's prefix cache holds, in the form
// they take on the KV-event wire (kvevents' uint64: the digest's low 64 bits), for checking a
// router's index against the engine.
type CacheState struct {
	// Hashes are the distinct cached block hashes, sorted.
	Hashes []uint64 `json:"hashes"`
	// NextSequence is the sequence number the next event batch will get: every cache change
	// so far is in batches below it once Settled.
	NextSequence uint64 `json:"nextSequence"`
	// Settled is true when the engine has no work and every step's events have been handed to
	// the publisher (they may still be delayed by the event-delay fault).
	Settled bool `json:"settled"`
	Running int  `json:"running"`
	Waiting int  `json:"waiting"`
}

func (s *Server) handleCache(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	hs := s.eng.CachedHashes()
	st := s.eng.Stats()
	settled := !s.eng.HasWork() && s.unpublished == 0
	var next uint64
	if s.opt.Publisher != nil {
		// Read under s.mu: Restart resets the publisher under it too.
		next = s.opt.Publisher.Stats().NextSequence
	}
	s.mu.Unlock()
	out := CacheState{Hashes: make([]uint64, len(hs)), NextSequence: next, Settled: settled,
		Running: st.Running, Waiting: st.Waiting}
	for i, h := range hs {
		out.Hashes[i] = h.Uint64()
	}
	slices.Sort(out.Hashes)
	writeJSON(w, http.StatusOK, out)
}

// seedFor returns the request's seed, or one derived from its prompt so that an unseeded request
// is still reproducible.
func seedFor(seed *int64, prompt []uint32) uint64 {
	if seed != nil {
		return uint64(*seed)
	}
	h := fnv.New64a()
	var b [4]byte
	for _, t := range prompt {
		b[0], b[1], b[2], b[3] = byte(t), byte(t>>8), byte(t>>16), byte(t>>24)
		h.Write(b[:])
	}
	return h.Sum64()
}

// naturalLength is how many tokens the simulated model "wants" to say when no max_tokens is given:
// 32 to 543, fixed by the seed, ending with finish_reason "stop".
func naturalLength(seed uint64) int {
	seed ^= seed >> 33
	seed *= 0xff51afd7ed558ccd
	seed ^= seed >> 33
	return 32 + int(seed%512)
}
