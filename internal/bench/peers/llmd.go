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

// Shared pieces of the llm-d EPP reimplementations (docs/peer-policies.md §1.0–§1.2).

// llmdBlockTokens is the approximate producer's block: max(64, engine block size) (§1.2).
func llmdBlockTokens(engineBlock int) int { return max(64, engineBlock) }

// queueScores is the queue-scorer: min-max over scraped waiting queues, all equal -> 1 (§1.1).
func queueScores(eps []Endpoint) []float64 {
	lo, hi := eps[0].Waiting, eps[0].Waiting
	for _, e := range eps {
		lo, hi = min(lo, e.Waiting), max(hi, e.Waiting)
	}
	out := make([]float64, len(eps))
	for i, e := range eps {
		if hi == lo {
			out[i] = 1
		} else {
			out[i] = float64(hi-e.Waiting) / float64(hi-lo)
		}
	}
	return out
}

// kvScores is the kv-cache-utilization-scorer: 1 - scraped usage (§1.1).
func kvScores(eps []Endpoint) []float64 {
	out := make([]float64, len(eps))
	for i, e := range eps {
		out[i] = clamp01(1 - e.KVUsage)
	}
	return out
}

func clamp01(x float64) float64 { return max(0, min(1, x)) }

// approxProducer is llm-d's approximate prefix producer (§1.2): block hashes of
// max(64, engine block) tokens including the partial tail, capped at maxTokens, recorded for the
// chosen endpoint at routing time in a per-pod LRU sized by the engine's scraped block count.
type approxProducer struct {
	idx       *lruIndex
	block     int
	maxBlocks int
	capacity  map[string]int
}

func newApproxProducer(engineBlock, maxTokens int) *approxProducer {
	b := llmdBlockTokens(engineBlock)
	return &approxProducer{idx: newLRUIndex(), block: b, maxBlocks: maxTokens / b, capacity: map[string]int{}}
}

func (a *approxProducer) hashes(tokens []uint32) []uint64 {
	return ChainHashes(tokens, a.block, true, a.maxBlocks)
}

// ratios returns matchBlocks/totalBlocks per endpoint and the per-endpoint match in blocks.
func (a *approxProducer) ratios(eps []Endpoint, hs []uint64) ([]float64, []int) {
	m := a.idx.match(hs)
	r := make([]float64, len(eps))
	blocks := make([]int, len(eps))
	for i, e := range eps {
		a.capacity[e.Name] = e.NumBlocks
		if len(hs) > 0 {
			blocks[i] = m[e.Name]
			r[i] = float64(blocks[i]) / float64(len(hs))
		}
	}
	return r, blocks
}

func (a *approxProducer) record(ep string, hs []uint64) {
	a.idx.add(ep, hs, a.capacity[ep])
}
