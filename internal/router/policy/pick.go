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

package policy

import "math"

// overloaded reports whether no candidate can start a request soon: every one has more than
// HoldAfter (DefaultHoldAfter when holding is off) of prefill queued. Interference is not
// priced then (see Evaluate).
func (p *Policy) overloaded(eps []Endpoint, cands []candidate) bool {
	limit := p.cfg.HoldAfter
	if limit <= 0 {
		limit = DefaultHoldAfter
	}
	for i := range cands {
		if p.queuedWait(&eps[cands[i].idx]) <= limit {
			return false
		}
	}
	return true
}

type candidate struct {
	idx       int
	credit    float64 // credited cached tokens
	uncached  int
	work      int     // queued prefill (local + remote) + own uncached
	ttft      float64 // predicted
	streams   int
	tokens    int // Load.InFlightTokens
	kvUsage   float64
	loadScore float64 // what pick-by-load minimises for this request's shape
	tie       uint64
	interfere float64 // what its prefill costs the streams decoding there (interference)
	placed    float64 // new prefixes recently placed here
	lora      loraFit // how the request's adapter fits here (loraActive without one)
	counted   bool    // placed is known (false: the endpoint is new to the policy)
	start     float64 // predicted TTFT with the queue's head discounted by its progress (startsAt)
}

// Pick chooses an endpoint for req among eps. eps should come in a stable order (e.g. by name)
// so that RoundRobin cycles predictably; the decision does not otherwise depend on the order.
// It is Evaluate then Commit: the request is taken to be placed where the decision says.
func (p *Policy) Pick(req Request, eps []Endpoint) Decision {
	d := p.Evaluate(req, eps)
	p.Commit(d)
	return d
}

// Evaluate returns the decision Pick would take for req among eps without changing the policy:
// the round-robin cursor and the record of new prefixes placed per endpoint stay as they are
// until Commit. A caller weighing several options for one request (the split decision prices
// a whole placement and a prefill placement) evaluates each and commits only the ones it acts
// on, so the policy's state advances once per real placement.
func (p *Policy) Evaluate(req Request, eps []Endpoint) Decision {
	cfg := p.cfg
	cands := p.scores[:0]
	newcomers := false
	ready := 0
	fewest := math.MaxInt // active streams on the least busy candidate
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
		c := candidate{idx: i, streams: streams, tokens: e.Load.InFlightTokens, kvUsage: e.Load.KVUsage}
		if req.Tokenized && req.PromptTokens > 0 {
			c.credit = p.credit(e.Cached, req.PromptTokens)
		}
		c.uncached = req.PromptTokens - int(math.Floor(c.credit))
		if c.uncached < 0 {
			c.uncached = 0
		}
		c.work = e.Load.QueuedPrefillTokens + e.Load.RemotePrefillTokens + c.uncached
		c.ttft = p.predict(e.Name, c.work)
		if p.reuse < lowReuse { // only the narrow placement cap reads it (place)
			c.start = p.startsAt(e, c.uncached)
		}
		if req.LoRA != "" {
			c.lora = fitOf(e.Load.LoRA)
			lc := p.loraCost(req, e.Load.LoRA, streams)
			c.ttft += lc
			c.start += lc
		}
		key := req.TieBreak
		if req.SessionKey != "" {
			key = hashString(req.SessionKey)
		}
		c.tie = rendezvous(key, e.Name)
		c.placed, c.counted = p.placed[e.Name]
		newcomers = newcomers || !c.counted
		cands = append(cands, c)
		fewest = min(fewest, streams)
	}
	p.scores = cands
	if ready == 0 {
		return Decision{Reason: ReasonNoEndpoint}
	}
	if len(cands) == 0 {
		return Decision{Reason: ReasonAdmissionFull}
	}
	var commit pendingCommit
	if newcomers {
		commit.newcomers, commit.level = p.levelNewcomers(eps, cands)
	}

	shape := p.shape(req, cands)
	// Past saturation (no endpoint can start a request soon) the decodes' inter-token time is
	// lost to queueing anyway and what matters is that every engine keeps draining its share:
	// priced there, interference steered misses away from the engines with the most streams
	// and left backlogs uneven (thrashing at 2× saturation lost 4 % of its throughput).
	overloaded := p.overloaded(eps, cands)
	shared := float64(fewest) * (1 - p.reuse) // see interference
	for i := range cands {
		// Auto scores every request by its predicted TTFT, which charges each endpoint the
		// prefix it would recompute: a released decode-shaped request goes where it is
		// cheapest, not merely to the fewest streams (which recomputes a long prefix on an
		// engine that may be deep in prefill), plus what that prefill costs the streams
		// decoding there (interference): a new prefix or a release lands where its prefill
		// delays the fewest running decodes. Decode load enters through the stream-first
		// placement of new prefixes (place), the bounded-load cap on releases and the
		// KV-pressure release gate (saturated).
		c := &cands[i]
		if !overloaded {
			c.interfere = p.interference(eps[c.idx].Name, c, shared)
		}
		c.loadScore = c.ttft + c.interfere
	}

	var chosen int // index into cands
	var reason Reason
	switch cfg.Kind {
	case RoundRobin:
		chosen = int(p.rr % uint64(len(cands)))
		commit.roundRobin = true
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
		if req.Tokenized && req.PromptTokens >= cfg.BlockSize {
			commit.startsPrefix, commit.followed = true, holder >= 0
		}
		switch {
		case holder < 0:
			// Only a tokenized prompt of at least one block starts a prefix that the index
			// will let later requests follow; anything else keeps the plain order, whose
			// tie-break (the session key) keeps a session on one endpoint.
			spread := req.Tokenized && req.PromptTokens >= cfg.BlockSize
			chosen, reason = p.place(cands, spread, !overloaded), ReasonLoad
			if spread {
				commit.placed, commit.among = true, len(eps)
			}
		case cfg.Kind == PrefixOnly:
			chosen, reason = holder, ReasonPrefix
		default:
			chosen, reason = holder, ReasonPrefix
			if sat, alt := p.saturated(eps, cands, holder, p.expectedOutput(req), overloaded); sat {
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
		AdapterCold:    req.LoRA != "" && c.lora != loraActive,
	}
	d.Fallbacks = p.fallbacks(eps, cands, chosen)
	d.commit = commit
	return d
}

// startsAt predicts the request's first token on e as predict does, with the router's queued
// prefill there less what the engine has computed of it since it got to the head of the queue
// (Load.PrefillElapsed), at the endpoint's fitted speed: the time left of a prefill under way
// is its predicted duration less its elapsed time, and the intercept (what a first token costs
// beyond the prefill itself) is not progress.
//
// Why only for placing unfollowed prompts (place), not in the TTFT the policy predicts and fits:
// the router counts a queued prompt whole until its first token comes back, so on a fleet where
// every engine has a prefill under way all of them look alike, and the placement's other orders
// (tokens in flight, placement counts) picked among them regardless of which prefill was nearly
// done, which round-robin gets right by its order alone (unique prompts at 30 QPS: TTFT p99
// 293 ms against round-robin's 223). Used as the predicted TTFT everywhere, with the fit
// learning on it, the elapsed time made engines part-way through a prefill look as good as idle
// ones to every decision: 23 rows of the issue 18 matrix met every criterion instead of 28 (the
// hot-prefix row at 10 QPS went from 0.98× to 1.53× the lowest peer's TTFT p90;
// docs/benchmarks.md).
func (p *Policy) startsAt(e *Endpoint, uncached int) float64 {
	q := e.Load.QueuedPrefillTokens
	if t := e.Load.PrefillElapsed; q > 0 && t > 0 {
		if a, b := p.fit(e.Name); b > 0 && t > a {
			q = max(0, q-int((t-a)/b))
		}
	}
	return p.predict(e.Name, q+e.Load.RemotePrefillTokens+uncached)
}

// interference is what computing c's uncached prompt on an endpoint costs the streams there, in
// request-seconds: vLLM's chunked prefill runs the prompt in the same steps as the running
// decodes, each step's duration grows with its prefill tokens at the rate the TTFT model learns
// (its slope, seconds per prefill token, fitted online from every first token), and every
// stream in the batch waits that step. So each stream loses about slope × uncached seconds
// while the prompt is computed. It is what a long uncached prompt placed beside many decodes
// costs their ITL, and what a prefix holder saves them by computing only the suffix.
//
// shared streams are left out of the count: the streams every candidate has, scaled by how
// little the traffic follows its prefixes (Evaluate passes fewest × (1 − reuse)). Those streams
// are stalled wherever the prompt goes, and priced in full they make every price alike on a
// busy fleet, so the caps that compare prices as ratios (place's cost cap, releaseTarget's tie
// tolerance) let through engines with a later first token. Where prefixes are followed that
// looseness is what lets the placement counts spread new prefixes for the traffic they will
// draw (shared-prefix at 40 QPS lost 4 % of its goodput with the shared streams left out
// whatever the reuse); where prompts are not reused it only costs first tokens (unique prompts at
// 30 QPS: TTFT p90 1.34× SGLang's priced in full, 1.19× weighted by reuse; docs/benchmarks.md,
// issue 18).
func (p *Policy) interference(name string, c *candidate, shared float64) float64 {
	return max(0, float64(c.streams)-shared) * p.slope(name) * float64(c.uncached)
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
