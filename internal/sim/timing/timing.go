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

// Package timing holds the simulator's hardware/model profiles and the step-time model that turns a
// scheduler step (prefill tokens, decode batch, context lengths) into seconds of GPU time.
//
// The model is a roofline: a step costs a fixed CPU/launch overhead, plus the larger of its compute
// time (2·params FLOPs per token plus attention FLOPs that grow with context) and its memory time
// (weights read once per step plus the KV cache of every scheduled sequence), plus, with tensor
// parallelism, two all-reduces per layer. Achieved fractions of peak (MFU, MBU) are calibrated per
// profile against public measurements; see docs/simulator.md for the figures and sources.
package timing

import (
	"fmt"
	"sort"
	"strings"
)

// GPU describes one accelerator.
type GPU struct {
	Name        string
	MemoryBytes float64 // HBM capacity
	MemoryBW    float64 // bytes/s
	FLOPS       float64 // dense BF16 peak, FLOP/s
	LinkBW      float64 // per-GPU all-reduce bandwidth (NVLink), bytes/s
}

// Model describes a dense decoder-only transformer in BF16.
type Model struct {
	Name     string
	Params   float64
	Layers   int
	Hidden   int
	KVHeads  int
	HeadDim  int
	MaxLen   int // native context length
	WeightsB float64
}

// Profile is a model served on TP GPUs of one kind, with calibrated efficiencies.
type Profile struct {
	Name  string
	GPU   GPU
	Model Model
	TP    int
	// MFU and MBU are the fractions of peak FLOPS and memory bandwidth a step achieves.
	MFU, MBU float64
	// StepOverhead is the fixed per-step cost (scheduling, sampling, kernel launches), seconds.
	StepOverhead float64
	// AllReduceLatency is the fixed cost of one all-reduce, seconds (TP > 1 only).
	AllReduceLatency float64
	// ActivationReserve is GPU memory per GPU kept for activations and CUDA graphs, bytes.
	ActivationReserve float64
}

// KVBytesPerToken is the size of one token's K and V across all layers, summed over the TP group.
func (p Profile) KVBytesPerToken() float64 {
	return 2 * float64(p.Model.Layers*p.Model.KVHeads*p.Model.HeadDim) * 2
}

// NumBlocks is the number of KV blocks of blockSize tokens that fit, the way vLLM sizes its cache:
// gpuMemUtil of each GPU, minus its weight shard and activation reserve.
func (p Profile) NumBlocks(blockSize int, gpuMemUtil float64) int {
	perGPU := p.GPU.MemoryBytes*gpuMemUtil - p.Model.WeightsB/float64(p.TP) - p.ActivationReserve
	if perGPU <= 0 || blockSize <= 0 {
		return 0
	}
	perTokenPerGPU := p.KVBytesPerToken() / float64(p.TP)
	return int(perGPU / (perTokenPerGPU * float64(blockSize)))
}

// Batch summarises one step for the time model.
type Batch struct {
	// Tokens is the number of tokens computed (prefill chunks plus one per decode).
	Tokens int
	// AttnPairs counts query-key pairs attended: for a chunk of n new tokens after c cached ones,
	// n·c + n(n+1)/2.
	AttnPairs float64
	// KVTokens is the number of tokens whose KV is read: the full context of every sequence.
	KVTokens int
}

// Add accounts for one sequence computing n new tokens after context c.
func (b *Batch) Add(n, c int) {
	b.Tokens += n
	b.AttnPairs += float64(n)*float64(c) + float64(n)*float64(n+1)/2
	b.KVTokens += c + n
}

// StepTime returns the duration of a step in seconds.
func (p Profile) StepTime(b Batch) float64 {
	if b.Tokens == 0 {
		return 0
	}
	m := p.Model
	tp := float64(p.TP)
	flops := 2*m.Params*float64(b.Tokens) + 4*float64(m.Layers*m.Hidden)*b.AttnPairs
	compute := flops / (tp * p.GPU.FLOPS * p.MFU)
	bytes := m.WeightsB/tp + p.KVBytesPerToken()/tp*float64(b.KVTokens)
	memory := bytes / (p.GPU.MemoryBW * p.MBU)
	t := p.StepOverhead + max(compute, memory)
	if p.TP > 1 {
		// Two all-reduces of the activations per layer; ring all-reduce moves 2(TP-1)/TP of the data.
		payload := float64(b.Tokens*m.Hidden) * 2 * 2 * (tp - 1) / tp
		t += float64(2*m.Layers) * (p.AllReduceLatency + payload/p.GPU.LinkBW)
	}
	return t
}

// GPUs known to the simulator.
var (
	H100SXM = GPU{Name: "H100-80GB", MemoryBytes: 79.6 * (1 << 30), MemoryBW: 3.35e12, FLOPS: 989e12, LinkBW: 450e9}
	H200    = GPU{Name: "H200-141GB", MemoryBytes: 139.8 * (1 << 30), MemoryBW: 4.8e12, FLOPS: 989e12, LinkBW: 450e9}
)

// Models known to the simulator (architecture figures from the models' published configs).
var (
	Llama31_8B  = Model{Name: "llama-3.1-8b", Params: 8.03e9, Layers: 32, Hidden: 4096, KVHeads: 8, HeadDim: 128, MaxLen: 131072, WeightsB: 16.06e9}
	Qwen25_32B  = Model{Name: "qwen2.5-32b", Params: 32.8e9, Layers: 64, Hidden: 5120, KVHeads: 8, HeadDim: 128, MaxLen: 32768, WeightsB: 65.5e9}
	Llama31_70B = Model{Name: "llama-3.1-70b", Params: 70.6e9, Layers: 80, Hidden: 8192, KVHeads: 8, HeadDim: 128, MaxLen: 131072, WeightsB: 141.1e9}
)

// Profiles by name. Efficiencies are calibrated in docs/simulator.md.
var profiles = map[string]Profile{
	"h100-llama-3.1-8b-tp1": {Name: "h100-llama-3.1-8b-tp1", GPU: H100SXM, Model: Llama31_8B, TP: 1,
		MFU: 0.55, MBU: 0.80, StepOverhead: 1.5e-3, ActivationReserve: 4e9},
	"h100-qwen2.5-32b-tp2": {Name: "h100-qwen2.5-32b-tp2", GPU: H100SXM, Model: Qwen25_32B, TP: 2,
		MFU: 0.50, MBU: 0.80, StepOverhead: 2e-3, AllReduceLatency: 8e-6, ActivationReserve: 4e9},
	"h100-llama-3.1-70b-tp4": {Name: "h100-llama-3.1-70b-tp4", GPU: H100SXM, Model: Llama31_70B, TP: 4,
		MFU: 0.45, MBU: 0.75, StepOverhead: 2.5e-3, AllReduceLatency: 10e-6, ActivationReserve: 5e9},
	"h200-llama-3.1-8b-tp1": {Name: "h200-llama-3.1-8b-tp1", GPU: H200, Model: Llama31_8B, TP: 1,
		MFU: 0.55, MBU: 0.80, StepOverhead: 1.5e-3, ActivationReserve: 4e9},
}

// Names lists the known profiles.
func Names() []string {
	out := make([]string, 0, len(profiles))
	for n := range profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Lookup returns a profile by name.
func Lookup(name string) (Profile, error) {
	p, ok := profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("unknown simulator profile %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return p, nil
}

// ForModel picks the profile that best matches a served model name and tensor-parallel size, so
// that the operator's plain vLLM arguments give sensible timing: a 32B-class name selects the 32B
// profile, a 70B-class name the 70B one, anything else the 8B one. The TP of the result is tp when
// positive.
func ForModel(model string, tp int) Profile {
	m := strings.ToLower(model)
	var p Profile
	switch {
	case strings.Contains(m, "70b") || strings.Contains(m, "72b"):
		p = profiles["h100-llama-3.1-70b-tp4"]
	case strings.Contains(m, "32b") || strings.Contains(m, "34b") || strings.Contains(m, "30b"):
		p = profiles["h100-qwen2.5-32b-tp2"]
	default:
		p = profiles["h100-llama-3.1-8b-tp1"]
	}
	if tp > 0 && tp != p.TP {
		p.TP = tp
		if p.AllReduceLatency == 0 {
			p.AllReduceLatency = 8e-6
		}
		p.Name = fmt.Sprintf("%s(tp%d)", p.Name, tp)
	}
	return p
}
