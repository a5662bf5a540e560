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

package main

import (
	"maps"
	"strconv"
	"testing"
)

// smallWorkloads are the benchmark's three shapes at a size a test runs in a second. hot has
// more endpoints than llm-d keeps pods per key by default (10), so that its configuration is
// checked too.
func smallWorkloads(blockSize int) []Workload {
	return []Workload{
		{Name: "shared", Endpoints: 12, PromptsPerEndpoint: 2, SharedPrefixes: 4, PrefixTokens: 1024, QuestionTokens: 320, BlockSize: blockSize, ChunkTokens: 256},
		{Name: "disjoint", Endpoints: 8, PromptsPerEndpoint: 2, PrefixTokens: 1024, QuestionTokens: 320, BlockSize: blockSize, ChunkTokens: 256},
		{Name: "hot", Endpoints: 14, PromptsPerEndpoint: 1, SharedPrefixes: 1, PrefixTokens: 1536, BlockSize: blockSize, ChunkTokens: 256},
	}
}

// The comparison is only fair if both indexes give the same answers: for every prompt the fleet
// holds (and its first blocks, and a prompt nobody holds), the same endpoints with the same
// number of leading blocks, after Build and after Churn.
func TestBothIndexesAnswerAlike(t *testing.T) {
	for _, bs := range []int{16, 64} {
		for _, w := range smallWorkloads(bs) {
			t.Run(w.Name+"/"+strconv.Itoa(bs), func(t *testing.T) {
				s := Generate(w)
				kv, ld := newKVRouter(w), newLLMD(w)
				if n := kv.apply(kvrouterBatches(w, s.Build)); n != 0 {
					t.Fatalf("kvrouter skipped %d blocks of Build", n)
				}
				if n := ld.apply(llmdMessages(w, s.Build)); n != 0 {
					t.Fatalf("llm-d failed %d events of Build", n)
				}
				if got := kv.entries(); got != s.Entries {
					t.Fatalf("kvrouter holds %d entries, the workload %d", got, s.Entries)
				}
				var prompts [][]uint32
				for e := 0; e < w.Endpoints; e++ {
					for k := 0; k < w.PromptsPerEndpoint; k++ {
						prompts = append(prompts, w.prompt(e, k, 0))
					}
				}
				check(t, "after Build", kv, ld, w, prompts, s.Lookups)
				if n := kv.apply(kvrouterBatches(w, s.Churn)); n != 0 {
					t.Fatalf("kvrouter skipped %d blocks of Churn", n)
				}
				if n := ld.apply(llmdMessages(w, s.Churn)); n != 0 {
					t.Fatalf("llm-d failed %d events of Churn", n)
				}
				check(t, "after Churn", kv, ld, w, s.Current, nil)

				if s.Stale == nil {
					return
				}
				// The one known difference: llm-d ignores AllBlocksCleared, so it still credits
				// endpoint 0 with the question it held before its restart.
				kv.lookup(s.Stale)
				ld.lookup(s.Stale)
				name := endpointName(0)
				prefix := w.PrefixTokens / w.BlockSize
				full := len(s.Stale) / w.BlockSize
				if got := kv.answer()[name]; got != prefix {
					t.Errorf("kvrouter: endpoint 0 holds %d blocks of its pre-restart prompt, want the %d of the prefix", got, prefix)
				}
				if got := ld.answer()[name]; got != full {
					t.Errorf("llm-d: endpoint 0 holds %d blocks of its pre-restart prompt; v0.5.0 ignores AllBlocksCleared, want %d (has llm-d changed?)", got, full)
				}
			})
		}
	}
}

func check(t *testing.T, when string, kv *kvrouterSide, ld *llmdSide, w Workload, prompts [][]uint32, extra []Lookup) {
	t.Helper()
	reqs := append([]Lookup(nil), extra...)
	for _, p := range prompts {
		reqs = append(reqs, Lookup{Name: "prompt", Tokens: p}, Lookup{Name: "first blocks", Tokens: p[:min(len(p), 3*w.BlockSize+5)]})
	}
	reqs = append(reqs, Lookup{Name: "nobody's", Tokens: tokens(42, 40*w.BlockSize)})
	matched := 0
	for i, r := range reqs {
		kv.lookup(r.Tokens)
		ld.lookup(r.Tokens)
		a, b := kv.answer(), ld.answer()
		if !maps.Equal(a, b) {
			t.Fatalf("%s, request %d (%s): kvrouter %v, llm-d %v", when, i, r.Name, a, b)
		}
		kv.prepareKeys(r.Tokens)
		kv.lookupKeys()
		ld.prepareKeys(r.Tokens)
		ld.lookupKeys()
		if !maps.Equal(kv.answer(), a) || !maps.Equal(ld.answer(), b) {
			t.Fatalf("%s, request %d (%s): the lookup over precomputed keys answers differently", when, i, r.Name)
		}
		matched += len(a)
	}
	if matched == 0 {
		t.Fatalf("%s: no request matched anything: the workload is not exercised", when)
	}
}
