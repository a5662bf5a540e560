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
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Workload builds the i-th request of a load.
type Workload func(i int) Request

// SharedPrefix is a mixed workload over groups shared prefixes of about words words each:
// request i takes prefix i mod groups plus one of questions distinct questions. Every request
// asks for maxTokens tokens and checks it gets exactly that many. A bounded set of distinct
// prompts (groups × questions) lets caches reach a steady state, which a soak needs to tell
// growth from a leak.
func SharedPrefix(groups, words, questions, maxTokens int) Workload {
	return func(i int) Request {
		k := i / groups // the kind varies within each group, so every engine sees every kind
		return mixed(k, prefix(i%groups, words)+fmt.Sprintf("Question %d: what comes next?", k%questions), maxTokens)
	}
}

// NewPrefixes is a workload whose prefix changes every per requests (request i uses prefix
// i / per, never seen before): each prefix's first request places it, and the ones that follow
// find it only if the router learned where it went.
func NewPrefixes(per, words, maxTokens int) Workload {
	return func(i int) Request {
		return mixed(i%per, prefix(i/per, words)+fmt.Sprintf("Question %d: what comes next?", i%per), maxTokens)
	}
}

func prefix(g, words int) string {
	return strings.Repeat(fmt.Sprintf("shared context %d of the fleet test. ", g), max(words/7, 1))
}

// mixed is the k-th kind of request for prompt: completions and chat, streaming and not, in
// turn.
func mixed(k int, prompt string, maxTokens int) Request {
	stream := k%2 == 1
	var body map[string]any
	path := "/v1/completions"
	if (k/2)%2 == 0 {
		body = map[string]any{"model": "m", "prompt": prompt, "max_tokens": maxTokens, "stream": stream}
	} else {
		path = "/v1/chat/completions"
		body = map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": prompt}},
			"max_tokens": maxTokens, "stream": stream}
	}
	if stream {
		body["stream_options"] = map[string]bool{"include_usage": true}
	}
	b, _ := json.Marshal(body)
	return Request{Path: path, Body: b, Stream: stream, WantTokens: maxTokens}
}

// Load drives a workload through a router: closed loop (Workers clients, each sending its next
// request when the last one ends) or, with Rate set, open loop (Rate arrivals per second, at
// most Workers in flight; an arrival that finds all of them busy is skipped and counted). A
// refused connection (nothing reached a server) is resent every 50 ms until the deadline.
type Load struct {
	URL      string
	Work     Workload
	Workers  int
	Rate     float64
	Deadline time.Duration // per request, default 30 s
	// Client defaults to a keep-alive client sized for Workers.
	Client *http.Client
	// ResendUnanswered resends Unanswered requests like refused ones (Tally.Unanswered says
	// when they happened). Only for a server known to answer every connection it accepts.
	ResendUnanswered bool

	tally   *Tally
	next    atomic.Int64
	skipped atomic.Int64
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// Start begins sending; Stop ends it.
func (l *Load) Start() {
	if l.Deadline <= 0 {
		l.Deadline = 30 * time.Second
	}
	if l.Workers <= 0 {
		l.Workers = 1
	}
	if l.Client == nil {
		l.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: l.Workers, Proxy: nil}}
	}
	l.tally = &Tally{}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	if l.Rate <= 0 {
		for range l.Workers {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				for ctx.Err() == nil {
					l.one(ctx)
				}
			}()
		}
		return
	}
	sem := make(chan struct{}, l.Workers)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		start := time.Now()
		for n := 0; ; n++ {
			// Arrivals on a fixed schedule, not a ticker: a late wake-up sends what is due.
			due := start.Add(time.Duration(float64(n) / l.Rate * float64(time.Second)))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(due)):
			}
			select {
			case sem <- struct{}{}:
				l.wg.Add(1)
				go func() {
					defer l.wg.Done()
					defer func() { <-sem }()
					l.one(ctx)
				}()
			default:
				l.skipped.Add(1)
			}
		}
	}()
}

// one sends the next request of the workload; a request already under way when Stop is
// called is finished (its outcome counts), one not yet sent is not.
func (l *Load) one(ctx context.Context) {
	req := l.Work(int(l.next.Add(1) - 1))
	deadline := time.Now().Add(l.Deadline)
	for {
		// The request's own context is not ctx: Stop lets requests in flight finish.
		r := Do(context.Background(), l.Client, l.URL, req, time.Until(deadline))
		resend := r.Outcome == Refused || (r.Outcome == Unanswered && l.ResendUnanswered)
		if !resend || time.Now().After(deadline) {
			if resend {
				r.Outcome, r.Reason = Lost, "not accepted until the deadline: "+r.Reason
			}
			l.tally.Add(r)
			return
		}
		l.tally.addRetry(r)
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			// Never accepted anywhere, and the load is over: not sent, not counted.
			return
		}
	}
}

// Stop stops sending, waits for the requests in flight and returns the tally.
func (l *Load) Stop() *Tally {
	l.cancel()
	l.wg.Wait()
	l.tally.skipped = int(l.skipped.Load())
	return l.tally
}

// Tally is the results so far (while running).
func (l *Load) Tally() *Tally { return l.tally }
