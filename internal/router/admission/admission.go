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

// Package admission decides whether the router takes a request now or sheds it with a fast 429.
// Engines never refuse work: past saturation every request joins their queue and the time to
// first token grows without limit for everyone. The router bounds that queue instead, by what
// it costs the request that would join it:
//
//   - its predicted TTFT on the engine the policy chose must be within a bound, unless nothing
//     is queued there (there is no queue to bound, and the model learns only from the engines
//     it is sent requests to). The prediction
//     is the larger of the policy's online model a + b·x (x the prefill work queued there plus
//     its own) and the wait for a free slot: the requests beyond the engine's batch capacity
//     ahead of it, drained at the engine's measured completion rate, then its own first token.
//     The model alone learns of a slot queue only one TTFT late, from the first tokens of the
//     requests in it, and admission is most generous exactly while the model lags (measured
//     with the model alone at 3× saturation: admitted TTFT p99 34 % over the bound, throughput
//     77 % of saturation; docs/reliability.md); the slot wait is current;
//   - while that engine's model is not calibrated (too few streamed requests timed, on it or
//     any other engine: the priors could be off by ten times), its queue of requests waiting
//     for a first token must be under its batch capacity, the requests it runs at once: a
//     queue that long drains in about one request's duration;
//   - the fleet's queued requests must be under the sum of the engines' batch capacities, so a
//     burst spread evenly cannot queue more than one batch per engine whatever the models say.
//
// Lower-priority requests see every bound scaled down, so they are shed first. The package is
// pure: no I/O, no clock (callers pass the time), no goroutines; a Controller is safe for
// concurrent use.
package admission

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
)

// Defaults.
const (
	// DefaultTTFTBound is long enough that a healthy fleet under heavy load (TTFTs of a few
	// hundred milliseconds to a few seconds for long prompts) and a noisy model never shed,
	// and short enough that an admitted interactive request still gets its first token before
	// most users give up and before common proxy timeouts (Envoy's route timeout is 15 s).
	DefaultTTFTBound = 10 * time.Second
	// DefaultEngineCapacity is vLLM's default --max-num-seqs, the batch capacity assumed when
	// none is configured.
	DefaultEngineCapacity = 256
	// DefaultBatchFraction scales every bound for batch requests: they are admitted only while
	// the queue is at most half what interactive ones may find.
	DefaultBatchFraction = 0.5
	// MaxRetryAfter caps Retry-After: a prediction far beyond the bound says more about the
	// model's noise than about when capacity frees up, and a client told to wait minutes may
	// not come back.
	MaxRetryAfter = 60
	// ShedWindow is the time constant of the decaying shed count: at a steady shed rate r it
	// reads r × 30 s, the requests that would have queued over two of KEDA's 15-second polls.
	ShedWindow = 30 * time.Second
	// rateWindow is the time constant of the completion rate that prices a queue's drain.
	rateWindow = 10 * time.Second
)

// Priority orders requests for shedding: the lower one is shed first.
type Priority uint8

const (
	// Interactive is the default: a user waits on the answer.
	Interactive Priority = iota
	// Batch is work that can wait: it is admitted only below BatchFraction of every bound.
	Batch
)

// Priorities lists every priority, for metric labels.
var Priorities = []Priority{Interactive, Batch}

func (p Priority) String() string {
	if p == Batch {
		return "batch"
	}
	return "interactive"
}

// ParsePriority reads a priority header: "interactive" or "batch" (any case); empty is
// Interactive.
func ParsePriority(v string) (Priority, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "interactive":
		return Interactive, nil
	case "batch":
		return Batch, nil
	}
	return Interactive, fmt.Errorf("priority %q: want interactive or batch", v)
}

// Reason says which bound shed a request.
type Reason string

const (
	// ReasonTTFT: the request's predicted TTFT exceeds the bound.
	ReasonTTFT Reason = "ttft"
	// ReasonQueue: the engine's queue is at its cap (uncalibrated model, or a static cap).
	ReasonQueue Reason = "queue"
	// ReasonFleetQueue: the fleet's queue is at its cap.
	ReasonFleetQueue Reason = "fleet-queue"
)

// Reasons lists every reason, for metric labels.
var Reasons = []Reason{ReasonTTFT, ReasonQueue, ReasonFleetQueue}

// Config sets the bounds. The zero value is the default configuration.
type Config struct {
	// TTFTBound: admit while the predicted TTFT is within it. 0: DefaultTTFTBound; negative:
	// no TTFT test (queue caps only).
	TTFTBound time.Duration
	// QueueCap bounds each engine's queue of requests waiting for a first token. Positive: a
	// static cap, enforced always; 0: the engine's batch capacity, enforced only while its TTFT
	// model is uncalibrated (or there is no TTFT test); negative: none.
	QueueCap int
	// FleetQueueCap bounds the queue summed over the ready engines. 0: the sum of their batch
	// capacities; negative: none.
	FleetQueueCap int
	// EngineCapacity is the requests an engine runs at once (its --max-num-seqs). 0:
	// DefaultEngineCapacity. Either is raised to what the engine was seen running.
	EngineCapacity int
	// BatchFraction scales every bound for Batch requests (0 < f <= 1). 0: DefaultBatchFraction.
	BatchFraction float64
	// TailHeadroom scales the TTFT bound a prediction is held to (0 < h <= 1; 0: 1, none). The
	// prediction is of a typical TTFT, while a bound is read as what the slowest admitted
	// requests stay within: the router sets it below 1 by its p99 spread (cmd/router).
	TailHeadroom float64
}

func (c Config) withDefaults() Config {
	if c.TTFTBound == 0 {
		c.TTFTBound = DefaultTTFTBound
	}
	if c.BatchFraction <= 0 || c.BatchFraction > 1 {
		c.BatchFraction = DefaultBatchFraction
	}
	if c.TailHeadroom <= 0 || c.TailHeadroom > 1 {
		c.TailHeadroom = 1
	}
	return c
}

// Endpoint is a ready engine (or data-parallel rank) as admission sees it.
type Endpoint struct {
	// Name identifies the endpoint's completion rate (see Completed).
	Name string
	// Queued is the requests waiting there for a first token (this router's and others').
	Queued int
	// InFlight is this router's requests there, RemoteInFlight the others' (from the engine's
	// scrape): together the engine's running and waiting requests.
	InFlight, RemoteInFlight int
	// PeakRunning is the most requests the engine was seen running at once: its batch capacity
	// is at least that, whatever was configured. (Not a measure of it: an engine busy with long
	// prompts runs a few requests and queues many, for want of token budget, not of slots.)
	PeakRunning int
	// Running is the requests the engine ran at its last scrape, KVUsage the share of its KV
	// cache they held then (0 to 1). An engine whose cache is full runs what fits in it, not
	// its batch capacity (see slots).
	Running int
	KVUsage float64
	// TTFT is the predicted time to first token in seconds: before routing, of a request that
	// adds no prefill of its own (the queue alone, a lower bound for any request); for the
	// chosen endpoint, the policy's prediction for the request. Calibrated says whether the
	// prediction stands on measurements rather than priors.
	TTFT       float64
	Calibrated bool
	// ServiceTTFT is the model's TTFT for the request's own prefill with nothing queued ahead
	// (its intercept before routing): what follows a wait for a slot. 0 when uncalibrated.
	ServiceTTFT float64
}

// Decision is admission's answer.
type Decision struct {
	Admit  bool
	Reason Reason
	// RetryAfter (seconds, 1 to MaxRetryAfter) is when the excess ahead of the request should
	// have drained.
	RetryAfter int
	// Value and Limit are what was compared: seconds for ReasonTTFT, requests for the queues.
	Value, Limit float64
}

// Message is the client-facing explanation of a shed.
func (d Decision) Message(p Priority) string {
	switch d.Reason {
	case ReasonTTFT:
		return fmt.Sprintf("the engines are overloaded: predicted time to first token %.1fs exceeds the %.1fs admitted for %s requests; retry after %ds",
			d.Value, d.Limit, p, d.RetryAfter)
	case ReasonQueue:
		return fmt.Sprintf("the engines are overloaded: %.0f requests already wait for a first token where at most %.0f are admitted for %s requests; retry after %ds",
			d.Value, d.Limit, p, d.RetryAfter)
	case ReasonFleetQueue:
		return fmt.Sprintf("the fleet is overloaded: %.0f requests already wait for a first token where at most %.0f are admitted for %s requests; retry after %ds",
			d.Value, d.Limit, p, d.RetryAfter)
	}
	return "admitted"
}

// Controller applies a Config and keeps the counts that price a drain and report the demand
// it turned away.
type Controller struct {
	cfg   Config
	start time.Time

	mu        sync.Mutex
	done      decaying // requests completed (queue departures)
	shedDecay decaying // requests shed
	shed      map[shedKey]uint64
	// endpoints holds each endpoint's completions, which drain its slot queue.
	endpoints map[string]*endpointRate
}

type endpointRate struct {
	done  decaying
	since time.Time
}

type shedKey struct {
	reason   Reason
	priority Priority
}

// New returns a Controller for cfg; now starts its rate window.
func New(cfg Config, now time.Time) *Controller {
	return &Controller{cfg: cfg.withDefaults(), start: now, done: decaying{tau: rateWindow},
		shedDecay: decaying{tau: ShedWindow}, shed: map[shedKey]uint64{}, endpoints: map[string]*endpointRate{}}
}

// Config returns the effective configuration.
func (c *Controller) Config() Config { return c.cfg }

// Check decides on a request of priority p. eps are the ready endpoints. chosen is the index in
// eps of the endpoint the policy picked (its TTFT the prediction for this request); chosen < 0
// asks before the request is tokenized and routed, and sheds only what no choice of endpoint
// could admit (the TTFTs are then the queues' alone, lower bounds). Check records no shed (call
// Shed for a request it turns away); it starts an endpoint's completion rate at its first
// admitted request.
func (c *Controller) Check(p Priority, eps []Endpoint, chosen int, now time.Time) Decision {
	if len(eps) == 0 {
		return Decision{Admit: true} // nothing to queue on: routing answers 503
	}
	frac := c.fraction(p)
	c.mu.Lock()
	rate := c.done.rate(now, c.start)
	rates := make([]float64, len(eps))
	for i := range eps {
		if r := c.endpoints[eps[i].Name]; r != nil {
			rates[i] = r.done.rate(now, r.since)
		}
	}
	c.mu.Unlock()
	if fcap := c.FleetQueueCap(eps); fcap > 0 {
		queued := 0
		for _, e := range eps {
			queued += e.Queued
		}
		limit := float64(fcap) * frac
		if float64(queued) >= limit {
			return Decision{Reason: ReasonFleetQueue, Value: float64(queued), Limit: limit,
				RetryAfter: drain(float64(queued)-limit+1, rate)}
		}
	}
	if chosen >= 0 {
		d := c.judge(eps[chosen], frac, rates[chosen])
		if d.Admit {
			c.dispatched(eps[chosen].Name, now)
		}
		return d
	}
	var best Decision
	for i, e := range eps {
		d := c.judge(e, frac, rates[i])
		if d.Admit {
			return d
		}
		if i == 0 || d.RetryAfter < best.RetryAfter {
			best = d
		}
	}
	return best
}

// judge applies the per-engine bounds to one endpoint. localRate is this router's recent
// completions per second there.
func (c *Controller) judge(e Endpoint, frac, localRate float64) Decision {
	drainRate := engineRate(e, localRate)
	// Nothing queued there: nothing to bound, whatever the prediction. This is also what keeps
	// an engine whose model came to predict past the bound (after a burst, say) from being
	// shed from for good: its model learns only from the first tokens of requests it is sent.
	if ttft, ok := c.predict(e, drainRate); ok && c.cfg.TTFTBound > 0 && e.Queued > 0 {
		limit := c.cfg.TTFTBound.Seconds() * frac * c.cfg.TailHeadroom
		if ttft > limit {
			// Both terms fall as the queue drains, at one second per second of excess:
			// that is when a request like this one would fit.
			return Decision{Reason: ReasonTTFT, Value: ttft, Limit: limit, RetryAfter: clampRetry(ttft - limit)}
		}
	}
	if qcap := c.queueCap(e); qcap > 0 {
		limit := float64(qcap) * frac
		if float64(e.Queued) >= limit {
			return Decision{Reason: ReasonQueue, Value: float64(e.Queued), Limit: limit,
				RetryAfter: drain(float64(e.Queued)-limit+1, drainRate)}
		}
	}
	return Decision{Admit: true}
}

// predict is the request's TTFT on e: the larger of the latency model's prediction (when
// calibrated) and the wait for a slot (when the engine's completion rate is known) followed by
// the request's own first token. ok is false when neither is known.
func (c *Controller) predict(e Endpoint, drainRate float64) (ttft float64, ok bool) {
	if e.Calibrated {
		ttft, ok = e.TTFT, true
	}
	if drainRate > 0 {
		// The engine runs its batch capacity at once; with the request, InFlight+1 want a
		// slot, and the excess waits for as many to finish. (Requests still in prefill hold a
		// slot too: the count is of everything in flight, not of the waiting queue.)
		ahead := e.InFlight + e.RemoteInFlight + 1 - c.slots(e)
		ttft, ok = max(ttft, float64(max(ahead, 0))/drainRate+e.ServiceTTFT), true
	}
	return ttft, ok
}

// engineRate scales this router's completion rate at an engine to the engine's: with several
// router replicas it sees only its share of the engine's requests (InFlight of
// InFlight+RemoteInFlight). 0 when unknown.
func engineRate(e Endpoint, localRate float64) float64 {
	if localRate <= 0 || e.InFlight <= 0 {
		return 0
	}
	return localRate * float64(e.InFlight+e.RemoteInFlight) / float64(e.InFlight)
}

func (c *Controller) fraction(p Priority) float64 {
	if p == Batch {
		return c.cfg.BatchFraction
	}
	return 1
}

// queueCap is an engine's cap on queued requests, 0 for none.
func (c *Controller) queueCap(e Endpoint) int {
	switch {
	case c.cfg.QueueCap != 0:
		return max(c.cfg.QueueCap, 0)
	case c.cfg.TTFTBound > 0 && e.Calibrated:
		return 0 // the TTFT bound is the finer test
	}
	return c.capacity(e)
}

// slots is the requests e can run at once now: its batch capacity, or, while its KV cache is
// full (KVUsage at least kvFull), what it runs, since a waiting request then starts only when a
// running one finishes and frees its blocks. Counted from the batch capacity alone, a fleet
// whose cache binds below --max-num-seqs showed no slot wait: in kvbench's shared-prefix at
// 60 QPS a full engine ran ~227 of 256 slots with 19 waiting, and admitted requests waited 95 s
// (p90) for a first token (docs/router.md, Admission control). The token budget does not
// enter: an engine with room in its cache admits waiting prompts as fast as it prefills them,
// which the TTFT model prices.
func (c *Controller) slots(e Endpoint) int {
	n := c.capacity(e)
	if e.KVUsage >= kvFull && e.Running > 0 {
		n = min(n, e.Running)
	}
	return n
}

// kvFull is the KV usage above which an engine's waiting requests wait for blocks: vLLM admits a
// prompt only when its blocks fit, and a 7,000-token prompt is 2–3 % of a large engine's cache.
const kvFull = 0.9

func (c *Controller) capacity(e Endpoint) int {
	n := c.cfg.EngineCapacity
	if n <= 0 {
		n = DefaultEngineCapacity
	}
	return max(n, e.PeakRunning)
}

// FleetQueueCap is the cap on the fleet's queued requests over eps (the ready endpoints), 0 for
// none.
func (c *Controller) FleetQueueCap(eps []Endpoint) int {
	if c.cfg.FleetQueueCap != 0 {
		return max(c.cfg.FleetQueueCap, 0)
	}
	n := 0
	for _, e := range eps {
		n += c.capacity(e)
	}
	return n
}

// Shed records a request turned away.
func (c *Controller) Shed(d Decision, p Priority, now time.Time) {
	c.mu.Lock()
	c.shed[shedKey{d.Reason, p}]++
	c.shedDecay.add(now)
	c.mu.Unlock()
}

// Completed records a request that left endpoint, which is what drains the queues.
func (c *Controller) Completed(endpoint string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done.add(now)
	if r := c.endpoints[endpoint]; r != nil {
		r.done.add(now)
	}
}

// dispatched starts an endpoint's completion-rate window at its first admitted request: a
// replica added long after the router started is not priced at its first completions spread
// over the router's lifetime.
func (c *Controller) dispatched(endpoint string, now time.Time) {
	c.mu.Lock()
	if c.endpoints[endpoint] == nil {
		c.endpoints[endpoint] = &endpointRate{done: decaying{tau: rateWindow}, since: now}
	}
	c.mu.Unlock()
}

// Forget drops an endpoint's completion rate (it left the fleet).
func (c *Controller) Forget(endpoint string) {
	c.mu.Lock()
	delete(c.endpoints, endpoint)
	c.mu.Unlock()
}

// Snapshot is the controller's counters at a time.
type Snapshot struct {
	// Shed counts the requests shed since start by reason and priority.
	Shed map[Reason]map[Priority]uint64
	// RecentShed is the decaying count of shed requests (time constant ShedWindow): the
	// demand the fleet turned away lately, which an autoscaler should see.
	RecentShed float64
	// CompletionRate is the recent completions per second.
	CompletionRate float64
}

// Snapshot returns the counters at now.
func (c *Controller) Snapshot(now time.Time) Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Snapshot{Shed: map[Reason]map[Priority]uint64{}, RecentShed: c.shedDecay.value(now),
		CompletionRate: c.done.rate(now, c.start)}
	for k, v := range c.shed {
		if s.Shed[k.reason] == nil {
			s.Shed[k.reason] = map[Priority]uint64{}
		}
		s.Shed[k.reason][k.priority] = v
	}
	return s
}

// drain is the seconds until excess requests have left a queue draining at rate per second,
// as a Retry-After. Without a rate (nothing completed lately) it is the minimum: the next
// check will know more.
func drain(excess, rate float64) int {
	if rate <= 0 {
		return 1
	}
	return clampRetry(excess / rate)
}

func clampRetry(seconds float64) int {
	if !(seconds > 1) { // NaN included
		return 1
	}
	return int(math.Min(math.Ceil(seconds), MaxRetryAfter))
}

// decaying is a count whose every event fades with time constant tau: at a steady rate r it
// tends to r·tau. It costs O(1) per event, unlike a sliding window's buckets.
type decaying struct {
	tau time.Duration
	v   float64
	at  time.Time
}

func (d *decaying) value(now time.Time) float64 {
	if d.at.IsZero() || !now.After(d.at) {
		return d.v
	}
	return d.v * math.Exp(-now.Sub(d.at).Seconds()/d.tau.Seconds())
}

func (d *decaying) add(now time.Time) {
	v := d.value(now)
	if now.After(d.at) {
		d.at = now
	}
	d.v = v + 1
}

// rate is events per second: the count over the effective span of the window since start (a
// window younger than tau has weighed less time, and dividing by tau would understate it).
func (d *decaying) rate(now, start time.Time) float64 {
	age := now.Sub(start).Seconds()
	if age <= 0 {
		return 0
	}
	tau := d.tau.Seconds()
	return d.value(now) / (tau * (1 - math.Exp(-age/tau)))
}
