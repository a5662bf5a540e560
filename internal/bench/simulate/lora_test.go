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

package simulate

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/bench/workload"
)

func loraSpec() *workload.Spec {
	s := &workload.Spec{
		Name: "tiny-lora", Kind: workload.KindLoRA, Seed: 9,
		Fleet: workload.Fleet{Engines: 4, Profile: "h100-llama-3.1-8b-tp1", BlockSize: 16, MaxLoRAs: 2},
		Load:  workload.Load{Rates: []float64{40}, Requests: 120},
		SLO:   workload.SLO{TTFTSeconds: 1, ITLSeconds: 0.1},
		LoRA:  &workload.LoRAMix{Adapters: 8, PrefixesPerAdapter: 2, PrefixTokens: 320, SuffixTokens: 32, OutputTokens: 16},
	}
	if err := s.Validate(); err != nil {
		panic(err)
	}
	return s
}

func TestLoRAAdapterAwareRoutingLoadsFewerAdapters(t *testing.T) {
	s := loraSpec()
	rr, kv, ll := run(t, s, "round-robin"), run(t, s, "kvrouter"), run(t, s, "llmd-lora")
	for name, r := range map[string]float64{"round-robin": rr.Extra["lora_loads"], "kvrouter": kv.Extra["lora_loads"], "llmd-lora": ll.Extra["lora_loads"]} {
		if r <= 0 {
			t.Fatalf("%s: no adapter loads reported", name)
		}
	}
	// Eight adapters on four engines of two slots each: spreading every adapter everywhere
	// swaps adapters all the time; keeping each on few engines does not.
	if kv.Extra["lora_loads"] >= rr.Extra["lora_loads"]/2 || ll.Extra["lora_loads"] >= rr.Extra["lora_loads"] {
		t.Fatalf("adapter loads: kvrouter %v, llmd-lora %v, round-robin %v", kv.Extra["lora_loads"], ll.Extra["lora_loads"], rr.Extra["lora_loads"])
	}
	if kv.Extra["lora_top_engine_share"] <= rr.Extra["lora_top_engine_share"] {
		t.Fatalf("kvrouter spread adapters as much as round-robin: %v vs %v", kv.Extra["lora_top_engine_share"], rr.Extra["lora_top_engine_share"])
	}
}

func TestLoRAOffHasNoAdapterFigures(t *testing.T) {
	if _, ok := run(t, tinySpec(), "round-robin").Extra["lora_loads"]; ok {
		t.Fatal("a fleet without LoRA reports adapter figures")
	}
}
