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

// Package tokenize asks an engine's POST /tokenize for the exact token ids it will see, so the
// router's index lookups match the engine's cache block for block (a byte-count estimate would
// put every block boundary in the wrong place and make every lookup a miss).
//
// Identical requests in flight at the same moment (n parallel samples of one prompt, client
// retries) share one call, and recent answers are kept in a small LRU cache keyed by a hash of
// the request body: both measured in docs/benchmarks.md.
package tokenize

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// CompletionRequest is /tokenize's completion form. Prompt is the prompt as a JSON string
// literal, exactly as the client sent it (RawPrompt), or as text (Prompt) when RawPrompt is nil:
// passing the client's bytes through spares decoding and re-encoding a prompt that can be
// hundreds of kilobytes.
type CompletionRequest struct {
	Model            string          `json:"model,omitempty"`
	Prompt           string          `json:"prompt"`
	RawPrompt        json.RawMessage `json:"-"`
	AddSpecialTokens *bool           `json:"add_special_tokens,omitempty"`
	// Authorization is sent as the call's Authorization header when not empty (an engine
	// started with --api-key guards /tokenize). It is not part of the cache key: every
	// engine of a fleet tokenizes alike.
	Authorization string `json:"-"`
}

// ChatRequest is /tokenize's chat form. Messages and the template fields are passed through as
// the client sent them so the engine applies exactly the chat template it will apply when it
// serves the request.
type ChatRequest struct {
	Model                string          `json:"model,omitempty"`
	Messages             json.RawMessage `json:"messages,omitempty"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt,omitempty"`
	ContinueFinalMessage *bool           `json:"continue_final_message,omitempty"`
	AddSpecialTokens     *bool           `json:"add_special_tokens,omitempty"`
	ChatTemplate         *string         `json:"chat_template,omitempty"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs,omitempty"`
	Tools                json.RawMessage `json:"tools,omitempty"`
	// Authorization: as in CompletionRequest.
	Authorization string `json:"-"`
}

type response struct {
	Count  int      `json:"count"`
	Tokens []uint32 `json:"tokens"`
}

// Client tokenizes against engines. The zero value is not usable; use New.
type Client struct {
	http    *http.Client
	timeout time.Duration
	group   singleflight.Group
	onCall  func(baseURL string, err error)

	mu     sync.Mutex
	budget int // tokens the cache may hold in all
	held   int
	ll     *list.List
	items  map[uint64]*list.Element
}

type entry struct {
	key    uint64
	tokens []uint32
}

// New returns a Client. timeout bounds one call (0: 2 s); cacheTokens is the LRU cache's budget
// in tokens, summed over its entries (0: off), so that 100K-token prompts cannot make it large:
// 4M tokens is 16 MiB.
func New(httpClient *http.Client, timeout time.Duration, cacheTokens int) *Client {
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	return &Client{http: httpClient, timeout: timeout, budget: cacheTokens, ll: list.New(),
		items: make(map[uint64]*list.Element)}
}

// OnCall has fn told the outcome of every call that reached an engine: once per call, however
// many requests share it, and never for an answer from the cache. The router holds timeouts
// against the engine that timed out. Set it before the first call.
func (c *Client) OnCall(fn func(baseURL string, err error)) { c.onCall = fn }

// The token slices returned may be shared with the cache and with concurrent callers: read only.

// Completion tokenizes a completion prompt on the engine at baseURL.
func (c *Client) Completion(ctx context.Context, baseURL string, r CompletionRequest) ([]uint32, error) {
	if r.RawPrompt == nil {
		return c.do(ctx, baseURL, r.Authorization, r)
	}
	rest := struct {
		Model            string `json:"model,omitempty"`
		AddSpecialTokens *bool  `json:"add_special_tokens,omitempty"`
	}{r.Model, r.AddSpecialTokens}
	return c.doSpliced(ctx, baseURL, r.Authorization, rest, "prompt", r.RawPrompt)
}

// Chat tokenizes chat messages (with the engine's chat template) on the engine at baseURL.
// Messages must be valid JSON (the client's bytes, already validated): they are passed through.
func (c *Client) Chat(ctx context.Context, baseURL string, r ChatRequest) ([]uint32, error) {
	raw := r.Messages
	r.Messages = nil
	return c.doSpliced(ctx, baseURL, r.Authorization, r, "messages", raw)
}

// doSpliced encodes r and inserts "key": raw as its first field; raw must be valid JSON.
func (c *Client) doSpliced(ctx context.Context, baseURL, auth string, r any, key string, raw json.RawMessage) ([]uint32, error) {
	rest, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("%w: encode request: %v", ErrTokenize, err)
	}
	body := make([]byte, 0, len(raw)+len(rest)+len(key)+8)
	body = append(body, '{', '"')
	body = append(body, key...)
	body = append(body, '"', ':')
	body = append(body, raw...)
	if len(rest) > 2 { // rest is "{...}" with at least one field
		body = append(body, ',')
		body = append(body, rest[1:]...)
	} else {
		body = append(body, '}')
	}
	return c.send(ctx, baseURL, auth, body)
}

// ErrTokenize wraps every failure (unreachable engine, timeout, non-200, bad body).
var ErrTokenize = errors.New("tokenize")

// IsTimeout reports whether a call failed because the engine did not answer within the
// client's timeout: an engine that accepts the call and says nothing, which the router holds
// against the engine, unlike a refusal or an error answer.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func (c *Client) do(ctx context.Context, baseURL, auth string, r any) ([]uint32, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("%w: encode request: %v", ErrTokenize, err)
	}
	return c.send(ctx, baseURL, auth, body)
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// cacheSeed keys the process-local cache (maphash hashes at memory speed; FNV over a 500 KB
// prompt cost half a millisecond).
var cacheSeed = maphash.MakeSeed()

func (c *Client) send(ctx context.Context, baseURL, auth string, body []byte) ([]uint32, error) {
	// Every engine of a fleet serves the same model with the same tokenizer, so the cache key
	// is the request alone, not the engine.
	key := maphash.Bytes(cacheSeed, body)
	if toks, ok := c.get(key); ok {
		return toks, nil
	}
	v, err, _ := c.group.Do(strconv.FormatUint(key, 16), func() (any, error) {
		// The shared call must not die with the first caller's context.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
		defer cancel()
		toks, err := c.call(cctx, baseURL, auth, body)
		if err == nil {
			c.put(key, toks)
		}
		if c.onCall != nil {
			c.onCall(baseURL, err)
		}
		return toks, err
	})
	if err != nil {
		return nil, err
	}
	return v.([]uint32), nil
}

func (c *Client) call(ctx context.Context, baseURL, auth string, body []byte) ([]uint32, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/tokenize", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokenize, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTokenize, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// The status only: an engine's error body may quote the request (a validation error
		// echoes its input), and this error reaches the router's /v1/status, the KVRouter's
		// conditions and debug logs, none of which may carry prompt text.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, fmt.Errorf("%w: %s answered %s", ErrTokenize, baseURL, resp.Status)
	}
	// 64 MiB holds the ids of a prompt of several million tokens. The raw answer is read into
	// a pooled buffer (the ids are copied out by the decoder), so a 600 KB answer costs no
	// allocation in the steady state.
	buf := bufPool.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 4<<20 {
			buf.Reset()
			bufPool.Put(buf)
		}
	}()
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, 64<<20)); err != nil {
		return nil, fmt.Errorf("%w: read response from %s: %w", ErrTokenize, baseURL, err)
	}
	out, err := decodeResponse(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%w: decode response from %s: %v", ErrTokenize, baseURL, err)
	}
	if out.Count != 0 && out.Count != len(out.Tokens) {
		return nil, fmt.Errorf("%w: %s returned count %d with %d tokens", ErrTokenize, baseURL, out.Count, len(out.Tokens))
	}
	return out.Tokens, nil
}

func (c *Client) get(key uint64) ([]uint32, bool) {
	if c.budget <= 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return nil, false
	}
	c.ll.MoveToFront(el)
	return el.Value.(*entry).tokens, true
}

func (c *Client) put(key uint64, toks []uint32) {
	if c.budget <= 0 || len(toks) > c.budget/4 {
		return // an entry may use at most a quarter of the budget
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.ll.MoveToFront(el)
		return
	}
	c.items[key] = c.ll.PushFront(&entry{key: key, tokens: toks})
	c.held += len(toks)
	for c.held > c.budget {
		old := c.ll.Back()
		c.ll.Remove(old)
		e := old.Value.(*entry)
		c.held -= len(e.tokens)
		delete(c.items, e.key)
	}
}
