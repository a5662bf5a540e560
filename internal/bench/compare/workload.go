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

import "fmt"

// Workload is a synthetic fleet: every endpoint holds PromptsPerEndpoint prompts, each a prefix
// followed by a question of its own. SharedPrefixes > 0 draws the prefixes from that many shared
// ones (the sizing point's 20 system prompts); 0 gives every prompt a prefix of its own (the
// worst case for memory: one key per entry).
type Workload struct {
	Name               string
	Endpoints          int
	PromptsPerEndpoint int
	SharedPrefixes     int
	PrefixTokens       int
	QuestionTokens     int
	BlockSize          int
	// ChunkTokens is how many tokens one BlockStored event carries: a prefill step of a chunked
	// prefill, so long prompts arrive as several chained events as they do from vLLM.
	ChunkTokens int
}

// EventKind is the engine event type; both indexes get the same sequence.
type EventKind uint8

const (
	Stored EventKind = iota + 1
	Removed
	Cleared
)

// Event is one engine event before either router decodes it into its own types.
type Event struct {
	Kind      EventKind
	Hashes    []uint64
	Parent    uint64
	HasParent bool
	Tokens    []uint32
}

// Message is one event batch (one ZMQ message) from one endpoint.
type Message struct {
	Endpoint int
	Events   []Event
}

// Lookup is one request the routers score, with its name in the report.
type Lookup struct {
	Name   string
	Tokens []uint32
}

// Stream is the whole workload: Build fills the fleet, Churn replaces every question
// (BlockRemoved + BlockStored) and restarts endpoint 0 (AllBlocksCleared, then its prompts again
// with new questions). Lookups run against the state Build leaves.
type Stream struct {
	W       Workload
	Build   []Message
	Churn   []Message
	Lookups []Lookup
	// Entries is the number of (block, endpoint) entries after Build.
	Entries int
	// BuildBlocks and ChurnBlocks count stored + removed blocks.
	BuildBlocks, ChurnBlocks int
	// Stale is a request whose answer the two indexes legitimately disagree on after Churn:
	// endpoint 0's question from before its restart (see Generate).
	Stale []uint32
	// Current are the prompts the fleet holds after Churn, one per (endpoint, prompt).
	Current [][]uint32
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// tokens returns n deterministic token ids below 151,000 (a Qwen-sized vocabulary) for a seed.
func tokens(seed uint64, n int) []uint32 {
	out := make([]uint32, n)
	s := splitmix(seed)
	for i := range out {
		s = splitmix(s)
		out[i] = uint32(s % 151000)
	}
	return out
}

// engineHash chains an engine block hash from content alone, so that every engine computes the
// same hash for the same block: the aligned PYTHONHASHSEED that llm-d's index needs (it maps
// engine hashes to its keys fleet-wide). kvrouter resolves engine hashes per source and needs
// no such alignment; giving it the same hashes costs it nothing.
func engineHash(parent uint64, toks []uint32) uint64 {
	h := parent ^ 0x51ed270b27a1c3d9
	for _, t := range toks {
		h = (h ^ uint64(t)) * 0x100000001b3
	}
	return splitmix(h) | 1
}

func (w Workload) prefixID(e, k int) uint64 {
	if w.SharedPrefixes == 0 {
		return uint64(1_000_000 + e*w.PromptsPerEndpoint + k)
	}
	return uint64((e + k*w.SharedPrefixes/w.PromptsPerEndpoint) % w.SharedPrefixes)
}

func (w Workload) prompt(e, k, gen int) []uint32 {
	p := tokens(w.prefixID(e, k)<<8, w.PrefixTokens)
	q := tokens(uint64(2_000_000_000+(e*w.PromptsPerEndpoint+k)*16+gen)<<8, w.QuestionTokens)
	return append(p, q...)
}

// store emits the BlockStored events of toks[from:] (full blocks only), chained to parent, in
// chunks of ChunkTokens; it returns the engine hashes of all full blocks of toks.
func (w Workload) store(e int, toks []uint32, fromBlock int, hashes []uint64, out *[]Message) ([]uint64, int) {
	bs := w.BlockSize
	n := len(toks) / bs
	hashes = hashes[:fromBlock]
	var parent uint64
	if fromBlock > 0 {
		parent = hashes[fromBlock-1]
	}
	per := max(1, w.ChunkTokens/bs)
	stored := 0
	for b := fromBlock; b < n; b += per {
		end := min(n, b+per)
		ev := Event{Kind: Stored, Parent: parent, HasParent: b > 0, Tokens: toks[b*bs : end*bs]}
		for i := b; i < end; i++ {
			parent = engineHash(parent, toks[i*bs:(i+1)*bs])
			ev.Hashes = append(ev.Hashes, parent)
			hashes = append(hashes, parent)
		}
		stored += end - b
		*out = append(*out, Message{Endpoint: e, Events: []Event{ev}})
	}
	return hashes, stored
}

// Generate builds the stream. Build interleaves endpoints prompt by prompt, as requests arrive
// across a fleet. Churn replaces each question (its blocks removed, the new ones stored after
// the prefix), then restarts endpoint 0: AllBlocksCleared and its prompts stored again with yet
// other questions. llm-d v0.5.0 ignores AllBlocksCleared (pool.go: `case AllBlocksCleared:
// continue`), so it keeps endpoint 0's pre-restart questions; Stale is one of them.
func Generate(w Workload) *Stream {
	if w.PromptsPerEndpoint < 1 || w.Endpoints < 1 || w.BlockSize < 1 {
		panic(fmt.Sprintf("bad workload %+v", w))
	}
	s := &Stream{W: w}
	prefixBlocks := w.PrefixTokens / w.BlockSize
	hashes := make([][][]uint64, w.Endpoints)
	for e := range hashes {
		hashes[e] = make([][]uint64, w.PromptsPerEndpoint)
	}
	for k := 0; k < w.PromptsPerEndpoint; k++ {
		for e := 0; e < w.Endpoints; e++ {
			var n int
			hashes[e][k], n = w.store(e, w.prompt(e, k, 0), 0, nil, &s.Build)
			s.BuildBlocks += n
			s.Entries += n
		}
	}
	// Engines must not hold one block twice: prompts of one endpoint share no prefix, and a
	// question starts at a block boundary only when the prefix ends on one.
	if w.PrefixTokens%w.BlockSize != 0 {
		panic("PrefixTokens must be a multiple of BlockSize")
	}
	if w.QuestionTokens > 0 {
		for k := 0; k < w.PromptsPerEndpoint; k++ {
			for e := 0; e < w.Endpoints; e++ {
				old := hashes[e][k][prefixBlocks:]
				s.Churn = append(s.Churn, Message{Endpoint: e, Events: []Event{{Kind: Removed, Hashes: append([]uint64(nil), old...)}}})
				s.ChurnBlocks += len(old)
				var n int
				hashes[e][k], n = w.store(e, w.prompt(e, k, 1), prefixBlocks, hashes[e][k], &s.Churn)
				s.ChurnBlocks += n
			}
		}
	}
	s.Churn = append(s.Churn, Message{Endpoint: 0, Events: []Event{{Kind: Cleared}}})
	gen := 1
	if w.QuestionTokens > 0 {
		gen = 2
		s.Stale = w.prompt(0, 0, 1)
	}
	for k := 0; k < w.PromptsPerEndpoint; k++ {
		var n int
		_, n = w.store(0, w.prompt(0, k, gen), 0, nil, &s.Churn)
		s.ChurnBlocks += n
	}
	for e := 0; e < w.Endpoints; e++ {
		for k := 0; k < w.PromptsPerEndpoint; k++ {
			g := min(1, gen)
			if e == 0 {
				g = gen
			}
			s.Current = append(s.Current, w.prompt(e, k, g))
		}
	}
	full := w.prompt(0, 0, 0)
	s.Lookups = []Lookup{{Name: fmt.Sprintf("%dK", (len(full)+500)/1000), Tokens: full}}
	if len(full) > 4096 {
		s.Lookups = append(s.Lookups, Lookup{Name: "4K", Tokens: full[:4096]})
	}
	return s
}
