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

package peers

import "math/rand/v2"

// random is llm-d's random-picker (docs/peer-policies.md §1.0, the "random-scheduling" baseline
// of §6.1): uniform over the candidates.
type random struct {
	nop
	rng *rand.Rand
}

func newRandom(e Env) Policy { return &random{rng: e.Rand} }

func (p *random) Pick(_ *Request, eps []Endpoint) int { return p.rng.IntN(len(eps)) }
