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

// Package kvevents decodes the KV-cache event batches that vLLM (and SGLang) engines publish over
// ZMQ: msgpack `[ts, events, data_parallel_rank]` batches whose events are either tagged arrays
// (vLLM <= 0.23) or tagged maps (vLLM >= 0.24). See docs/vllm-contract.md §1.
//
// Decoding is the router's hot path, so Decoder reuses every buffer it hands out: the slices in
// a decoded Batch alias the Decoder's arenas and the payload, and stay valid only until the next
// Decode call on the same Batch. Copy what you keep.
package kvevents

// Kind is the type of a KV-cache event.
type Kind uint8

const (
	// KindBlockStored announces newly cached blocks (full blocks of a request, or a tier copy).
	KindBlockStored Kind = iota + 1
	// KindBlockRemoved announces evicted blocks, by engine hash.
	KindBlockRemoved
	// KindAllBlocksCleared announces that the engine dropped its whole prefix cache.
	KindAllBlocksCleared
)

func (k Kind) String() string {
	switch k {
	case KindBlockStored:
		return "BlockStored"
	case KindBlockRemoved:
		return "BlockRemoved"
	case KindAllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "Unknown"
}

// Medium is the storage tier a block lives on. Engines name tiers in many ways (vLLM: GPU, CPU,
// FS, OBJ, STORAGE; SGLang: CPU_PINNED, CPU_TIER1, DISK, ...); routing only distinguishes three.
type Medium uint8

const (
	// MediumGPU is device memory; an absent or empty medium means GPU (vLLM's block pool).
	MediumGPU Medium = iota
	// MediumCPU is host memory (vLLM's CPU offloading tier, LMCache, SGLang's CPU tiers).
	MediumCPU
	// MediumStorage is anything slower: file system, object store, disk, external tiers.
	MediumStorage
	// NumMedia is the number of media; valid media are < NumMedia.
	NumMedia = 3
)

func (m Medium) String() string {
	switch m {
	case MediumGPU:
		return "gpu"
	case MediumCPU:
		return "cpu"
	case MediumStorage:
		return "storage"
	}
	return "unknown"
}

// ParseMedium maps an engine's medium name (case-insensitive) to a Medium. Empty means GPU;
// CPU-like names (CPU, CPU_PINNED, CPU_TIER1, CPU_TIER2) map to CPU; every other name is slower
// than host memory as far as routing cares, so it maps to storage.
func ParseMedium(name []byte) Medium {
	if len(name) == 0 || asciiEqualFold(name, "gpu") {
		return MediumGPU
	}
	if len(name) >= 3 && asciiEqualFold(name[:3], "cpu") {
		return MediumCPU
	}
	return MediumStorage
}

// SpecKind says which attention kind a KV-cache group holds (vLLM hybrid-attention models).
type SpecKind uint8

const (
	// SpecUnset: the event did not say (older vLLM, SGLang); treated as full attention.
	SpecUnset SpecKind = iota
	// SpecFullAttention: ordinary prefix-indexable attention blocks.
	SpecFullAttention
	// SpecOther: sliding window, Mamba and other kinds whose blocks are not a plain prefix.
	SpecOther
)

// Event is one decoded KV-cache event. Slices alias the Decoder's buffers and the payload.
type Event struct {
	Kind Kind
	// BlockHashes are the engine's block hashes, normalised to uint64 (bytes: last 8 bytes
	// big-endian; negative int64: two's complement), in chain order.
	BlockHashes []uint64
	// ParentHash is the engine hash of the block before BlockHashes[0], if HasParent.
	ParentHash uint64
	HasParent  bool
	// TokenIDs are the blocks' token ids, BlockSize per block (empty for hash-only tier events).
	// SGLang's bigram form ([[t0,t1],[t1,t2],...]) is flattened to its first elements.
	TokenIDs  []uint32
	BlockSize int
	Medium    Medium
	// LoRAName is the adapter name, "" for the base model. Interned: no allocation per event.
	LoRAName string
	// ExtraKeys is nil when the event carries none; otherwise one entry per block, each the raw
	// msgpack encoding of that block's extra-key tuple (nil entry: no extra keys). See
	// ExtraKeyItems for walking one.
	ExtraKeys [][]byte
	// GroupIdx is the KV-cache group (hybrid models); 0 by default.
	GroupIdx int
	SpecKind SpecKind
}

// Batch is one decoded event batch (one ZMQ message).
type Batch struct {
	// TS is the engine's wall-clock time of the batch, seconds since the Unix epoch.
	TS     float64
	Events []Event
	// DataParallelRank is the publishing rank, if HasRank.
	DataParallelRank int
	HasRank          bool

	hashes []uint64
	tokens []uint32
	extras [][]byte
}
