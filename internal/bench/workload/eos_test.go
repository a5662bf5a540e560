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
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"
)

// goldenSpecs are one spec of every kind, written in the test so that no workload file edit
// changes them.
func goldenSpecs(t *testing.T) map[string]*Spec {
	base := func(kind string) *Spec {
		return &Spec{Name: kind, Kind: kind, Seed: 7, Fleet: Fleet{Engines: 2, MaxModelLen: 4096}, Load: Load{Rates: []float64{8}, Requests: 300},
			SLO: SLO{TTFTSeconds: 1, ITLSeconds: 0.1}}
	}
	out := map[string]*Spec{}
	s := base(KindSharedPrefix)
	s.SharedPrefix = &SharedPrefix{Groups: 4, PromptsPerGroup: 3, SystemTokens: 500, QuestionTokens: 40, OutputTokens: 120}
	out[s.Kind] = s
	s = base(KindMultiTurn)
	s.MultiTurn = &Sessions{SystemPrompts: 2, SystemTokens: 300, Turns: 4, FirstTokens: 50, NewTokens: 30, OutputTokens: 80, ThinkSeconds: 2}
	out[s.Kind] = s
	s = base(KindAgentic)
	s.Agentic = &Sessions{SystemPrompts: 1, SystemTokens: 800, Turns: 6, FirstTokens: 100, NewTokens: 200, OutputTokens: 60, ThinkSeconds: 0.5}
	out[s.Kind] = s
	s = base(KindUnique)
	s.Unique = &Unique{PromptTokens: 3900, OutputTokens: 300}
	out[s.Kind] = s
	s = base(KindHotPrefix)
	s.HotPrefix = &PrefixMix{Prefixes: 10, HotShare: 0.6, PrefixTokens: 700, SuffixTokens: 30, OutputTokens: 90}
	out[s.Kind] = s
	s = base(KindZipf)
	s.Zipf = &PrefixMix{Prefixes: 40, S: 1.1, PrefixTokens: 600, SuffixTokens: 20, OutputTokens: 70}
	out[s.Kind] = s
	s = base(KindSiblings)
	s.Siblings = &Siblings{N: 4, PromptTokens: 400, OutputTokens: 50}
	out[s.Kind] = s
	s = base(KindLoRA)
	s.Fleet.MaxLoRAs = 4
	s.LoRA = &LoRAMix{Adapters: 8, S: 1.2, BaseShare: 0.2, PrefixesPerAdapter: 2, PrefixTokens: 300, SuffixTokens: 20, OutputTokens: 100}
	out[s.Kind] = s
	s = base(KindMix)
	s.Load = Load{Rates: []float64{8}, Duration: 30}
	s.Mix = &Mix{Classes: []MixClass{
		{Name: "chat", Share: 3, Prefixes: 3, PrefixTokens: 200, MinPromptTokens: 10, MaxPromptTokens: 100, MinOutputTokens: 20, MaxOutputTokens: 200},
		{Name: "doc", Share: 1, MinPromptTokens: 2000, MaxPromptTokens: 3000, MinOutputTokens: 50},
	}, Bursts: &Bursts{Class: "doc", EverySeconds: 5, Count: 3, SpreadSeconds: 1}}
	out[s.Kind] = s
	for k, s := range out {
		if err := s.Validate(); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	return out
}

// fingerprint hashes every field the old generator set (not OutputLen, which it did not have).
func fingerprint(reqs []Request) string {
	h := sha256.New()
	w := func(v uint64) {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	for _, r := range reqs {
		w(uint64(r.ID))
		w(math.Float64bits(r.At))
		w(uint64(int64(r.Parent)))
		w(uint64(r.MaxTokens))
		for _, s := range r.Segments {
			w(s.Seed)
			w(uint64(s.Len))
		}
		h.Write([]byte(r.Session))
		h.Write([]byte{0})
		h.Write([]byte(r.Adapter))
		h.Write([]byte{0})
		if r.Truncated {
			w(1)
		} else {
			w(0)
		}
	}
	return fmt.Sprintf("%x", h.Sum(nil))[:16]
}

// goldenFingerprints were taken from the generator before OutputLen and Options.EOS existed:
// with EOS off every request must still be what it was, field by field.
var goldenFingerprints = map[string]string{
	"agentic":       "aad7f2c24b447417",
	"hot-prefix":    "06a949a46fe730bf",
	"lora":          "3c81d3aed65c4c8f",
	"mix":           "e71d9aaf7cb2eb5c",
	"multi-turn":    "417edb1c942faf05",
	"shared-prefix": "a764e6b3b976d00c",
	"siblings":      "59d5f152a22fcd3f",
	"unique":        "06adc76a9907a129",
	"zipf":          "cf6e474808a5acc3",
	"azure":         "a0ef6a6bb0fb683b",
	"mooncake":      "910a3a599e006659",
}

// allSpecs is goldenSpecs and traceSpecs together.
func allSpecs(t *testing.T) map[string]*Spec {
	out := goldenSpecs(t)
	for k, s := range traceSpecs(t) {
		out[k] = s
	}
	return out
}

func generateBoth(t *testing.T, s *Spec, rate float64) (off, on []Request) {
	t.Helper()
	opt := Options{TracesDir: "../../../bench/traces", MaxPromptTokens: s.Fleet.MaxModelLen}
	if s.Kind == KindTrace {
		opt.MaxPromptTokens = 32768
	}
	off, err := Generate(s, rate, opt)
	if err != nil {
		t.Fatal(err)
	}
	opt.EOS = true
	on, err = Generate(s, rate, opt)
	if err != nil {
		t.Fatal(err)
	}
	return off, on
}

func TestEOSOffIsTheOldGenerator(t *testing.T) {
	for k, s := range allSpecs(t) {
		off, _ := generateBoth(t, s, s.Load.Rates[0])
		if got := fingerprint(off); got != goldenFingerprints[k] {
			t.Errorf("%s: with EOS off the requests changed (fingerprint %s, was %s)", k, got, goldenFingerprints[k])
		}
		for _, r := range off {
			if r.OutputLen != 0 {
				t.Fatalf("%s: request %d has OutputLen %d with EOS off", k, r.ID, r.OutputLen)
			}
		}
	}
}

func TestEOSOnChangesOnlyOutputLengths(t *testing.T) {
	for k, s := range allSpecs(t) {
		off, on := generateBoth(t, s, s.Load.Rates[0])
		if len(on) != len(off) {
			t.Fatalf("%s: %d requests with EOS on, %d off", k, len(on), len(off))
		}
		for i := range on {
			a, b := on[i], off[i]
			if a.ID != b.ID || a.At != b.At || a.Parent != b.Parent || a.Session != b.Session || a.Adapter != b.Adapter ||
				a.Truncated != b.Truncated || !slices.Equal(a.Segments, b.Segments) {
				t.Fatalf("%s: request %d differs beyond its output length:\n on %+v\noff %+v", k, i, a, b)
			}
			if a.OutputLen < 1 {
				t.Fatalf("%s: request %d has no true output length", k, i)
			}
		}
	}
}

func TestEOSCapIsFixedPerClass(t *testing.T) {
	specs := goldenSpecs(t)
	for k, s := range specs {
		off, on := generateBoth(t, s, s.Load.Rates[0])
		caps := map[int]bool{}
		longer := 0
		for i, r := range on {
			if k == KindMix {
				// chat requests open with a shared prefix; doc requests have one segment.
				want := map[bool]int{true: 800, false: 200}[len(r.Segments) == 2]
				if r.MaxTokens != want {
					t.Fatalf("mix: request %d capped at %d, want its class's %d", i, r.MaxTokens, want)
				}
				continue
			}
			caps[r.MaxTokens] = true
			if r.MaxTokens != max(64, 4*off[i].MaxTokens) {
				t.Fatalf("%s: request %d capped at %d, want 4 x nominal %d", k, i, r.MaxTokens, off[i].MaxTokens)
			}
			if r.OutputLen > off[i].MaxTokens {
				longer++
			}
		}
		if k != KindMix && len(caps) != 1 {
			t.Fatalf("%s: caps %v, want one per class", k, caps)
		}
		if k != KindMix && longer == 0 {
			t.Fatalf("%s: no request ran past its nominal length: the draw is not memoryless", k)
		}
	}
	s := specs[KindSharedPrefix]
	s.Output = &Output{CapTokens: 150}
	_, on := generateBoth(t, s, 8)
	capped := 0
	for _, r := range on {
		if r.MaxTokens != 150 {
			t.Fatalf("output.capTokens 150 not sent: %d", r.MaxTokens)
		}
		if r.OutputLen > r.MaxTokens {
			capped++
		}
	}
	if capped == 0 {
		t.Fatal("with a cap near the nominal length some requests must draw past it (they stop at the cap)")
	}
}

func TestEOSMeanIsNominalAndIndependentOfRate(t *testing.T) {
	s := goldenSpecs(t)[KindUnique]
	s.Unique.PromptTokens = 20
	s.Load.Requests = 20000
	_, a := generateBoth(t, s, 8)
	_, b := generateBoth(t, s, 64)
	sum := 0.0
	for i := range a {
		if a[i].OutputLen != b[i].OutputLen || a[i].MaxTokens != b[i].MaxTokens {
			t.Fatalf("request %d: length %d/%d at rate 8, %d/%d at rate 64: the draw must not depend on the rate",
				i, a[i].OutputLen, a[i].MaxTokens, b[i].OutputLen, b[i].MaxTokens)
		}
		sum += float64(a[i].OutputLen)
	}
	mean := sum / float64(len(a))
	if math.Abs(mean-300)/300 > 0.03 {
		t.Fatalf("mean drawn length %.1f, want the nominal 300 within 3%%", mean)
	}
}

func TestEOSTracesKeepRecordedLengths(t *testing.T) {
	for k, s := range traceSpecs(t) {
		off, on := generateBoth(t, s, 2)
		for i := range on {
			if on[i].OutputLen != off[i].MaxTokens || on[i].MaxTokens != max(DefaultTraceCap, off[i].MaxTokens) {
				t.Fatalf("%s: request %d: true %d cap %d, recorded %d", k, i, on[i].OutputLen, on[i].MaxTokens, off[i].MaxTokens)
			}
		}
		s.Output = &Output{CapTokens: 100}
		_, on = generateBoth(t, s, 2)
		leaked := 0
		for i := range on {
			if on[i].MaxTokens != max(100, off[i].MaxTokens) {
				t.Fatalf("%s: request %d capped at %d with capTokens 100 and recorded %d", k, i, on[i].MaxTokens, off[i].MaxTokens)
			}
			if off[i].MaxTokens > 100 {
				leaked++
			}
		}
		if leaked == 0 {
			t.Fatalf("%s: the test needs recorded answers above the cap", k)
		}
	}
}

func TestEOSLengthIsGeometric(t *testing.T) {
	if EOSLength(1, 1) != 1 || EOSLength(2, 0) != 1 {
		t.Fatal("a mean of 1 or less must give one token")
	}
	// Memoryless: P(L > 2m | L > m) = P(L > m), about e^-1 for a large mean.
	const m, n = 200, 40000
	over, over2 := 0, 0
	for i := range n {
		l := EOSLength(SeedOf(9, uint64(i)), m)
		if l > m {
			over++
		}
		if l > 2*m {
			over2++
		}
	}
	p1, p2 := float64(over)/n, float64(over2)/float64(over)
	if math.Abs(p1-math.Exp(-1)) > 0.02 || math.Abs(p2-p1) > 0.03 {
		t.Fatalf("P(L>m)=%.3f, P(L>2m|L>m)=%.3f: want both near %.3f", p1, p2, math.Exp(-1))
	}
}

// traceSpecs replay the vendored Azure and Mooncake conversation traces (400 requests each).
func traceSpecs(t *testing.T) map[string]*Spec {
	out := map[string]*Spec{}
	for _, tr := range []*Trace{{Format: "azure", File: "AzureLLMInferenceTrace_conv.csv"}, {Format: "mooncake", File: "conversation_trace.jsonl", BlockTokens: 512}} {
		s := &Spec{Name: tr.Format, Kind: KindTrace, Seed: 3, Fleet: Fleet{Engines: 2}, Load: Load{Rates: []float64{2}, Requests: 400},
			SLO: SLO{TTFTSeconds: 1, ITLSeconds: 0.1}, Trace: tr}
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		out[tr.Format] = s
	}
	return out
}
