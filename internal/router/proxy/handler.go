package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/router/policyinput"
	"github.com/kvrouter/kvrouter/internal/router/tokenize"
)

// EndpointHeader names the engine that served a response.
const EndpointHeader = "X-Kvrouter-Endpoint"

// dpRankHeader asks a data-parallel vLLM server for a specific rank.
const dpRankHeader = "X-Data-Parallel-Rank"

type apiKind int

const (
	kindCompletion apiKind = iota
	kindChat
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
	// authorization is what the router's /tokenize call for this request sends (auth.go).
	authorization string
}

// parseInference reads the fields the router needs from the body's top-level members. Large
// values (prompt, messages, tools) stay raw sub-slices of the body; small ones are decoded.
func parseInference(fields map[string][]byte) (inference, string, error) {
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
			if err := json.Unmarshal(v, f.dst); err != nil {
				return req, f.key, fmt.Errorf("invalid %s: %v", f.key, err)
			}
		}
	}
	req.Prompt, req.Messages = raw("prompt"), raw("messages")
	req.ChatTemplateKwargs, req.Tools = raw("chat_template_kwargs"), raw("tools")
	return req, "", nil
}

// handleInference serves /v1/completions and /v1/chat/completions.
func (s *Server) handleInference(kind apiKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.counters.requests.Add(1)
		// A client trickling its body (slowloris) would hold this handler for ever: bound the
		// read. The deadline is lifted once the body is in, so that the connection's reads,
		// which notice a client leaving mid-stream, go on for as long as the answer takes.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyReadTimeout)) // the network's clock, not s.now
		body, err := readBody(w, r, s.cfg.MaxBodyBytes)
		_ = rc.SetReadDeadline(time.Time{})
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				s.fail(w, http.StatusRequestEntityTooLarge, "invalid_request_error",
					fmt.Sprintf("request body exceeds %d bytes", s.cfg.MaxBodyBytes), "")
				return
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				w.Header().Set("Connection", "close")
				s.fail(w, http.StatusRequestTimeout, "invalid_request_error",
					fmt.Sprintf("request body not received within %v", s.cfg.BodyReadTimeout), "")
				return
			}
			s.fail(w, http.StatusBadRequest, "invalid_request_error", "cannot read request body: "+err.Error(), "")
			return
		}
		fields, err := topLevel(body)
		if err != nil {
			s.fail(w, http.StatusBadRequest, "invalid_request_error", "request body is not valid JSON: "+err.Error(), "")
			return
		}
		req, param, err := parseInference(fields)
		if err != nil {
			s.fail(w, http.StatusBadRequest, "invalid_request_error", err.Error(), param)
			return
		}
		if req.Model == "" {
			s.fail(w, http.StatusBadRequest, "invalid_request_error", "you must provide a model parameter", "model")
			return
		}
		switch {
		case kind == kindCompletion && len(req.Prompt) == 0:
			s.fail(w, http.StatusBadRequest, "invalid_request_error", "you must provide a prompt", "prompt")
			return
		case kind == kindChat && (len(req.Messages) == 0 || req.Messages[0] != '['):
			s.fail(w, http.StatusBadRequest, "invalid_request_error", "messages must be an array", "messages")
			return
		}
		lora, known := s.models.lookup(r.Context(), req.Model)
		if !known {
			s.fail(w, http.StatusNotFound, "invalid_request_error",
				fmt.Sprintf("the model %q does not exist", req.Model), "model")
			return
		}
		if s.cfg.ReportModeFull {
			if body, err = injectReportMode(body); err != nil {
				s.fail(w, http.StatusBadRequest, "invalid_request_error", err.Error(), "vllm_xargs")
				return
			}
		}

		t := s.tbl.Load()
		req.authorization = s.cfg.Auth.upstreamAuthorization(r.Header.Get("Authorization"))
		tokens, tokenized := s.tokens(r.Context(), t, kind, &req)
		maxTokens := 0
		if req.MaxCompletionTokens != nil {
			maxTokens = *req.MaxCompletionTokens
		} else if req.MaxTokens != nil {
			maxTokens = *req.MaxTokens
		}
		params := kvindex.KeyParams{LoRAName: lora, CacheSalt: req.CacheSalt}
		promptTokens := len(tokens)
		if !tokenized {
			// Not a guess at the token count for the index (that is what tokenization is for);
			// only a size for the load accounting: ~4 bytes per token of the body.
			promptTokens = len(body) / 4
		}
		preq := policy.Request{PromptTokens: promptTokens, Tokenized: tokenized, MaxTokens: maxTokens,
			TieBreak: policyinput.TieBreak(tokens, s.counters.requests.Load())}
		if s.cfg.SessionHeader != "" {
			preq.SessionKey = r.Header.Get(s.cfg.SessionHeader)
		}

		routeStart := s.now()
		var keys []kvindex.Key
		if tokenized && s.index != nil {
			// Computed once, for the lookup and for the prediction after dispatch.
			keys = kvindex.RequestKeys(make([]kvindex.Key, 0, len(tokens)/s.blockSize()), tokens, s.blockSize(), params)
		}
		d, gpuHeld := s.decide(t, preq, keys)
		s.metrics.decisionSeconds.Observe(s.now().Sub(routeStart).Seconds())
		s.countDecision(d)
		if d.Endpoint == "" {
			s.counters.rejected.Add(1)
			w.Header().Set("Retry-After", strconv.Itoa(s.cfg.RetryAfter))
			msg := "no engine is ready"
			if d.Reason == policy.ReasonAdmissionFull {
				msg = "every engine is at its admission limit"
			}
			s.fail(w, http.StatusServiceUnavailable, "server_error", msg, "")
			return
		}
		if tokenized {
			s.counters.promptTokens.Add(uint64(len(tokens)))
			s.counters.cachedTokens.Add(uint64(d.CachedTokens))
		}

		out := maxTokens
		if out <= 0 {
			out = s.policy.Config().DefaultMaxTokens
		}
		ex := &exchange{s: s, w: w, r: r, body: body, path: r.URL.Path, stream: req.Stream,
			keys: keys, gpuHeld: gpuHeld, workTokens: promptTokens + out, promptTokens: promptTokens}
		ex.run(t, d)
	}
}

// tokens asks an engine for the request's exact token ids. A failure (or no engine to ask) is
// counted and reported as a degradation; the request is then routed by load alone.
func (s *Server) tokens(ctx context.Context, t *table, kind apiKind, req *inference) ([]uint32, bool) {
	if kind == kindCompletion {
		// A prompt that is already token ids needs no tokenizer.
		if ids, ok := promptIDs(req.Prompt); ok {
			return ids, true
		}
	}
	base := s.tokenizeURL(t)
	if base == "" {
		return nil, false
	}
	start := s.now()
	var toks []uint32
	var err error
	if kind == kindCompletion {
		cr := tokenize.CompletionRequest{Model: req.Model, AddSpecialTokens: req.AddSpecialTokens, Authorization: req.authorization}
		if raw := bytes.TrimSpace(req.Prompt); len(raw) > 0 && raw[0] == '"' {
			cr.RawPrompt = raw // already validated by the request's decode: pass it through
		} else if text, ok := promptText(req.Prompt); ok {
			cr.Prompt = text
		} else {
			s.tokenizeFailed(fmt.Errorf("prompt is neither a string, a list of strings, nor token ids"), false)
			return nil, false
		}
		toks, err = s.tok.Completion(ctx, base, cr)
	} else {
		toks, err = s.tok.Chat(ctx, base, tokenize.ChatRequest{Model: req.Model, Messages: req.Messages,
			AddGenerationPrompt: req.AddGenerationPrompt, ContinueFinalMessage: req.ContinueFinalMessage,
			AddSpecialTokens: req.AddSpecialTokens, ChatTemplate: req.ChatTemplate,
			ChatTemplateKwargs: req.ChatTemplateKwargs, Tools: req.Tools, Authorization: req.authorization})
	}
	s.metrics.tokenizeSeconds.Observe(s.now().Sub(start).Seconds())
	if err != nil {
		s.tokenizeFailed(err, true)
		return nil, false
	}
	s.tokenizeOK()
	return toks, true
}

// tokenizeURL picks a ready engine to tokenize on, rotating so the work spreads.
func (s *Server) tokenizeURL(t *table) string {
	n := len(t.routes)
	if n == 0 {
		return ""
	}
	now := s.now()
	first := int(s.tokRR.Add(1) % uint64(n))
	for i := 0; i < n; i++ {
		r := &t.routes[(first+i)%n]
		if ok, _ := s.readiness(r, 0, now); ok {
			return r.ep.URL
		}
	}
	return ""
}

func (s *Server) tokenizeFailed(err error, engine bool) {
	s.counters.tokFailures.Add(1)
	s.metrics.tokenizeFailures.Inc()
	s.degMu.Lock()
	now := s.now()
	if s.tokFailSince.IsZero() {
		s.tokFailSince = now
	}
	s.tokLastErr = err.Error()
	s.tokLastFail = now
	s.degMu.Unlock()
	if engine {
		s.log.V(1).Info("tokenize failed; routing by load", "error", err.Error())
	}
}

func (s *Server) tokenizeOK() {
	s.degMu.Lock()
	s.tokFailSince = time.Time{}
	s.degMu.Unlock()
}

// decide builds the policy's snapshot and picks an endpoint. keys are the prompt's content keys
// (kvindex.RequestKeys), nil when it was not tokenized. gpuHeld[i] is the leading blocks of the
// prompt route i holds on GPU (confirmed), nil without keys.
func (s *Server) decide(t *table, req policy.Request, keys []kvindex.Key) (d policy.Decision, gpuHeld []int) {
	n := len(t.routes)
	eps := make([]policy.Endpoint, n)
	loads := make([]policy.Load, n)
	streaks := make([]int, n)
	s.tracker.Loads(t.names, loads, streaks)
	now := s.now()
	for i := range t.routes {
		ready, _ := s.readiness(&t.routes[i], streaks[i], now)
		eps[i] = policy.Endpoint{Name: t.routes[i].name, Ready: ready, Load: loads[i]}
	}
	if req.Tokenized && s.index != nil && len(keys) > 0 {
		bs := s.blockSize()
		gpuHeld = make([]int, n)
		for _, m := range s.index.AppendLookupKeys(make([]kvindex.EndpointMatch, 0, n), keys) {
			i, ok := t.bySrc[m.Source]
			if !ok {
				continue
			}
			eps[i].Cached = policyinput.Cached(m, bs)
			gpuHeld[i] = m.Blocks[kvevents.MediumGPU]
		}
	}
	s.policyMu.Lock()
	d = s.policy.Pick(req, eps)
	s.policyMu.Unlock()
	return d, gpuHeld
}

// blockSize is the engines' block size, which the policy and the index share.
func (s *Server) blockSize() int { return s.policy.Config().BlockSize }

func (s *Server) countDecision(d policy.Decision) {
	s.counters.decMu.Lock()
	s.counters.decisions[string(d.Reason)]++
	s.counters.decMu.Unlock()
	s.metrics.decisions.WithLabelValues(string(d.Reason), string(d.Shape)).Inc()
}

// promptIDs reads a completion prompt given as token ids ([1,2,3] or [[1,2,3], ...]: the first).
func promptIDs(raw json.RawMessage) ([]uint32, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	if ids, ok := tokenize.ParseIDs(raw); ok && len(ids) > 0 {
		return ids, true
	}
	var batch [][]uint32
	if err := json.Unmarshal(raw, &batch); err == nil && len(batch) > 0 && len(batch[0]) > 0 {
		return batch[0], true
	}
	return nil, false
}

// promptText reads a completion prompt given as text ("..." or ["...", ...]: the first; a batch
// is routed as a whole by its first prompt).
func promptText(raw json.RawMessage) (string, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true
	}
	var batch []string
	if err := json.Unmarshal(raw, &batch); err == nil && len(batch) > 0 {
		return batch[0], true
	}
	return "", false
}

// injectReportMode sets vllm_xargs.kv_cache_report_mode = "full", keeping any other xargs.
func injectReportMode(body []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("request body is not a JSON object: %v", err)
	}
	xargs := map[string]json.RawMessage{}
	if raw, ok := m["vllm_xargs"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &xargs); err != nil {
			return nil, fmt.Errorf("vllm_xargs must be an object")
		}
	}
	if _, set := xargs["kv_cache_report_mode"]; !set {
		xargs["kv_cache_report_mode"] = json.RawMessage(`"full"`)
	}
	raw, err := json.Marshal(xargs)
	if err != nil {
		return nil, err
	}
	m["vllm_xargs"] = raw
	return json.Marshal(m)
}

// fail writes an OpenAI-style error.
func (s *Server) fail(w http.ResponseWriter, code int, typ, msg, param string) {
	s.metrics.requests.WithLabelValues("", strconv.Itoa(code)).Inc()
	writeError(w, code, typ, msg, param)
}

func writeError(w http.ResponseWriter, code int, typ, msg, param string) {
	type apiError struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	}
	e := apiError{Message: msg, Type: typ, Code: code}
	if param != "" {
		e.Param = &param
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]apiError{"error": e})
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
