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

package fleettest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Outcome is what became of one request, as its client sees it (docs/reliability.md defines
// the classes).
type Outcome int

const (
	// Completed: a 200 with a whole answer: a JSON body with a finished choice, or an SSE
	// stream whose last choice has a finish reason and that ends with "data: [DONE]"; with
	// Request.WantTokens set, exactly that many tokens.
	Completed Outcome = iota
	// ClearError: an OpenAI-style JSON error ({"error":{"message":...}}) with a 4xx or 5xx
	// status, or, on a stream already started, an SSE "data: {"error":...}" event: the client
	// knows the request failed and can retry it.
	ClearError
	// Refused: the connection was refused or reset while being set up, so the request never
	// reached a server (a restarting router's closed port); safe to resend, and Load resends it.
	Refused
	// Unanswered: the connection was closed or reset after the request was written and before
	// any byte of an answer. A client cannot tell whether a server read it, so it counts as Lost,
	// unless the test knows the server answers every connection it accepts (a router in graceful
	// shutdown does) and sets Load.ResendUnanswered.
	Unanswered
	// Lost: anything else: no answer by the deadline, a stream cut without an error event, a
	// reset without an answer, a body that is not what was asked for.
	Lost
)

func (o Outcome) String() string {
	return [...]string{"completed", "clear-error", "refused", "unanswered", "LOST"}[o]
}

// Request is one OpenAI request to send.
type Request struct {
	Path   string // /v1/completions or /v1/chat/completions
	Body   []byte
	Stream bool
	// WantTokens, when > 0, is the exact number of generated tokens a complete answer has
	// (vllm-sim generates exactly max_tokens when it is given).
	WantTokens int
}

// Result is one request's outcome.
type Result struct {
	Outcome Outcome
	Status  int
	// Reason says what made it an error or lost (empty when completed).
	Reason   string
	Stream   bool
	Endpoint string
	Start    time.Time
	Latency  time.Duration
	// TTFT is the time to a stream's first data event (0 for whole answers and errors).
	TTFT time.Duration
	// From the answer's usage, when it has one.
	PromptTokens, CachedTokens int
}

// Do sends req to baseURL and classifies the answer; deadline bounds the whole exchange (past
// it the request is Lost: a hang).
func Do(ctx context.Context, c *http.Client, baseURL string, req Request, deadline time.Duration) (res Result) {
	res = Result{Stream: req.Stream, Start: time.Now()}
	defer func() { res.Latency = time.Since(res.Start) }()
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+req.Path, bytes.NewReader(req.Body))
	if err != nil {
		res.Outcome, res.Reason = Lost, err.Error()
		return res
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(hr)
	if err != nil {
		var op *net.OpError
		switch {
		case errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial"):
			res.Outcome, res.Reason = Refused, "connection not established: "+err.Error()
		case ctx.Err() != nil:
			res.Outcome, res.Reason = Lost, "no response headers by the deadline"
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
			res.Outcome, res.Reason = Unanswered, "connection closed before any answer: "+err.Error()
		default:
			res.Outcome, res.Reason = Lost, "no answer: "+err.Error()
		}
		return res
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	res.Endpoint = resp.Header.Get("X-Kvrouter-Endpoint")
	if resp.StatusCode != http.StatusOK {
		classifyError(&res, resp, ctx)
		return res
	}
	if req.Stream {
		classifyStream(&res, resp, req, ctx)
	} else {
		classifyWhole(&res, resp, req, ctx)
	}
	return res
}

type apiError struct {
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
	} `json:"error"`
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type answer struct {
	Choices []struct {
		Text    *string                    `json:"text"`
		Message *struct{ Content *string } `json:"message"`
		Delta   *struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

func (res *Result) setUsage(u *usage) {
	if u == nil {
		return
	}
	res.PromptTokens = u.PromptTokens
	if u.PromptTokensDetails != nil {
		res.CachedTokens = u.PromptTokensDetails.CachedTokens
	}
}

func readFailure(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return "body not finished by the deadline"
	}
	return "body cut: " + err.Error()
}

func classifyError(res *Result, resp *http.Response, ctx context.Context) {
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		res.Outcome, res.Reason = Lost, fmt.Sprintf("status %d, %s", resp.StatusCode, readFailure(ctx, err))
		return
	}
	var e apiError
	if resp.StatusCode < 400 || json.Unmarshal(body, &e) != nil || e.Error == nil || e.Error.Message == "" {
		res.Outcome, res.Reason = Lost, fmt.Sprintf("status %d without an OpenAI error body: %.200q", resp.StatusCode, body)
		return
	}
	res.Outcome, res.Reason = ClearError, fmt.Sprintf("%d %s", resp.StatusCode, e.Error.Message)
}

func classifyWhole(res *Result, resp *http.Response, req Request, ctx context.Context) {
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		res.Outcome, res.Reason = Lost, readFailure(ctx, err)
		return
	}
	var a answer
	if err := json.Unmarshal(body, &a); err != nil || len(a.Choices) == 0 || a.Choices[0].FinishReason == nil ||
		(a.Choices[0].Text == nil && a.Choices[0].Message == nil) {
		res.Outcome, res.Reason = Lost, fmt.Sprintf("200 without a finished choice: %.200q", body)
		return
	}
	res.setUsage(a.Usage)
	if req.WantTokens > 0 && (a.Usage == nil || a.Usage.CompletionTokens != req.WantTokens) {
		res.Outcome, res.Reason = Lost, fmt.Sprintf("answer has the wrong length: %.200q", body)
		return
	}
	res.Outcome = Completed
}

func classifyStream(res *Result, resp *http.Response, req Request, ctx context.Context) {
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		res.Outcome, res.Reason = Lost, "stream answered with content type "+ct
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	tokens, finished, done := 0, false, false
	errMsg := ""
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data:") {
			continue // blank separators, comments
		}
		if res.TTFT == 0 {
			res.TTFT = time.Since(res.Start)
		}
		data := strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		if data == "[DONE]" {
			done = true
			continue
		}
		if done {
			res.Outcome, res.Reason = Lost, "data after [DONE]"
			return
		}
		var e apiError
		if json.Unmarshal([]byte(data), &e) == nil && e.Error != nil {
			if e.Error.Message == "" {
				res.Outcome, res.Reason = Lost, "SSE error event without a message"
				return
			}
			errMsg = e.Error.Message
			continue
		}
		var a answer
		if err := json.Unmarshal([]byte(data), &a); err != nil {
			res.Outcome, res.Reason = Lost, fmt.Sprintf("undecodable SSE event %.200q", data)
			return
		}
		res.setUsage(a.Usage)
		for _, c := range a.Choices {
			// A chat stream opens with a role-only chunk that carries no token.
			if c.Text != nil || (c.Delta != nil && c.Delta.Role == "" && c.Delta.Content != nil) {
				tokens++
			}
			finished = finished || c.FinishReason != nil
		}
	}
	switch {
	case errMsg != "":
		// An error event is a clear end whatever follows; the stream must still end (cleanly,
		// or cut: the client knows it failed either way).
		res.Outcome, res.Reason = ClearError, "SSE error event: "+errMsg
	case sc.Err() != nil:
		res.Outcome, res.Reason = Lost, fmt.Sprintf("stream cut after %d tokens without an error event (%s)", tokens, readFailure(ctx, sc.Err()))
	case !done || !finished:
		res.Outcome, res.Reason = Lost, fmt.Sprintf("stream ended after %d tokens without finish reason and [DONE] (finished %v, done %v)", tokens, finished, done)
	case req.WantTokens > 0 && tokens != req.WantTokens:
		res.Outcome, res.Reason = Lost, fmt.Sprintf("stream has %d tokens, want %d", tokens, req.WantTokens)
	default:
		res.Outcome = Completed
	}
}

// Tally collects results; safe for concurrent use.
type Tally struct {
	mu       sync.Mutex
	results  []Result
	retried  int
	skipped  int // open-loop arrivals skipped because every client was busy
	reasons  map[string]int
	byOutput [5]int
	// unanswered are the times of the Unanswered results that were resent.
	unanswered []time.Time
}

// Add records one result.
func (t *Tally) Add(r Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reasons == nil {
		t.reasons = map[string]int{}
	}
	t.results = append(t.results, r)
	t.byOutput[r.Outcome]++
	if r.Outcome != Completed {
		t.reasons[r.Outcome.String()+": "+shorten(r.Reason)]++
	}
}

func (t *Tally) addRetry(r Result) {
	t.mu.Lock()
	t.retried++
	if r.Outcome == Unanswered {
		t.unanswered = append(t.unanswered, r.Start)
	}
	t.mu.Unlock()
}

// Unanswered is when each resent Unanswered request was sent.
func (t *Tally) Unanswered() []time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]time.Time(nil), t.unanswered...)
}

// shorten keeps reasons groupable: messages that differ only in numbers count together.
func shorten(s string) string {
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

// Count is the number of results with outcome o.
func (t *Tally) Count(o Outcome) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byOutput[o]
}

// Total is the number of results.
func (t *Tally) Total() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.results)
}

// Results is a copy of every result, in the order they finished.
func (t *Tally) Results() []Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Result(nil), t.results...)
}

// String summarises the tally: counts per outcome and the distinct reasons.
func (t *Tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "sent %d: completed %d, clear errors %d, lost %d (resent: %d after a refused connection, %d unanswered; arrivals skipped %d)",
		len(t.results), t.byOutput[Completed], t.byOutput[ClearError], t.byOutput[Lost]+t.byOutput[Unanswered],
		t.retried-len(t.unanswered), len(t.unanswered), t.skipped)
	keys := make([]string, 0, len(t.reasons))
	for k := range t.reasons {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "\n    %5d × %s", t.reasons[k], k)
	}
	return b.String()
}

// AssertNoneLost fails the test if any request was lost (Unanswered ones not resent
// included), listing why.
func (t *Tally) AssertNoneLost(tb interface {
	Helper()
	Errorf(string, ...any)
}) {
	tb.Helper()
	if n := t.Count(Lost) + t.Count(Unanswered); n > 0 {
		tb.Errorf("%d requests lost: %s", n, t)
	}
}

// Percentile is the q-quantile (0..1) of the latencies of the results that pass keep (nil: all).
func Percentile(rs []Result, q float64, keep func(Result) bool) time.Duration {
	var ls []time.Duration
	for _, r := range rs {
		if keep == nil || keep(r) {
			ls = append(ls, r.Latency)
		}
	}
	if len(ls) == 0 {
		return 0
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
	i := int(q*float64(len(ls))+0.5) - 1
	return ls[min(max(i, 0), len(ls)-1)]
}
