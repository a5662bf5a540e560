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
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/router/tokenize"
	"github.com/kvrouter/kvrouter/internal/routerapi"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// The --tokenizer modes (docs/tokenizer.md).
const (
	// TokenizerAuto tokenizes in process once a tokenizer is loaded and has agreed with an
	// engine's /tokenize on the start sample; on the engines until then.
	TokenizerAuto = "auto"
	// TokenizerLocal tokenizes in process as soon as a tokenizer is loaded, without waiting
	// for the start check (which still runs, and demotes it on a mismatch).
	TokenizerLocal = "local"
	// TokenizerEngine always asks an engine's /tokenize.
	TokenizerEngine = "engine"
)

// LocalTokenizer is what the router needs of an in-process tokenizer (*tokenizer.Tokenizer).
type LocalTokenizer interface {
	Encode(text string, addSpecial bool) []uint32
	EncodeChat(in tokenizer.ChatInput, addSpecial bool) ([]uint32, error)
}

// verifySlots bounds the samples being checked on engines at once: a sample that finds every
// slot taken is skipped, so verification never queues behind a slow engine nor adds up to load.
const verifySlots = 4

// localTokens is the in-process tokenizer's state. One mismatch with an engine is enough to stop
// using it until the router restarts (or is handed another tokenizer): the start sample passed
// once, so checking it again would pass again and prove nothing about the text that disagreed.
type localTokens struct {
	mode     string
	fraction float64

	cur   atomic.Pointer[loadedTokenizer] // nil until one is loaded
	inUse atomic.Bool
	slots chan struct{}

	mu           sync.Mutex
	reason       string
	verified     bool
	demoted      bool
	mismatches   uint64
	lastMismatch time.Time
	cause        string // the degradation's message: the case and engine, never text or ids
	demotedAt    time.Time

	localReqs                   atomic.Uint64
	matches, verifyErrs         atomic.Uint64
	localCounter                prometheus.Counter
	verifications               *prometheus.CounterVec
	verifyMatch, verifyMismatch prometheus.Counter
	verifyError                 prometheus.Counter
}

type loadedTokenizer struct {
	t      LocalTokenizer
	origin string
}

func newLocalTokens(cfg Config, reg prometheus.Registerer) *localTokens {
	l := &localTokens{mode: cfg.Tokenizer, fraction: cfg.TokenizerVerifyFraction, slots: make(chan struct{}, verifySlots)}
	l.reason = "no in-process tokenizer loaded yet"
	if l.mode == TokenizerEngine {
		l.reason = "--tokenizer engine"
	}
	l.localCounter = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_tokenizer_local_requests_total",
		Help: "Requests tokenized in process (from the model's tokenizer.json) rather than on an engine."})
	l.verifications = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_tokenizer_verifications_total",
		Help: "In-process tokenizations checked against an engine's /tokenize (the start sample and a fraction of requests), by result: match, mismatch, or error (no engine answered)."},
		[]string{"result"})
	l.verifyMatch = l.verifications.WithLabelValues("match")
	l.verifyMismatch = l.verifications.WithLabelValues("mismatch")
	l.verifyError = l.verifications.WithLabelValues("error")
	if reg != nil {
		reg.MustRegister(l.localCounter, l.verifications, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kvrouter_tokenizer_in_process",
			Help: "1 while requests are tokenized in process, 0 while they are tokenized on the engines."},
			func() float64 {
				if l.inUse.Load() {
					return 1
				}
				return 0
			}))
	}
	return l
}

// active is the tokenizer requests use now, nil when they go to the engines.
func (l *localTokens) active() *loadedTokenizer {
	if !l.inUse.Load() {
		return nil
	}
	return l.cur.Load()
}

func (l *localTokens) setReason(r string) {
	l.mu.Lock()
	l.reason = r
	l.mu.Unlock()
}

// TokenizerLoading reports why no in-process tokenizer is loaded yet (a download under way, or
// failing: the error, which must not carry a token), for /v1/status.
func (s *Server) TokenizerLoading(reason string) {
	if s.local.mode == TokenizerEngine || s.local.cur.Load() != nil {
		return
	}
	s.local.setReason(reason)
}

// SetLocalTokenizer hands the router an in-process tokenizer loaded from origin. In auto mode it
// is used once it agrees with an engine on the start sample, which runs in the background until
// an engine has answered it or ctx ends; in local mode at once. It replaces any earlier one and
// clears an earlier mismatch: another tokenizer is another question.
func (s *Server) SetLocalTokenizer(ctx context.Context, t LocalTokenizer, origin string) {
	l := s.local
	if l.mode == TokenizerEngine || t == nil {
		return
	}
	lt := &loadedTokenizer{t: t, origin: origin}
	// The tokenizer, the verdict and whether requests use it change together under l.mu, so a
	// late mismatch about the previous tokenizer cannot turn this one off, nor a start check
	// turn on one a mismatch has just demoted.
	l.mu.Lock()
	l.cur.Store(lt)
	l.demoted, l.verified, l.cause = false, false, ""
	if l.mode == TokenizerLocal {
		l.reason = "--tokenizer local (start check pending)"
	} else {
		l.reason = "start check pending: waiting for an engine to compare with"
	}
	s.useLocal(l.mode == TokenizerLocal)
	l.mu.Unlock()
	s.log.Info("in-process tokenizer loaded", "origin", origin, "mode", l.mode)
	go s.startCheck(ctx, lt)
}

// useLocal switches requests to the in-process tokenizer (on) or to the engines. The caller holds
// s.local.mu.
func (s *Server) useLocal(on bool) {
	s.local.inUse.Store(on)
	if on {
		// No request asks the engines any more: a run of /tokenize failures before the switch
		// is over (TokenizerUnavailable then clears a minute after the last one).
		s.tokenizeOK()
	}
}

// startCheck tokenizes the start sample in process and on an engine until an engine has answered
// every case, then trusts the tokenizer or not.
func (s *Server) startCheck(ctx context.Context, lt *loadedTokenizer) {
	l := s.local
	wait := 200 * time.Millisecond
	lastErr := ""
	for {
		if l.cur.Load() != lt {
			return // replaced
		}
		engine, base, _ := s.tokenizeEngine(s.tbl.Load())
		if base != "" {
			name, pos, err := s.checkSample(ctx, lt.t, base)
			switch {
			case err != nil:
				// Said once per kind of failure: an engine that wants a key the router lacks
				// (--engine-api-key-file) would otherwise fill the log.
				if msg := err.Error(); msg != lastErr {
					lastErr = msg
					s.log.Info("tokenizer start check: the engine did not answer; retrying", "engine", engine, "error", msg)
				}
				l.verifyError.Inc()
				l.verifyErrs.Add(1)
			case name != "":
				s.tokenizerMismatch(lt, fmt.Sprintf("the start check's %q sample tokenized differently on engine %s (first difference at token %d)", name, engine, pos))
				return
			default:
				l.matches.Add(uint64(len(tokenize.StartSample)))
				l.verifyMatch.Add(float64(len(tokenize.StartSample)))
				l.mu.Lock()
				if l.demoted || l.cur.Load() != lt {
					l.mu.Unlock()
					return
				}
				l.verified = true
				l.reason = "start check passed on engine " + engine
				s.useLocal(true)
				l.mu.Unlock()
				s.log.Info("in-process tokenizer agrees with the engine on the start sample; tokenizing in process", "engine", engine)
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// checkSample compares every case of the start sample; it returns the first case that differs and
// the position of its first differing token, or an error when the engine did not answer.
func (s *Server) checkSample(ctx context.Context, t LocalTokenizer, base string) (string, int, error) {
	auth := s.cfg.Auth.upstreamAuthorization("")
	for _, c := range tokenize.StartSample {
		var local, remote []uint32
		var err error
		if c.Chat {
			in := tokenizer.ChatInput{Messages: c.Messages, AddGenerationPrompt: true}
			if local, err = encodeChatSafe(t, in, false); err != nil {
				// No chat template, or one this tokenizer cannot render: every chat request
				// then falls back to the engines on its own, so there is nothing to compare.
				continue
			}
			gen := true
			remote, err = s.tok.Chat(ctx, base, tokenize.ChatRequest{Model: s.cfg.Model, Messages: c.Messages,
				AddGenerationPrompt: &gen, Authorization: auth})
		} else {
			if local, err = encodeSafe(t, c.Prompt, c.AddSpecialTokens); err != nil {
				return c.Name, 0, nil
			}
			add := c.AddSpecialTokens
			remote, err = s.tok.Completion(ctx, base, tokenize.CompletionRequest{Model: s.cfg.Model, Prompt: c.Prompt,
				AddSpecialTokens: &add, Authorization: auth})
		}
		if err != nil {
			return "", 0, err
		}
		if pos := firstDifference(local, remote); pos >= 0 {
			return c.Name, pos, nil
		}
	}
	return "", 0, nil
}

// firstDifference is the index of the first token where a and b differ (len of the shorter when
// one is a prefix of the other), -1 when they are equal.
func firstDifference(a, b []uint32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return n
	}
	return -1
}

// tokenizerMismatch stops in-process tokenization with lt for good (see localTokens) and says
// why; a late finding about a tokenizer since replaced is dropped.
func (s *Server) tokenizerMismatch(lt *loadedTokenizer, cause string) {
	l := s.local
	l.verifyMismatch.Inc()
	l.mu.Lock()
	if l.cur.Load() != lt {
		l.mu.Unlock()
		return
	}
	l.mismatches++
	l.lastMismatch = s.now()
	first := !l.demoted
	if first {
		l.demoted, l.cause, l.demotedAt = true, cause, l.lastMismatch
		l.reason = "mismatch: " + cause
	}
	l.inUse.Store(false)
	l.mu.Unlock()
	if first {
		s.log.Info("in-process tokenizer disagrees with the engines; tokenizing on the engines' /tokenize until restart", "cause", cause)
	}
}

// localTokenize tokenizes the request in process, when that is in use; false sends it to an
// engine (not in use, or a request this tokenizer cannot handle: its chat template fails, a
// feature it lacks).
func (s *Server) localTokenize(kind apiKind, req *inference) ([]uint32, bool) {
	lt := s.local.active()
	if lt == nil {
		return nil, false
	}
	if req.lora != "" || req.ChatTemplate != nil || bytes.Contains(req.ChatTemplateKwargs, []byte(`"chat_template"`)) ||
		bytes.Contains(req.Messages, []byte(`"reasoning_content"`)) || bytes.Contains(req.Messages, []byte(`"reasoning"`)) {
		// A LoRA adapter may bring a tokenizer of its own (vLLM loads it when it does), and a
		// client's own chat template would run in the router: a template can loop or recurse
		// without bound, and caching each one compiled would grow without bound too. vLLM
		// itself refuses request templates unless told to trust them. Assistant messages that
		// carry reasoning ("reasoning_content", "reasoning") are passed to templates in ways that
		// differ between vLLM releases. The engines tokenize these.
		return nil, false
	}
	t := lt.t
	var toks []uint32
	var err error
	if kind == kindCompletion {
		text, ok := promptText(req.Prompt)
		if !ok {
			return nil, false // the engine path reports the unreadable prompt
		}
		toks, err = encodeSafe(t, text, boolOr(req.AddSpecialTokens, true))
	} else {
		toks, err = encodeChatSafe(t, chatInput(req), boolOr(req.AddSpecialTokens, false))
	}
	if err != nil {
		// The error may quote the template, never the prompt; still, debug level only.
		s.log.V(1).Info("in-process tokenizer cannot tokenize this request; asking an engine", "error", err.Error())
		return nil, false
	}
	s.local.localReqs.Add(1)
	s.local.localCounter.Inc()
	if f := s.local.fraction; f > 0 && (f >= 1 || rand.Float64() < f) {
		s.verifyLater(lt, kind, req, toks)
	}
	return toks, true
}

// chatInput is the request's chat for the model's own template (localTokenize sends requests
// carrying a template of their own to the engines).
func chatInput(req *inference) tokenizer.ChatInput {
	return tokenizer.ChatInput{Messages: req.Messages, Tools: req.Tools, AddGenerationPrompt: boolOr(req.AddGenerationPrompt, true),
		ContinueFinalMessage: boolOr(req.ContinueFinalMessage, false), ChatTemplateKwargs: req.ChatTemplateKwargs}
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

// encodeSafe and encodeChatSafe turn a tokenizer panic on some input into that request's
// fallback to the engine rather than the router's end.
func encodeSafe(t LocalTokenizer, text string, addSpecial bool) (toks []uint32, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("tokenizer panic: %v", r)
		}
	}()
	return t.Encode(text, addSpecial), nil
}

func encodeChatSafe(t LocalTokenizer, in tokenizer.ChatInput, addSpecial bool) (toks []uint32, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("tokenizer panic: %v", r)
		}
	}()
	return t.EncodeChat(in, addSpecial)
}

// verifyLater has an engine tokenize the request too, off the request path, and compares. The
// request's fields are copied: its body is not the verification's to hold on to.
func (s *Server) verifyLater(lt *loadedTokenizer, kind apiKind, req *inference, local []uint32) {
	select {
	case s.local.slots <- struct{}{}:
	default:
		return // enough checks in flight; this sample is skipped
	}
	cr := tokenize.CompletionRequest{Model: req.Model, AddSpecialTokens: req.AddSpecialTokens, Authorization: req.authorization}
	var chat tokenize.ChatRequest
	if kind == kindCompletion {
		cr.RawPrompt = bytes.Clone(bytes.TrimSpace(req.Prompt))
		if len(cr.RawPrompt) == 0 || cr.RawPrompt[0] != '"' {
			cr.RawPrompt = nil
			cr.Prompt, _ = promptText(req.Prompt)
		}
	} else {
		chat = tokenize.ChatRequest{Model: req.Model, Messages: bytes.Clone(req.Messages),
			AddGenerationPrompt: req.AddGenerationPrompt, ContinueFinalMessage: req.ContinueFinalMessage,
			AddSpecialTokens: req.AddSpecialTokens, ChatTemplate: req.ChatTemplate,
			ChatTemplateKwargs: bytes.Clone(req.ChatTemplateKwargs), Tools: bytes.Clone(req.Tools), Authorization: req.authorization}
	}
	go func() {
		defer func() { <-s.local.slots }()
		engine, base, _ := s.tokenizeEngine(s.tbl.Load())
		var remote []uint32
		err := errTokenizeSkipped
		if base != "" {
			// The client's context is not the check's: the request may well be over by now. A
			// deadline of its own keeps a hung /tokenize from holding a slot for long.
			ctx, cancel := context.WithTimeout(context.Background(), verifyTimeout)
			if kind == kindCompletion {
				remote, err = s.tok.Completion(ctx, base, cr)
			} else {
				remote, err = s.tok.Chat(ctx, base, chat)
			}
			cancel()
		}
		if err == nil && kind == kindChat && firstDifference(local, remote) >= 0 {
			// A template that prints the date (strftime_now) renders differently on either side
			// of midnight: render again now, after the engine did, before calling it a mismatch.
			in := tokenizer.ChatInput{Messages: chat.Messages, Tools: chat.Tools, AddGenerationPrompt: boolOr(chat.AddGenerationPrompt, true),
				ContinueFinalMessage: boolOr(chat.ContinueFinalMessage, false), ChatTemplateKwargs: chat.ChatTemplateKwargs}
			if again, aerr := encodeChatSafe(lt.t, in, boolOr(chat.AddSpecialTokens, false)); aerr == nil && firstDifference(again, remote) < 0 {
				local = again
			}
		}
		s.verified(lt, kind, engine, local, remote, err)
	}()
}

// verifyTimeout bounds one sampled verification's call to an engine.
const verifyTimeout = 10 * time.Second

// verified records one sampled request's check.
func (s *Server) verified(lt *loadedTokenizer, kind apiKind, engine string, local, remote []uint32, err error) {
	l := s.local
	if err != nil {
		l.verifyErrs.Add(1)
		l.verifyError.Inc()
		s.log.V(1).Info("tokenizer verification: no engine answered", "error", err.Error())
		return
	}
	pos := firstDifference(local, remote)
	if pos < 0 {
		l.matches.Add(1)
		l.verifyMatch.Inc()
		return
	}
	what := "a completions request"
	if kind == kindChat {
		what = "a chat request"
	}
	s.tokenizerMismatch(lt, fmt.Sprintf("%s sampled for verification tokenized differently on engine %s (first difference at token %d of %d in process, %d on the engine)",
		what, engine, pos, len(local), len(remote)))
}

// tokenizerStatus fills the status document's tokenizer block and, after a mismatch, its
// TokenizerMismatch degradation.
func (s *Server) tokenizerStatus(st *routerapi.Status) {
	l := s.local
	ts := &routerapi.Tokenizer{Mode: l.mode, Source: "engine", LocalRequests: l.localReqs.Load(),
		Verifications: l.matches.Load(), VerifyErrors: l.verifyErrs.Load()}
	if l.inUse.Load() {
		ts.Source = "local"
	}
	if c := l.cur.Load(); c != nil {
		ts.Origin = c.origin
	}
	l.mu.Lock()
	ts.Reason, ts.Verified, ts.Mismatches = l.reason, l.verified, l.mismatches
	if !l.lastMismatch.IsZero() {
		at := l.lastMismatch
		ts.LastMismatch = &at
	}
	if l.demoted {
		st.Degradations = append(st.Degradations, routerapi.Degradation{Type: "TokenizerMismatch",
			Message: l.cause + "; prompts are tokenized on the engines' /tokenize until the router restarts", Since: l.demotedAt})
	}
	l.mu.Unlock()
	st.Tokenizer = ts
}

// compile-time check that the real tokenizer fits.
var _ LocalTokenizer = (*tokenizer.Tokenizer)(nil)
