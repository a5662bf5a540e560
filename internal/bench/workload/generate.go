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

package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
)

// Request is one request of a run.
type Request struct {
	ID int
	// At is the arrival time in seconds from the start of the run. For a follow-up (Parent >= 0)
	// it is the think time after the parent finished instead.
	At float64
	// Parent is the index of the request this one continues: its prompt starts with the parent's
	// prompt and the parent's answer. -1 for none.
	Parent int
	// Segments make up the prompt (after the parent's context).
	Segments  []Segment
	MaxTokens int
	// Session identifies a conversation or agent (session-affinity policies key on it).
	Session string
	// Truncated is set when the prompt was cut to fit the model's context.
	Truncated bool
	// Adapter is the LoRA adapter the request names as its model ("" for the base model).
	Adapter string
	// OutputLen is the true output length: the position of the end-of-sequence token the
	// simulated model samples, drawn independently of MaxTokens (which is then only the
	// client's cap). 0 means no EOS before MaxTokens, the behaviour with Options.EOS off. It may
	// exceed MaxTokens; the request then stops at the cap. Only the engine may read it: a
	// policy that did would know the future.
	OutputLen int

	// classCap is the cap of the request's class where the class is not a single length (a mix
	// class); 0 elsewhere. Only Generate reads it.
	classCap int
}

// PromptLen is the number of tokens in the request's own segments.
func (r *Request) PromptLen() int {
	n := 0
	for _, s := range r.Segments {
		n += s.Len
	}
	return n
}

// Tokens returns the request's own prompt tokens (not the parent's context).
func (r *Request) Tokens() []uint32 {
	out := make([]uint32, 0, r.PromptLen())
	for _, s := range r.Segments {
		out = s.AppendTokens(out)
	}
	return out
}

// Text returns the request's own prompt text.
func (r *Request) Text() string {
	var b strings.Builder
	for _, s := range r.Segments {
		s.AppendText(&b)
	}
	return b.String()
}

// Options are run-time inputs to Generate that the spec does not hold.
type Options struct {
	// TracesDir is where trace files are read from.
	TracesDir string
	// MaxPromptTokens truncates longer prompts (0: no limit); output tokens are kept.
	MaxPromptTokens int
	// EOS draws each request's true output length (OutputLen) independently of its MaxTokens,
	// which becomes the client's cap (see honest simulation in docs/simulator.md). Off, requests
	// are exactly what they were before EOS existed. Arrivals and prompts are the same either way.
	EOS bool
}

// Generate returns the requests of one run at rate (requests/s, or the trace speed-up), sorted by
// arrival with follow-ups after their parents. The same spec, rate and seed give the same requests.
func Generate(s *Spec, rate float64, opt Options) ([]Request, error) {
	rng := rand.New(rand.NewPCG(s.Seed, math.Float64bits(rate)))
	g := &gen{s: s, rate: rate, rng: rng, limit: s.Load.Requests, eos: opt.EOS}
	if s.Load.Duration > 0 {
		g.window = s.Load.Duration
	}
	var err error
	switch s.Kind {
	case KindSharedPrefix:
		g.sharedPrefix()
	case KindMultiTurn:
		g.sessions(s.MultiTurn, "chat")
	case KindAgentic:
		g.sessions(s.Agentic, "agent")
	case KindUnique:
		g.poisson(func(i int) Request {
			return Request{Segments: []Segment{{SeedOf(s.Seed, 1, uint64(i)), s.Unique.PromptTokens}}, MaxTokens: s.Unique.OutputTokens}
		})
	case KindHotPrefix, KindZipf:
		g.prefixMix()
	case KindSiblings:
		g.siblings()
	case KindLoRA:
		g.lora()
	case KindMix:
		g.mix()
	case KindTrace:
		err = g.trace(opt.TracesDir)
	}
	if err != nil {
		return nil, err
	}
	reqs := g.out
	if opt.MaxPromptTokens > 0 {
		truncate(reqs, opt.MaxPromptTokens)
	}
	for i := range reqs {
		reqs[i].ID = i
	}
	if opt.EOS {
		applyEOS(s, reqs)
	}
	return reqs, nil
}

type gen struct {
	s      *Spec
	rate   float64
	rng    *rand.Rand
	limit  int
	window float64
	out    []Request
	eos    bool
}

// more reports whether another arrival at t fits the run's bounds.
func (g *gen) more(t float64) bool {
	if g.limit > 0 && len(g.out) >= g.limit {
		return false
	}
	return g.window <= 0 || t < g.window
}

// poisson appends independent requests with exponential inter-arrival times.
func (g *gen) poisson(mk func(i int) Request) {
	t := 0.0
	for i := 0; g.more(t); i++ {
		r := mk(i)
		r.At, r.Parent = t, -1
		g.out = append(g.out, r)
		t += g.rng.ExpFloat64() / g.rate
	}
}

func (g *gen) sharedPrefix() {
	sp, seed := g.s.SharedPrefix, g.s.Seed
	g.poisson(func(int) Request {
		grp, user := g.rng.IntN(sp.Groups), g.rng.IntN(sp.PromptsPerGroup)
		return Request{
			Segments: []Segment{
				{SeedOf(seed, 2, uint64(grp)), sp.SystemTokens},
				{SeedOf(seed, 3, uint64(grp), uint64(user)), sp.QuestionTokens},
			},
			MaxTokens: sp.OutputTokens,
			Session:   fmt.Sprintf("g%d-u%d", grp, user),
		}
	})
}

// sessions starts sessions as a Poisson process at rate/turns, so the request rate is about
// rate once sessions overlap; each later turn waits for the previous answer plus think time.
func (g *gen) sessions(ss *Sessions, label string) {
	seed := g.s.Seed
	turns := max(1, ss.Turns)
	t := 0.0
	for sess := 0; g.more(t); sess++ {
		sys := g.rng.IntN(max(1, ss.SystemPrompts))
		name := fmt.Sprintf("%s-%d", label, sess)
		parent := -1
		for turn := 0; turn < turns && (g.limit <= 0 || len(g.out) < g.limit); turn++ {
			r := Request{Parent: parent, MaxTokens: ss.OutputTokens, Session: name}
			if turn == 0 {
				r.At = t
				r.Segments = []Segment{{SeedOf(seed, 4, uint64(sys)), ss.SystemTokens}, {SeedOf(seed, 5, uint64(sess)), ss.FirstTokens}}
			} else {
				r.At = g.rng.ExpFloat64() * ss.ThinkSeconds
				r.Segments = []Segment{{SeedOf(seed, 6, uint64(sess), uint64(turn)), ss.NewTokens}}
			}
			parent = len(g.out)
			g.out = append(g.out, r)
		}
		t += g.rng.ExpFloat64() * float64(turns) / g.rate
	}
}

func (g *gen) prefixMix() {
	pm, seed := g.s.HotPrefix, g.s.Seed
	var zipf *rand.Zipf
	if g.s.Kind == KindZipf {
		pm = g.s.Zipf
		zipf = rand.NewZipf(g.rng, math.Max(pm.S, 1.0001), 1, uint64(max(1, pm.Prefixes)-1))
	}
	g.poisson(func(i int) Request {
		var p uint64
		switch {
		case zipf != nil:
			p = zipf.Uint64()
		case g.rng.Float64() < pm.HotShare:
			p = 0
		default:
			p = 1 + uint64(g.rng.IntN(max(1, pm.Prefixes)))
		}
		return Request{
			Segments:  []Segment{{SeedOf(seed, 7, p), pm.PrefixTokens}, {SeedOf(seed, 8, uint64(i)), pm.SuffixTokens}},
			MaxTokens: pm.OutputTokens,
		}
	})
}

// lora draws an adapter per request (Zipf over the adapters, or the base model with BaseShare),
// then one of that adapter's prefixes, then a unique suffix. The prefix seeds differ per adapter,
// though prefixes of different adapters could share tokens and still not share KV blocks (the
// adapter's name is in every block hash): distinct tokens only keep the figures readable.
func (g *gen) lora() {
	l, seed := g.s.LoRA, g.s.Seed
	var zipf *rand.Zipf
	if l.S > 1 && l.Adapters > 1 {
		zipf = rand.NewZipf(g.rng, l.S, 1, uint64(l.Adapters-1))
	}
	g.poisson(func(i int) Request {
		adapter := ""
		a := uint64(l.Adapters) // the base model's prefixes
		if g.rng.Float64() >= l.BaseShare {
			if zipf != nil {
				a = zipf.Uint64()
			} else {
				a = uint64(g.rng.IntN(l.Adapters))
			}
			adapter = AdapterName(int(a))
		}
		p := uint64(g.rng.IntN(l.PrefixesPerAdapter))
		return Request{
			Segments:  []Segment{{SeedOf(seed, 13, a, p), l.PrefixTokens}, {SeedOf(seed, 14, uint64(i)), l.SuffixTokens}},
			MaxTokens: l.OutputTokens,
			Adapter:   adapter,
		}
	})
}

// mix draws each Poisson arrival's class by share, then merges in the bursts (kept in arrival
// order; bursts only land within the run's window, and the request cap still holds).
func (g *gen) mix() {
	m, seed := g.s.Mix, g.s.Seed
	total := 0.0
	for _, c := range m.Classes {
		total += c.Share
	}
	byName := map[string]int{}
	for k, c := range m.Classes {
		byName[c.Name] = k
	}
	draw := func(k, i int) Request {
		c := &m.Classes[k]
		var segs []Segment
		if c.Prefixes > 0 {
			segs = append(segs, Segment{SeedOf(seed, 15, uint64(k), uint64(g.rng.IntN(c.Prefixes))), c.PrefixTokens})
		}
		if n := c.MinPromptTokens + g.rng.IntN(c.MaxPromptTokens-c.MinPromptTokens+1); n > 0 {
			segs = append(segs, Segment{SeedOf(seed, 16, uint64(i)), n})
		}
		out := c.MinOutputTokens + g.rng.IntN(c.MaxOutputTokens-c.MinOutputTokens+1)
		// No Session: a class is not a conversation (a shared session id would pin the whole
		// class to one engine under session affinity, and kvrouter breaks ties on it).
		r := Request{Segments: segs, MaxTokens: out}
		if g.eos {
			r.classCap = g.s.capFor(c.MaxOutputTokens)
		}
		return r
	}
	g.poisson(func(i int) Request {
		x, k := g.rng.Float64()*total, 0
		for k < len(m.Classes)-1 && x >= m.Classes[k].Share {
			x -= m.Classes[k].Share
			k++
		}
		return draw(k, i)
	})
	b := m.Bursts
	if b == nil {
		return
	}
	end := g.window
	if end <= 0 && len(g.out) > 0 {
		end = g.out[len(g.out)-1].At
	}
	n := len(g.out)
	var burst []Request
	for t := b.EverySeconds; t < end; t += b.EverySeconds {
		for range b.Count {
			r := draw(byName[b.Class], n+len(burst))
			r.At, r.Parent = t+g.rng.Float64()*b.SpreadSeconds, -1
			burst = append(burst, r)
		}
	}
	g.out = append(g.out, burst...)
	sort.SliceStable(g.out, func(a, c int) bool { return g.out[a].At < g.out[c].At })
	if g.limit > 0 && len(g.out) > g.limit {
		g.out = g.out[:g.limit]
	}
}

// siblings: bursts of N identical prompts arrive together (Poisson bursts at rate/N).
func (g *gen) siblings() {
	sb, seed := g.s.Siblings, g.s.Seed
	t := 0.0
	for b := 0; g.more(t); b++ {
		for k := 0; k < sb.N && (g.limit <= 0 || len(g.out) < g.limit); k++ {
			g.out = append(g.out, Request{
				At: t, Parent: -1, MaxTokens: sb.OutputTokens, Session: fmt.Sprintf("burst-%d", b),
				Segments: []Segment{{SeedOf(seed, 9, uint64(b)), sb.PromptTokens}},
			})
		}
		t += g.rng.ExpFloat64() * float64(sb.N) / g.rate
	}
}

func (g *gen) trace(dir string) error {
	tr := g.s.Trace
	path := tr.File
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, tr.File)
	}
	var recs []TraceRecord
	var err error
	if tr.Format == "mooncake" {
		recs, err = ReadMooncake(path)
	} else {
		recs, err = ReadAzure(path)
	}
	if err != nil {
		return err
	}
	for i, rec := range recs {
		at := rec.At / g.rate
		if !g.more(at) {
			break
		}
		out := rec.OutputTokens
		if tr.MaxOutputTokens > 0 {
			out = min(out, tr.MaxOutputTokens)
		}
		r := Request{At: at, Parent: -1, MaxTokens: max(1, out)}
		if len(rec.HashIDs) == 0 {
			r.Segments = []Segment{{SeedOf(g.s.Seed, 10, uint64(i)), rec.InputTokens}}
		} else {
			left := rec.InputTokens
			for _, h := range rec.HashIDs {
				n := min(left, tr.BlockTokens)
				if n <= 0 {
					break
				}
				// Equal hash ids are equal blocks, and a block's id covers its whole prefix, so
				// seeding each block by its id reproduces the trace's sharing exactly.
				r.Segments = append(r.Segments, Segment{SeedOf(g.s.Seed, 11, h), n})
				left -= n
			}
			if left > 0 {
				r.Segments = append(r.Segments, Segment{SeedOf(g.s.Seed, 12, uint64(i)), left})
			}
		}
		g.out = append(g.out, r)
	}
	return nil
}

// truncate cuts prompts (own segments, from the end) so that no request exceeds max tokens.
func truncate(reqs []Request, maxTokens int) {
	for i := range reqs {
		r := &reqs[i]
		limit := maxTokens - r.MaxTokens
		if r.Parent >= 0 || limit <= 0 {
			continue
		}
		if r.PromptLen() <= limit {
			continue
		}
		r.Truncated = true
		n := 0
		for j := range r.Segments {
			if n+r.Segments[j].Len > limit {
				r.Segments[j].Len = limit - n
				r.Segments = r.Segments[:j+1]
				break
			}
			n += r.Segments[j].Len
		}
	}
}

// SortByArrival orders independent requests by arrival; follow-ups keep their relative order.
// Generate already returns arrival order for every kind; this is for callers that merge runs.
func SortByArrival(reqs []Request) {
	sort.SliceStable(reqs, func(a, b int) bool {
		if reqs[a].Parent >= 0 || reqs[b].Parent >= 0 {
			return false
		}
		return reqs[a].At < reqs[b].At
	})
}
