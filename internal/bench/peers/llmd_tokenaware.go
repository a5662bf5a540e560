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

import "math/rand/v2"

// llmdTokenPrefill is llm-d's "sticky until saturated" prefill-bound profile (docs/peer-policies.md
// §1.4, optimized-baseline guide): approximate prefix producer with the match capped at the model
// length (40,960 tokens), inflight-load producer (uncached input tokens per endpoint, released at
// the first token), prefix-cache-affinity-filter (ratio >= 0.80, broken when the best sticky
// endpoint's TTFT exceeds the best non-sticky one's by more than 18 s, TTFT = in-flight tokens /
// 15,928 tok/s), then token-load-scorer (argmin in-flight + this request's uncached tokens; Q =
// 4,194,304 makes it linear) with the max-score picker.
type llmdTokenPrefill struct {
	rng      *rand.Rand
	prefix   *approxProducer
	inflight map[string]int
	pending  map[int]pendingTokens
}

type pendingTokens struct {
	hashes   []uint64
	uncached map[string]int
	charged  int
}

const (
	llmdAffinityThreshold = 0.80
	llmdMaxTTFTPenalty    = 18.0
	llmdPeakPrefill       = 15928.0
	llmdTokenLoadQ        = 4194304.0
)

func newLLMDTokenPrefill(e Env) Policy {
	return &llmdTokenPrefill{rng: e.Rand, prefix: newApproxProducer(e.BlockSize, 40960),
		inflight: map[string]int{}, pending: map[int]pendingTokens{}}
}

func (p *llmdTokenPrefill) Pick(r *Request, eps []Endpoint) int {
	hs := p.prefix.hashes(r.Tokens)
	ratio, blocks := p.prefix.ratios(eps, hs)
	unc := map[string]int{}
	for i, e := range eps {
		// uncachedInputTokens: (totalBlocks - matchBlocks)·B + max(0, L - totalBlocks·B).
		u := (len(hs)-blocks[i])*p.prefix.block + max(0, len(r.Tokens)-len(hs)*p.prefix.block)
		unc[e.Name] = min(u, len(r.Tokens))
	}
	p.pending[r.ID] = pendingTokens{hashes: hs, uncached: unc}

	keep := make([]bool, len(eps))
	var sticky, non []int
	for i := range eps {
		if ratio[i] >= llmdAffinityThreshold {
			sticky = append(sticky, i)
		} else {
			non = append(non, i)
		}
	}
	ttft := func(i int) float64 { return float64(p.inflight[eps[i].Name]) / llmdPeakPrefill }
	useSticky := len(eps) > 1 && len(sticky) > 0
	if useSticky && len(non) > 0 {
		bs, bn := ttft(sticky[0]), ttft(non[0])
		for _, i := range sticky {
			bs = min(bs, ttft(i))
		}
		for _, i := range non {
			bn = min(bn, ttft(i))
		}
		if bs-bn > llmdMaxTTFTPenalty {
			useSticky = false
		}
	}
	for i := range keep {
		keep[i] = !useSticky
	}
	for _, i := range sticky {
		if useSticky {
			keep[i] = true
		}
	}
	s := make([]float64, len(eps))
	for i, e := range eps {
		if !keep[i] {
			s[i] = -1
			continue
		}
		s[i] = 1 - min(1, float64(p.inflight[e.Name]+unc[e.Name])/llmdTokenLoadQ)
	}
	return argmaxRandom(s, p.rng)
}

func (p *llmdTokenPrefill) Dispatched(r *Request, ep string) {
	pt := p.pending[r.ID]
	p.prefix.record(ep, pt.hashes)
	pt.charged = pt.uncached[ep]
	pt.hashes, pt.uncached = nil, nil
	p.pending[r.ID] = pt
	p.inflight[ep] += pt.charged
}

func (p *llmdTokenPrefill) FirstToken(r *Request, ep string, _ float64) {
	if pt, ok := p.pending[r.ID]; ok {
		p.inflight[ep] -= pt.charged
		delete(p.pending, r.ID)
	}
}

// Finished releases the tokens of a request that ended without a first token (an error).
func (p *llmdTokenPrefill) Finished(r *Request, ep string) { p.FirstToken(r, ep, 0) }

// llmdTokenDecode is the decode profile's active-request-scorer (docs/peer-policies.md §1.4):
// n = in-flight requests, idle (n <= 0) -> 1, else (maxN - n)/maxN; max-score picker.
type llmdTokenDecode struct {
	nop
	rng *rand.Rand
}

func newLLMDTokenDecode(e Env) Policy { return &llmdTokenDecode{rng: e.Rand} }

func (p *llmdTokenDecode) Pick(_ *Request, eps []Endpoint) int {
	maxN := 0
	for _, e := range eps {
		maxN = max(maxN, e.InFlight)
	}
	s := make([]float64, len(eps))
	for i, e := range eps {
		if e.InFlight <= 0 {
			s[i] = 1
		} else {
			s[i] = float64(maxN-e.InFlight) / float64(maxN)
		}
	}
	return argmaxRandom(s, p.rng)
}
