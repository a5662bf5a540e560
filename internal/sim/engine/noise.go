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

package engine

import (
	"math"
	"math/rand/v2"
)

// stepNoise draws the multiplicative step-time factors of Config.StepNoise: lognormal with mean
// 1 and the given coefficient of variation. Lognormal because a step is never faster than its
// kernels allow by much while slow outliers stretch further (the right tail of real step times).
type stepNoise struct {
	rng       *rand.Rand
	mu, sigma float64
}

func newStepNoise(cv float64, seed uint64) *stepNoise {
	if !(cv > 0) {
		return nil
	}
	// For lognormal(mu, sigma): mean = exp(mu + sigma²/2), CV² = exp(sigma²) - 1.
	s2 := math.Log1p(cv * cv)
	return &stepNoise{rng: rand.New(rand.NewPCG(seed, 0x73746570)), mu: -s2 / 2, sigma: math.Sqrt(s2)}
}

func (n *stepNoise) factor() float64 { return math.Exp(n.mu + n.sigma*n.rng.NormFloat64()) }
