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

// Package kvindex is the router's exact prefix index: which engine holds which prefix blocks, on
// which medium, keyed by the blocks' content rather than the engines' hashes.
//
// A block's content key chains (parent key, the block's token ids, the LoRA name, the block's
// extra keys), so the router computes the same keys from a request's tokens (RequestKeys) as the
// index computes from engine events (Apply), whatever hash algorithm and seed the engines use.
// Engine hashes are kept per source only to resolve parents and removals.
//
// All methods are safe for concurrent use. Ingestion holds the write lock for one batch at a time
// (long batches are applied in slices), so lookups wait at most for one short slice.
package kvindex

import (
	"time"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
)

// Key is a block's content key: a 64-bit chained hash (collisions at 2.5M keys: ~2e-7).
type Key uint64

// SourceID names one event source: an engine endpoint (pod) and its data-parallel rank. Each
// rank of an engine has its own cache and its own event stream.
type SourceID struct {
	Endpoint string
	Rank     int
}

// KeyParams are the request attributes that enter the content key besides the tokens.
type KeyParams struct {
	// LoRAName is the adapter serving the request, "" for the base model.
	LoRAName string
	// CacheSalt is the request's cache_salt (vLLM mixes it into the first block only).
	CacheSalt string
}

// Config configures an Index.
type Config struct {
	// BlockSize is the engines' block size in tokens (--block-size). Events with another block
	// size are skipped and counted. Default 16.
	BlockSize int
	// MaxKeys caps the number of distinct content keys held; past it the least recently used
	// keys (stored or looked up) are evicted and counted. 0 means 4,194,304.
	MaxKeys int
	// PredictTTL is how long a predicted entry lives unless events confirm it. Default 2s.
	PredictTTL time.Duration
	// PredictHold bounds how long a prediction made with PredictPendingKeys lives before its
	// request is settled (SettleKeys): a safety net should the settle never come. Default 10m;
	// never less than PredictTTL.
	PredictHold time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// LookupOptions tune one Lookup.
type LookupOptions struct {
	KeyParams
	// MaxBlocks caps how many leading blocks are matched (0: all full blocks of the request).
	MaxBlocks int
}

// EndpointMatch is what one source holds of a request's prefix. All counts are leading blocks
// from block 0 (a hole ends the match), multiply by the block size for tokens.
type EndpointMatch struct {
	Source SourceID
	// Blocks[m] is the confirmed prefix resident on medium m (kvevents.MediumGPU, ...).
	Blocks [kvevents.NumMedia]int
	// AnyBlocks is the confirmed prefix where every block is resident on at least one medium.
	AnyBlocks int
	// PredictedBlocks is the GPU prefix when unexpired predicted entries count as resident
	// (>= Blocks[MediumGPU]).
	PredictedBlocks int
}

// Tokens converts a block count to tokens for this index's block size.
func (ix *Index) Tokens(blocks int) int { return blocks * ix.blockSize }

// ApplyStats says what one Apply did.
type ApplyStats struct {
	BlocksStored  int // block stores applied (duplicates included)
	BlocksRemoved int // block removals applied
	Cleared       bool
	// Skipped counts blocks that could not be placed: unknown parent, unknown engine hash,
	// block size mismatch, non-prefix attention kinds. Each reason is also a metric label.
	Skipped int
}

// Stats is a snapshot of the index's size and counters.
type Stats struct {
	Keys      int    // distinct content keys held
	Entries   int    // (source, engine block) records: the (block, endpoint) entries
	Sources   int    // sources with at least one entry or prediction
	Predicted int    // unexpired predicted (source, key) entries, approximately
	Evictions uint64 // keys evicted by the MaxKeys cap
}
