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

// Package live drives a running router or engine over HTTP with an open-loop load: requests are
// sent at their workload arrival times whether or not earlier ones have answered (Poisson or
// trace timestamps), streamed, and timed on the client side (TTFT, inter-token latency, E2E).
// Runs are bounded in request count and wall time, and only loopback targets are accepted: this
// is a benchmark for your own machine, not a load generator for someone else's service.
package live

import (
	"bufio"
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
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
	"github.com/kvrouter/kvrouter/internal/bench/workload"
)

// Config is one live run.
type Config struct {
	// Target is the base URL of the router or engine (http://127.0.0.1:8080).
	Target string
	// Model is sent in every request; empty asks the target's /v1/models for the first one.
	Model    string
	Requests []workload.Request
	// MaxRequests and MaxDuration bound the run (0: all requests / 10 minutes).
	MaxRequests int
	MaxDuration time.Duration
	// RequestTimeout bounds one request (default 2 minutes).
	RequestTimeout time.Duration
	// TimeScale is the simulated seconds per wall second of a vllm-sim target (its --time-scale):
	// arrivals are compressed by it and measured times stretched by it, so figures read in
	// simulated seconds. 1 for real engines.
	TimeScale float64
	// EndpointHeader, when a response carries it, names the engine that served the request (for
	// the imbalance figure).
	EndpointHeader string
	SLO            metrics.SLO
	Client         *http.Client
	Log            *slog.Logger
}

// CheckLoopback refuses targets that are not on this machine.
func CheckLoopback(target string) error {
	u, err := url.Parse(target)
	if err != nil {
		return fmt.Errorf("target %q: %w", target, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("target %q: want an http:// URL", target)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("target %q: kvbench live only drives loopback targets (127.0.0.1, ::1, localhost)", target)
	}
	return nil
}

type result struct {
	rec    metrics.Record
	gaps   []float64
	output string
	err    error
}

// Run executes the run and summarises it.
func Run(ctx context.Context, cfg Config) (metrics.Result, error) {
	if err := CheckLoopback(cfg.Target); err != nil {
		return metrics.Result{}, err
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
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0}}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	target := strings.TrimRight(cfg.Target, "/")
	if cfg.Model == "" {
		m, err := firstModel(ctx, cfg.Client, target)
		if err != nil {
			return metrics.Result{}, err
		}
		cfg.Model = m
	}
	reqs := cfg.Requests
	if cfg.MaxRequests > 0 && len(reqs) > cfg.MaxRequests {
		reqs = reqs[:cfg.MaxRequests]
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.MaxDuration)
	defer cancel()

	r := &runner{cfg: cfg, target: target, reqs: reqs, results: make([]result, len(reqs)),
		prompts: make([]string, len(reqs)), start: time.Now()}
	children := map[int]int{}
	for i := range reqs {
		if p := reqs[i].Parent; p >= 0 && p < len(reqs) {
			children[p] = i
		}
	}
	r.children = children
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
		r.launch(ctx, i, "")
	}
	wg.Wait()
	wall := time.Since(r.start).Seconds()

	recs := make([]metrics.Record, 0, len(reqs))
	var gaps []float64
	failures := 0
	endpoints := map[string]bool{}
	for i := range r.results {
		res := &r.results[i]
		if res.err != nil {
			failures++
			if failures <= 3 {
				cfg.Log.Warn("request failed", "request", i, "err", res.err)
			}
			res.rec.Failed = true
		}
		if res.rec.Endpoint != "" {
			endpoints[res.rec.Endpoint] = true
		}
		recs = append(recs, res.rec)
		gaps = append(gaps, res.gaps...)
	}
	var names []string
	for n := range endpoints {
		names = append(names, n)
	}
	out := metrics.Summarize(recs, gaps, names, cfg.SLO, 0, nil)
	out.Extra = map[string]float64{"wall_s": wall, "time_scale": cfg.TimeScale}
	if failures == len(reqs) && len(reqs) > 0 {
		return out, fmt.Errorf("every request failed (first: %v)", r.results[0].err)
	}
	return out, nil
}

type runner struct {
	cfg      Config
	target   string
	reqs     []workload.Request
	results  []result
	prompts  []string
	children map[int]int
	start    time.Time
	wg       *sync.WaitGroup
}

// launch sends request i (its prompt after ctxText) in a goroutine; when it finishes, its
// follow-up is scheduled after the think time.
func (r *runner) launch(ctx context.Context, i int, ctxText string) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		w := &r.reqs[i]
		prompt := ctxText + w.Text()
		res := r.do(ctx, w, prompt)
		r.results[i] = res
		c, ok := r.children[i]
		if !ok {
			return
		}
		if res.err != nil {
			r.results[c] = result{err: fmt.Errorf("previous turn failed: %w", res.err)}
			r.results[c].rec.Arrival = res.rec.Finish
			return
		}
		at := time.Now().Add(time.Duration(r.reqs[c].At / r.cfg.TimeScale * float64(time.Second)))
		if !sleepUntil(ctx, at) {
			r.results[c] = result{err: ctx.Err()}
			return
		}
		r.launch(ctx, c, prompt+res.output)
	}()
}

func (r *runner) since() float64 { return time.Since(r.start).Seconds() * r.cfg.TimeScale }

type streamChunk struct {
	Choices []struct {
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func (r *runner) do(ctx context.Context, w *workload.Request, prompt string) result {
	var res result
	res.rec.Arrival = r.since()
	body, _ := json.Marshal(map[string]any{
		"model": r.cfg.Model, "prompt": prompt, "max_tokens": w.MaxTokens, "stream": true,
		"stream_options": map[string]any{"include_usage": true}, "ignore_eos": true,
	})
	rctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, r.target+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		res.err = err
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	if w.Session != "" {
		req.Header.Set("X-Session-ID", w.Session)
	}
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		res.err = err
		return res
	}
	defer resp.Body.Close()
	if r.cfg.EndpointHeader != "" {
		res.rec.Endpoint = resp.Header.Get(r.cfg.EndpointHeader)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		res.err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		return res
	}
	var out strings.Builder
	last := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		if string(data) == "[DONE]" {
			break
		}
		var c streamChunk
		if err := json.Unmarshal(data, &c); err != nil {
			res.err = fmt.Errorf("bad stream chunk: %w", err)
			return res
		}
		if c.Error != nil {
			res.err = errors.New(c.Error.Message)
			return res
		}
		now := r.since()
		for _, ch := range c.Choices {
			if ch.Text == "" {
				continue
			}
			out.WriteString(ch.Text)
			res.rec.OutputTokens++
			if res.rec.FirstToken == 0 {
				res.rec.FirstToken = now
			} else {
				res.gaps = append(res.gaps, now-last)
			}
			last = now
		}
		if c.Usage != nil {
			res.rec.PromptTokens = c.Usage.PromptTokens
			if c.Usage.PromptTokensDetails != nil {
				res.rec.CachedTokens = c.Usage.PromptTokensDetails.CachedTokens
			}
			if c.Usage.CompletionTokens > 0 {
				res.rec.OutputTokens = c.Usage.CompletionTokens
			}
		}
	}
	if err := sc.Err(); err != nil {
		res.err = err
		return res
	}
	if res.rec.FirstToken == 0 {
		res.err = errors.New("stream ended without a token")
		return res
	}
	res.rec.Finish = r.since()
	res.output = out.String()
	return res
}

func firstModel(ctx context.Context, c *http.Client, target string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target+"/v1/models", nil)
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("listing models at %s: %w", target, err)
	}
	defer resp.Body.Close()
	var m struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || len(m.Data) == 0 {
		return "", fmt.Errorf("listing models at %s: no model in the answer (HTTP %d)", target, resp.StatusCode)
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
