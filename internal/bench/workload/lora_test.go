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
	"strings"
	"testing"
)

func loraWorkload() *Spec {
	return &Spec{
		Name: "l", Kind: KindLoRA, Seed: 3,
		Fleet: Fleet{Engines: 2, MaxLoRAs: 2},
		Load:  Load{Rates: []float64{10}, Requests: 2000},
		SLO:   SLO{TTFTSeconds: 1, ITLSeconds: 0.1},
		LoRA:  &LoRAMix{Adapters: 5, S: 1.5, BaseShare: 0.2, PrefixesPerAdapter: 3, PrefixTokens: 64, SuffixTokens: 8, OutputTokens: 4},
	}
}

func TestLoRAWorkloadDrawsAdaptersByPopularity(t *testing.T) {
	s := loraWorkload()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Fleet.LoRALoadSeconds != 0.025 {
		t.Fatalf("default load time %v", s.Fleet.LoRALoadSeconds)
	}
	reqs, err := Generate(s, 10, Options{})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	prefixes := map[string]map[uint64]bool{}
	for _, r := range reqs {
		count[r.Adapter]++
		if prefixes[r.Adapter] == nil {
			prefixes[r.Adapter] = map[uint64]bool{}
		}
		prefixes[r.Adapter][r.Segments[0].Seed] = true
	}
	base := float64(count[""]) / float64(len(reqs))
	if base < 0.15 || base > 0.25 {
		t.Fatalf("base-model share %.2f, want about 0.2", base)
	}
	// Zipf(1.5): the first adapter is the most popular and the last the least.
	if !(count[AdapterName(0)] > count[AdapterName(1)] && count[AdapterName(1)] > count[AdapterName(4)] && count[AdapterName(4)] > 0) {
		t.Fatalf("adapter counts %v do not follow the Zipf order", count)
	}
	if len(count) != 6 {
		t.Fatalf("%d distinct models, want 5 adapters and the base", len(count))
	}
	// Each adapter (and the base) has its own prefixes, never another's.
	owner := map[uint64]string{}
	for a, ps := range prefixes {
		if len(ps) != 3 {
			t.Fatalf("%q used %d prefixes, want 3", a, len(ps))
		}
		for p := range ps {
			if o, ok := owner[p]; ok {
				t.Fatalf("prefix shared by %q and %q", o, a)
			}
			owner[p] = a
		}
	}
}

func TestLoRAWorkloadValidation(t *testing.T) {
	for _, c := range []struct {
		mut  func(*Spec)
		want string
	}{
		{func(s *Spec) { s.Fleet.MaxLoRAs = 0 }, "kind lora needs fleet.maxLoRAs >= 1"},
		{func(s *Spec) { s.LoRA.Adapters = 0 }, "lora.adapters and lora.prefixesPerAdapter must be at least 1"},
		{func(s *Spec) { s.LoRA.BaseShare = 1 }, "lora.baseShare must be within [0, 1)"},
		{func(s *Spec) { s.LoRA.OutputTokens = 0 }, "lora needs a prompt"},
		{func(s *Spec) { s.Fleet.LoRALoadSeconds = -1 }, "must not be negative"},
		{func(s *Spec) { s.LoRA = nil }, "kind lora needs a lora section"},
	} {
		s := loraWorkload()
		c.mut(s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}
