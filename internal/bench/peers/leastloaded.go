package peers

import "math/rand/v2"

// leastLoaded sends each request to the endpoint with the fewest router-local in-flight requests
// (the load signal of SGLang, production-stack loadaware and AIBrix, docs/peer-policies.md §7),
// ties at random. It is cache-blind.
type leastLoaded struct {
	nop
	rng *rand.Rand
}

func newLeastLoaded(e Env) Policy { return &leastLoaded{rng: e.Rand} }

func (p *leastLoaded) Pick(_ *Request, eps []Endpoint) int { return fewestInFlight(eps, p.rng) }
