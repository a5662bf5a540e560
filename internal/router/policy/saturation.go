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
//     docs/benchmarks.md). Below saturation only to an endpoint with at most
//     ReleaseQueueSlack more prefill queued than the holder (startsSoonEnough): the cost
//     counts every stream on the holder against one first token, and a replica just added
//     drew every release at once and made each wait behind the recomputes of the others;
//   - (Auto only) decode load under memory pressure: a holder over the bounded-load cap on
//     active streams ((1+LoadBound) × the fleet mean) while its KV cache is past KVPressure
//     makes every new stream wait for memory or preempt another, a cost neither model sees
//     until after the fact.
//
// DecodeBound keeps the plain stream-count rule (see Config.DecodeSlack) for A/B comparison.
func (p *Policy) saturated(eps []Endpoint, cands []candidate, holder, out int, overloaded bool) (bool, int) {
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
	if p.cfg.Kind == Auto && a.streams < h.streams && p.startsSoonEnough(eps, a, h, overloaded) {
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

// startsSoonEnough reports whether a release on decode cost may send the request to a: past
// saturation always; below it, only where the prefill queued ahead of it is at most
// ReleaseQueueSlack longer than on the holder h (see Config.ReleaseQueueSlack). Queued work,
// not predicted TTFT: the recompute itself is what moving a prefix costs once, and a bound on
// it would keep long prompts from ever moving off a busy holder.
func (p *Policy) startsSoonEnough(eps []Endpoint, a, h *candidate, overloaded bool) bool {
	return overloaded || p.cfg.ReleaseQueueSlack < 0 ||
		p.queuedWait(&eps[a.idx]) <= p.queuedWait(&eps[h.idx])+p.cfg.ReleaseQueueSlack+1e-12
}

// fleetCost is what serving the request on an endpoint costs everyone, in request-seconds: its
// own time to first token and decode (out tokens at the endpoint's inter-token latency with one
// more stream), plus what it costs the streams already there, whose every step it slows by the
// decode model's per-stream slope and whose tokens wait while its uncached prompt is computed.
// ok is false while the decode line is not calibrated.
func (p *Policy) fleetCost(name string, c *candidate, out int) (float64, bool) {
	d0, d1, ok := p.decodeFit()
	if !ok {
		return 0, false
	}
	s, n := float64(c.streams), float64(out)
	prefill := p.slope(name) * float64(c.uncached)
	return c.ttft + n*(d0+d1*(s+1)) + s*(prefill+n*d1), true
}

// expectedOutput is the output length a request is priced at: its max_tokens (or
// DefaultMaxTokens) scaled by the share of the cap that finished requests were seen to use
// (ObserveOutput), since max_tokens is a cap and real answers stop at EOS well before it.
func (p *Policy) expectedOutput(req Request) int {
	if req.MaxTokens > 0 {
		return max(1, int(math.Ceil(float64(req.MaxTokens)*p.outputShare(true))))
	}
	return max(1, int(math.Ceil(float64(p.cfg.DefaultMaxTokens)*p.outputShare(false))))
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
