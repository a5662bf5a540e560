package peers

import (
	"github.com/kvrouter/kvrouter/internal/kvindex"
	"github.com/kvrouter/kvrouter/internal/loadsignal"
	"github.com/kvrouter/kvrouter/internal/policy"
	"github.com/kvrouter/kvrouter/internal/policyinput"
)

// kvrouter drives the shipping router's code, not a copy: internal/policy decides, internal/
// kvindex (fed by the engines' KV events, with predictions recorded at dispatch) says what each
// engine holds, and internal/loadsignal keeps the router-local load accounting. Only the glue
// between them (a few lines the router also has) lives here.
type kvrouter struct {
	pol     *policy.Policy
	ix      *kvindex.Index
	load    *loadsignal.Tracker
	block   int
	pending map[int]*kvrDispatch
	names   []string
	loads   []policy.Load
	eps     []policy.Endpoint
	last    policy.Decision
	reasons map[string]float64
	seq     uint64
}

// Stats reports how often each decision reason and request shape came up, which is what explains
// a kvrouter result (e.g. how often the prefix holder was judged saturated).
func (p *kvrouter) Stats() map[string]float64 { return p.reasons }

type kvrDispatch struct {
	ticket *loadsignal.Ticket
	work   int
}

func kvrouterFactory(name, kind string, tune policy.Config) Factory {
	return Factory{
		Name: name, Source: "internal/policy " + kind, NeedsEvents: true,
		New: func(e Env) Policy {
			cfg := tune
			cfg.Kind, cfg.BlockSize = policy.Kind(kind), e.BlockSize
			return &kvrouter{
				pol: policy.New(cfg),
				ix:  e.Events, load: loadsignal.NewTracker(), block: e.BlockSize,
				pending: map[int]*kvrDispatch{}, reasons: map[string]float64{},
			}
		},
	}
}

func (p *kvrouter) Pick(r *Request, eps []Endpoint) int {
	p.names = p.names[:0]
	for _, e := range eps {
		p.names = append(p.names, e.Name)
	}
	p.loads = append(p.loads[:0], make([]policy.Load, len(eps))...)
	p.load.Loads(p.names, p.loads, nil)
	cached := map[string]policy.Cached{}
	if p.ix != nil {
		// The same conversion the router does (internal/policyinput), so simulation tests
		// exactly what ships.
		for _, m := range p.ix.Lookup(r.Tokens, kvindex.LookupOptions{}) {
			if c := policyinput.Cached(m, p.block); c.Total() > cached[m.Source.Endpoint].Total() {
				cached[m.Source.Endpoint] = c
			}
		}
	}
	p.eps = p.eps[:0]
	for i, e := range eps {
		l := p.loads[i]
		l.KVUsage = e.KVUsage
		p.eps = append(p.eps, policy.Endpoint{Name: e.Name, Ready: true, Load: l, Cached: cached[e.Name]})
	}
	p.seq++
	tie := policyinput.TieBreak(r.Tokens, p.seq)
	p.last = p.pol.Pick(policy.Request{
		PromptTokens: len(r.Tokens), Tokenized: true, MaxTokens: r.MaxTokens, SessionKey: r.Session, TieBreak: tie,
	}, p.eps)
	p.reasons["reason_"+string(p.last.Reason)+"_"+string(p.last.Shape)]++
	for i, e := range eps {
		if e.Name == p.last.Endpoint {
			return i
		}
	}
	return 0 // no decision (cannot happen with ready endpoints and no admission limit)
}

func (p *kvrouter) Dispatched(r *Request, ep string) {
	d := p.last
	if d.Endpoint != ep {
		// The harness overrode the choice (it never does); account without a decision.
		d = policy.Decision{Endpoint: ep, UncachedTokens: len(r.Tokens), PrefillWork: len(r.Tokens)}
	}
	if p.ix != nil {
		p.ix.Predict(kvindex.SourceID{Endpoint: ep}, r.Tokens, kvindex.KeyParams{})
	}
	out := r.MaxTokens
	p.pending[r.ID] = &kvrDispatch{ticket: p.load.Dispatch(ep, d.UncachedTokens, len(r.Tokens)+out), work: d.PrefillWork}
}

func (p *kvrouter) FirstToken(r *Request, ep string, ttft float64) {
	if d := p.pending[r.ID]; d != nil {
		d.ticket.FirstToken()
		p.pol.ObserveTTFT(ep, d.work, ttft)
	}
}

func (p *kvrouter) Finished(r *Request, ep string) {
	if d := p.pending[r.ID]; d != nil {
		d.ticket.Done()
		delete(p.pending, r.ID)
	}
}
