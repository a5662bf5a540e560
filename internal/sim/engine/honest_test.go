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
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/sim/timing"
)

func TestEOSAfterStopsBeforeTheCap(t *testing.T) {
	e := newEngine(t, nil)
	early := &Request{ID: "eos", Prompt: tokens(1, 40), MaxTokens: 100, EOSAfter: 7, Seed: 1}
	capped := &Request{ID: "cap", Prompt: tokens(500, 40), MaxTokens: 5, EOSAfter: 30, Seed: 2}
	plain := &Request{ID: "plain", Prompt: tokens(900, 40), MaxTokens: 12, Seed: 3}
	for _, r := range []*Request{early, capped, plain} {
		if err := e.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	var lastOf = map[string]int{}
	for _, st := range runAll(t, e) {
		for _, tok := range st.Tokens {
			if tok.Last {
				lastOf[tok.Req.ID] = len(tok.Req.Output)
			}
		}
	}
	for _, c := range []struct {
		r    *Request
		want int
	}{{early, 7}, {capped, 5}, {plain, 12}} {
		if len(c.r.Output) != c.want || lastOf[c.r.ID] != c.want {
			t.Errorf("%s: %d outputs (last token at %d), want %d", c.r.ID, len(c.r.Output), lastOf[c.r.ID], c.want)
		}
	}
	if e.Stats().GenerationTokens != 7+5+12 {
		t.Fatalf("generation tokens %d, want %d", e.Stats().GenerationTokens, 7+5+12)
	}
}

func TestEOSAfterStillStopsAtContextLength(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.MaxModelLen = 100 })
	r := &Request{ID: "a", Prompt: tokens(1, 40), MaxTokens: 1000, EOSAfter: 500, Seed: 1}
	if err := e.Submit(r); err != nil {
		t.Fatal(err)
	}
	runAll(t, e)
	if len(r.Output) != 60 {
		t.Fatalf("%d outputs, want 60 (the context length)", len(r.Output))
	}
}

// durations runs one long request on an engine with the given noise and returns each step's time.
func durations(t *testing.T, cv float64, seed uint64) []float64 {
	t.Helper()
	e := newEngine(t, func(c *Config) { c.StepNoise, c.NoiseSeed = cv, seed })
	if err := e.Submit(&Request{ID: "a", Prompt: tokens(1, 300), MaxTokens: 4000, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	var out []float64
	for _, st := range runAll(t, e) {
		out = append(out, st.Duration)
	}
	return out
}

func TestStepNoise(t *testing.T) {
	clean := durations(t, 0, 1)
	if again := durations(t, 0, 99); !slices.Equal(clean, again) {
		t.Fatal("without noise the seed must not matter")
	}
	// Zero noise is the profile's step time exactly (the batch is the same whatever the noise).
	e := newEngine(t, nil)
	if err := e.Submit(&Request{ID: "a", Prompt: tokens(1, 300), MaxTokens: 2, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if st := e.Step(); st.Duration != e.Config().Profile.StepTime(prefillBatch(300)) || st.Duration != clean[0] {
		t.Fatalf("noiseless prefill took %v, the profile says %v", st.Duration, e.Config().Profile.StepTime(prefillBatch(300)))
	}

	const cv = 0.1
	a, b, c := durations(t, cv, 7), durations(t, cv, 7), durations(t, cv, 8)
	if !slices.Equal(a, b) {
		t.Fatal("the same noise seed must give the same step times")
	}
	if slices.Equal(a, c) {
		t.Fatal("different noise seeds gave the same step times")
	}
	if len(a) != len(clean) {
		t.Fatalf("noise changed the number of steps: %d vs %d", len(a), len(clean))
	}
	var sum, sq float64
	for i := range a {
		f := a[i] / clean[i]
		sum += f
		sq += f * f
	}
	n := float64(len(a))
	mean := sum / n
	sd := math.Sqrt(sq/n - mean*mean)
	if math.Abs(mean-1) > 0.01 || math.Abs(sd/mean-cv) > 0.01 {
		t.Fatalf("noise factors: mean %.4f CV %.4f over %d steps, want 1 and %.2f", mean, sd/mean, len(a), cv)
	}
}

func prefillBatch(n int) timing.Batch {
	var b timing.Batch
	b.Add(n, 0)
	return b
}
