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

package policyinput

import (
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/policy"
)

func TestCachedSplitsTiersDisjointly(t *testing.T) {
	m := kvindex.EndpointMatch{AnyBlocks: 10, PredictedBlocks: 12}
	m.Blocks[kvevents.MediumGPU] = 4
	m.Blocks[kvevents.MediumCPU] = 7
	got := Cached(m, 16)
	want := policy.Cached{GPU: 64, CPU: 48, Storage: 48, Predicted: 32}
	if got != want {
		t.Fatalf("got %+v want %+v", got, want)
	}
	if got.Total() != 12*16 {
		t.Fatalf("parts add up to %d tokens, want the predicted prefix %d", got.Total(), 12*16)
	}
}

func TestCachedPredictionsBeyondGPUOnly(t *testing.T) {
	// Nothing confirmed: the whole predicted prefix is credited as predicted.
	m := kvindex.EndpointMatch{PredictedBlocks: 5}
	if got := Cached(m, 64); got != (policy.Cached{Predicted: 320}) {
		t.Fatalf("got %+v", got)
	}
	// Predictions inside the confirmed prefix add nothing.
	m = kvindex.EndpointMatch{AnyBlocks: 6, PredictedBlocks: 6}
	m.Blocks[kvevents.MediumGPU] = 6
	if got := Cached(m, 64); got != (policy.Cached{GPU: 384}) {
		t.Fatalf("got %+v", got)
	}
}

func TestTieBreakHashesWholePrompt(t *testing.T) {
	a := []uint32{1, 2, 3, 4}
	b := []uint32{1, 2, 3, 5}
	if TieBreak(a, 0) != TieBreak(append([]uint32(nil), a...), 7) {
		t.Fatal("identical prompts must tie-break alike")
	}
	if TieBreak(a, 0) == TieBreak(b, 0) {
		t.Fatal("prompts differing in the last token should differ")
	}
	if TieBreak(nil, 1) == TieBreak(nil, 2) {
		t.Fatal("token-less requests should spread by counter")
	}
}

func TestTieBreakSeesEveryToken(t *testing.T) {
	base := make([]uint32, 1003)
	for i := range base {
		base[i] = uint32(i * 7919)
	}
	h := TieBreak(base, 1)
	if TieBreak(slices.Clone(base), 2) != h {
		t.Fatal("same tokens, different tie-break")
	}
	seen := map[uint64]bool{h: true}
	for _, pos := range []int{0, 1, 2, 3, 4, 5, 6, 7, 500, 1001, 1002} {
		v := slices.Clone(base)
		v[pos]++
		if seen[TieBreak(v, 1)] {
			t.Fatalf("changing token %d does not change the tie-break", pos)
		}
		seen[TieBreak(v, 1)] = true
	}
	if TieBreak(base[:1002], 1) == h || TieBreak(nil, 1) == TieBreak(nil, 2) {
		t.Fatal("length or sequence ignored")
	}
}
