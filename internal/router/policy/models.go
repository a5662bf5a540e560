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

import "sort"

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
	p.timed++
	p.timedAt[endpoint] = p.timed
	p.fitsStale = true
}

// ObserveITL feeds the mean inter-token latency (seconds) of a finished stream on endpoint, with
// the endpoint's active streams (this router's and others') while it decoded. It feeds two
// fits: the endpoint's own (DecodeModel, reported in the router's status, where an engine
// slower than the others stands out) and the fleet's (FleetDecodeModel), which is the one the
// policy prices decode with (see decodeFit).
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
	p.fleetDecode.Observe(streams, itlSeconds)
}

// DecodeModel returns the inter-token latency model fitted on one endpoint's streams alone, or
// nil if none of them has been timed. The policy does not price with it (see decodeFit).
func (p *Policy) DecodeModel(endpoint string) *LatencyModel { return p.decode[endpoint] }

// FleetDecodeModel returns the inter-token latency model fitted on every endpoint's streams
// together: the line the policy prices decode load with.
func (p *Policy) FleetDecodeModel() *LatencyModel { return p.fleetDecode }

// decodeFit is the inter-token latency line decode load is priced at: the fleet's, fitted on
// every endpoint's timed streams together. ok is false while it has seen too few streams to be
// trusted (the decode cost is unknown then, and the policy does not guess it).
//
// Why one line for the fleet and not one per endpoint: a stream's mean gap between tokens moves
// with the prefills that shared its steps as much as with the streams, and over time the two move
// together on one engine. While traffic ramps up an engine gains streams just as the prefills of
// new prefixes thin out, so its own fit sees more streams with faster tokens and puts the
// per-stream slope at its floor; decode load was then priced as free, a holder with 40 streams
// looked no costlier than an idle replica, and replicas added to the fleet took 1 % of the later
// traffic (kvbench scale-up at 10 QPS, 32B engines, where a stream adds about 0.35 ms a step).
// Engines compared at the same moment share the traffic's phase and differ in streams, and the
// fleet's fit, which weighs the fleet's latest ~50 timed streams together, finds the slope (0.25
// to 0.35 ms). The replicas of one KVRouter run one engine template, so one line describes them (in
// a disaggregated fleet the prefill pool times only the whole requests it serves, and shares the
// line); what sets one engine apart (its queue, its prefill speed) is priced by its own TTFT model.
// One intercept per engine around the shared slope was tried: the intercepts followed the noise of
// recent prefills and released holders for nothing (shared-prefix at 40 and 60 QPS lost 7 % of
// their goodput; docs/benchmarks.md, issue 18).
func (p *Policy) decodeFit() (intercept, slope float64, ok bool) {
	if !p.fleetDecode.Calibrated() {
		return 0, 0, false
	}
	a, b := p.fleetDecode.Params()
	return a, b, true
}

// Model returns the latency model of an endpoint, or nil if it has never been observed.
func (p *Policy) Model(endpoint string) *LatencyModel { return p.models[endpoint] }

// fleetPrior is where a new endpoint's model starts: the median of the calibrated endpoints'
// fits (so a fresh replica of the same hardware is neither feared nor flooded), or the static
// priors when nothing is calibrated yet.
func (p *Policy) fleetPrior(except string) (float64, float64) {
	if a, b, ok := p.fleetFit(except); ok {
		return a, b
	}
	return priorIntercept, priorSlope
}

// fleetFit is medianFit(p.models, except) from sorted copies kept between first tokens: predict
// asks for it per candidate, and sorting the fleet's fits each time would cost a decision more
// than the rest of it on a large fleet.
func (p *Policy) fleetFit(except string) (intercept, slope float64, ok bool) {
	if p.fitsStale {
		p.fitA, p.fitB = p.fitA[:0], p.fitB[:0]
		for _, m := range p.models {
			if m.Calibrated() {
				a, b := m.Params()
				p.fitA = append(p.fitA, a)
				p.fitB = append(p.fitB, b)
			}
		}
		sort.Float64s(p.fitA)
		sort.Float64s(p.fitB)
		p.fitsStale = false
	}
	skipA, skipB := -1, -1
	if m := p.models[except]; m != nil && m.Calibrated() {
		a, b := m.Params()
		skipA, skipB = sort.SearchFloat64s(p.fitA, a), sort.SearchFloat64s(p.fitB, b)
	}
	if len(p.fitA) == 0 || (skipA >= 0 && len(p.fitA) == 1) {
		return 0, 0, false
	}
	return medianSkipping(p.fitA, skipA), medianSkipping(p.fitB, skipB), true
}

// medianSkipping is the median of sorted s without its element at skip (none when skip < 0).
func medianSkipping(s []float64, skip int) float64 {
	n := len(s)
	if skip >= 0 {
		n--
	}
	at := func(i int) float64 {
		if skip >= 0 && i >= skip {
			i++
		}
		return s[i]
	}
	if n%2 == 1 {
		return at(n / 2)
	}
	return (at(n/2-1) + at(n/2)) / 2
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

// predict returns the predicted TTFT on an endpoint for x tokens of prefill work: on the fleet's
// line (the median of the calibrated endpoints' fits) unless the endpoint's own fit says more
// than fitBand faster or slower at x, then on its own fit. An endpoint with too few
// observations borrows the fleet's fit, and one whose own fit has gone stale (the fleet has
// timed staleAfter first tokens per endpoint since its last) is predicted no slower than the
// fleet's fit of the others says.
//
// Why the fleet's line within the band: the replicas of one KVRouter run one engine template,
// and what tells their own fits apart is mostly noise. Each learns from the requests it was
// sent, timed with whatever else shared their steps (streams, other prompts' chunks), which x
// does not count: on kvbench's identical simulated engines the fits ended a run up to 40 %
// apart (the Mooncake synthetic trace: 95 to 134 µs a token). Compared on their own fits,
// engines were told apart by that noise: on the same trace 7 to 23 long prompts a run (2 s of
// prefill or more) got their first token a second or more after the soonest any of three
// policies gave them, against 5 to 10 under llm-d's token-load scorer, which compares queues
// alone, and 8 to 17 on the fleet's line. Beyond the band the engine's own fit rules, so a
// slower GPU or a throttled node is still seen for what it is
// (TestLatencyModelMakesSaturationPerEndpoint); with no band at all, the line for every engine,
// the LoRA workload lost its first tokens (lora-zipf at 60 QPS: TTFT p90 1.12× the best peer's,
// against 0.84× with the band; docs/benchmarks.md, issue 18).
//
// Why the stale bound: a fit only learns from the requests its engine is sent. One left
// pessimistic (a few slow first tokens while the engine was busy) keeps the engine out of the
// placement's TTFT cap, so it is sent nothing that would correct it, and at low load, with first
// tokens milliseconds apart, an engine went without a new prefix for seconds while the others
// served them all (test/reliability, TestHostileEventPeer, 2 of 5 runs). Bounded by the fleet's
// fit once stale, such an engine is tried again; an engine that really is slow answers slowly
// and its fit, fresh again, says so.
func (p *Policy) predict(endpoint string, x int) float64 {
	m := p.models[endpoint]
	if m == nil || !m.Calibrated() {
		a, b := p.fleetPrior(endpoint)
		return a + b*float64(x)
	}
	own := m.Predict(float64(x))
	if a, b, ok := p.fleetFit(""); ok {
		if fleet := a + b*float64(x); own <= fleet*(1+fitBand) && fleet <= own*(1+fitBand) {
			return fleet
		}
	}
	if p.timed-p.timedAt[endpoint] > uint64(staleAfter*len(p.models)) {
		if fa, fb, ok := p.fleetFit(endpoint); ok {
			return min(own, fa+fb*float64(x))
		}
	}
	return own
}

// fitBand is how far (a ratio) an endpoint's own TTFT prediction may stray from the fleet's line
// before predict believes it over the line (see predict).
const fitBand = 0.3

// staleAfter is how many first tokens per endpoint the fleet times before an endpoint's own TTFT
// fit, not updated meanwhile, is bounded by the fleet's (see predict).
const staleAfter = 8

// PredictITL is the predicted inter-token latency (seconds) on an endpoint with streams active
// streams, on the fleet's line (see decodeFit); ok is false while it is not calibrated.
func (p *Policy) PredictITL(_ string, streams float64) (seconds float64, ok bool) {
	a, b, ok := p.decodeFit()
	if !ok {
		return 0, false
	}
	return a + b*max(streams, 0), true
}

// fit is an endpoint's fitted TTFT line: intercept (seconds) and slope (seconds per prefill
// token), the fleet's while it has too few observations of its own.
//
// Why its own even within fitBand of the fleet's, unlike predict: the prices read its slope (the
// streams a prefill stalls, a recompute, the start estimate), and on the fleet's line there as
// well, 30 rows of the issue 18 matrix met every criterion against 33 (lora-zipf at 40 QPS:
// TTFT p90 1.09× the best peer's against 0.75×; docs/benchmarks.md).
func (p *Policy) fit(endpoint string) (intercept, slope float64) {
	if m := p.models[endpoint]; m != nil && m.Calibrated() {
		return m.Params()
	}
	return p.fleetPrior(endpoint)
}

// slope is an endpoint's fitted seconds per prefill token (see fit).
func (p *Policy) slope(endpoint string) float64 {
	_, b := p.fit(endpoint)
	return b
}
