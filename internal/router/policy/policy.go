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

// Package policy decides which engine serves a request. It is pure: no I/O, no clock, no
// goroutines. Callers hand it a snapshot of every endpoint (readiness, load, what the index says
// each one holds of this request's prefix) and the request's shape, and get back a choice, ranked
// fallbacks and a reason. The router drives it for live traffic and kvbench drives the very same
// code in virtual time, so a policy measured in simulation is the policy that ships.
//
// A Policy carries a little state of its own: the round-robin cursor, two online latency models
// per endpoint (time to first token, fed through ObserveTTFT; inter-token latency, fed through
// ObserveITL), the fleet's inter-token latency line, a decayed count of the new prefixes
// recently placed on each endpoint and the share of requests that follow a prefix. It is not
// safe for concurrent use: the owner serialises calls (the router holds a mutex around Pick; a
// Pick costs microseconds).
package policy

// Policy is a routing policy with its state.
type Policy struct {
	cfg    Config
	rr     uint64
	models map[string]*LatencyModel
	// timed counts the first tokens fed to ObserveTTFT, and timedAt is each endpoint's count at
	// its last one: how long since its TTFT model saw the engine (see predict).
	timed   uint64
	timedAt map[string]uint64
	// fitA and fitB are the calibrated TTFT fits' intercepts and slopes, sorted, for the fleet's
	// median (fleetFit); fitsStale says they must be rebuilt (a fit moved, or an endpoint left).
	fitA, fitB []float64
	fitsStale  bool
	// decode holds one inter-token latency model per endpoint, and fleetDecode one fitted on
	// every endpoint's streams (ObserveITL).
	decode      map[string]*LatencyModel
	fleetDecode *LatencyModel
	// placed counts the new prefixes recently placed on each endpoint (see place and
	// notePlacement).
	placed map[string]float64
	// outCapped and outUncapped learn the share of its cap a request uses (ObserveOutput).
	outCapped, outUncapped outputStat
	// reuse is the decayed share of prefix-starting requests (a tokenized prompt of at least
	// one block) that found a holder worth following: how much the traffic follows its
	// prefixes (see interference). It starts at 1, the behaviour before any traffic is seen.
	reuse float64
	// followed is the same share over the last followedMemory of them (see followedReuse).
	followed float64
	// scratch buffers, reused across calls to keep Pick allocation-light.
	scores []candidate
}

// New returns a Policy for cfg.
func New(cfg Config) *Policy {
	return &Policy{cfg: cfg.withDefaults(), models: make(map[string]*LatencyModel), timedAt: make(map[string]uint64), fitsStale: true,
		decode: make(map[string]*LatencyModel), fleetDecode: NewDecodeModel(priorITL, priorITLSlope),
		placed: make(map[string]float64), reuse: 1, followed: 1}
}

// Config returns the effective configuration (defaults filled in).
func (p *Policy) Config() Config { return p.cfg }

// Forget drops what the policy learnt of an endpoint (it left the fleet; a namesake that comes
// back is a new engine).
func (p *Policy) Forget(endpoint string) {
	delete(p.models, endpoint)
	delete(p.timedAt, endpoint)
	p.fitsStale = true
	delete(p.decode, endpoint)
	delete(p.placed, endpoint)
}
