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
	"context"

	"github.com/go-logr/logr"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvcache/kvblock"
	"k8s.io/apimachinery/pkg/util/sets"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// llm-d's event pool (pkg/kvevents) and its Indexer (pkg/kvcache) cannot be imported with
// CGO_ENABLED=0: the first also holds the ZMQ subscriber (cgo), the second the tokenizers (cgo).
// So this file drives llm-d's kvblock package the way those two use it, written here from what
// they do, not copied: a stored block's engine hashes and its parent's request key (looked up by
// the parent's engine hash) go to Index.Add with the request keys the TokenProcessor derives from
// the block's tokens; a removal is Index.Evict per engine hash; a lookup is the TokenProcessor's
// keys, Index.Lookup and a longest-prefix count. Every call into kvblock is llm-d's own code.
// Not reproduced: the Indexer also formats a debug string of every matched key's pods on each
// request (a cost that grows with the matched keys), so this benchmark's "router path" for llm-d
// is a lower bound of what its Indexer spends.

const llmdModel = "Qwen/Qwen3-32B"

func init() {
	// llm-d runs with a logger whose trace level is off; without one, controller-runtime warns
	// after 30 s. Discard disables the same calls.
	ctrllog.SetLogger(logr.Discard())
}

// llmdEvent is one KV event as llm-d's pool has it after decoding (GPU medium, no LoRA).
type llmdEvent struct {
	kind      EventKind
	hashes    []kvblock.BlockHash
	parent    kvblock.BlockHash
	hasParent bool
	tokens    []uint32
}

type llmdMessage struct {
	pod    string
	events []llmdEvent
}

func llmdMessages(_ Workload, msgs []Message) []llmdMessage {
	out := make([]llmdMessage, len(msgs))
	for i, m := range msgs {
		out[i].pod = endpointName(m.Endpoint)
		for _, ev := range m.Events {
			e := llmdEvent{kind: ev.Kind, parent: kvblock.BlockHash(ev.Parent), hasParent: ev.HasParent, tokens: ev.Tokens}
			e.hashes = make([]kvblock.BlockHash, len(ev.Hashes))
			for j, h := range ev.Hashes {
				e.hashes[j] = kvblock.BlockHash(h)
			}
			out[i].events = append(out[i].events, e)
		}
	}
	return out
}

// llmdSide is llm-d's precise prefix-cache path: kvblock's in-memory index fed as its event pool
// feeds it, queried as its Indexer queries it.
type llmdSide struct {
	index kvblock.Index
	tp    kvblock.TokenProcessor
	keys  []kvblock.BlockHash
	match map[string]int
}

// newLLMD configures the in-memory index to hold the whole workload: Size stays at its default
// (1e8 keys, far above any workload here), PodCacheSize (pods kept per key, default 10) is raised
// to the fleet size, without which a block held by more than 10 endpoints would lose some.
func newLLMD(w Workload) *llmdSide {
	idx, err := kvblock.NewIndex(context.Background(), &kvblock.IndexConfig{
		InMemoryConfig: &kvblock.InMemoryIndexConfig{Size: 1e8, PodCacheSize: max(10, w.Endpoints)},
	})
	if err != nil {
		panic(err)
	}
	return &llmdSide{index: idx, tp: kvblock.NewChunkedTokenDatabase(&kvblock.TokenProcessorConfig{BlockSize: w.BlockSize})}
}

// apply feeds the messages to the index and returns how many events it could not apply (a
// parent it does not know, an index error), which the pool would log and skip.
func (s *llmdSide) apply(msgs []llmdMessage) int {
	ctx := context.Background()
	failed := 0
	for i := range msgs {
		pod := []kvblock.PodEntry{{PodIdentifier: msgs[i].pod, DeviceTier: "gpu"}}
		for _, ev := range msgs[i].events {
			switch ev.kind {
			case Stored:
				parent := kvblock.EmptyBlockHash
				if ev.hasParent {
					key, err := s.index.GetRequestKey(ctx, ev.parent)
					if err != nil {
						failed++
						continue
					}
					parent = key
				}
				if len(ev.hashes) == 0 {
					continue
				}
				keys := s.tp.TokensToKVBlockKeys(parent, ev.tokens, llmdModel)
				if err := s.index.Add(ctx, ev.hashes, keys, pod); err != nil {
					failed++
				}
			case Removed:
				for _, h := range ev.hashes {
					if err := s.index.Evict(ctx, h, pod); err != nil {
						failed++
					}
				}
			case Cleared:
				// llm-d v0.5.0's pool ignores AllBlocksCleared (compare_test.go checks it).
			}
		}
	}
	return failed
}

// lookup is the Indexer's path after tokenization: keys from tokens, the index, the scoring.
func (s *llmdSide) lookup(tokens []uint32) {
	s.prepareKeys(tokens)
	s.lookupKeys()
}

// lookupKeys is the index and the scoring alone, over keys computed beforehand.
func (s *llmdSide) lookupKeys() {
	if len(s.keys) == 0 {
		s.match = nil
		return
	}
	keyToPods, err := s.index.Lookup(context.Background(), s.keys, sets.New[string]())
	if err != nil {
		panic(err)
	}
	s.match = leadingBlocks(s.keys, keyToPods)
}

func (s *llmdSide) prepareKeys(tokens []uint32) {
	s.keys = s.tp.TokensToKVBlockKeys(kvblock.EmptyBlockHash, tokens, llmdModel)
}

// leadingBlocks counts, per pod, the blocks it holds from the first one on without a hole:
// llm-d's default longest-prefix score when every block is on GPU (weight 1).
func leadingBlocks(keys []kvblock.BlockHash, keyToPods map[kvblock.BlockHash][]kvblock.PodEntry) map[string]int {
	held := map[string]int{}
	for _, e := range keyToPods[keys[0]] {
		held[e.PodIdentifier] = 1
	}
	for i := 1; i < len(keys) && len(held) > 0; i++ {
		still := map[string]bool{}
		for _, e := range keyToPods[keys[i]] {
			still[e.PodIdentifier] = true
		}
		progressed := false
		for pod, n := range held {
			if n == i && still[pod] {
				held[pod] = n + 1
				progressed = true
			}
		}
		if !progressed {
			break
		}
	}
	return held
}

// answer is the last lookup's leading blocks per pod.
func (s *llmdSide) answer() map[string]int {
	out := make(map[string]int, len(s.match))
	for pod, n := range s.match {
		if n > 0 {
			out[pod] = n
		}
	}
	return out
}
