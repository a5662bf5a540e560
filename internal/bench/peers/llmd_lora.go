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

package peers

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/cespare/xxhash/v2"
)

// llmdLoRA is llm-d's default profile with the LoRA affinity scorer added (docs/peer-policies.md
// §1.5): queue-scorer 2 + kv-cache-utilization-scorer 2 + prefix-cache-scorer 3 over the
// approximate prefix producer (§1.1, §1.2, as llmdDefault), plus lora-affinity-scorer at weight
// 4, the weight KServe's LLMInferenceService gives it when it injects the scorer into the llm-d
// scheduler for a model with adapters. The scorer reads the scraped vllm:lora_requests_info: 1 when
// the request's adapter has running requests on the pod, 0.8 when the pod's running and waiting
// adapters leave a slot (fewer than max_lora), 0.6 when the adapter only waits there, else 0; a
// base-model request scores 0.8 wherever a slot is free, like any other model name. The prefix
// producer's chain starts from the request's model name, as llm-d's does, so prefixes are per
// adapter.
type llmdLoRA struct {
	nop
	rng    *rand.Rand
	prefix *approxProducer
	weight float64
	last   map[int][]uint64
}

// llmdLoRAWeight is the lora-affinity-scorer's weight in KServe's injected llm-d config.
const llmdLoRAWeight = 4

func newLLMDLoRA(e Env) Policy {
	return &llmdLoRA{rng: e.Rand, prefix: newApproxProducer(e.BlockSize, 131072), weight: llmdLoRAWeight, last: map[int][]uint64{}}
}

func (p *llmdLoRA) Pick(r *Request, eps []Endpoint) int {
	hs := modelHashes(p.prefix.hashes(r.Tokens), r.Adapter)
	p.last[r.ID] = hs
	ratio, _ := p.prefix.ratios(eps, hs)
	q, kv := queueScores(eps), kvScores(eps)
	s := make([]float64, len(eps))
	for i, e := range eps {
		s[i] = 2*q[i] + 2*kv[i] + 3*ratio[i] + p.weight*loraAffinity(e, r.Adapter)
	}
	return argmaxRandom(s, p.rng)
}

// Dispatched is PreRequest: the request's hashes go to the chosen pod's LRU at once.
func (p *llmdLoRA) Dispatched(r *Request, ep string) {
	p.prefix.record(ep, p.last[r.ID])
	delete(p.last, r.ID)
}

// loraAffinity is the lora-affinity-scorer's score of one pod for a model name. A pod that does
// not report adapters (max_lora 0) has no room by the scorer's rule and scores 0 for all; the
// harness only runs it on LoRA fleets.
func loraAffinity(e Endpoint, model string) float64 {
	active, waiting := contains(e.RunningLoRAs, model), contains(e.WaitingLoRAs, model)
	switch {
	case active:
		return 1
	case len(e.RunningLoRAs)+len(e.WaitingLoRAs) < e.MaxLoRAs:
		return 0.8
	case waiting:
		return 0.6
	}
	return 0
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// modelHashes chains the model name into a request's block hashes: llm-d starts the prefix
// chain from the model, so the same prompt for two adapters matches nothing across them.
func modelHashes(hs []uint64, model string) []uint64 {
	if model == "" {
		return hs
	}
	seed := xxhash.Sum64String(model)
	var b [16]byte
	for i, h := range hs {
		binary.LittleEndian.PutUint64(b[:8], seed)
		binary.LittleEndian.PutUint64(b[8:], h)
		hs[i] = xxhash.Sum64(b[:])
	}
	return hs
}
