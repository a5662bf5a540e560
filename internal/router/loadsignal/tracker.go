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

// Package loadsignal keeps the router's view of each engine's load: its own accounting of the
// requests it has in flight (exact and instant) and a periodic scrape of each engine's /metrics
// (global but about a second old). Combining the two is what keeps several router replicas
// coherent: each replica sees its own dispatches at once and the others' through the scrape.
package loadsignal

import (
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/policy"
)

// rateWindow is how far back the engine hit rate and preemption rate look.
const rateWindow = 60 * time.Second

// Tracker holds the load of every endpoint. It is safe for concurrent use.
type Tracker struct {
	mu  sync.Mutex
	eps map[string]*endpointState
	// loraForgetAfter is how many consecutive failed scrapes drop an endpoint's adapter state.
	loraForgetAfter int
	now             func() time.Time
}

// SetClock replaces the clock the tracker times prefill queues with (time.Now by default):
// kvbench's simulated router runs it on the simulation's virtual time.
func (t *Tracker) SetClock(now func() time.Time) {
	t.mu.Lock()
	t.now = now
	t.mu.Unlock()
}

// DefaultLoRAForgetAfter is the failed scrapes after which an endpoint's adapters are forgotten
// unless SetLoRAForgetAfter says otherwise: the router's default for taking an engine out of
// routing.
const DefaultLoRAForgetAfter = 3

// SetLoRAForgetAfter sets how many consecutive failed scrapes drop an endpoint's adapter state:
// the number that makes the endpoint unready (until then it still takes requests, and its
// adapters are likelier the last ones seen than unknown). n <= 0 keeps them across any number
// of failures (an engine that restarted meanwhile is still noticed by its counters).
func (t *Tracker) SetLoRAForgetAfter(n int) {
	t.mu.Lock()
	t.loraForgetAfter = n
	t.mu.Unlock()
}

type endpointState struct {
	// Local accounting.
	inFlight      int
	prefilling    int // requests without a first token yet
	queuedPrefill int // their uncached prompt tokens
	// prefillSince is when the engine got to the head of that queue as this router sees it: the
	// queue became non-empty, or a first token came back (the request before it is done).
	prefillSince time.Time
	tokens       int // prompt + expected output of every request in flight
	avgUncached  float64
	// adapters counts this router's requests in flight per LoRA adapter.
	adapters map[string]int
	// lora is the engine's scraped adapter state (vllm:lora_requests_info).
	lora LoRAInfo
	// recent are the adapters last seen in use there (dispatched by this router or scraped
	// running), least recent first: vLLM keeps the last max_lora of them in its GPU slots after
	// their requests end, which its metric no longer shows.
	recent []string

	// Scrape.
	metrics       EngineMetrics
	scraped       bool
	scrapedAt     time.Time
	scrapeErr     string
	scrapeErrors  uint64
	failStreak    int // consecutive failed scrapes
	remote        int // other clients' requests in the engine at the last scrape
	remotePrefill int // estimated prefill tokens of the remote waiting requests
	remoteWaiting int // other clients' requests waiting in the engine at the last scrape
	peakRunning   int // most requests seen running at once
	samples       []sample
}

type sample struct {
	at                         time.Time
	hits, queries, preemptions float64
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{eps: make(map[string]*endpointState), loraForgetAfter: DefaultLoRAForgetAfter, now: time.Now}
}

func (t *Tracker) state(ep string) *endpointState {
	s := t.eps[ep]
	if s == nil {
		s = &endpointState{}
		t.eps[ep] = s
	}
	return s
}

// Ticket is one dispatched request's share of an endpoint's load. FirstToken and Done are
// idempotent and safe to call from different goroutines.
type Ticket struct {
	t        *Tracker
	ep       string
	adapter  string
	uncached int
	tokens   int
	once     sync.Once
	first    sync.Once
}

// Dispatch records a request sent to ep with uncached prompt tokens to compute and tokens of
// total work (prompt plus expected output), and returns its ticket.
func (t *Tracker) Dispatch(ep string, uncached, tokens int) *Ticket {
	return t.DispatchAdapter(ep, "", uncached, tokens)
}

// DispatchAdapter is Dispatch for a request of a LoRA adapter ("" for the base model): until it
// is done the engine counts as having the adapter active, whatever its last scrape said.
func (t *Tracker) DispatchAdapter(ep, adapter string, uncached, tokens int) *Ticket {
	t.mu.Lock()
	s := t.state(ep)
	if adapter != "" {
		if s.adapters == nil {
			s.adapters = map[string]int{}
		}
		s.adapters[adapter]++
		s.used(adapter)
	}
	s.inFlight++
	if s.prefilling == 0 {
		s.prefillSince = t.now()
	}
	s.prefilling++
	s.queuedPrefill += uncached
	s.tokens += tokens
	// EWMA of request size, used to price the other clients' waiting requests.
	if s.avgUncached == 0 {
		s.avgUncached = float64(uncached)
	} else {
		s.avgUncached += 0.1 * (float64(uncached) - s.avgUncached)
	}
	t.mu.Unlock()
	return &Ticket{t: t, ep: ep, adapter: adapter, uncached: uncached, tokens: tokens}
}

// FirstToken records that the request's prefill is done: its uncached tokens leave the queue.
func (k *Ticket) FirstToken() {
	k.first.Do(func() {
		k.t.mu.Lock()
		if s := k.t.eps[k.ep]; s != nil {
			s.prefilling--
			s.queuedPrefill -= k.uncached
			s.prefillSince = k.t.now()
		}
		k.t.mu.Unlock()
	})
}

// Done records that the request finished (or failed, or was cancelled).
func (k *Ticket) Done() {
	k.FirstToken()
	k.once.Do(func() {
		k.t.mu.Lock()
		if s := k.t.eps[k.ep]; s != nil {
			s.inFlight--
			s.tokens -= k.tokens
			if k.adapter != "" {
				if s.adapters[k.adapter]--; s.adapters[k.adapter] <= 0 {
					delete(s.adapters, k.adapter)
				}
			}
		}
		k.t.mu.Unlock()
	})
}

// Loads fills out[i] with the policy's view of names[i]'s load, and failStreaks[i] (when not
// nil) with its consecutive failed scrapes, under one lock.
func (t *Tracker) Loads(names []string, out []policy.Load, failStreaks []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for i, n := range names {
		s := t.eps[n]
		if s == nil {
			out[i] = policy.Load{}
			if failStreaks != nil {
				failStreaks[i] = 0
			}
			continue
		}
		if failStreaks != nil {
			failStreaks[i] = s.failStreak
		}
		out[i] = policy.Load{
			InFlight:             s.inFlight,
			QueuedPrefillTokens:  s.queuedPrefill,
			PrefillElapsed:       s.prefillElapsed(now),
			InFlightTokens:       s.tokens,
			RemoteInFlight:       s.remote,
			RemotePrefillTokens:  s.remotePrefill,
			QueuedRequests:       s.prefilling,
			RemoteQueuedRequests: s.remoteWaiting,
			PeakRunning:          s.peakRunning,
			Running:              int(s.metrics.Running),
			KVUsage:              s.metrics.KVUsage,
		}
	}
}

// prefillElapsed is how long (seconds) the engine has been computing the head of this router's
// prefill queue there; 0 when the queue is empty.
func (s *endpointState) prefillElapsed(now time.Time) float64 {
	if s.prefilling == 0 {
		return 0
	}
	return max(0, now.Sub(s.prefillSince).Seconds())
}

// maxRecent bounds the remembered adapters of an endpoint; far more than any --max-loras.
const maxRecent = 256

// used moves adapter to the most recent end of s.recent.
func (s *endpointState) used(adapter string) {
	for i, a := range s.recent {
		if a == adapter {
			s.recent = append(s.recent[:i], s.recent[i+1:]...)
			break
		}
	}
	if len(s.recent) >= maxRecent {
		s.recent = s.recent[1:]
	}
	s.recent = append(s.recent, adapter)
}

// loaded reports whether adapter is among the slots most recently used adapters of s: still in
// the engine's GPU slots unless someone else's requests displaced it.
func (s *endpointState) loaded(adapter string, slots int) bool {
	for i := len(s.recent) - 1; i >= 0 && i >= len(s.recent)-slots; i-- {
		if s.recent[i] == adapter {
			return true
		}
	}
	return false
}

// FillLoRA sets out[i] to what is known of names[i]'s adapters with respect to adapter:
// its slots, the adapters active there (the scraped running and waiting ones and those of this
// router's requests in flight) and whether adapter is one of them. An engine whose adapters are
// unknown (it does not report vllm:lora_requests_info, or they were forgotten after failed
// scrapes) gets Slots 0, and Resident only when this router has requests of adapter in flight
// there.
func (t *Tracker) FillLoRA(names []string, adapter string, out []policy.LoRAState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, n := range names {
		s := t.eps[n]
		if s == nil {
			out[i] = policy.LoRAState{}
			continue
		}
		if !s.lora.Reported {
			// Slots unknown (not scraped yet, or the engine does not export its adapters): vLLM
			// has at least one, so the adapter this router used there last is still loaded.
			// Without this, an adapter's requests in the first scrape interval spread over
			// every engine, each loading it.
			out[i] = policy.LoRAState{Resident: s.adapters[adapter] > 0 || s.loaded(adapter, 1)}
			continue
		}
		st := policy.LoRAState{Slots: s.lora.MaxLoRAs, Active: len(s.adapters)}
		st.Resident = s.adapters[adapter] > 0 || s.loaded(adapter, s.lora.MaxLoRAs)
		for _, list := range [][]string{s.lora.Running, s.lora.Waiting} {
			for _, a := range list {
				if s.adapters[a] == 0 {
					st.Active++ // not already counted as a local one
				}
				st.Resident = st.Resident || a == adapter
			}
		}
		out[i] = st
	}
}

// RecordLoRA stores ep's scraped adapter state alone (RecordScrape stores it with the rest);
// kvbench uses it to give a simulated router the engines' adapters without a full scrape.
func (t *Tracker) RecordLoRA(ep string, info LoRAInfo) {
	t.mu.Lock()
	t.state(ep).recordLoRA(info)
	t.mu.Unlock()
}

func (s *endpointState) recordLoRA(info LoRAInfo) {
	s.lora = info
	for _, a := range info.Running {
		s.used(a)
	}
}

// RecordScrape stores a successful scrape of ep taken at at.
func (t *Tracker) RecordScrape(ep string, m EngineMetrics, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(ep)
	s.metrics = m
	s.scraped = true
	s.scrapedAt = at
	s.scrapeErr = ""
	s.failStreak = 0
	// Whatever the engine holds beyond this router's own requests was put there by someone
	// else. Requests this router has not yet seen finish can make the difference negative for
	// a moment; clamp.
	s.remote = max(0, int(m.Running+m.Waiting)-s.inFlight)
	s.remoteWaiting = max(0, int(m.Waiting)-s.prefilling)
	s.remotePrefill = int(float64(s.remoteWaiting) * s.avgUncached)

	smp := sample{at: at, hits: m.PrefixHits, queries: m.PrefixQueries, preemptions: m.Preemptions}
	if n := len(s.samples); n > 0 {
		last := s.samples[n-1]
		if smp.hits < last.hits || smp.queries < last.queries || smp.preemptions < last.preemptions {
			s.samples = s.samples[:0] // the engine restarted: its counters began again
			s.peakRunning = 0         // and it may have come back with another --max-num-seqs
			s.recent = nil            // and with empty adapter slots
		}
	}
	s.recordLoRA(m.LoRA)
	// Not its capacity: requests also wait while long prompts take a step's token budget, so
	// an engine busy with prefill can run one request and queue ten. What it ran is a floor.
	s.peakRunning = max(s.peakRunning, int(m.Running))
	s.samples = append(s.samples, smp)
	// Keep one sample at or beyond the window's edge as the baseline, so the rates cover a
	// full window even when scrapes are sparse.
	cut := 0
	for cut < len(s.samples)-2 && at.Sub(s.samples[cut+1].at) >= rateWindow {
		cut++
	}
	s.samples = s.samples[cut:]
}

// RecordScrapeError notes a failed scrape. The last good metrics stay (stale), the remote
// estimate is dropped so a dead engine's old queue does not steer traffic. The adapters stay
// until the failures make the endpoint unready (SetLoRAForgetAfter): one failed scrape of an
// engine that still serves leaves its adapters where they were, and forgetting them would make
// it look like an engine of unknown adapters.
func (t *Tracker) RecordScrapeError(ep string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(ep)
	s.scrapeErr = err.Error()
	s.scrapeErrors++
	s.failStreak++
	s.remote, s.remotePrefill, s.remoteWaiting = 0, 0, 0
	// Past that, the engine is out of routing, and may come back restarted with empty slots.
	if t.loraForgetAfter > 0 && s.failStreak >= t.loraForgetAfter {
		s.lora, s.recent = LoRAInfo{}, nil
	}
}

// Remove forgets ep (it left the fleet). Tickets still open for it become no-ops.
func (t *Tracker) Remove(ep string) {
	t.mu.Lock()
	delete(t.eps, ep)
	t.mu.Unlock()
}

// EndpointStats is one endpoint's load as /v1/status shows it.
type EndpointStats struct {
	InFlight            int
	QueuedPrefillTokens int
	TokensInFlight      int
	RemoteInFlight      int
	Metrics             EngineMetrics
	Scraped             bool
	ScrapedAt           time.Time
	ScrapeError         string
	ScrapeErrors        uint64
	// FailStreak counts consecutive failed scrapes (0 after a success).
	FailStreak int
	// WindowHits and WindowQueries are the prefix-cache counters' increase over the window
	// (token-weighted, for fleet-wide hit rates).
	WindowHits, WindowQueries float64
	// HitRate is the engine's prefix-cache hit rate (token-weighted) over the last minute; ok is
	// false when there is no traffic in the window to compute it from.
	HitRate              float64
	HitRateOK            bool
	PreemptionsPerMinute float64
	// LoRA is the engine's last good vllm:lora_requests_info (kept across failed scrapes until
	// the endpoint is unready); LoadedAdapters the adapters the router believes in its GPU
	// slots, most recent first (see FillLoRA: vLLM keeps adapters loaded after their requests
	// end, and its metric then no longer lists them).
	LoRA           LoRAInfo
	LoadedAdapters []string
}

// Stats returns ep's stats.
func (t *Tracker) Stats(ep string) EndpointStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.eps[ep]
	if s == nil {
		return EndpointStats{}
	}
	st := EndpointStats{
		InFlight:            s.inFlight,
		QueuedPrefillTokens: s.queuedPrefill,
		TokensInFlight:      s.tokens,
		RemoteInFlight:      s.remote,
		Metrics:             s.metrics,
		Scraped:             s.scraped,
		ScrapedAt:           s.scrapedAt,
		ScrapeError:         s.scrapeErr,
		ScrapeErrors:        s.scrapeErrors,
		FailStreak:          s.failStreak,
		LoRA:                s.lora,
	}
	slots := s.lora.MaxLoRAs
	if !s.lora.Reported {
		slots = 1 // vLLM has one slot at least (as FillLoRA assumes)
	}
	for i := len(s.recent) - 1; i >= 0 && i >= len(s.recent)-slots; i-- {
		st.LoadedAdapters = append(st.LoadedAdapters, s.recent[i])
	}
	if n := len(s.samples); n >= 2 {
		first, last := s.samples[0], s.samples[n-1]
		st.WindowHits, st.WindowQueries = last.hits-first.hits, last.queries-first.queries
		if dq := last.queries - first.queries; dq > 0 {
			st.HitRate = (last.hits - first.hits) / dq
			st.HitRateOK = true
		}
		if dt := last.at.Sub(first.at).Minutes(); dt > 0 {
			st.PreemptionsPerMinute = (last.preemptions - first.preemptions) / dt
		}
	}
	return st
}
