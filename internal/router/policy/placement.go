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

import (
	"math"
	"sort"
)

// kvBand is how much fuller (scraped KV-cache usage, 0..1) an endpoint's cache must be than
// another's for a new prefix to prefer the emptier one before the placement counts.
const kvBand = 0.2

// placementMemory is how many new-prefix placements per endpoint the placement counts remember:
// each placement decays every count by 1/(placementMemory × endpoints).
const placementMemory = 64

// place picks an endpoint for a request no endpoint holds a prefix of worth following.
//
// PrefillBound takes the lowest predicted TTFT. Otherwise: a cold request (nothing cached worth
// following) starts a prefix that later requests will follow, so it is placed for the traffic
// to come, not only for its own TTFT: among endpoints whose predicted TTFT is within
// SaturationFactor of the best (the TTFT cap; below saturation (unsaturated) at most
// PlacementTTFTSlack later than the best as well), whose load score (TTFT plus interference) is
// within SaturationFactor of the best (the cost cap), and that are within the bounded-load cap
// on streams (see placementBound), the one with a clearly emptier KV cache (below saturation),
// then, below saturation where fewer than followedReuse of new prompts find a holder, the one
// with clearly fewer tokens in flight, then the one that was given the fewest new prefixes
// lately (when spread is set), then the fewest active streams (decode load), then the lower
// TTFT, then the lower KV usage, then the rendezvous hash (see better).
//
// Why placements first: the traffic a prefix will draw is unknown when it is placed, so the
// engine holding the fewest recent prefixes is the one whose future load is expected lowest.
// Streams measure only the present, and early in a burst of new prefixes they are noise: on
// shared-prefix at 60 QPS, placing by streams first left 18 to 21 of the 150 groups per engine
// and made 12,917 output tok/s; by placements, 14,101 (docs/benchmarks.md). The cap is what
// still answers the present: prefixes differ in popularity, and an engine whose prefixes drew
// more than their share takes no new one. Placing by prefill queue alone makes an engine busy
// decoding with a full cache look idle.
//
// Why an absolute slack on top of the ratio: the ratio scales with the request's own prefill,
// so for a long prompt it let spreading cost its first token seconds (1.5 × 4 s). With a 0.5 s
// slack below saturation only the workloads with long prompts move: rag-long-doc at 12 QPS
// went from 1.18× to 1.06× the lowest peer TTFT p90, and the Mooncake conversation trace at 2×
// on 8B engines met the TTFT bar it missed. Applied past saturation as well it cost
// shared-prefix at 60 QPS 1.6 % of its goodput: there first tokens are late everywhere and
// spreading is what drains the backlogs (docs/benchmarks.md, issue 18).
//
// When no endpoint is within all three caps, the TTFT cap outranks the cost cap: the second
// pass keeps the TTFT and bounded-load caps, the later ones the cost and bounded-load caps, the
// last the cost cap alone. Interference may steer a prompt among the endpoints that start it
// soon enough, but it does not make it wait longer than the TTFT cap allows while one of them
// is within the bounded-load cap. With the cost cap kept first, 28 % of the Mooncake
// conversation trace's long new prompts (10,000 tokens and more) went to an engine with fewer
// streams behind a queue more than 0.5 s longer than the best's, and they made most of its
// TTFT tail (docs/benchmarks.md, issue 18).
//
// Why the TTFT cap narrows where prefixes are not followed: the slack under it buys spreading
// for the traffic a new prefix will draw, and where the reuse share is under lowReuse a prefix
// draws next to none. Below saturation the first two passes then allow no more than ttftTie
// later than the best; the third and fourth passes bring the usual cap back, with the cost cap
// and then without it, before the TTFT is left unbounded. On unique prompts at 30 QPS the usual
// cap sent 2,000-token prompts behind a prefill already under way (TTFT p90 1.11×
// round-robin's); narrowed, 1.01×. Without the third pass a narrow cap that no endpoint within
// the stream cap met dropped the TTFT cap at once, and the Mooncake conversation trace's tail
// grew (docs/benchmarks.md, issue 18). Under the narrow cap the first two passes also keep to
// the endpoints that would start the prompt within startTie of the soonest, judged on their
// prefill queues' progress (startsAt): where every engine has a prefill under way, the ones
// whose prefill is nearly done (unique prompts at 30 QPS: TTFT p90 1.00× round-robin's, against
// 1.01×). The start cap is part of the narrow cap: when no endpoint within it is within the
// other caps, the third pass's usual cap follows. Running the first two passes again without it
// first looked the safer order and measured worse (26 rows of the issue 18 matrix meeting every
// criterion against 29; docs/benchmarks.md). Taking the soonest start among the endpoints those
// passes can take, so that the start cap never empties them, measured worse too (45 rows
// meeting the TTFT criterion against 47). What the fourth pass mends: with only the third, the
// cost cap outranked the TTFT cap once the narrow passes were empty, and a long prompt of the
// Mooncake synthetic trace went behind a queue seconds long while an engine with none was
// within the usual cap and the stream cap, over the cost cap only for the streams its prefill
// would stall (TestUsualTTFTCapOutranksTheCostCapAfterTheNarrowOne).
func (p *Policy) place(cands []candidate, spread, unsaturated bool) int {
	if p.cfg.Kind == PrefillBound {
		return p.lowestCost(cands)
	}
	best, bestTTFT := math.Inf(1), math.Inf(1)
	for i := range cands {
		best = math.Min(best, cands[i].loadScore)
		bestTTFT = math.Min(bestTTFT, cands[i].ttft)
	}
	costCap := p.cfg.SaturationFactor*best + 1e-12
	spreadCap := p.cfg.SaturationFactor*bestTTFT + 1e-12
	if unsaturated && p.cfg.PlacementTTFTSlack > 0 {
		spreadCap = math.Min(spreadCap, bestTTFT+p.cfg.PlacementTTFTSlack+1e-12)
	}
	ttftCap := spreadCap
	startCap := math.Inf(1) // on start (startsAt), with the TTFT cap
	if unsaturated && p.reuse < lowReuse {
		ttftCap = math.Min(ttftCap, bestTTFT+ttftTie+1e-12)
		bestStart := math.Inf(1)
		for i := range cands {
			bestStart = math.Min(bestStart, cands[i].start)
		}
		startCap = bestStart + startTie + 1e-12
	}
	order := placementOrder{spread: spread, byKV: unsaturated}
	if unsaturated && p.followed < followedReuse {
		mean := 0.0
		for i := range cands {
			mean += float64(cands[i].tokens)
		}
		order.tokenBand = tokenBand * mean / float64(len(cands))
	}
	bound, roomy := p.placementBound(cands, bestTTFT)
	unbounded := math.Inf(1)
	passes := [...]struct {
		cost, streams bool
		ttft, start   float64
	}{
		{cost: true, streams: true, ttft: ttftCap, start: startCap},
		{streams: true, ttft: ttftCap, start: startCap},
		{cost: true, streams: true, ttft: spreadCap, start: unbounded}, // differs from the first with low reuse
		{streams: true, ttft: spreadCap, start: unbounded},             // and from the second
		{cost: true, streams: true, ttft: unbounded, start: unbounded},
		{cost: true, ttft: unbounded, start: unbounded},
	}
	chosen := -1
	for _, pass := range passes {
		if chosen >= 0 {
			break
		}
		for i := range cands {
			c := &cands[i]
			limit := bound
			if c.kvUsage < roomyKV {
				limit += roomy
			}
			if (pass.cost && c.loadScore > costCap) || c.ttft > pass.ttft || c.start > pass.start ||
				(pass.streams && float64(c.streams+1) > limit) {
				continue
			}
			if chosen < 0 || c.better(&cands[chosen], order) {
				chosen = i
			}
		}
	}
	return chosen
}

// roomyKV is the KV-cache usage (scraped, 0..1) below which an endpoint's bounded-load cap for
// new prefixes is counted in inter-token latency rather than in streams (see placementBound).
const roomyKV = 0.5

// placementBound is the bounded-load cap on a new prefix's endpoint, in active streams counting
// the request: PlacementLoadBound over the fleet's mean (streamBound), plus roomy more on an
// endpoint whose KV cache is less than roomyKV full. roomy is what the cap is worth in
// inter-token latency on the fleet's decode line: a stream there costs slope, on top of an
// intercept that every stream pays, so (1+ε) × the mean's inter-token latency allows ε ×
// intercept / slope more streams than (1+ε) × the mean stream count. It is very large while the
// slope sits at its floor (the fleet sees no cost per stream, as under heavy prefill stalls),
// which lifts the cap on the roomy endpoints.
//
// roomy is 0, and the count rules, while the line is not calibrated, and where keeping to the
// count costs the request next to nothing: an endpoint within it gets the first token at most
// ttftTie later than the best (bestTTFT). At low load, with first tokens milliseconds apart,
// the TTFT cap (a ratio) rules out all but the fastest engine and the count is what spreads new
// prefixes: with the cap lifted there too, a fleet serving short new prompts sent every one to
// one engine (test/reliability, TestHostileEventPeer). Gated at the 0.5 s placement slack
// instead of ttftTie, the count ruled where the latency cap had paid (rows of the issue 18
// matrix meeting every criterion: 24 with ttftTie, 22 with the slack).
//
// Why in latency where memory is roomy: on few long streams a count is coarse. The Mooncake
// conversation trace on 32B engines runs about 3.5 streams per engine, where a 10 % cap rules
// out every engine with 5, which costs the others nothing measurable (0.35 ms a step each
// against a 20 ms step), and sent long new prompts behind longer prefill queues: 10,000-token
// and longer prompts got their first token 1.2 s later at p90 than with llm-d's token-load
// scorer. Why only there: a stream's KV cache is the other thing it takes, and where memory is
// short the count is the better measure; on the same trace at 8× on 8B engines, with caches
// full, the latency cap let long prompts onto engines that then preempted their streams, and
// goodput fell from 3.7× to 0.42× the best peer's (docs/benchmarks.md, issue 18).
func (p *Policy) placementBound(cands []candidate, bestTTFT float64) (bound, roomy float64) {
	bound = p.streamBound(cands, 1+p.cfg.PlacementLoadBound)
	a, b, ok := p.decodeFit()
	if !ok || b <= 0 {
		return bound, 0
	}
	for i := range cands {
		if float64(cands[i].streams+1) <= bound && cands[i].ttft <= bestTTFT+ttftTie {
			return bound, 0
		}
	}
	return bound, p.cfg.PlacementLoadBound * a / b
}

// startTie is how much later than the soonest a prompt placed where prefixes are not followed
// may start, judged on the queues' progress (startsAt): about one decode step, the grain at which
// an engine takes up a new prompt.
const startTie = 0.02

// ttftTie is how much later a first token may come for the placement's count cap on streams to
// cost the request nothing worth a latency cap (see placementBound): about a decode step or two,
// well under what a user notices and what the TTFT fits resolve.
const ttftTie = 0.05

// lowReuse is the reuse share below which new prefixes are placed for their own first token
// rather than spread for traffic to come (see place): fewer than one in five prefix-starting
// requests finds a holder. In kvbench's workloads the Mooncake traces run at 0.05-0.3, unique
// prompts and the Azure traces at 0, and traffic built on shared prefixes at 0.4 and above.
const lowReuse = 0.2

// reuseMemory is how many prefix-starting requests the reuse share remembers.
const reuseMemory = 64

// Reuse reports the decayed share of recent prefix-starting requests that found a holder worth
// following (1 until traffic says otherwise): how far the interference price counts the streams
// every endpoint has (see interference).
func (p *Policy) Reuse() float64 { return p.reuse }

// placementOrder is how better orders candidates for one placement: by the placement counts
// (spread), by a clearly emptier KV cache (byKV), and by fewer tokens in flight where they
// differ by more than tokenBand tokens (0: not by tokens).
type placementOrder struct {
	spread, byKV bool
	tokenBand    float64
}

// tokenBand is how much more than another, as a share of the candidates' mean tokens in flight,
// an endpoint must have in flight for a new prompt to prefer the other before the placement
// counts, where prefixes are seldom followed (followedReuse).
const tokenBand = 0.25

// followedReuse is the share of prefix-starting requests finding a holder, over the last
// followedMemory of them, below which tokens in flight order placements before the placement
// counts (see better). In kvbench's workloads the Mooncake traces run at 0.05-0.3, unique
// prompts and the Azure traces at 0, and traffic built on shared prefixes at 0.54 and above.
//
// Why a longer memory than the reuse share's (reuseMemory): the first hundreds of requests of
// traffic built on shared prefixes start nearly all new prefixes, the ones that the placement
// counts must spread for the traffic to come. Judged on the reuse share, the tokens took over
// while they were placed, and shared-prefix at 10 QPS lost 2.1 % of its goodput.
const (
	followedReuse  = 0.5
	followedMemory = 512
)

// better orders cold-placement candidates: the adapter active there before a free adapter slot
// before adapters unknown before no free slot (a LoRA request), then a KV cache emptier by more
// than kvBand, then fewer tokens in flight by more than the order's tokenBand, then fewer recent
// placements (when spread), then fewer streams, lower TTFT, lower KV usage, higher rendezvous
// hash.
//
// Why a clearly emptier cache before the placement counts: the scraped KV usage is the decode
// load resident now (each decode step reads every running stream's cache, and on long contexts
// that read sets the step time) and the room left for the traffic the new prefix will draw. The
// counts, continuous and decayed, otherwise decide every placement; on the Mooncake
// conversation trace at 4× they put new long conversations on engines decoding long contexts
// (ITL p90 15.5 ms; with a 0.2 band first, 15.0 ms; 0.1 gave 14.3 ms but cost thrashing at 2×
// saturation 2 % of its throughput). The band keeps the counts in charge where caches fill
// evenly (shared-prefix is unchanged). Past saturation (byKV false) it is skipped,
// as interference is (Evaluate): the scraped usages then differ by which engine was scraped
// mid-eviction, and following them cost thrashing at 2× saturation 4 % of its throughput and
// the conversation trace at 8× 3 %.
//
// Why tokens in flight next, where prefixes are seldom followed: on long contexts a decode step
// is mostly the read of every running stream's KV cache, so the engine holding the fewest
// prompt and output tokens in flight steps fastest, whatever its stream count. The router
// counts them exactly and at once, where the scraped usage is a second old and banded coarsely.
// On the Mooncake conversation trace on 8B engines (128K context) the placement counts left
// some engines decoding far more context than others: kvrouter's median inter-token latency
// was the lowest of all policies but its p90 1.11× Dynamo's at 4×, whose cost counts every
// engine's active blocks; with the tokens first, 1.09×. Where traffic follows its prefixes the
// counts keep the first word, for the reason they come before streams: a new prefix is placed
// for the traffic it will draw, which the load of the moment does not tell (docs/benchmarks.md,
// issue 18).
//
// Why the adapter first: a new prefix of an adapter draws that adapter's traffic wherever it is
// placed, and every engine it lands on spends one of its few adapter slots on it. Spreading an
// adapter's prefixes as the placement counts would spread plain prefixes leaves each engine
// juggling more adapters than it has slots, and requests wait for slots: on lora-zipf, placing
// by placements first loaded adapters more often than placing by adapter first
// (docs/benchmarks.md). The TTFT cap and the bounded-load cap still apply: an engine holding a
// popular adapter that is busier than the cap allows gets no new prefix, and the adapter spreads
// to a second engine.
func (c *candidate) better(b *candidate, o placementOrder) bool {
	switch {
	case c.lora != b.lora:
		return c.lora < b.lora
	case o.byKV && math.Abs(c.kvUsage-b.kvUsage) > kvBand:
		return c.kvUsage < b.kvUsage
	case o.tokenBand > 0 && math.Abs(float64(c.tokens-b.tokens)) > o.tokenBand:
		return c.tokens < b.tokens
	case o.spread && c.placed != b.placed:
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

// pendingCommit is what a decision changes in the policy once it is acted on (Commit): Evaluate
// only computes it, so that options priced and then dropped leave no trace.
type pendingCommit struct {
	roundRobin bool // advance the round-robin cursor
	// placed: a new prefix is placed on the decision's endpoint, among endpoints in all.
	placed bool
	among  int
	// newcomers are endpoints seen for the first time, levelled to level placements.
	newcomers []string
	level     float64
	// startsPrefix: the request could start a prefix and counts in the reuse share; followed: it
	// found a holder.
	startsPrefix, followed bool
}

// Commit records that d, a decision of Evaluate, was acted on: the request was sent where d says.
// Commit a decision at most once; a decision without an endpoint changes nothing.
func (p *Policy) Commit(d Decision) {
	c := d.commit
	for _, n := range c.newcomers {
		if _, ok := p.placed[n]; !ok {
			p.placed[n] = c.level
		}
	}
	if d.Endpoint == "" {
		return
	}
	if c.startsPrefix {
		v := 0.0
		if c.followed {
			v = 1
		}
		p.reuse += (v - p.reuse) / reuseMemory
		p.followed += (v - p.followed) / followedMemory
	}
	if c.roundRobin {
		p.rr++
	}
	if c.placed {
		p.notePlacement(d.Endpoint, c.among)
	}
}

// notePlacement counts a new prefix placed on endpoint, one of among endpoints, and ages every
// count so that the counts describe about the last placementMemory placements per endpoint.
func (p *Policy) notePlacement(endpoint string, among int) {
	keep := 1 - 1/float64(placementMemory*max(1, among))
	for n, v := range p.placed {
		p.placed[n] = v * keep
	}
	p.placed[endpoint]++
}

// levelNewcomers gives a candidate seen for the first time the placement count of the least
// placed one: a replica added to the fleet takes its share of new prefixes, not every new prefix
// until it has caught up with engines that have served for hours. It returns the newcomers and
// that count for Commit to record.
func (p *Policy) levelNewcomers(eps []Endpoint, cands []candidate) (names []string, least float64) {
	least = math.Inf(1)
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
			names = append(names, eps[c.idx].Name)
		}
	}
	return names, least
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
