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

import "math"

// LatencyModel is an online fit of one endpoint's time to first token as a line in the prefill work
// queued in front of (and including) a request:
//
//	TTFT ≈ a + b·x,   x = uncached prefill tokens in flight on the endpoint + the request's own
//
// fitted by recursive least squares with exponential forgetting, so it follows an engine whose
// speed drifts (other tenants, thermal limits, a different model after a rollout) without any
// calibration recipe. The intercept a absorbs the fixed costs (network, scheduling, one decode
// step); the slope b is the inverse of the engine's effective prefill throughput as this router
// sees it. When several router replicas share the engines, each sees only its part of the queue,
// and the fitted slope grows to match: the model is calibrated against what this replica can see.
//
// A LatencyModel is not safe for concurrent use; the Policy that owns it is driven by one caller
// at a time.
type LatencyModel struct {
	// theta = (a, b); p is the 2×2 inverse-information matrix of RLS.
	a, b          float64
	p00, p01, p11 float64
	n             int
	// scale brings x to O(1) inside the RLS update (see xScale).
	scale float64
}

// Priors used before an endpoint has been observed and no other endpoint has either. They only
// have to be the right order of magnitude: a few observations replace them.
const (
	priorIntercept = 0.05        // seconds
	priorSlope     = 1.0 / 10000 // seconds per token: 10K tokens/s prefill
	// Decode priors: a 20 ms step, each active stream adding 0.2 ms. Only where the first
	// observations of an endpoint start from; the policy uses no decode cost before some
	// endpoint is calibrated.
	priorITL      = 0.02
	priorITLSlope = 0.0002
	// forgetting weights the last ~1/(1-λ) ≈ 50 observations.
	forgetting = 0.98
	// minSlope keeps the model monotone: more queued work never predicts a faster answer, even
	// when noisy observations would fit a flat or falling line.
	minSlope = 1e-7
	// calibratedAfter is the number of observations after which the fit is trusted over priors.
	calibratedAfter = 8
	// xScale brings token counts to O(1) inside the RLS update so that the covariance stays well
	// conditioned for prompts from 10 to 1M tokens.
	xScale = 1.0 / 10000
	// streamScale does the same for stream counts (1 to a few hundred) in the decode model.
	streamScale = 1.0 / 100
)

// NewLatencyModel returns a model that starts from the given intercept (seconds) and slope
// (seconds per token).
func NewLatencyModel(intercept, slope float64) *LatencyModel {
	return newLine(intercept, slope, xScale)
}

// NewDecodeModel returns a model of inter-token latency (seconds) as a line in the endpoint's
// active streams, starting from the given intercept (seconds) and slope (seconds per stream).
// It is the same online fit as the TTFT model, over another variable: a decode step reads every
// active stream's KV cache, so each stream on an engine slows every other one's tokens.
func NewDecodeModel(intercept, slope float64) *LatencyModel {
	return newLine(intercept, slope, streamScale)
}

func newLine(intercept, slope, scale float64) *LatencyModel {
	m := &LatencyModel{scale: scale}
	m.reset(intercept, slope)
	return m
}

func (m *LatencyModel) reset(intercept, slope float64) {
	m.a = intercept
	m.b = slope / m.scale
	// Large initial covariance: the priors give way after a handful of observations.
	m.p00, m.p01, m.p11 = 10, 0, 10
	m.n = 0
}

// Observe feeds one measured TTFT (seconds) for a request dispatched with x tokens of prefill
// work ahead of and including it. Non-finite or negative inputs are ignored: a broken clock
// must not poison the fit.
func (m *LatencyModel) Observe(x, ttft float64) {
	if !(x >= 0) || !(ttft >= 0) || math.IsInf(x, 0) || math.IsInf(ttft, 0) {
		return
	}
	xs := x * m.scale
	// phi = (1, xs). Standard RLS update with forgetting factor λ.
	pphi0 := m.p00 + m.p01*xs
	pphi1 := m.p01 + m.p11*xs
	denom := forgetting + pphi0 + xs*pphi1
	k0, k1 := pphi0/denom, pphi1/denom
	errPred := ttft - (m.a + m.b*xs)
	m.a += k0 * errPred
	m.b += k1 * errPred
	// P = (P - k phiᵀ P) / λ
	p00 := (m.p00 - k0*pphi0) / forgetting
	p01 := (m.p01 - k0*pphi1) / forgetting
	p11 := (m.p11 - k1*pphi1) / forgetting
	m.p00, m.p01, m.p11 = p00, p01, p11
	// Keep the covariance bounded when the inputs stop exciting the model (constant x), the
	// classic RLS wind-up.
	const pMax = 1e3
	if m.p00 > pMax || m.p11 > pMax {
		s := pMax / math.Max(m.p00, m.p11)
		m.p00 *= s
		m.p01 *= s
		m.p11 *= s
	}
	// The fit itself stays unclamped: clamping a or b here would feed the clamped value back
	// into the next update while the covariance keeps describing the unclamped one, and the
	// two drift apart until the slope explodes (seen in kvbench after about 1100 decode
	// observations of a flat ITL line). The floors apply where predictions are read (Params).
	m.n++
}

// Predict returns the expected latency in seconds at x (tokens of prefill work for a TTFT model,
// active streams for a decode model).
func (m *LatencyModel) Predict(x float64) float64 {
	if x < 0 {
		x = 0
	}
	// The slope's floor keeps predictions monotone; the line itself may cross zero (a fit of
	// near-free measurements at one x), so the floor on time applies to the prediction, not to
	// the intercept alone.
	return max(m.a+max(m.b, minSlope/m.scale)*x*m.scale, 0)
}

// Params returns the fitted intercept (seconds) and slope (seconds per token, or per stream).
func (m *LatencyModel) Params() (intercept, slope float64) {
	// Monotone and non-negative as read (minSlope); the fit underneath is left unclamped.
	return max(m.a, 0), max(m.b, minSlope/m.scale) * m.scale
}

// Observations is the number of TTFTs the model has seen.
func (m *LatencyModel) Observations() int { return m.n }

// Calibrated reports whether the fit has seen enough observations to stand on its own.
func (m *LatencyModel) Calibrated() bool { return m.n >= calibratedAfter }
