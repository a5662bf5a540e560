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

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestLoRAAffinityScores(t *testing.T) {
	e := Endpoint{RunningLoRAs: []string{"a"}, WaitingLoRAs: []string{"b"}, MaxLoRAs: 2}
	for _, c := range []struct {
		ep    Endpoint
		model string
		want  float64
	}{
		{e, "a", 1},   // active
		{e, "b", 0.6}, // waiting, no room left
		{e, "c", 0},   // neither, no room
		{Endpoint{RunningLoRAs: []string{"a"}, MaxLoRAs: 2}, "c", 0.8}, // room for one more
		{Endpoint{RunningLoRAs: []string{"a"}, MaxLoRAs: 2}, "", 0.8},  // the base model is a model name like any other
		{Endpoint{}, "a", 0}, // no LoRA reported: no room by the scorer's rule
	} {
		if got := loraAffinity(c.ep, c.model); got != c.want {
			t.Errorf("%+v for %q: %v, want %v", c.ep, c.model, got, c.want)
		}
	}
}

func TestLLMDLoRAPrefersThePodWithTheAdapter(t *testing.T) {
	p := newLLMDLoRA(Env{BlockSize: 16, Rand: rand.New(rand.NewPCG(1, 2))})
	eps := []Endpoint{
		{Name: "full", RunningLoRAs: []string{"x"}, MaxLoRAs: 1},
		{Name: "room", MaxLoRAs: 1},
		{Name: "has", RunningLoRAs: []string{"a"}, MaxLoRAs: 1},
	}
	r := &Request{ID: 1, Tokens: make([]uint32, 200), Adapter: "a"}
	if i := p.Pick(r, eps); eps[i].Name != "has" {
		t.Fatalf("picked %s, want the pod with the adapter", eps[i].Name)
	}
	eps[2].RunningLoRAs = []string{"y"}
	if i := p.Pick(&Request{ID: 2, Tokens: make([]uint32, 200), Adapter: "a"}, eps); eps[i].Name != "room" {
		t.Fatalf("picked %s, want the pod with a free slot", eps[i].Name)
	}
}

func TestModelHashesSeparateAdapters(t *testing.T) {
	tokens := make([]uint32, 256)
	base := ChainHashes(tokens, 64, true, 0)
	a := modelHashes(ChainHashes(tokens, 64, true, 0), "a")
	b := modelHashes(ChainHashes(tokens, 64, true, 0), "b")
	if !slices.Equal(modelHashes(slices.Clone(base), ""), base) {
		t.Fatal("base-model hashes changed")
	}
	for i := range a {
		if a[i] == b[i] || a[i] == base[i] {
			t.Fatalf("block %d: the same hash for two models", i)
		}
	}
}
