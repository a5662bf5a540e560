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

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

func TestLatencyModelConverges(t *testing.T) {
	m := NewLatencyModel(priorIntercept, priorSlope)
	for i := 0; i < 200; i++ {
		x := float64((i * 7919) % 50000)
		noise := 0.01 * math.Sin(float64(i))
		m.Observe(x, 0.1+x/4000+noise)
	}
	a, b := m.Params()
	if math.Abs(a-0.1) > 0.02 || math.Abs(b-1.0/4000)/(1.0/4000) > 0.02 {
		t.Fatalf("fit a=%g b=%g, want 0.1, %g", a, b, 1.0/4000)
	}
	if !m.Calibrated() {
		t.Fatal("not calibrated after 200 observations")
	}
	// Garbage is ignored.
	m.Observe(math.NaN(), 1)
	m.Observe(10, math.Inf(1))
	m.Observe(-1, 1)
	if a2, b2 := m.Params(); a2 != a || b2 != b {
		t.Fatal("invalid observation changed the fit")
	}
	// It follows drift: the engine gets twice as slow.
	for i := 0; i < 300; i++ {
		x := float64((i * 7919) % 50000)
		m.Observe(x, 0.1+x/2000)
	}
	if _, b := m.Params(); math.Abs(b-1.0/2000)/(1.0/2000) > 0.05 {
		t.Fatalf("did not follow drift: b=%g", b)
	}
	// Constant input must not wind the covariance up into nonsense.
	for i := 0; i < 10000; i++ {
		m.Observe(1000, 0.6)
	}
	if got := m.Predict(1000); math.Abs(got-0.6) > 0.01 {
		t.Fatalf("predict after constant input %g", got)
	}
	if got := m.Predict(0); got < 0 || math.IsNaN(got) {
		t.Fatalf("predict(0) %g", got)
	}
}

func TestDecodeModelFitsTheLine(t *testing.T) {
	m := NewDecodeModel(priorITL, priorITLSlope)
	for i := 0; i < 200; i++ {
		s := float64(i % 150)
		m.Observe(s, 0.012+0.0004*s)
	}
	a, b := m.Params()
	if math.Abs(a-0.012) > 0.001 || math.Abs(b-0.0004) > 0.00002 {
		t.Fatalf("fit a=%.4f b=%.6f, want 0.012 and 0.0004", a, b)
	}
}

// TestLatencyModelStaysBoundedOnFlatDecodeLine replays the decode observations that drove the
// fit to a slope of 1e32 while the floors were applied inside the update (kvbench, kvrouter-pd
// on pd-long-prompt: an almost flat ITL line over streams): the fit must track the data to the
// end, not diverge.
func TestLatencyModelStaysBoundedOnFlatDecodeLine(t *testing.T) {
	raw, err := os.ReadFile("testdata/itl-divergence-obs.txt")
	if err != nil {
		t.Fatal(err)
	}
	var xs, ys []float64
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var x, y float64
		if _, err := fmt.Sscan(line, &x, &y); err != nil {
			t.Fatalf("bad observation %q: %v", line, err)
		}
		xs, ys = append(xs, x), append(ys, y)
	}
	if len(xs) < 1000 {
		t.Fatalf("only %d observations, the divergence needs about 1100", len(xs))
	}
	lo, hi := ys[0], ys[0]
	for _, y := range ys {
		lo, hi = min(lo, y), max(hi, y)
	}
	m := NewDecodeModel(priorITL, priorITLSlope)
	for i := range xs {
		// Each prediction, before the observation, must stay within the data's own range
		// (with room for the early priors): a diverging fit leaves it by orders of magnitude.
		if got := m.Predict(xs[i]); i >= 50 && (got < lo/2 || got > 2*hi || math.IsNaN(got)) {
			a, b := m.Params()
			t.Fatalf("observation %d: predicted %g s at %g streams, data within [%g, %g] (fit a=%g b=%g)", i, got, xs[i], lo, hi, a, b)
		}
		m.Observe(xs[i], ys[i])
	}
	if _, b := m.Params(); b > hi-lo || b < 0 {
		t.Fatalf("slope %g s per stream after %d observations spanning %g s", b, len(xs), hi-lo)
	}
}

// The fleet's median fit kept sorted between first tokens is the median computed afresh, for
// every endpoint left out in turn, as fits move and endpoints leave.
func TestFleetFitMatchesMedianFit(t *testing.T) {
	p := New(Config{})
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "b", "c", "d", "e", "f", "g"}
	check := func() {
		t.Helper()
		for _, n := range append(names, "new") {
			a, b, ok := p.fleetFit(n)
			wa, wb, wok := medianFit(p.models, n)
			if ok != wok || a != wa || b != wb {
				t.Fatalf("fleetFit(%s) = %v %v %v, medianFit %v %v %v", n, a, b, ok, wa, wb, wok)
			}
		}
	}
	check()
	for i := range 400 {
		n := names[rng.IntN(len(names))]
		w := 500 + rng.IntN(20000)
		p.ObserveTTFT(n, w, 0.02+float64(w)*(1e-4+1e-5*float64(i%5)))
		check()
		if i%97 == 0 {
			p.Forget(names[rng.IntN(len(names))])
			check()
		}
	}
}

// Engines whose fits differ by less than fitBand are predicted on the fleet's line, so a prompt
// goes to the shorter queue rather than to the engine whose fit happens to read faster; an
// engine clearly slower than the line is still predicted, and avoided, on its own fit.
func TestEnginesWithinTheBandAreComparedOnTheFleetsLine(t *testing.T) {
	setup := func(slope1 float64) (*Policy, []Endpoint) {
		p := New(Config{Kind: Auto})
		for i, slope := range []float64{1e-4, slope1, 1e-4} {
			for x := 10000; x <= 100000; x += 10000 {
				p.ObserveTTFT(fmt.Sprintf("e%d", i), x, priorIntercept+slope*float64(x))
			}
		}
		eps := fleet(3)
		eps[0].Load.QueuedPrefillTokens = 2000
		eps[2].Load.QueuedPrefillTokens = 100000
		return p, eps
	}
	line := priorIntercept + 1e-4*20000

	p, eps := setup(1.2e-4) // 20 % slower by its own fit: noise, within the band
	if got, _ := p.PredictTTFT("e1", 20000); math.Abs(got-line) > 0.01*line {
		t.Fatalf("within the band: e1 predicted %.3f s for 20,000 tokens, want the fleet's line, %.3f s", got, line)
	}
	if d := p.Pick(prefillReq(20000), eps); d.Endpoint != "e1" {
		t.Fatalf("within the band: placed on %s, behind a queue, not on the idle e1", d.Endpoint)
	}

	p, eps = setup(2e-4) // twice as slow: an engine that is
	own := priorIntercept + 2e-4*20000
	if got, _ := p.PredictTTFT("e1", 20000); math.Abs(got-own) > 0.02*own {
		t.Fatalf("beyond the band: e1 predicted %.3f s for 20,000 tokens, want its own fit, %.3f s", got, own)
	}
	if d := p.Pick(prefillReq(20000), eps); d.Endpoint != "e0" {
		t.Fatalf("beyond the band: placed on %s, not on e0, whose queue costs less than e1's speed", d.Endpoint)
	}
}
