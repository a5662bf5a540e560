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

package admission

import (
	"time"

	"github.com/kvrouter/kvrouter/internal/router/policy"
)

// RouterTailHeadroom is the router's default --admission-tail-headroom: the p99 of the requests
// admitted at the bound ran 23–26 % over their predicted TTFT under overload
// (docs/reliability.md), so predictions are held to 70 % of the bound.
const RouterTailHeadroom = 0.7

// Predictor is the policy's TTFT model as admission reads it: the predicted time to first token
// on endpoint with work tokens of prefill queued there, and whether the prediction stands on
// measurements. *policy.Policy is one; the caller serialises access to it.
type Predictor interface {
	PredictTTFT(endpoint string, work int) (seconds float64, calibrated bool)
}

// The two functions below are the glue between the policy's view of the fleet and the
// Controller, shared by the router's proxy and kvbench's simulated router, so that the
// simulation sheds exactly what the router ships.

// CheckEarly applies the bounds before a request is tokenized and routed: each ready endpoint of
// eps is judged on its queue alone (no prefill of the request's own, a lower bound), and the
// request is shed only when none admits it. It records no shed.
func (c *Controller) CheckEarly(pr Predictor, p Priority, eps []policy.Endpoint, now time.Time) Decision {
	aeps := make([]Endpoint, 0, len(eps))
	for i := range eps {
		if !eps[i].Ready {
			continue
		}
		l := &eps[i].Load
		e := FromPolicy(&eps[i])
		fill(&e, pr, l.QueuedPrefillTokens+l.RemotePrefillTokens, 0)
		aeps = append(aeps, e)
	}
	return c.Check(p, aeps, -1, now)
}

// CheckRouted applies the bounds to the endpoint the policy chose in d, with the request's own
// predicted TTFT there, against the same eps the policy decided on. The policy does not see the
// slot queues admission prices, so when its choice is beyond an engine's bound the fallbacks are
// tried in the policy's order, charged the whole prompt (their cache is not weighed again, as on
// a retry): a request is refused only when no engine can take it in time, and when another can,
// d is rewritten to send it there. A decision without an endpoint is admitted (routing answers
// it). The returned Decision is the first refusal when none admits; record it with Shed.
func (c *Controller) CheckRouted(pr Predictor, p Priority, eps []policy.Endpoint, d *policy.Decision, promptTokens int, adapter string, now time.Time) Decision {
	if d.Endpoint == "" {
		return Decision{Admit: true}
	}
	aeps := make([]Endpoint, 0, len(eps))
	src := make([]int, 0, len(eps)) // index in eps of each of aeps
	chosen := -1
	for i := range eps {
		if eps[i].Ready {
			if eps[i].Name == d.Endpoint {
				chosen = len(aeps)
			}
			aeps = append(aeps, FromPolicy(&eps[i]))
			src = append(src, i)
		}
	}
	if chosen < 0 {
		return Decision{Admit: true} // the policy picks a ready endpoint; nothing to bound otherwise
	}
	fill(&aeps[chosen], pr, d.PrefillWork, d.UncachedTokens)
	aeps[chosen].TTFT = d.PredictedTTFT
	first := c.Check(p, aeps, chosen, now)
	if first.Admit || first.Reason == ReasonFleetQueue {
		return first // no other engine changes the fleet's queue
	}
	at := make(map[string]int, len(aeps)) // endpoint name → index in aeps
	for j := range aeps {
		at[aeps[j].Name] = j
	}
	for k, f := range d.Fallbacks {
		j, ok := at[f]
		if !ok {
			continue
		}
		l := &eps[src[j]].Load
		work := l.QueuedPrefillTokens + l.RemotePrefillTokens + promptTokens
		ttft := fill(&aeps[j], pr, work, promptTokens)
		if !c.Check(p, aeps, j, now).Admit {
			continue
		}
		rest := append([]string{d.Endpoint}, d.Fallbacks[:k]...)
		rest = append(rest, d.Fallbacks[k+1:]...)
		*d = policy.Decision{Endpoint: f, Fallbacks: rest, Reason: d.Reason, Shape: d.Shape,
			UncachedTokens: promptTokens, PrefillWork: work, PredictedTTFT: ttft,
			AdapterCold: adapter != "" && !l.LoRA.Resident}
		return Decision{Admit: true}
	}
	return first
}

// FromPolicy is admission's view of an endpoint's load, its prediction not yet filled in (fill).
func FromPolicy(e *policy.Endpoint) Endpoint {
	l := &e.Load
	return Endpoint{Name: e.Name, Queued: l.QueuedRequests + l.RemoteQueuedRequests,
		InFlight: l.InFlight, RemoteInFlight: l.RemoteInFlight, PeakRunning: l.PeakRunning,
		Running: l.Running, KVUsage: l.KVUsage}
}

// fill sets e's prediction for a request with work tokens of prefill there, own of them its own,
// and returns the predicted TTFT.
func fill(e *Endpoint, pr Predictor, work, own int) float64 {
	e.TTFT, e.Calibrated = pr.PredictTTFT(e.Name, work)
	e.ServiceTTFT = 0
	if e.Calibrated {
		e.ServiceTTFT, _ = pr.PredictTTFT(e.Name, own)
	}
	return e.TTFT
}
