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

package simulate

// Disaggregated prefill/decode runs. A P/D policy on a workload with fleet.disaggregation sees
// the first engines as the prefill pool and the rest as the decode pool (Endpoint.Role). A
// request it splits runs the connector protocol of vLLM's disaggregation proxy in virtual time:
// a prefill leg (max_tokens 1, KV kept for the pull) on the prefill engine, the KV transfer of
// the blocks the decode engine lacks over the workload's transport, the prefill engine's blocks
// released, then the decode leg on the decode engine with the transferred tokens stored in its
// prefix cache (and announced by its KV events). Any other policy runs on the same engines
// unsplit: the same GPU budget, all aggregated.

import (
	"fmt"
	"strconv"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
	"github.com/kvrouter/kvrouter/internal/bench/peers"
	"github.com/kvrouter/kvrouter/internal/sim/engine"
	"github.com/kvrouter/kvrouter/internal/sim/timing"
)

// prefillPrefix marks a prefill leg's engine request ID; the decode leg (or a whole request)
// carries the bare request index.
const prefillPrefix = "p"

// pdRun is the P/D state of one run.
type pdRun struct {
	pol  peers.PDPolicy
	prof timing.Profile
	tr   timing.Transport
	// split counts requests whose prefill leg was accepted; whole those served aggregated
	// (by plan or after a failed prefill leg, which fallbacks counts again).
	split, whole, fallbacks, badPlans int
	// transfer and prefillLeg are seconds per split request: the KV transfer and the prefill
	// leg from dispatch to its answer.
	transfer, prefillLeg []float64
}

// pdLeg is one request's P/D progress.
type pdLeg struct {
	split           bool
	prefill, decode int     // engine indices
	sent            float64 // prefill leg dispatch time
	cached          int     // prompt tokens the prefill engine's cache served
}

// setupPD switches the run to P/D when the fleet is disaggregated and the policy plans P/D:
// the first Prefill engines become the prefill pool, the rest the decode pool.
func (s *sim) setupPD(prof timing.Profile) error {
	d := s.cfg.Spec.Fleet.Disaggregation
	if d == nil {
		return nil
	}
	pol, ok := s.pol.(peers.PDPolicy)
	if !ok {
		return nil
	}
	tr, err := timing.LookupTransport(d.Transport)
	if err != nil {
		return err
	}
	if d.Prefill+d.Decode != len(s.engines) {
		return fmt.Errorf("disaggregated fleet of %d prefill and %d decode engines, but %d engines", d.Prefill, d.Decode, len(s.engines))
	}
	s.pd = &pdRun{pol: pol, prof: prof, tr: tr}
	for i, e := range s.engines {
		if i < d.Prefill {
			e.name, e.role = fmt.Sprintf("prefill-%02d", i), peers.RolePrefill
		} else {
			e.name, e.role = fmt.Sprintf("decode-%02d", i-d.Prefill), peers.RoleDecode
		}
	}
	return nil
}

// arrivePD plans request i and starts it: whole on the plan's engine, or its prefill leg.
func (s *sim) arrivePD(i int, eps []peers.Endpoint) {
	st := &s.reqs[i]
	plan := s.pd.pol.PlanPD(&st.pr, eps)
	if plan.Shed {
		s.recs[i].Failed, s.recs[i].Shed = true, true
		s.finishOne(i)
		return
	}
	d, p := plan.Decode, plan.Prefill
	if d < 0 || d >= s.active {
		s.pd.badPlans++
		d = 0
	}
	if plan.Aggregated() || p >= s.active || p == d {
		if !plan.Aggregated() {
			s.pd.badPlans++
		}
		s.pd.whole++
		s.dispatch(i, d, 0)
		return
	}
	st.pd = pdLeg{split: true, prefill: p, decode: d, sent: s.now}
	s.recs[i].Endpoint = s.engines[d].name
	e := s.engines[p]
	s.pd.pol.PrefillDispatched(&st.pr, e.name)
	er := &engine.Request{ID: prefillPrefix + strconv.Itoa(i), Prompt: st.prompt, MaxTokens: 1,
		Seed: s.cfg.Spec.Seed + uint64(i), LoRA: st.w.Adapter, HoldKV: true}
	if !e.busy {
		e.eng.AdvanceTo(s.now)
	}
	if err := e.eng.Submit(er); err != nil {
		// The prefill engine refused the leg (the engine would answer 400): the request is
		// served whole on the decode engine, as the peers' proxies fall back.
		s.pd.pol.PrefillDone(&st.pr, e.name, 0, false)
		st.pd = pdLeg{}
		s.pd.fallbacks++
		s.pd.whole++
		s.dispatch(i, d, 0)
		return
	}
	s.pd.split++
	s.inflt[p]++
	// The decode engine is the request's destination from the plan on (llm-d's sidecar holds it
	// there while the prefill runs; a proxy owes it that stream): its router-local in-flight count
	// includes the request during the prefill leg and the transfer, so that a burst of arrivals
	// does not all see the decode pool as idle.
	s.inflt[d]++
	if !e.busy {
		s.kick(p)
	}
}

// prefillDone handles the answer of request i's prefill leg on engine j: the policy learns the
// leg's time and the KV transfer of the blocks the decode engine lacks starts.
func (s *sim) prefillDone(i, j int, r *engine.Request) {
	st := &s.reqs[i]
	secs := s.now - st.pd.sent
	st.pd.cached = r.CachedTokens()
	s.pd.prefillLeg = append(s.pd.prefillLeg, secs)
	s.pd.pol.PrefillDone(&st.pr, s.engines[j].name, secs, true)
	if rp, ok := s.pd.pol.(peers.DecodeAfterPrefill); ok {
		// This router picks the decode engine only now, on the fleet as it is after the prefill.
		if d := rp.RepickDecode(&st.pr, s.endpoints()); d >= 0 && d < s.active && s.engines[d].role == peers.RoleDecode {
			s.inflt[st.pd.decode]--
			s.inflt[d]++
			st.pd.decode = d
			s.recs[i].Endpoint = s.engines[d].name
		}
	}
	t := s.pd.prof.TransferTime(s.lackingTokens(i), s.pd.tr)
	s.pd.transfer = append(s.pd.transfer, t)
	s.push(s.now+t, evTransferDone, i, nil)
}

// lackingTokens is the prompt tokens of request i the decode engine pulls: the full blocks the
// engine takes from a transfer (never the last prompt token, which it recomputes) less the
// prefix its own cache holds now.
func (s *sim) lackingTokens(i int) int {
	st := &s.reqs[i]
	bs := s.ecfg.BlockSize
	transferable := (len(st.prompt) - 1) / bs * bs
	held := s.engines[st.pd.decode].eng.CachedPrefixTokens(st.prompt, st.w.Adapter, "")
	return max(0, transferable-held)
}

// transferDone ends request i's KV transfer: the prefill engine frees the blocks it held for
// the pull and the decode leg starts with the prompt's KV in place.
func (s *sim) transferDone(i int) {
	st := &s.reqs[i]
	p := s.engines[st.pd.prefill]
	p.eng.Release(prefillPrefix + strconv.Itoa(i))
	if !p.busy {
		// Freed blocks may let a waiting request in.
		p.eng.AdvanceTo(s.now)
		s.kick(st.pd.prefill)
	}
	st.pr.PrefilledOn = p.name
	s.inflt[st.pd.decode]-- // dispatch counts it again
	s.dispatch(i, st.pd.decode, len(st.prompt))
}

// extras adds the P/D figures of the run.
func (pd *pdRun) extras(extra map[string]float64) {
	if n := pd.split + pd.whole; n > 0 {
		extra["pd_split_share"] = float64(pd.split) / float64(n)
	}
	extra["pd_split_requests"] = float64(pd.split)
	extra["pd_prefill_fallbacks"] = float64(pd.fallbacks)
	extra["pd_bad_plans"] = float64(pd.badPlans)
	if len(pd.transfer) > 0 {
		extra["pd_transfer_ms_mean"] = 1000 * mean(pd.transfer)
		extra["pd_transfer_ms_p90"] = 1000 * metrics.Percentile(append([]float64(nil), pd.transfer...), 90)
	}
	if len(pd.prefillLeg) > 0 {
		extra["pd_prefill_leg_ms_mean"] = 1000 * mean(pd.prefillLeg)
		extra["pd_prefill_leg_ms_p90"] = 1000 * metrics.Percentile(append([]float64(nil), pd.prefillLeg...), 90)
	}
}

func mean(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}
