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

// loraCost is the time (seconds) an endpoint adds to a request's first token because of its LoRA
// adapter, which Pick adds to the predicted TTFT so that adapters weigh in every decision the way
// queued prefill does (cold placement, holder choice, release) rather than filtering endpoints:
// an engine that holds the adapter but is overloaded still loses to one that must load it.
//
//   - adapter active there (running or waiting requests, or this router's in flight): nothing;
//   - no free slot: vLLM admits the request only once every request of some other adapter has
//     left the batch, and keeps admitting requests of the adapters it holds meanwhile. The wait
//     is priced as one whole request's decode at the endpoint's inter-token latency with its
//     current streams (the learned decode model, or its priors before any stream is timed),
//     plus the load (Config.LoRALoad);
//   - a free slot: the load, plus a share of that wait growing with the slots it leaves taken,
//     loraSlotPressure × (active+1)/slots × active/slots. Taking the last free slots of an
//     engine is what makes the next adapter sent there wait; an empty engine's first slot costs
//     only the load. Priced at the load alone, new prefixes of an adapter spread over engines
//     as plain prefixes do, and the fleet loaded adapters far more often, with a much longer
//     TTFT tail at high load (docs/benchmarks.md);
//   - unknown (Slots 0: the endpoint does not report its adapters, or has not been scraped
//     since it failed): the load. Charging nothing would make such an endpoint look like one
//     holding the adapter, and send new adapters' prefixes to failing or silent engines.
func (p *Policy) loraCost(req Request, l LoRAState, streams int) float64 {
	if req.LoRA == "" {
		return 0
	}
	switch fitOf(l) {
	case loraActive:
		return 0
	case loraUnknown:
		return p.cfg.LoRALoad
	}
	d0, d1, ok := p.decodeFit()
	if !ok {
		d0, d1 = priorITL, priorITLSlope
	}
	wait := float64(p.expectedOutput(req)) * (d0 + d1*float64(streams))
	if l.Active < l.Slots {
		taken := float64(l.Active) / float64(l.Slots)
		return p.cfg.LoRALoad + loraSlotPressure*wait*taken*(taken+1/float64(l.Slots))
	}
	return p.cfg.LoRALoad + wait
}

// loraSlotPressure weighs the slot-wait share a free slot is charged (see loraCost). On lora-zipf
// a range of values around it all cut adapter loads and tail TTFT against 0, none clearly ahead
// of the others; 0.5 is the middle of that range.
const loraSlotPressure = 0.5

// loraFit is how a request's adapter fits an endpoint, best first.
type loraFit uint8

const (
	loraActive  loraFit = iota // active there (or known to be this router's in flight there)
	loraFree                   // a free adapter slot
	loraUnknown                // adapters not reported: a load at least, a slot wait perhaps
	loraFull                   // no free slot: wait for another adapter to drain
)

// fitOf is how a LoRA request fits an endpoint with adapter state l.
func fitOf(l LoRAState) loraFit {
	switch {
	case l.Resident:
		return loraActive
	case l.Slots <= 0:
		return loraUnknown
	case l.Active < l.Slots:
		return loraFree
	}
	return loraFull
}
