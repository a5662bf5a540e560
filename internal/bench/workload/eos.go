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

package workload

import (
	"math"
	"math/rand/v2"
)

// eosTag separates the EOS draws' random stream from every other seed of the workload, so that
// turning EOS on changes output lengths only (arrivals and prompts come from other streams).
const eosTag = 0x454f53

// DefaultTraceCap is the cap a trace request is sent with when output.capTokens is unset: a
// typical client max_tokens, above nearly every recorded answer.
const DefaultTraceCap = 4096

// Output is the optional output section of a workload: what clients send as max_tokens when
// output lengths are drawn independently of it (Options.EOS).
type Output struct {
	// CapTokens is every request's max_tokens. 0: four times the class's nominal output length
	// (at least 64) for synthetic kinds, DefaultTraceCap for traces.
	CapTokens int `json:"capTokens,omitempty"`
}

// capFor is the cap of a request class whose nominal output length is nominal. It depends on
// the class only, never on a drawn length: a cap that did would tell the router the answer.
func (s *Spec) capFor(nominal int) int {
	if s.Output != nil && s.Output.CapTokens > 0 {
		return s.Output.CapTokens
	}
	return max(64, 4*nominal)
}

// applyEOS turns the generated requests' MaxTokens (the nominal lengths) into the true lengths
// and caps of Options.EOS. Synthetic kinds draw the true length from a memoryless EOS with the
// nominal length as its mean; traces keep the recorded length as the true one and send a fixed
// cap above it (the recorded length where it is larger: those few requests leak their length).
func applyEOS(s *Spec, reqs []Request) {
	for i := range reqs {
		r := &reqs[i]
		nominal := r.MaxTokens
		if s.Kind == KindTrace {
			r.OutputLen = nominal
			capTokens := DefaultTraceCap
			if s.Output != nil && s.Output.CapTokens > 0 {
				capTokens = s.Output.CapTokens
			}
			r.MaxTokens = max(capTokens, nominal)
			continue
		}
		r.OutputLen = EOSLength(SeedOf(s.Seed, eosTag, uint64(r.ID)), nominal)
		if r.classCap > 0 {
			r.MaxTokens = r.classCap
		} else {
			r.MaxTokens = s.capFor(nominal)
		}
		r.classCap = 0
	}
}

// EOSLength draws an output length from a memoryless end of sequence with the given mean: the
// model stops after each token with probability 1/mean, so the length is geometric on 1, 2, ...
// (the same seed gives the same length).
func EOSLength(seed uint64, mean int) int {
	if mean <= 1 {
		return 1
	}
	u := rand.New(rand.NewPCG(seed, eosTag)).Float64()
	// Inverse CDF: P(L > k) = (1-p)^k. 1-u is in (0, 1], so the log is finite.
	n := 1 + math.Floor(math.Log(1-u)/math.Log1p(-1/float64(mean)))
	return int(min(n, math.MaxInt32))
}
