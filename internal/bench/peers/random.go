package peers

import "math/rand/v2"

// random is llm-d's random-picker (docs/peer-policies.md §1.0, the "random-scheduling" baseline
// of §6.1): uniform over the candidates.
type random struct {
	nop
	rng *rand.Rand
}

func newRandom(e Env) Policy { return &random{rng: e.Rand} }

func (p *random) Pick(_ *Request, eps []Endpoint) int { return p.rng.IntN(len(eps)) }
