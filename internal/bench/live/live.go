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

// Package live drives a running router, engine or any OpenAI-compatible server over HTTP with an
// open-loop load: requests are sent at their workload arrival times whether or not earlier ones
// have answered (Poisson or trace timestamps), streamed, and timed on the client side (TTFT, TPOT,
// inter-token latency, E2E, as vllm bench serve defines them). A run is bounded in request count,
// wall time and (optionally) requests in flight.
package live

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
	"github.com/kvrouter/kvrouter/internal/bench/workload"
)

// UsageMode says what usage reporting a run asks the server for.
type UsageMode string

const (
	// UsageFinal asks for one usage chunk at the end (stream_options.include_usage), which
	// OpenAI, vLLM, SGLang and llama.cpp understand.
	UsageFinal UsageMode = "final"
	// UsageContinuous also asks vLLM for usage on every chunk (continuous_usage_stats).
	UsageContinuous UsageMode = "continuous"
	// UsageNone sends no stream_options, for servers that reject it.
	UsageNone UsageMode = "none"
)

// ParseUsageMode reads the --usage flag.
func ParseUsageMode(s string) (UsageMode, error) {
	switch m := UsageMode(s); m {
	case UsageFinal, UsageContinuous, UsageNone:
		return m, nil
	}
	return "", fmt.Errorf("usage %q: want final, continuous or none", s)
}

// Config is one live run.
type Config struct {
	// Target is the base URL of the router, engine or server (http:// or https://).
	Target string
	// APIKey, when set, is sent as "Authorization: Bearer KEY". It is never logged or reported,
	// and with it set no redirect to another origin is followed (see sameOriginRedirects).
	APIKey string
	// Endpoint is the API driven (default completions).
	Endpoint Endpoint
	// Model is sent in every request; empty asks the target's /v1/models for the first one.
	Model    string
	Requests []workload.Request
	// MaxRequests and MaxDuration bound the run (0: all requests / 10 minutes).
	MaxRequests int
	MaxDuration time.Duration
	// MaxInFlight caps requests awaiting an answer (0: no cap, a pure open loop). A request due
	// while the cap is reached waits, and its latencies count from when it is sent, as with vllm
	// bench serve's --max-concurrency.
	MaxInFlight int
	// RequestTimeout bounds one request (default 2 minutes).
	RequestTimeout time.Duration
	// IgnoreEOS sends "ignore_eos": true (vLLM, SGLang) so that answers run to max_tokens. Off
	// by default: real servers stop at EOS, and some reject fields they do not know.
	IgnoreEOS bool
	// ReturnTokenIDs sends vLLM's "return_token_ids": true, which streams each chunk's token ids.
	ReturnTokenIDs bool
	// Usage selects the usage reporting asked for (default UsageFinal).
	Usage UsageMode
	// MaxEventBytes bounds one SSE line or event (0: sse.DefaultMaxBytes).
	MaxEventBytes int
	// TimeScale is the simulated seconds per wall second of a vllm-sim target (its --time-scale):
	// arrivals are compressed by it and measured times stretched by it, so figures read in
	// simulated seconds. 1 for real engines.
	TimeScale float64
	// EndpointHeader, when a response carries it, names the engine that served the request (for
	// the imbalance figure).
	EndpointHeader string
	SLO            metrics.SLO
	// Goodput is the vllm bench serve style objective of Outcome.Serving.
	Goodput  metrics.GoodputSLO
	Client   *http.Client
	Log      *slog.Logger
	Progress *Progress
}

// CheckTarget accepts an absolute http:// or https:// URL with a host.
func CheckTarget(target string) error {
	u, err := url.Parse(target)
	if err != nil {
		// Not the url.Error itself: it repeats the URL, credentials included.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("target is not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("target: want an http:// or https:// URL")
	}
	if u.Host == "" {
		return fmt.Errorf("target %q: no host", Redact(target))
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("target %q: give the base URL without a query or fragment", Redact(target))
	}
	return nil
}

// Redact drops what may carry a credential from a URL (user information, query, fragment), for
// logs and reports.
func Redact(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.Opaque != "" {
		return "(URL without a host)"
	}
	u.User, u.RawQuery, u.Fragment, u.ForceQuery = nil, "", "", false
	return u.String()
}

// ErrorCount is one kind of failure: its message (without prompt text) and how often it occurred.
type ErrorCount struct {
	Message string `json:"message"`
	Count   int    `json:"count"`
	// First is the index of the first request that failed this way.
	First int `json:"first_request"`
}

// Outcome is a run's results.
type Outcome struct {
	// Result is the summary every kvbench mode reports.
	Result metrics.Result
	// Serving has the figures in vllm bench serve's terms.
	Serving metrics.Serving
	Model   string
	Start   time.Time
	// Wall is the run's wall-clock duration.
	Wall time.Duration
	// TokenSources counts completed requests by where their output length came from
	// (SourceUsage, SourceTokenIDs, SourceChunks).
	TokenSources map[string]int
	// FinishReasons counts completed requests by the finish reason the server gave ("length",
	// "stop", ...; "" when it gave none): answers that stop before max_tokens show here.
	FinishReasons map[string]int
	// Sent is how many requests were handed to the server; the rest of the planned ones were
	// never sent (the wall bound came first, a previous turn failed).
	Sent int
	// Errors lists the kinds of failure, most frequent first.
	Errors []ErrorCount
	// Records and Timings are per request, in workload order.
	Records []metrics.Record
	Timings []metrics.Timing
}

type result struct {
	rec    metrics.Record
	timing metrics.Timing
	source string
	finish string
	output string
	err    error
}

// Run executes the run and summarises it.
func Run(ctx context.Context, cfg Config) (metrics.Result, error) {
	out, err := RunDetailed(ctx, cfg)
	if out == nil {
		return metrics.Result{}, err
	}
	return out.Result, err
}

// RunDetailed executes the run and returns everything it measured. When every request failed it
// returns the outcome and an error naming the first failure.
func RunDetailed(ctx context.Context, cfg Config) (*Outcome, error) {
	if err := CheckTarget(cfg.Target); err != nil {
		return nil, err
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = Completions
	}
	if _, err := ParseEndpoint(string(cfg.Endpoint)); err != nil {
		return nil, err
	}
	if cfg.Usage == "" {
		cfg.Usage = UsageFinal
	}
	if _, err := ParseUsageMode(string(cfg.Usage)); err != nil {
		return nil, err
	}
	if cfg.TimeScale <= 0 {
		cfg.TimeScale = 1
	}
	if cfg.MaxDuration <= 0 {
		cfg.MaxDuration = 10 * time.Minute
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 2 * time.Minute
	}
	if cfg.MaxInFlight < 0 {
		return nil, fmt.Errorf("max in flight %d: want 0 (no cap) or more", cfg.MaxInFlight)
	}
	if cfg.Client == nil {
		// The default transport's TLS, proxy and HTTP/2 settings, with enough idle connections
		// kept per host for an open loop.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 512
		cfg.Client = &http.Client{Transport: tr}
	}
	if cfg.APIKey != "" {
		// A copy: the caller's client keeps its own policy for its other uses.
		c := *cfg.Client
		c.CheckRedirect = sameOriginRedirects(c.CheckRedirect)
		cfg.Client = &c
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	target := strings.TrimRight(cfg.Target, "/")
	if cfg.Model == "" {
		m, err := firstModel(ctx, cfg.Client, target, cfg.APIKey)
		if err != nil {
			return nil, err
		}
		cfg.Model = m
	}
	reqs := cfg.Requests
	if cfg.MaxRequests > 0 && len(reqs) > cfg.MaxRequests {
		reqs = reqs[:cfg.MaxRequests]
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.MaxDuration)
	defer cancel()

	r := &runner{cfg: cfg, target: target, reqs: reqs, results: make([]result, len(reqs)), start: time.Now(),
		children: map[int]int{}}
	if cfg.MaxInFlight > 0 {
		r.slots = make(chan struct{}, cfg.MaxInFlight)
	}
	for i := range reqs {
		if p := reqs[i].Parent; p >= 0 && p < len(reqs) {
			r.children[p] = i
		}
	}
	cfg.Progress.begin(len(reqs))
	var wg sync.WaitGroup
	r.wg = &wg
	for i := range reqs {
		if reqs[i].Parent >= 0 {
			continue
		}
		at := r.start.Add(time.Duration(reqs[i].At / cfg.TimeScale * float64(time.Second)))
		if !sleepUntil(ctx, at) {
			break
		}
		r.launch(ctx, i, conversation{})
	}
	wg.Wait()
	wall := time.Since(r.start)
	cfg.Progress.end()
	return r.summarise(wall)
}

func (r *runner) summarise(wall time.Duration) (*Outcome, error) {
	cfg := r.cfg
	out := &Outcome{Model: cfg.Model, Start: r.start, Wall: wall, Sent: int(r.sent.Load()),
		TokenSources: map[string]int{}, FinishReasons: map[string]int{}}
	recs := make([]metrics.Record, 0, len(r.reqs))
	var gaps []float64
	failures := 0
	endpoints := map[string]bool{}
	kinds := map[string]*ErrorCount{}
	var firstErr error
	for i := range r.results {
		res := &r.results[i]
		if res.err == nil && res.rec.Finish == 0 {
			res.err = errors.New("not sent: the run ended first")
			if r.reqs[i].Parent < 0 {
				res.rec.Arrival = r.reqs[i].At // when it was due
			}
		}
		if res.err != nil {
			failures++
			if firstErr == nil {
				firstErr = res.err
			}
			msg := res.err.Error()
			if k := kinds[msg]; k != nil {
				k.Count++
			} else {
				kinds[msg] = &ErrorCount{Message: msg, Count: 1, First: i}
			}
			if failures <= 3 {
				cfg.Log.Warn("request failed", "request", i, "err", msg)
			}
			res.rec.Failed = true
		} else {
			out.TokenSources[res.source]++
			out.FinishReasons[res.finish]++
		}
		if res.rec.Endpoint != "" {
			endpoints[res.rec.Endpoint] = true
		}
		recs = append(recs, res.rec)
		out.Timings = append(out.Timings, res.timing)
		gaps = append(gaps, res.timing.ITL...)
	}
	for _, k := range kinds {
		out.Errors = append(out.Errors, *k)
	}
	sort.Slice(out.Errors, func(a, b int) bool {
		if out.Errors[a].Count != out.Errors[b].Count {
			return out.Errors[a].Count > out.Errors[b].Count
		}
		return out.Errors[a].First < out.Errors[b].First
	})
	var names []string
	for n := range endpoints {
		names = append(names, n)
	}
	sort.Strings(names)
	out.Records = recs
	res := metrics.Summarize(recs, gaps, names, cfg.SLO, 0, nil)
	dur := wall.Seconds() * cfg.TimeScale
	out.Serving = metrics.SummarizeServing(recs, out.Timings, dur, cfg.Goodput)
	s := &out.Serving
	res.Extra = map[string]float64{
		"wall_s": wall.Seconds(), "time_scale": cfg.TimeScale, "run_duration_s": dur,
		"ttft_mean_s": s.TTFT.Mean, "tpot_mean_s": s.TPOT.Mean, "tpot_p99_s": s.TPOT.P99,
		"itl_mean_s": s.ITL.Mean, "itl_p99_s": s.ITL.P99, "e2e_mean_s": s.E2E.Mean,
		"total_token_throughput_tok_s": s.TotalThroughput, "request_goodput_req_s": s.RequestGoodput,
	}
	out.Result = res
	if failures == len(r.reqs) && len(r.reqs) > 0 {
		return out, fmt.Errorf("every request failed (first: %v)", firstErr)
	}
	return out, nil
}

type runner struct {
	cfg      Config
	target   string
	reqs     []workload.Request
	results  []result
	children map[int]int
	start    time.Time
	wg       *sync.WaitGroup
	slots    chan struct{}
	// sent counts the requests handed to the HTTP client.
	sent atomic.Int64
}

// conversation is what a follow-up turn resends: the text so far (completions) or the messages
// so far (chat).
type conversation struct {
	text     string
	messages []message
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// launch sends request i (after the conversation so far) in a goroutine; when it finishes, its
// follow-up is scheduled after the think time.
func (r *runner) launch(ctx context.Context, i int, conv conversation) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		w := &r.reqs[i]
		text := w.Text()
		next := conversation{text: conv.text + text,
			messages: append(append([]message(nil), conv.messages...), message{Role: "user", Content: text})}
		res := r.send(ctx, w, next)
		r.results[i] = res
		c, ok := r.children[i]
		if !ok {
			return
		}
		if res.err != nil {
			r.results[c] = result{err: fmt.Errorf("previous turn failed: %w", res.err)}
			r.results[c].rec.Arrival = res.rec.Finish
			r.cfg.Progress.skipped()
			return
		}
		at := time.Now().Add(time.Duration(r.reqs[c].At / r.cfg.TimeScale * float64(time.Second)))
		if !sleepUntil(ctx, at) {
			r.results[c] = result{err: fmt.Errorf("not sent: %w", ctx.Err())}
			r.cfg.Progress.skipped()
			return
		}
		next.text += res.output
		next.messages = append(next.messages, message{Role: "assistant", Content: res.output})
		r.launch(ctx, c, next)
	}()
}

func (r *runner) since() float64 { return time.Since(r.start).Seconds() * r.cfg.TimeScale }

// send waits for an in-flight slot when there is a cap, then does the request.
func (r *runner) send(ctx context.Context, w *workload.Request, conv conversation) result {
	if r.slots != nil {
		select {
		case r.slots <- struct{}{}:
			defer func() { <-r.slots }()
		case <-ctx.Done():
			r.cfg.Progress.skipped()
			return result{err: fmt.Errorf("not sent: %w", ctx.Err())}
		}
	}
	r.cfg.Progress.sentOne()
	r.sent.Add(1)
	res := r.do(ctx, w, conv)
	if res.err != nil {
		res.err = sanitize(res.err, conv.text, r.cfg.APIKey)
	}
	r.cfg.Progress.finished(res.err != nil)
	return res
}

// body builds the request body for the run's endpoint.
func (r *runner) body(w *workload.Request, conv conversation) ([]byte, error) {
	model := r.cfg.Model
	if w.Adapter != "" {
		// A LoRA workload names the adapter as the model, as OpenAI-compatible servers expect;
		// --model still picks the base model for the rest of the run.
		model = w.Adapter
	}
	b := map[string]any{"model": model, "stream": true}
	if r.cfg.Endpoint == Chat {
		b["messages"] = conv.messages
		// As vllm bench serve sends it; OpenAI deprecated max_tokens for chat.
		b["max_completion_tokens"] = w.MaxTokens
	} else {
		b["prompt"] = conv.text
		b["max_tokens"] = w.MaxTokens
	}
	switch r.cfg.Usage {
	case UsageFinal:
		b["stream_options"] = map[string]any{"include_usage": true}
	case UsageContinuous:
		b["stream_options"] = map[string]any{"include_usage": true, "continuous_usage_stats": true}
	}
	if r.cfg.IgnoreEOS {
		b["ignore_eos"] = true
	}
	if r.cfg.ReturnTokenIDs {
		b["return_token_ids"] = true
	}
	return json.Marshal(b)
}

func (r *runner) do(ctx context.Context, w *workload.Request, conv conversation) result {
	var res result
	res.rec.Arrival = r.since()
	body, err := r.body(w, conv)
	if err != nil {
		res.err = err
		return res
	}
	rctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, r.target+r.cfg.Endpoint.Path(), bytes.NewReader(body))
	if err != nil {
		res.err = err
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if r.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.APIKey)
	}
	if w.Session != "" {
		req.Header.Set("X-Session-ID", w.Session)
	}
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		res.err = requestError(rctx, ctx, err, r.cfg.RequestTimeout)
		return res
	}
	defer resp.Body.Close()
	if r.cfg.EndpointHeader != "" {
		res.rec.Endpoint = resp.Header.Get(r.cfg.EndpointHeader)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		res.err = httpError(resp.StatusCode, redactKey(b, r.cfg.APIKey))
		return res
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "text/event-stream") {
		res.err = fmt.Errorf("answer is %s, not an event stream (does the server stream?)", clip(ct))
		return res
	}
	s, err := readStream(resp.Body, r.since, r.cfg.MaxEventBytes)
	if err != nil {
		if rctx.Err() != nil {
			err = requestError(rctx, ctx, err, r.cfg.RequestTimeout)
		}
		res.err = err
		return res
	}
	// Let the connection go back to the pool: a server may send a few bytes after [DONE].
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	res.rec.FirstToken, res.rec.Finish = s.first, max(s.end, s.lastOut)
	res.rec.OutputTokens, res.source = s.outputTokens()
	if s.usage != nil {
		res.rec.PromptTokens = s.usage.PromptTokens
		if d := s.usage.PromptTokensDetails; d != nil {
			res.rec.CachedTokens = d.CachedTokens
		}
	}
	res.timing.ITL = s.itl
	res.finish = s.finish
	res.output = s.text.String()
	return res
}

// requestError says which bound ended a request.
func requestError(rctx, run context.Context, err error, timeout time.Duration) error {
	switch {
	case run.Err() != nil:
		return fmt.Errorf("cut off: the run ended (%v)", run.Err())
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("request timed out after %s", timeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		// url.Error repeats the method and URL; the URL may carry the target's user information.
		return fmt.Errorf("%s: %v", strings.ToLower(ue.Op), ue.Err)
	}
	return err
}

// httpError turns an error answer into a message: the status and the server's message when it
// wrote one in the OpenAI error shapes, else the start of the body.
func httpError(status int, body []byte) error {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	msg := ""
	if json.Unmarshal(body, &e) == nil {
		switch {
		case errorMessage(e.Error) != "":
			msg = errorMessage(e.Error)
		case e.Message != "":
			msg = e.Message
		case len(e.Detail) > 0:
			msg = string(e.Detail)
		}
	}
	if msg == "" {
		msg = strings.TrimSpace(string(body))
	}
	return fmt.Errorf("HTTP %d: %s", status, clip(msg))
}

// promptEchoWindow is the shortest run of prompt bytes in a server message that counts as an
// echo of the prompt.
const promptEchoWindow = 16

// sanitize withholds a server message that quotes the prompt (validation errors of some servers
// echo the request back), so that no prompt text reaches logs or reports, and replaces the API key
// wherever the message repeats it (servers that echo the Authorization header in a 401).
func sanitize(err error, prompt, apiKey string) error {
	msg := err.Error()
	if quotesPrompt(msg, prompt) {
		return errors.New("server error quoting the prompt (message withheld)")
	}
	if red := redactClipped(msg, apiKey); red != msg {
		return errors.New(red)
	}
	return err
}

// redactClipped replaces the API key in a message, and also the start of the key where clip cut
// the message inside it.
func redactClipped(msg, apiKey string) string {
	if apiKey == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, apiKey, "REDACTED")
	body, clipped := strings.CutSuffix(msg, "…")
	if !clipped {
		return msg
	}
	for k := min(len(apiKey)-1, len(body)); k >= 4; k-- {
		if strings.HasSuffix(body, apiKey[:k]) {
			return body[:len(body)-k] + "REDACTED…"
		}
	}
	return msg
}

// quotesPrompt reports whether msg holds promptEchoWindow or more consecutive bytes of the prompt
// (all of it when the prompt is shorter). Every window of the short message goes into a set and
// the prompt is scanned once, so the cost is linear in both lengths.
func quotesPrompt(msg, prompt string) bool {
	if prompt == "" {
		return false
	}
	if len(prompt) < promptEchoWindow {
		return strings.Contains(msg, prompt)
	}
	if len(msg) < promptEchoWindow {
		return false
	}
	windows := make(map[string]struct{}, len(msg)-promptEchoWindow+1)
	for i := 0; i+promptEchoWindow <= len(msg); i++ {
		windows[msg[i:i+promptEchoWindow]] = struct{}{}
	}
	for i := 0; i+promptEchoWindow <= len(prompt); i++ {
		if _, ok := windows[prompt[i:i+promptEchoWindow]]; ok {
			return true
		}
	}
	return false
}

// redactKey replaces every occurrence of the API key in a server's answer, before the answer is
// clipped: clipping first could leave a prefix of the key that no longer matches.
func redactKey(b []byte, apiKey string) []byte {
	if apiKey == "" {
		return b
	}
	return bytes.ReplaceAll(b, []byte(apiKey), []byte("REDACTED"))
}

// sameOriginRedirects is the redirect policy of a run with an API key. Go's client forwards the
// Authorization header to the same host name on another port or scheme (an http:// downgrade
// included) and to its subdomains, so a redirect is followed only to the scheme, host and port of
// the first request; next is the policy applied then (nil: Go's default).
func sameOriginRedirects(next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		first := via[0].URL
		if req.URL.Scheme != first.Scheme || !strings.EqualFold(canonicalHost(req.URL), canonicalHost(first)) {
			status := 0
			if req.Response != nil {
				status = req.Response.StatusCode
			}
			return fmt.Errorf("HTTP %d redirect to %s://%s: kvbench does not follow a redirect to another scheme, host or port with an API key",
				status, req.URL.Scheme, req.URL.Host)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
}

// canonicalHost is host:port with the scheme's default port filled in.
func canonicalHost(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port)
}

func firstModel(ctx context.Context, c *http.Client, target, apiKey string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	where := Redact(target)
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("listing models at %s: %w", where, requestError(ctx, context.Background(), err, 30*time.Second))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return "", fmt.Errorf("listing models at %s: %w (give --model to skip this)", where, httpError(resp.StatusCode, redactKey(b, apiKey)))
	}
	var m struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&m); err != nil || len(m.Data) == 0 {
		return "", fmt.Errorf("listing models at %s: no model in the answer (give --model)", where)
	}
	return m.Data[0].ID, nil
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}
