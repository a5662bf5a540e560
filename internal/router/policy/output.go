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

package policy

// outputMemory is the number of finished requests the learned output share averages over
// (an exponentially weighted mean with weight 1/outputMemory), and outputCalibrated how many
// it needs before it replaces the prior of 1 (a request uses its whole cap).
const (
	outputMemory     = 256
	outputCalibrated = 32
)

// outputStat is an online mean of the share of their cap that finished requests used.
type outputStat struct {
	share float64
	n     int
}

func (o *outputStat) observe(share float64) {
	o.n++
	w := max(1/float64(outputMemory), 1/float64(o.n))
	o.share += w * (share - o.share)
}

// ObserveOutput feeds a finished request's output length (tokens) with the max_tokens it was
// sent with (0: none; its share is then taken of DefaultMaxTokens). The policy prices a
// request's decode (fleetCost, the LoRA slot wait) at the share of its cap that requests have
// been seen to use: pricing every request at its full cap overstates the decode cost of
// staying on a busy prefix holder against recomputing its prefix elsewhere, and sent long
// documents away from their holders (rag-long-doc, where answers stop at EOS far below the
// cap).
func (p *Policy) ObserveOutput(maxTokens, output int) {
	if output < 0 {
		return
	}
	capped := maxTokens > 0
	if !capped {
		maxTokens = p.cfg.DefaultMaxTokens
	}
	p.outStat(capped).observe(min(1, float64(output)/float64(maxTokens)))
}

// OutputShare reports the learned share of the cap that answers use, for requests with (capped)
// or without a max_tokens, and how many finished requests it has seen; the share is 1 (every
// request priced at its cap) until outputCalibrated have.
func (p *Policy) OutputShare(capped bool) (share float64, observations int) {
	return p.outputShare(capped), p.outStat(capped).n
}

// outputShare is the learned share of the cap used by requests with (capped) or without a
// max_tokens; 1 until enough have finished. It stays above a small floor so that a burst of
// requests that stopped at once (errors, cancellations) does not make decode look free.
func (p *Policy) outputShare(capped bool) float64 {
	o := p.outStat(capped)
	if o.n < outputCalibrated {
		return 1
	}
	return max(0.05, o.share)
}

func (p *Policy) outStat(capped bool) *outputStat {
	if capped {
		return &p.outCapped
	}
	return &p.outUncapped
}
