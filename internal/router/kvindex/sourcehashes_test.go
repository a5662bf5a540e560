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

package kvindex_test

import (
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvevents/kveventstest"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
)

// SourceHashes lists the engine hashes a source holds on one medium, following stores, copies,
// removals and clears; Sources lists the sources with state, and forgets a removed endpoint.
func TestSourceHashesAndSources(t *testing.T) {
	ix := kvindex.New(kvindex.Config{BlockSize: bs})
	apply(t, ix, srcA, kveventstest.Stored{Hashes: []uint64{9, 3}, Tokens: toks(2*bs, 1), BlockSize: bs})
	apply(t, ix, srcA, kveventstest.Stored{Hashes: []uint64{3}, Medium: "CPU"})
	apply(t, ix, srcB, kveventstest.Stored{Hashes: []uint64{5}, Tokens: toks(bs, 1), BlockSize: bs})
	if got := ix.SourceHashes(srcA, kvevents.MediumGPU); !slices.Equal(got, []uint64{3, 9}) {
		t.Fatalf("GPU hashes of a: %v", got)
	}
	if got := ix.SourceHashes(srcA, kvevents.MediumCPU); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("CPU hashes of a: %v", got)
	}
	apply(t, ix, srcA, kveventstest.Removed{Hashes: []uint64{9}, Medium: "GPU"})
	if got := ix.SourceHashes(srcA, kvevents.MediumGPU); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("after removing 9: %v", got)
	}
	if got := ix.Sources(); !slices.Equal(got, []kvindex.SourceID{srcA, srcB}) {
		t.Fatalf("sources %v", got)
	}
	ix.ClearSource(srcB)
	if got := ix.SourceHashes(srcB, kvevents.MediumGPU); len(got) != 0 {
		t.Fatalf("after clearing b: %v", got)
	}
	ix.RemoveEndpoint("a")
	if got := ix.Sources(); !slices.Equal(got, []kvindex.SourceID{srcB}) {
		t.Fatalf("after removing a: %v", got)
	}
	if got := ix.SourceHashes(kvindex.SourceID{Endpoint: "nobody"}, kvevents.MediumGPU); got == nil || len(got) != 0 {
		t.Fatalf("unknown source: %v", got)
	}
}
