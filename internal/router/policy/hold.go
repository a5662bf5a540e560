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

// DefaultHoldAfter is Config.HoldAfter's default, in seconds of prefill queued ahead: a few
// thousand prompt tokens on an H100 (10-16K prefill tokens/s for an 8B model, 4-11K for a 32B
// TP2 one), one or a few chunked-prefill steps. An engine with less than that queued starts a
// new request within a step or two, and holding the request back could only leave it idle
// between the first token that frees it and the release; one with more has its next steps
// spoken for, and a request committed to it now would only wait there instead of in the
// router. In kvbench, 0.25 s to 1 s changed thrashing at 2× saturation by less than the seed
// noise (docs/router.md#router-queue).
const DefaultHoldAfter = 0.5

// ShouldHold reports whether a new request should wait in the router's queue (internal/router/
// queue) rather than be sent to any of eps now: no ready endpoint is expected to start it soon.
// Committing it to an engine's own queue then would only fix, at arrival, which queue it waits
// in; held in the router it goes, when released, to whichever engine frees first, with its
// cache affinity judged on the load of that moment.
//
// An endpoint can start a request soon when the prefill queued there (this router's and the
// others', as the TTFT model prices it: slope × tokens, the intercept left out since every
// endpoint pays it) is at most Config.HoldAfter, and it is under the admission limit.
func (p *Policy) ShouldHold(eps []Endpoint) bool {
	if p.cfg.HoldAfter <= 0 {
		return false
	}
	ready := false
	for i := range eps {
		if !eps[i].Ready {
			continue
		}
		ready = true
		if p.CanStart(&eps[i]) {
			return false
		}
	}
	return ready
}

// CanStart reports whether e is expected to start a new request soon: it is ready, under the
// admission limit, and the prefill queued there takes at most Config.HoldAfter. Always true
// when holding is off.
func (p *Policy) CanStart(e *Endpoint) bool {
	if p.cfg.HoldAfter <= 0 {
		return e.Ready
	}
	if !e.Ready || (p.cfg.MaxInFlight > 0 && e.Load.InFlight+e.Load.RemoteInFlight >= p.cfg.MaxInFlight) {
		return false
	}
	return p.queuedWait(e) <= p.cfg.HoldAfter
}

// queuedWait is how long the prefill already queued on e is expected to take (seconds).
func (p *Policy) queuedWait(e *Endpoint) float64 {
	return p.slope(e.Name) * float64(e.Load.QueuedPrefillTokens+e.Load.RemotePrefillTokens)
}
