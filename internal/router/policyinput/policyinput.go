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

// Package policyinput converts what the prefix index says about a request into the policy's
// input. The router (internal/router/proxy) and kvbench's simulation (internal/bench/peers) both call
// it, so a policy measured in simulation sees exactly the input it sees in production.
package policyinput

import (
	"math/bits"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/policy"
)

// Cached splits an index match into disjoint per-tier token counts: the GPU prefix, then what
// slower tiers add beyond it (CPU, then storage), then what predictions add beyond everything
// confirmed. The parts never overlap, so the policy's tier credits never count a block twice.
// (A block present only on CPU inside a hole of the GPU prefix is counted at the storage rate:
// a small underestimate that keeps this O(1).)
func Cached(m kvindex.EndpointMatch, blockSize int) policy.Cached {
	gpu := m.Blocks[kvevents.MediumGPU]
	cpu := max(0, min(m.Blocks[kvevents.MediumCPU], m.AnyBlocks)-gpu)
	storage := max(0, m.AnyBlocks-gpu-cpu)
	confirmed := max(gpu, m.AnyBlocks)
	predicted := max(0, m.PredictedBlocks-confirmed)
	return policy.Cached{GPU: gpu * blockSize, CPU: cpu * blockSize, Storage: storage * blockSize,
		Predicted: predicted * blockSize}
}

// TieBreak is the value for policy.Request.TieBreak, which the policy uses to break load ties
// only when the request has no session key: a hash of the whole prompt, so identical cold
// prompts land on the same endpoint among equally loaded ones (on every router replica: the hash
// is fixed, not seeded per process) while prompts that merely share a template header spread; a
// counter-derived value when there are no tokens. The router (internal/router/proxy) and
// kvbench (internal/bench/peers) both call it, so simulation breaks ties as production does.
// Four multiply-xor lanes over pairs of tokens overlap the multiplies: a serial FNV chain cost
// ~0.2 ms per 100K tokens.
func TieBreak(tokens []uint32, seq uint64) uint64 {
	if len(tokens) == 0 {
		return seq * 0x9e3779b97f4a7c15
	}
	const prime = 0x100000001b3
	h0, h1, h2, h3 := uint64(0xcbf29ce484222325), uint64(0x84222325cbf29ce4), uint64(0x9e3779b97f4a7c15), uint64(0xc2b2ae3d27d4eb4f)
	i := 0
	for ; i+8 <= len(tokens); i += 8 {
		t := tokens[i : i+8 : i+8]
		h0 = (h0 ^ (uint64(t[0]) | uint64(t[1])<<32)) * prime
		h1 = (h1 ^ (uint64(t[2]) | uint64(t[3])<<32)) * prime
		h2 = (h2 ^ (uint64(t[4]) | uint64(t[5])<<32)) * prime
		h3 = (h3 ^ (uint64(t[6]) | uint64(t[7])<<32)) * prime
	}
	for ; i < len(tokens); i++ {
		h0 = (h0 ^ uint64(tokens[i])) * prime
	}
	h := h0 ^ bits.RotateLeft64(h1, 17) ^ bits.RotateLeft64(h2, 31) ^ bits.RotateLeft64(h3, 47) ^ uint64(len(tokens))
	// Final avalanche (murmur3's fmix64), so every token bit reaches every hash bit.
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
