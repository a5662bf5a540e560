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

// Package kvevent holds the simulator's KV-cache events as plain values, independent of their wire
// encoding (internal/sim/kvpublish) so that the engine core and kvbench can use them without ZMQ.
package kvevent

import "github.com/kvrouter/kvrouter/internal/sim/blockhash"

// Kind says which vLLM event a value stands for.
type Kind uint8

// The three events of vllm/distributed/kv_events.py that a GPU block pool emits.
const (
	BlockStored Kind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

// MediumGPU is the only tier the simulator models.
const MediumGPU = "GPU"

// Event is one KV-cache event. Fields not used by a Kind are left zero.
type Event struct {
	Kind Kind
	// Hashes of the blocks stored or removed, in chain order for BlockStored.
	Hashes []blockhash.Hash
	// Parent is the hash of the block before Hashes[0]; zero when the run starts at token 0.
	Parent blockhash.Hash
	// Tokens are the token ids of the stored blocks, BlockSize per block.
	Tokens    []uint32
	BlockSize int
	LoRAName  string
	// ExtraKeys[i] are the extra keys hashed into block i (nil when none); same length as Hashes.
	ExtraKeys [][]string
	Medium    string
}

// Batch is what one scheduler step publishes: vLLM's KVEventBatch.
type Batch struct {
	// TS is the wall-clock time of the batch in seconds since the Unix epoch (vLLM's time.time()).
	TS     float64
	Events []Event
	// DPRank is the data-parallel rank of the publisher (always filled, like vLLM's publisher).
	DPRank int
}
