// Package policy decides which engine serves a request. It is pure: no I/O, no clock, no
// goroutines. Callers hand it a snapshot of every endpoint (readiness, load, what the index says
// each one holds of this request's prefix) and the request's shape, and get back a choice, ranked
// fallbacks and a reason. The router drives it for live traffic and kvbench drives the very same
// code in virtual time, so a policy measured in simulation is the policy that ships.
//
// A Policy carries a little state of its own: the round-robin cursor, two online latency models
// per endpoint (time to first token, fed through ObserveTTFT; inter-token latency, fed through
// ObserveITL) and a decayed count of the new prefixes recently placed on each endpoint. It is not safe for concurrent use: the owner
// serialises calls (the router holds a mutex around Pick; a Pick costs microseconds).
package policy

import (
	"fmt"
	"math"
	"sort"
)

// Kind names a routing policy. The values match the KVRouter CRD's enum.
type Kind string

const (
	Auto         Kind = "Auto"
	PrefillBound Kind = "PrefillBound"
	DecodeBound  Kind = "DecodeBound"
	RoundRobin   Kind = "RoundRobin"
	LeastLoaded  Kind = "LeastLoaded"
	PrefixOnly   Kind = "PrefixOnly"
)

// Kinds lists every policy, in the CRD's order.
var Kinds = []Kind{Auto, PrefillBound, DecodeBound, RoundRobin, LeastLoaded, PrefixOnly}

// ParseKind accepts a policy name as the CRD spells it (case-sensitive, as the enum is).
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown routing policy %q (want one of %v)", s, Kinds)
}

// Shape is the resource a request mostly consumes, which decides the load signal it is
// balanced on.
type Shape string

const (
	// ShapePrefill: the uncached prompt dominates; balance on queued prefill work (as time).
	ShapePrefill Shape = "prefill"
	// ShapeDecode: generation dominates; balance on active streams.
	ShapeDecode Shape = "decode"
)

// Reason says why a decision came out the way it did. It is a metric label, so the set is closed.
type Reason string

const (
	ReasonPrefix        Reason = "prefix"          // stayed on the endpoint holding the longest prefix
	ReasonSaturated     Reason = "saturated"       // the holder was saturated; picked by load
	ReasonLoad          Reason = "load"            // nothing cached anywhere worth following; picked by load
	ReasonRoundRobin    Reason = "round_robin"     // RoundRobin
	ReasonLeastLoaded   Reason = "least_loaded"    // LeastLoaded
	ReasonNoEndpoint    Reason = "no_endpoint"     // nothing ready
	ReasonAdmissionFull Reason = "admission_limit" // every ready endpoint is at its admission limit
)

// Config tunes a Policy. The zero value of every field means "use the default", so
// Config{Kind: Auto, BlockSize: 16} is a complete configuration.
type Config struct {
	Kind Kind
	// BlockSize of the engines' KV cache, in tokens. A match shorter than one block is no match.
	BlockSize int
	// MaxInFlight is the admission limit: an endpoint with this many requests in flight (this
	// router's plus the others' estimated from the scrape) takes no more. 0 means no limit.
	MaxInFlight int
	// SaturationFactor: the prefix holder is saturated when its predicted TTFT for this request
	// exceeds this multiple of the best alternative's (which includes the recompute there) and
	// the time saved outweighs what the recompute costs the alternative's streams; or (Auto)
	// when the request costs the fleet this multiple more there, decode included (see
	// saturated). Default 1.5.
	SaturationFactor float64
	// TargetTTFT (seconds), optional: a holder predicted above it is released whenever another
	// endpoint predicts better, even by less than SaturationFactor and whatever the recompute
	// costs the fleet. 0 disables it.
	TargetTTFT float64
	// DecodeSlack: under DecodeBound, a holder is saturated when it has more than
	// max(SaturationFactor × fewest, fewest + DecodeSlack) active streams. Default 4. (Auto and
	// PrefillBound use the cost gates below instead: see saturated.)
	DecodeSlack int
	// LoadBound is the ε of consistent hashing with bounded loads: a released request (Auto,
	// PrefillBound) only goes to an endpoint whose active streams, with it, stay within
	// (1+ε) × the fleet's mean, so releases do not herd onto one endpoint whose latency model
	// has not caught up yet; and under Auto a holder past KVPressure is released when it is
	// over that cap. Default 0.25.
	LoadBound float64
	// PlacementLoadBound is the same bound for placing a new prefix: it goes to no endpoint
	// whose active streams, with it, exceed (1+ε) × the fleet's mean (unless every endpoint
	// does). Tighter than LoadBound (default 0.1) because a new prefix draws traffic for as long
	// as it lives, and prefixes are not moved once the requests that follow them are many.
	PlacementLoadBound float64
	// KVPressure: the KV-cache usage (scraped, 0..1) above which an endpoint's decode load
	// costs other requests (new streams queue for memory or preempt running ones). Auto
	// releases a holder over the bounded-load cap on streams only when it is under this
	// pressure: below it, extra streams batch cheaply and moving would only recompute the
	// prefix elsewhere. Default 0.85.
	KVPressure float64
	// Tier credits: how much a cached token on a slower tier is worth relative to one on the GPU
	// (it still has to be loaded back). Defaults 0.75 (CPU), 0.25 (storage), 0.9 (predicted: the
	// router sent this prefix there moments ago and the engine has not reported it yet).
	CPUCredit, StorageCredit, PredictedCredit float64
	// PrefillRatio: a request is classified prefill-bound when its uncached prompt tokens (on the
	// endpoint holding most of it) are at least this many times its expected output. Default 4.
	// The shape is reported (Decision.Shape, a metric label); Auto's decisions are cost-based
	// and do not switch on it.
	PrefillRatio float64
	// MinPrefixShare: an endpoint is a prefix holder worth sticking to only if it holds more
	// than every other candidate by at least this share of the prompt (and one block). A chat
	// template header or a system prompt that every engine holds decides nothing. Default 0.05.
	MinPrefixShare float64
	// DefaultMaxTokens stands in for the expected output of a request that sets no max_tokens.
	// Default 256.
	DefaultMaxTokens int
	// TieTolerance: endpoints whose load score is within this fraction of the best are tied, and
	// the tie is broken by the session key (or the request's tie-break value) with rendezvous
	// hashing, so one session lands on one endpoint on every router replica. Default 0.05.
	TieTolerance float64
}

func (c Config) withDefaults() Config {
	if c.Kind == "" {
		c.Kind = Auto
	}
	if c.BlockSize <= 0 {
		c.BlockSize = 16
	}
	if c.SaturationFactor <= 1 {
		c.SaturationFactor = 1.5
	}
	if c.DecodeSlack <= 0 {
		c.DecodeSlack = 4
	}
	if c.LoadBound <= 0 {
		c.LoadBound = 0.25
	}
	if c.PlacementLoadBound <= 0 {
		c.PlacementLoadBound = 0.1
	}
	if c.KVPressure <= 0 {
		c.KVPressure = 0.85
	}
	if c.CPUCredit <= 0 {
		c.CPUCredit = 0.75
	}
	if c.StorageCredit <= 0 {
		c.StorageCredit = 0.25
	}
	if c.PredictedCredit <= 0 {
		c.PredictedCredit = 0.9
	}
	if c.PrefillRatio <= 0 {
		c.PrefillRatio = 4
	}
	if c.MinPrefixShare <= 0 {
		c.MinPrefixShare = 0.05
	}
	if c.DefaultMaxTokens <= 0 {
		c.DefaultMaxTokens = 256
	}
	if c.TieTolerance <= 0 {
		c.TieTolerance = 0.05
	}
	return c
}

// Cached is how much of this request's prompt an endpoint holds, in tokens, split by the best
// tier each token is on (the parts are disjoint and add up to at most the prompt).
type Cached struct {
	GPU, CPU, Storage int
	// Predicted: held according to routing decisions not yet confirmed by the engine's events.
	Predicted int
}

// Total is every cached token regardless of tier.
func (c Cached) Total() int { return c.GPU + c.CPU + c.Storage + c.Predicted }

// Load is what is known about an endpoint's load.
type Load struct {
	// Router-local accounting, exact and instant.
	InFlight            int // requests this router has in flight there
	QueuedPrefillTokens int // uncached prompt tokens of those requests that have not had a first token yet
	// Estimated load from other clients of the engine (other router replicas, direct callers):
	// the engine's scraped queue minus what this router had in flight at scrape time. It
	// refreshes with the scrape (about once a second) while local changes show at once.
	RemoteInFlight      int
	RemotePrefillTokens int
	// Scraped engine state, informational for the policy (KV usage near 1 shows up as slower
	// TTFTs, which the latency model already sees).
	KVUsage float64
}

// Endpoint is one engine (or one data-parallel rank of one) as the policy sees it.
type Endpoint struct {
	Name   string
	Ready  bool
	Load   Load
	Cached Cached
}

// Request is the shape of one request.
type Request struct {
	// PromptTokens is the prompt length in tokens. When Tokenized is false it is an estimate and
	// Cached is ignored: the request is routed by load alone.
	PromptTokens int
	Tokenized    bool
	// MaxTokens is the request's max_tokens (0: not given).
	MaxTokens int
	// SessionKey, when set, breaks ties so that one session stays on one endpoint.
	SessionKey string
	// TieBreak breaks ties when there is no session key (e.g. a hash of the first block, so that
	// identical cold prompts land together, or a counter).
	TieBreak uint64
}

// Decision is the policy's answer.
type Decision struct {
	// Endpoint is the chosen endpoint's name; empty when none can take the request (see Reason).
	Endpoint string
	// Fallbacks are the other candidates, best first: where to retry when the chosen one fails
	// before answering.
	Fallbacks []string
	Reason    Reason
	Shape     Shape
	// CachedTokens is the credited prefix on the chosen endpoint; UncachedTokens the prompt
	// tokens it must compute. The router adds UncachedTokens to the endpoint's queued prefill.
	CachedTokens, UncachedTokens int
	// PrefillWork is the x of the latency model at dispatch (queued prefill there plus this
	// request's uncached tokens); hand it back with the measured TTFT to ObserveTTFT.
	PrefillWork int
	// PredictedTTFT (seconds) on the chosen endpoint.
	PredictedTTFT float64
}

// Policy is a routing policy with its state.
type Policy struct {
	cfg    Config
	rr     uint64
	models map[string]*LatencyModel
	// decode holds one inter-token latency model per endpoint (ObserveITL).
	decode map[string]*LatencyModel
	// placed counts the new prefixes recently placed on each endpoint (see place and
	// notePlacement).
	placed map[string]float64
	// scratch buffers, reused across calls to keep Pick allocation-light.
	scores []candidate
}

// placementMemory is how many new-prefix placements per endpoint the placement counts remember:
// each placement decays every count by 1/(placementMemory × endpoints).
const placementMemory = 64

type candidate struct {
	idx       int
	credit    float64 // credited cached tokens
	uncached  int
	work      int     // queued prefill (local + remote) + own uncached
	ttft      float64 // predicted
	streams   int
	kvUsage   float64
	loadScore float64 // what pick-by-load minimises for this request's shape
	tie       uint64
	placed    float64 // new prefixes recently placed here
	counted   bool    // placed is known (false: the endpoint is new to the policy)
}

// New returns a Policy for cfg.
func New(cfg Config) *Policy {
	return &Policy{cfg: cfg.withDefaults(), models: make(map[string]*LatencyModel),
		decode: make(map[string]*LatencyModel), placed: make(map[string]float64)}
}

// Config returns the effective configuration (defaults filled in).
func (p *Policy) Config() Config { return p.cfg }

// ObserveTTFT feeds a measured time to first token (seconds) of a request dispatched to endpoint
// with prefillWork = Decision.PrefillWork.
func (p *Policy) ObserveTTFT(endpoint string, prefillWork int, ttftSeconds float64) {
	m := p.models[endpoint]
	if m == nil {
		a, b := p.fleetPrior(endpoint)
		m = NewLatencyModel(a, b)
		p.models[endpoint] = m
	}
	m.Observe(float64(prefillWork), ttftSeconds)
}

// ObserveITL feeds the mean inter-token latency (seconds) of a finished stream on endpoint, with
// the endpoint's active streams (this router's and others') while it decoded.
func (p *Policy) ObserveITL(endpoint string, streams, itlSeconds float64) {
	m := p.decode[endpoint]
	if m == nil {
		a, b, ok := medianFit(p.decode, endpoint)
		if !ok {
			a, b = priorITL, priorITLSlope
		}
		m = NewDecodeModel(a, b)
		p.decode[endpoint] = m
	}
	m.Observe(streams, itlSeconds)
}

// DecodeModel returns the inter-token latency model of an endpoint, or nil if it has never been
// observed.
func (p *Policy) DecodeModel(endpoint string) *LatencyModel { return p.decode[endpoint] }

// decodeFit is an endpoint's inter-token latency line: its own once calibrated, else the median
// of the calibrated endpoints'. ok is false while no endpoint is calibrated (no stream has been
// timed: the decode cost is unknown and the policy does not guess it).
func (p *Policy) decodeFit(endpoint string) (intercept, slope float64, ok bool) {
	if m := p.decode[endpoint]; m != nil && m.Calibrated() {
		a, b := m.Params()
		return a, b, true
	}
	return medianFit(p.decode, endpoint)
}

// Model returns the latency model of an endpoint, or nil if it has never been observed.
func (p *Policy) Model(endpoint string) *LatencyModel { return p.models[endpoint] }

// Forget drops what the policy learnt of an endpoint (it left the fleet; a namesake that comes
// back is a new engine).
func (p *Policy) Forget(endpoint string) {
	delete(p.models, endpoint)
	delete(p.decode, endpoint)
	delete(p.placed, endpoint)
}

// fleetPrior is where a new endpoint's model starts: the median of the calibrated endpoints'
// fits (so a fresh replica of the same hardware is neither feared nor flooded), or the static
// priors when nothing is calibrated yet.
func (p *Policy) fleetPrior(except string) (float64, float64) {
	if a, b, ok := medianFit(p.models, except); ok {
		return a, b
	}
	return priorIntercept, priorSlope
}

// medianFit is the median intercept and slope of the calibrated models other than except's; ok
// is false when there is none.
func medianFit(models map[string]*LatencyModel, except string) (intercept, slope float64, ok bool) {
	var as, bs []float64
	for name, m := range models {
		if name == except || !m.Calibrated() {
			continue
		}
		a, b := m.Params()
		as = append(as, a)
		bs = append(bs, b)
	}
	if len(as) == 0 {
		return 0, 0, false
	}
	return median(as), median(bs), true
}

func median(v []float64) float64 {
	sort.Float64s(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// predict returns the predicted TTFT on an endpoint for x tokens of prefill work. An endpoint
// with too few observations borrows the fleet's fit.
func (p *Policy) predict(endpoint string, x int) float64 {
	if m := p.models[endpoint]; m != nil && m.Calibrated() {
		return m.Predict(float64(x))
	}
	a, b := p.fleetPrior(endpoint)
	return a + b*float64(x)
}

// Pick chooses an endpoint for req among eps. eps should come in a stable order (e.g. by name)
// so that RoundRobin cycles predictably; the decision does not otherwise depend on the order.
func (p *Policy) Pick(req Request, eps []Endpoint) Decision {
	cfg := p.cfg
	cands := p.scores[:0]
	newcomers := false
	ready := 0
	for i := range eps {
		e := &eps[i]
		if !e.Ready {
			continue
		}
		ready++
		streams := e.Load.InFlight + e.Load.RemoteInFlight
		if cfg.MaxInFlight > 0 && streams >= cfg.MaxInFlight {
			continue
		}
		c := candidate{idx: i, streams: streams, kvUsage: e.Load.KVUsage}
		if req.Tokenized && req.PromptTokens > 0 {
			c.credit = p.credit(e.Cached, req.PromptTokens)
		}
		c.uncached = req.PromptTokens - int(math.Floor(c.credit))
		if c.uncached < 0 {
			c.uncached = 0
		}
		c.work = e.Load.QueuedPrefillTokens + e.Load.RemotePrefillTokens + c.uncached
		c.ttft = p.predict(e.Name, c.work)
		key := req.TieBreak
		if req.SessionKey != "" {
			key = hashString(req.SessionKey)
		}
		c.tie = rendezvous(key, e.Name)
		c.placed, c.counted = p.placed[e.Name]
		newcomers = newcomers || !c.counted
		cands = append(cands, c)
	}
	p.scores = cands
	if ready == 0 {
		return Decision{Reason: ReasonNoEndpoint}
	}
	if len(cands) == 0 {
		return Decision{Reason: ReasonAdmissionFull}
	}
	if newcomers {
		p.levelNewcomers(eps, cands)
	}

	shape := p.shape(req, cands)
	for i := range cands {
		// Auto scores every request by its predicted TTFT, which charges each endpoint the
		// prefix it would recompute: a released decode-shaped request goes where it is
		// cheapest, not merely to the fewest streams (which recomputes a long prefix on an
		// engine that may be deep in prefill). Decode load enters through the stream-first
		// placement of new prefixes (place), the bounded-load cap on releases and the
		// KV-pressure release gate (saturated).
		cands[i].loadScore = cands[i].ttft
	}

	var chosen int // index into cands
	var reason Reason
	switch cfg.Kind {
	case RoundRobin:
		chosen = int(p.rr % uint64(len(cands)))
		p.rr++
		reason = ReasonRoundRobin
	case LeastLoaded:
		// Cache-blind: active streams, then queued prefill tokens (without this request's
		// cache-dependent share).
		for i := range cands {
			e := &eps[cands[i].idx]
			cands[i].loadScore = float64(cands[i].streams) +
				float64(e.Load.QueuedPrefillTokens+e.Load.RemotePrefillTokens)/(1+float64(e.Load.QueuedPrefillTokens+e.Load.RemotePrefillTokens))
		}
		chosen = p.byLoad(cands)
		reason = ReasonLeastLoaded
	default:
		switch cfg.Kind {
		case PrefillBound:
			shape = ShapePrefill
			for i := range cands {
				cands[i].loadScore = cands[i].ttft
			}
		case DecodeBound:
			shape = ShapeDecode
			for i := range cands {
				cands[i].loadScore = float64(cands[i].streams) + cands[i].ttft/(1+cands[i].ttft)
			}
		}
		holder := p.holder(cands, req.PromptTokens)
		switch {
		case holder < 0:
			// Only a tokenized prompt of at least one block starts a prefix that the index
			// will let later requests follow; anything else keeps the plain order, whose
			// tie-break (the session key) keeps a session on one endpoint.
			spread := req.Tokenized && req.PromptTokens >= cfg.BlockSize
			chosen, reason = p.place(cands, spread), ReasonLoad
			if spread {
				p.notePlacement(eps, cands[chosen].idx)
			}
		case cfg.Kind == PrefixOnly:
			chosen, reason = holder, ReasonPrefix
		default:
			chosen, reason = holder, ReasonPrefix
			if sat, alt := p.saturated(eps, cands, holder, p.expectedOutput(req)); sat {
				chosen, reason = alt, ReasonSaturated
			}
		}
	}

	c := cands[chosen]
	d := Decision{
		Endpoint:       eps[c.idx].Name,
		Reason:         reason,
		Shape:          shape,
		CachedTokens:   int(math.Floor(c.credit)),
		UncachedTokens: c.uncached,
		PrefillWork:    c.work,
		PredictedTTFT:  c.ttft,
	}
	d.Fallbacks = p.fallbacks(eps, cands, chosen)
	return d
}

// credit converts what an endpoint holds into tokens the request does not have to compute,
// discounting slower tiers, capped at the prompt.
func (p *Policy) credit(c Cached, prompt int) float64 {
	cr := float64(c.GPU) + p.cfg.CPUCredit*float64(c.CPU) +
		p.cfg.StorageCredit*float64(c.Storage) + p.cfg.PredictedCredit*float64(c.Predicted)
	return math.Min(cr, float64(prompt))
}

// shape classifies a request by the least prefill it can cost (on its best holder) against its
// expected output.
func (p *Policy) shape(req Request, cands []candidate) Shape {
	minUncached := req.PromptTokens
	for _, c := range cands {
		if c.uncached < minUncached {
			minUncached = c.uncached
		}
	}
	out := req.MaxTokens
	if out <= 0 {
		out = p.cfg.DefaultMaxTokens
	}
	if float64(minUncached) >= p.cfg.PrefillRatio*float64(out) {
		return ShapePrefill
	}
	return ShapeDecode
}

// holder returns the candidate with the most credited prefix (ties: lower load, then the tie
// hash), or -1 when no candidate holds meaningfully more of it than the others.
func (p *Policy) holder(cands []candidate, prompt int) int {
	least := math.Inf(1)
	for i := range cands {
		least = math.Min(least, cands[i].credit)
	}
	if len(cands) == 1 {
		least = 0
	}
	need := math.Max(float64(p.cfg.BlockSize), p.cfg.MinPrefixShare*float64(prompt))
	best := -1
	for i := range cands {
		c := &cands[i]
		if c.credit-least < need {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := &cands[best]
		switch {
		case c.credit > b.credit:
			best = i
		case c.credit == b.credit && (c.loadScore < b.loadScore ||
			(c.loadScore == b.loadScore && c.tie > b.tie)):
			best = i
		}
	}
	return best
}

// saturated reports whether staying on the holder costs more than moving, and if so where the
// request goes instead (see releaseTarget). Staying recomputes nothing; moving recomputes the
// prefix the holder has, on an engine whose other streams wait while it does. Three costs can
// outweigh that, for any request shape:
//
//   - time to first token: predicted TTFT already charges the alternative the whole prompt it
//     would compute, so the holder is released when its queue makes it SaturationFactor × slower
//     than the alternative even after that, and the time saved exceeds the recompute's cost to
//     the alternative's streams (recompute time × (1 + its active streams)). The second test is
//     what keeps a long shared prefix on its holder when every engine is busy: moving then only
//     trades one queue for another and pays the prefill twice;
//   - (Auto only) decode load, once some stream has been timed (ObserveITL): each stream on an
//     engine slows every other one's tokens, so the request is priced at what it costs everyone
//     (fleetCost) on the holder and on the alternative, and the holder is released when it
//     costs SaturationFactor × more. The factor is what keeps a burst of siblings together: by
//     the cost alone, at low load, spreading siblings saves a little latency for a lot of
//     recompute (a margin of 1.05 dropped the siblings workload's hit rate from 87 % to 67 %;
//     docs/benchmarks.md);
//   - (Auto only) decode load under memory pressure: a holder over the bounded-load cap on
//     active streams ((1+LoadBound) × the fleet mean) while its KV cache is past KVPressure
//     makes every new stream wait for memory or preempt another, a cost neither model sees
//     until after the fact.
//
// DecodeBound keeps the plain stream-count rule (see Config.DecodeSlack) for A/B comparison.
func (p *Policy) saturated(eps []Endpoint, cands []candidate, holder, out int) (bool, int) {
	h := &cands[holder]
	if p.cfg.Kind == DecodeBound {
		fewest := h.streams
		for _, c := range cands {
			fewest = min(fewest, c.streams)
		}
		limit := math.Max(p.cfg.SaturationFactor*float64(fewest), float64(fewest+p.cfg.DecodeSlack))
		if float64(h.streams) > limit {
			return true, p.byLoad(cands)
		}
		return false, -1
	}
	alt := p.releaseTarget(cands, holder)
	if alt < 0 {
		return false, -1
	}
	a := &cands[alt]
	if p.cfg.TargetTTFT > 0 && h.ttft > p.cfg.TargetTTFT && a.ttft < h.ttft {
		// An explicit latency target outranks the fleet's efficiency.
		return true, alt
	}
	if h.ttft > p.cfg.SaturationFactor*a.ttft {
		// The request would get its first token sooner elsewhere. Moving is still only worth
		// it if the time saved exceeds what the recompute costs the alternative: its prefill
		// runs in the same steps as the streams decoding there, each of which it delays by
		// about its own duration.
		recompute := p.slope(eps[a.idx].Name) * float64(max(0, a.uncached-h.uncached))
		if h.ttft-a.ttft > recompute*float64(1+a.streams) {
			return true, alt
		}
	}
	if p.cfg.Kind == Auto && a.streams < h.streams {
		ch, okH := p.fleetCost(eps[h.idx].Name, h, out)
		ca, okA := p.fleetCost(eps[a.idx].Name, a, out)
		if okH && okA && ch > ca*p.cfg.SaturationFactor {
			return true, alt
		}
	}
	if p.cfg.Kind == Auto && h.kvUsage >= p.cfg.KVPressure && a.streams < h.streams &&
		float64(h.streams+1) > p.streamBound(cands, 1+p.cfg.LoadBound) {
		return true, alt
	}
	return false, -1
}

// fleetCost is what serving the request on an endpoint costs everyone, in request-seconds: its
// own time to first token and decode (out tokens at the endpoint's inter-token latency with one
// more stream), plus what it costs the streams already there, whose every step it slows by the
// decode model's per-stream slope and whose tokens wait while its uncached prompt is computed.
// ok is false while no decode model is calibrated.
func (p *Policy) fleetCost(name string, c *candidate, out int) (float64, bool) {
	d0, d1, ok := p.decodeFit(name)
	if !ok {
		return 0, false
	}
	s, n := float64(c.streams), float64(out)
	prefill := p.slope(name) * float64(c.uncached)
	return c.ttft + n*(d0+d1*(s+1)) + s*(prefill+n*d1), true
}

// expectedOutput is the output length a request is priced at.
func (p *Policy) expectedOutput(req Request) int {
	if req.MaxTokens > 0 {
		return req.MaxTokens
	}
	return p.cfg.DefaultMaxTokens
}

// releaseTarget is where a released request would go: the lowest predicted TTFT (which charges
// each endpoint the prefix it would recompute, so a partial holder beats an empty one) among
// the endpoints other than the holder within the bounded-load cap on active streams, near-ties
// to fewer streams. The cap is what keeps releases from herding: the latency model of an
// endpoint only learns it is slower once its first tokens come back, and until then every
// release would pick the same "fast" endpoint (a fresh replica, typically).
func (p *Policy) releaseTarget(cands []candidate, holder int) int {
	bound := p.streamBound(cands, 1+p.cfg.LoadBound)
	best := -1
	for i := range cands {
		if i == holder || float64(cands[i].streams+1) > bound {
			continue
		}
		if best < 0 || cands[i].loadScore < cands[best].loadScore {
			best = i
		}
	}
	if best < 0 {
		return -1
	}
	limit := cands[best].loadScore*(1+p.cfg.TieTolerance) + 1e-12
	chosen := best
	for i := range cands {
		c, b := &cands[i], &cands[chosen]
		if i == holder || float64(c.streams+1) > bound || c.loadScore > limit {
			continue
		}
		if c.streams < b.streams || (c.streams == b.streams && c.tie > b.tie) {
			chosen = i
		}
	}
	return chosen
}

// streamBound is the bounded-load cap on an endpoint's active streams counting this request:
// factor × the fleet's mean with this request, rounded up, and never below 2 (one stream
// already there plus this one is no imbalance).
func (p *Policy) streamBound(cands []candidate, factor float64) float64 {
	total := 1
	for i := range cands {
		total += cands[i].streams
	}
	return math.Max(2, math.Ceil(factor*float64(total)/float64(len(cands))))
}

// place picks an endpoint for a request no endpoint holds a prefix of worth following.
//
// PrefillBound takes the lowest predicted TTFT. Otherwise: a cold request (nothing cached worth
// following) starts a prefix that later requests will follow, so it is placed for the traffic
// to come, not only for its own TTFT: among endpoints whose predicted TTFT is within
// SaturationFactor of the best and within the bounded-load cap on streams (PlacementLoadBound),
// the one that was given the fewest new prefixes lately (when spread is set), then the fewest
// active streams (decode load), then the lower TTFT, then the lower KV usage, then the rendezvous
// hash.
//
// Why placements first: the traffic a prefix will draw is unknown when it is placed, so the
// engine holding the fewest recent prefixes is the one whose future load is expected lowest.
// Streams measure only the present, and early in a burst of new prefixes they are noise: on
// shared-prefix at 60 QPS, placing by streams first left 18 to 21 of the 150 groups per engine
// and made 12,917 output tok/s; by placements, 14,101 (docs/benchmarks.md). The cap is what
// still answers the present: prefixes differ in popularity, and an engine whose prefixes drew
// more than their share takes no new one. Placing by prefill queue alone makes an engine busy
// decoding with a full cache look idle.
func (p *Policy) place(cands []candidate, spread bool) int {
	if p.cfg.Kind == PrefillBound {
		return p.lowestCost(cands)
	}
	best := math.Inf(1)
	for i := range cands {
		best = math.Min(best, cands[i].loadScore)
	}
	ttftCap := p.cfg.SaturationFactor*best + 1e-12
	bound := p.streamBound(cands, 1+p.cfg.PlacementLoadBound)
	chosen := -1
	for pass := 0; pass < 2 && chosen < 0; pass++ {
		for i := range cands {
			c := &cands[i]
			// The first pass keeps to the bounded-load cap; the second, reached only when
			// every endpoint within the TTFT cap is over it, ignores it.
			if c.loadScore > ttftCap || (pass == 0 && float64(c.streams+1) > bound) {
				continue
			}
			if chosen < 0 || c.better(&cands[chosen], spread) {
				chosen = i
			}
		}
	}
	return chosen
}

// better orders cold-placement candidates: fewer recent placements (when spread), then fewer
// streams, lower TTFT, lower KV usage, higher rendezvous hash.
func (c *candidate) better(b *candidate, spread bool) bool {
	switch {
	case spread && c.placed != b.placed:
		return c.placed < b.placed
	case c.streams != b.streams:
		return c.streams < b.streams
	case c.loadScore != b.loadScore:
		return c.loadScore < b.loadScore
	case c.kvUsage != b.kvUsage:
		return c.kvUsage < b.kvUsage
	}
	return c.tie > b.tie
}

// notePlacement counts a new prefix placed on eps[idx], and ages every count so that the counts
// describe about the last placementMemory placements per endpoint.
func (p *Policy) notePlacement(eps []Endpoint, idx int) {
	keep := 1 - 1/float64(placementMemory*max(1, len(eps)))
	for n, v := range p.placed {
		p.placed[n] = v * keep
	}
	p.placed[eps[idx].Name]++
}

// levelNewcomers gives a candidate seen for the first time the placement count of the least
// placed one: a replica added to the fleet takes its share of new prefixes, not every new prefix
// until it has caught up with engines that have served for hours.
func (p *Policy) levelNewcomers(eps []Endpoint, cands []candidate) {
	least := math.Inf(1)
	for i := range cands {
		if cands[i].counted {
			least = math.Min(least, cands[i].placed)
		}
	}
	if math.IsInf(least, 1) {
		least = 0
	}
	for i := range cands {
		if c := &cands[i]; !c.counted {
			c.placed, c.counted = least, true
			p.placed[eps[c.idx].Name] = least
		}
	}
}

// lowestCost returns the candidate with the lowest load score; near-ties (within TieTolerance)
// go to fewer streams, then the rendezvous hash.
func (p *Policy) lowestCost(cands []candidate) int {
	best := 0
	for i := range cands {
		if cands[i].loadScore < cands[best].loadScore {
			best = i
		}
	}
	limit := cands[best].loadScore*(1+p.cfg.TieTolerance) + 1e-12
	chosen := best
	for i := range cands {
		c, b := &cands[i], &cands[chosen]
		if c.loadScore > limit {
			continue
		}
		if c.streams < b.streams || (c.streams == b.streams && c.tie > b.tie) {
			chosen = i
		}
	}
	return chosen
}

// slope is an endpoint's fitted seconds per prefill token (the fleet's while it has too few
// observations of its own).
func (p *Policy) slope(endpoint string) float64 {
	if m := p.models[endpoint]; m != nil && m.Calibrated() {
		_, b := m.Params()
		return b
	}
	_, b := p.fleetPrior(endpoint)
	return b
}

// byLoad returns the candidate with the lowest load score; near-ties (within TieTolerance) go to
// the highest rendezvous hash, which spreads ties evenly and keeps a session on one endpoint.
func (p *Policy) byLoad(cands []candidate) int {
	best := 0
	for i := 1; i < len(cands); i++ {
		if cands[i].loadScore < cands[best].loadScore {
			best = i
		}
	}
	limit := cands[best].loadScore*(1+p.cfg.TieTolerance) + 1e-12
	chosen := best
	for i := range cands {
		if cands[i].loadScore <= limit && cands[i].tie > cands[chosen].tie {
			chosen = i
		}
	}
	return chosen
}

// fallbacks ranks the other candidates by load score.
func (p *Policy) fallbacks(eps []Endpoint, cands []candidate, chosen int) []string {
	if len(cands) <= 1 {
		return nil
	}
	order := make([]int, 0, len(cands)-1)
	for i := range cands {
		if i != chosen {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		ca, cb := &cands[order[a]], &cands[order[b]]
		if ca.loadScore != cb.loadScore {
			return ca.loadScore < cb.loadScore
		}
		return ca.tie > cb.tie
	})
	out := make([]string, len(order))
	for i, o := range order {
		out[i] = eps[cands[o].idx].Name
	}
	return out
}

// hashString is FNV-1a 64; it only has to spread session keys, not resist attackers (a client
// choosing its session key can only choose its own endpoint among ties).
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// rendezvous is the highest-random-weight score of (key, endpoint): stable across processes, so
// every router replica breaks the same tie the same way, and only the keys of a removed endpoint
// move when the fleet changes.
func rendezvous(key uint64, endpoint string) uint64 {
	return mix64(key ^ hashString(endpoint))
}

// mix64 is the splitmix64 finaliser.
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
