package peers

// roundRobin follows production-stack's roundrobin (docs/peer-policies.md §4): a cursor over the
// endpoints in a stable order, idx mod n. It is also what a Kubernetes Service approximates.
type roundRobin struct {
	nop
	next int
}

func newRoundRobin(Env) Policy { return &roundRobin{} }

func (p *roundRobin) Pick(_ *Request, eps []Endpoint) int {
	i := p.next % len(eps)
	p.next++
	return i
}
