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
	"path/filepath"
	"strings"
	"testing"
)

func pdSpec() *Spec {
	return &Spec{
		Name: "pd", Kind: KindMix, Seed: 3,
		Fleet: Fleet{Profile: "h100-llama-3.1-8b-tp1", Disaggregation: &Disaggregation{Prefill: 2, Decode: 2}},
		Load:  Load{Rates: []float64{5}, Duration: 60},
		SLO:   SLO{TTFTSeconds: 1, ITLSeconds: 0.05},
		Mix: &Mix{
			Classes: []MixClass{
				{Name: "chat", Share: 1, Prefixes: 2, PrefixTokens: 100, MinPromptTokens: 10, MaxPromptTokens: 50, MinOutputTokens: 5, MaxOutputTokens: 9},
				{Name: "long", MinPromptTokens: 4000, MaxPromptTokens: 8000, MinOutputTokens: 3},
			},
			Bursts: &Bursts{Class: "long", EverySeconds: 10, Count: 4, SpreadSeconds: 1},
		},
	}
}

func TestDisaggregationDefaultsAndChecks(t *testing.T) {
	s := pdSpec()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Fleet.Engines != 4 || s.Fleet.Disaggregation.Transport != "rdma" {
		t.Fatalf("engines %d, transport %q: want 4 derived and rdma by default", s.Fleet.Engines, s.Fleet.Disaggregation.Transport)
	}
	for name, c := range map[string]struct {
		edit func(*Spec)
		want string
	}{
		"no prefill":     {func(s *Spec) { s.Fleet.Disaggregation.Prefill = 0 }, "prefill >= 1"},
		"no decode":      {func(s *Spec) { s.Fleet.Disaggregation.Decode = 0 }, "decode >= 1"},
		"bad transport":  {func(s *Spec) { s.Fleet.Disaggregation.Transport = "carrier-pigeon" }, "fleet.disaggregation.transport"},
		"engines differ": {func(s *Spec) { s.Fleet.Engines = 3 }, "must equal fleet.disaggregation"},
		"with scale-up":  {func(s *Spec) { s.ScaleUp = &ScaleUp{AtFraction: 0.5, Add: 1} }, "scaleUp cannot"},
		"no class":       {func(s *Spec) { s.Mix.Classes = nil }, "at least one class"},
		"burst of none":  {func(s *Spec) { s.Mix.Bursts.Class = "nope" }, "names no class"},
		"no share":       {func(s *Spec) { s.Mix.Classes[0].Share = 0 }, "add up"},
		"bad lengths":    {func(s *Spec) { s.Mix.Classes[0].MaxPromptTokens = 5 }, "minPromptTokens <= maxPromptTokens"},
		"no output":      {func(s *Spec) { s.Mix.Classes[1].MinOutputTokens = 0 }, "minOutputTokens"},
		"prefix alone":   {func(s *Spec) { s.Mix.Classes[0].PrefixTokens = 0 }, "go together"},
	} {
		s := pdSpec()
		c.edit(s)
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.want)
		}
	}
}

func TestMixDrawsClassesAndBursts(t *testing.T) {
	s := pdSpec()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := Generate(s, 5, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(s, 5, Options{})
	if len(a) != len(b) {
		t.Fatalf("one seed, %d then %d requests", len(a), len(b))
	}
	long := 0
	for i, r := range a {
		if i > 0 && r.At < a[i-1].At {
			t.Fatalf("request %d arrives before its predecessor", i)
		}
		if r.At != b[i].At || r.PromptLen() != b[i].PromptLen() || r.MaxTokens != b[i].MaxTokens {
			t.Fatalf("request %d differs between two generations with one seed", i)
		}
		if r.Session != "" {
			t.Fatalf("request %d carries session %q: a mix class is not a conversation", i, r.Session)
		}
		// The classes' answer lengths do not overlap: 3 tokens is the long class.
		switch {
		case r.MaxTokens == 3:
			long++
			if r.PromptLen() < 4000 || r.PromptLen() > 8000 {
				t.Fatalf("long request %d: %d prompt tokens", i, r.PromptLen())
			}
		case r.MaxTokens >= 5 && r.MaxTokens <= 9:
			if r.PromptLen() < 110 || r.PromptLen() > 150 {
				t.Fatalf("chat request %d: %d prompt tokens", i, r.PromptLen())
			}
		default:
			t.Fatalf("request %d: %d output tokens, in neither class", i, r.MaxTokens)
		}
	}
	// Bursts at 10, 20, ..., 50 s within the 60 s window, 4 each; the long class has no share
	// of the Poisson stream.
	if long != 20 {
		t.Fatalf("%d long requests, want 5 bursts of 4", long)
	}
}

func TestShippedPDWorkloadsLoad(t *testing.T) {
	files, _ := filepath.Glob("../../../bench/workloads/pd-*.yaml")
	if len(files) < 4 {
		t.Fatalf("found %d pd-*.yaml workloads", len(files))
	}
	for _, f := range files {
		s, err := LoadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if s.Fleet.Disaggregation == nil {
			t.Errorf("%s: no fleet.disaggregation", f)
		}
	}
}
