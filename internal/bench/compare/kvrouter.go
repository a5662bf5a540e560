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
	"fmt"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
)

// kvrouterSide drives kvindex as the router does: each decoded batch goes to Index.Apply under
// its source, and a request is scored with AppendLookup over its tokens (keys hashed inside).
type kvrouterSide struct {
	ix      *kvindex.Index
	sources []kvindex.SourceID
	buf     []kvindex.EndpointMatch
	keys    []kvindex.Key
}

// kvrouterBatch is a message already decoded into kvrouter's types (what kvevents.Decoder
// hands the index), so that only the index is timed.
type kvrouterBatch struct {
	src   int
	batch kvevents.Batch
}

func kvrouterBatches(w Workload, msgs []Message) []kvrouterBatch {
	out := make([]kvrouterBatch, len(msgs))
	for i, m := range msgs {
		out[i].src = m.Endpoint
		for _, ev := range m.Events {
			var kev kvevents.Event
			switch ev.Kind {
			case Stored:
				kev = kvevents.Event{Kind: kvevents.KindBlockStored, BlockHashes: ev.Hashes, ParentHash: ev.Parent,
					HasParent: ev.HasParent, TokenIDs: ev.Tokens, BlockSize: w.BlockSize, Medium: kvevents.MediumGPU}
			case Removed:
				kev = kvevents.Event{Kind: kvevents.KindBlockRemoved, BlockHashes: ev.Hashes, Medium: kvevents.MediumGPU}
			case Cleared:
				kev = kvevents.Event{Kind: kvevents.KindAllBlocksCleared}
			}
			out[i].batch.Events = append(out[i].batch.Events, kev)
		}
	}
	return out
}

func newKVRouter(w Workload) *kvrouterSide {
	s := &kvrouterSide{ix: kvindex.New(kvindex.Config{BlockSize: w.BlockSize})}
	for e := 0; e < w.Endpoints; e++ {
		s.sources = append(s.sources, kvindex.SourceID{Endpoint: endpointName(e)})
	}
	return s
}

func endpointName(e int) string { return fmt.Sprintf("10.0.%d.%d:8000", e/250, e%250) }

// apply returns the number of blocks the index could not place (0 on a sound stream).
func (s *kvrouterSide) apply(batches []kvrouterBatch) int {
	skipped := 0
	for i := range batches {
		skipped += s.ix.Apply(s.sources[batches[i].src], &batches[i].batch).Skipped
	}
	return skipped
}

// lookup is the router's per-request call: keys from tokens, then the prefix match. The
// answer stays in s.buf (see answer), so that the timed call is only what the router does.
func (s *kvrouterSide) lookup(tokens []uint32) {
	s.buf = s.ix.AppendLookup(s.buf[:0], tokens, kvindex.LookupOptions{})
}

// lookupKeys is the index alone, over keys hashed beforehand (see prepareKeys).
func (s *kvrouterSide) lookupKeys() {
	s.buf = s.ix.AppendLookupKeys(s.buf[:0], s.keys)
}

func (s *kvrouterSide) prepareKeys(tokens []uint32) {
	s.keys = kvindex.RequestKeys(s.keys[:0], tokens, s.ix.BlockSize(), kvindex.KeyParams{})
}

// answer is the last lookup's result: endpoint -> leading blocks held on GPU.
func (s *kvrouterSide) answer() map[string]int {
	out := make(map[string]int, len(s.buf))
	for _, m := range s.buf {
		if n := m.Blocks[kvevents.MediumGPU]; n > 0 {
			out[m.Source.Endpoint] = n
		}
	}
	return out
}

func (s *kvrouterSide) entries() int { return s.ix.Stats().Entries }
