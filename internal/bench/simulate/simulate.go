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

// Package simulate runs a workload through a fleet of simulated vLLM engines in virtual time: a
// discrete-event simulation in one goroutine, deterministic for a seed. The engines are the
// simulator's own engine core (internal/sim/engine) and the routing is a peers.Policy, which for
// kvrouter is the shipping internal/router/policy code over an internal/router/kvindex fed with the engines'
// real KV events. Nothing here sleeps: an hour of traffic runs in seconds.
package simulate

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
	"github.com/kvrouter/kvrouter/internal/bench/peers"
	"github.com/kvrouter/kvrouter/internal/bench/workload"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/sim/engine"
	"github.com/kvrouter/kvrouter/internal/sim/timing"
)

// Config is one run: one workload at one rate through one policy.
type Config struct {
	Spec     *workload.Spec
	Rate     float64
	Requests []workload.Request
	Policy   peers.Factory
	// Seed drives the policy's random choices (ties, random routing).
	Seed uint64
	// EventLag is the delay between a step's end and its KV events reaching the router's index
	// (ZMQ publish, decode, apply). Default 5 ms.
	EventLag float64
	// ScrapeInterval is how often engine gauges (waiting, running, KV usage) are refreshed for
	// policies that read them. Default 50 ms (llm-d's default).
	ScrapeInterval float64
	// DrainLimit bounds the run: requests unfinished this long after the last arrival fail.
	// Default 900 s.
	DrainLimit float64

	// The honest-simulation switches (see honest.go); all zero is the old, flattering harness.
	// StepNoise is the coefficient of variation of each engine step's duration (engine.Config
	// StepNoise), seeded per engine from Seed.
	StepNoise float64
	// EventJitter is the mean of an exponential delay added to EventLag per KV event batch,
	// seconds; batches of one engine still arrive in order (one TCP stream).
	EventJitter float64
	// EventLoss is the probability that a KV event batch never reaches the router. The loss is
	// noticed at the next batch of that engine (a sequence gap) and repaired by a replay that
	// lands ReplayDelay seconds later, as internal/router/kvstream does live.
	EventLoss   float64
	ReplayDelay float64
}

type evKind uint8

const (
	evArrival evKind = iota
	evStepDone
	evDeliver
	evScrape
	evScaleUp
	evTransferDone
	evReplay
)

type event struct {
	t    float64
	seq  uint64
	kind evKind
	i    int // request index (arrival) or engine index
	b    any // delivered batch
}

type queue []event

func (q queue) Len() int { return len(q) }
func (q queue) Less(a, b int) bool {
	if q[a].t != q[b].t {
		return q[a].t < q[b].t
	}
	return q[a].seq < q[b].seq
}
func (q queue) Swap(a, b int) { q[a], q[b] = q[b], q[a] }
func (q *queue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simEngine struct {
	name   string
	role   string // peers.RolePrefill or peers.RoleDecode in a split fleet
	eng    *engine.Engine
	busy   bool
	res    engine.StepResult
	scrape peers.Endpoint
	steps  int
}

type reqState struct {
	w        *workload.Request
	prompt   []uint32
	output   []uint32
	er       *engine.Request
	pr       peers.Request
	ep       int
	lastTok  float64
	children int
	pd       pdLeg
}

type sim struct {
	cfg     Config
	q       queue
	seq     uint64
	now     float64
	engines []*simEngine
	active  int // engines[:active] take traffic
	inflt   []int
	pol     peers.Policy
	events  *kvindex.Index
	exact   *kvindex.Index
	reqs    []reqState
	recs    []metrics.Record
	itl     []float64
	left    int
	ecfg    engine.Config
	lastArr float64
	su      *metrics.ScaleUp
	pd      *pdRun // nil unless a P/D policy runs on a disaggregated fleet
	queuer  peers.Queuer
	link    *eventLink // nil without event jitter and loss: every batch lands after EventLag
	ceil    *cacheCeiling
}

// Run simulates one run and returns its figures.
func Run(cfg Config) (metrics.Result, error) {
	if cfg.EventLag <= 0 {
		cfg.EventLag = 0.005
	}
	if cfg.ScrapeInterval <= 0 {
		cfg.ScrapeInterval = 0.05
	}
	if cfg.DrainLimit <= 0 {
		cfg.DrainLimit = 900
	}
	spec := cfg.Spec
	prof, err := timing.Lookup(spec.Fleet.Profile)
	if err != nil {
		return metrics.Result{}, err
	}
	seed := "0"
	s := &sim{cfg: cfg, ecfg: engine.Config{
		Profile: prof, BlockSize: spec.Fleet.BlockSize, NumBlocks: spec.Fleet.NumBlocks, MaxModelLen: spec.Fleet.MaxModelLen,
		HashAlgo: "sha256_cbor", HashSeed: &seed, EmitEvents: cfg.Policy.NeedsEvents || cfg.Policy.NeedsExact,
		MaxLoRAs: spec.Fleet.MaxLoRAs, LoRALoadTime: spec.Fleet.LoRALoadSeconds,
	}}
	clock := func() time.Time { return time.Unix(0, 0).Add(time.Duration(s.now * float64(time.Second))) }
	if cfg.Policy.NeedsEvents {
		s.events = kvindex.New(kvindex.Config{BlockSize: spec.Fleet.BlockSize, Now: clock})
	}
	if cfg.Policy.NeedsExact {
		s.exact = kvindex.New(kvindex.Config{BlockSize: spec.Fleet.BlockSize, Now: clock})
	}
	total := spec.Fleet.Engines
	if spec.ScaleUp != nil {
		total += spec.ScaleUp.Add
	}
	for i := range total {
		ec := s.ecfg
		ec.StepNoise, ec.NoiseSeed = cfg.StepNoise, noiseSeed(cfg.Seed, i)
		e, err := engine.New(ec)
		if err != nil {
			return metrics.Result{}, fmt.Errorf("engine %d: %w", i, err)
		}
		s.engines = append(s.engines, &simEngine{name: fmt.Sprintf("engine-%02d", i), eng: e})
	}
	s.active = spec.Fleet.Engines
	s.inflt = make([]int, total)
	if s.events != nil {
		s.link = newEventLink(cfg, total)
	}
	pol := cfg.Policy.New(peers.Env{
		BlockSize: spec.Fleet.BlockSize,
		Rand:      rand.New(rand.NewPCG(cfg.Seed, 0x6b7662656e6368)),
		Now:       func() float64 { return s.now },
		Events:    s.events, Exact: s.exact,
	})
	s.pol = pol
	s.queuer, _ = pol.(peers.Queuer)
	if err := s.setupPD(prof); err != nil {
		return metrics.Result{}, err
	}

	s.reqs = make([]reqState, len(cfg.Requests))
	s.recs = make([]metrics.Record, len(cfg.Requests))
	s.ceil = newCacheCeiling(spec.Fleet.BlockSize, len(cfg.Requests))
	for i := range cfg.Requests {
		w := &cfg.Requests[i]
		s.reqs[i] = reqState{w: w, ep: -1}
		if w.Parent >= 0 {
			s.reqs[w.Parent].children++
			continue
		}
		s.push(w.At, evArrival, i, nil)
		s.lastArr = max(s.lastArr, w.At)
	}
	s.left = len(cfg.Requests)
	if spec.ScaleUp != nil {
		s.push(spec.ScaleUp.AtFraction*s.lastArr, evScaleUp, 0, nil)
	}
	s.push(0, evScrape, 0, nil)

	start := time.Now()
	deadline := s.lastArr + cfg.DrainLimit
	for s.q.Len() > 0 && s.left > 0 {
		ev := heap.Pop(&s.q).(event)
		if ev.t > deadline {
			break
		}
		s.now = ev.t
		switch ev.kind {
		case evArrival:
			s.arrive(ev.i)
		case evStepDone:
			s.stepDone(ev.i)
		case evDeliver:
			s.deliver(ev.i, ev.b)
		case evReplay:
			s.replay(ev.i)
		case evScrape:
			for _, e := range s.engines[:s.active] {
				st := e.eng.Stats()
				e.scrape = peers.Endpoint{Name: e.name, Waiting: st.Waiting, Running: st.Running, KVUsage: st.KVUsage, NumBlocks: st.NumBlocks,
					RunningLoRAs: st.RunningLoRAs, WaitingLoRAs: st.WaitingLoRAs, MaxLoRAs: s.ecfg.MaxLoRAs}
			}
			s.push(s.now+cfg.ScrapeInterval, evScrape, 0, nil)
			s.release()
		case evTransferDone:
			s.transferDone(ev.i)
		case evScaleUp:
			s.su = &metrics.ScaleUp{At: s.now, Total: len(s.engines)}
			for _, e := range s.engines[s.active:] {
				e.eng.AdvanceTo(s.now)
				s.su.Added = append(s.su.Added, e.name)
			}
			s.active = len(s.engines)
		}
	}
	wall := time.Since(start).Seconds()

	names := make([]string, 0, len(s.engines))
	for _, e := range s.engines[:s.active] {
		names = append(names, e.name)
	}
	for i := range s.reqs {
		if s.recs[i].Finish == 0 {
			s.recs[i].Failed = true
		}
	}
	res := metrics.Summarize(s.recs, s.itl, names, metrics.SLO{TTFT: spec.SLO.TTFTSeconds, ITL: spec.SLO.ITLSeconds}, 0, s.su)
	res.Policy, res.Source, res.Rate = cfg.Policy.Name, cfg.Policy.Source, cfg.Rate
	steps := 0
	for _, e := range s.engines {
		steps += e.steps
	}
	res.Extra = map[string]float64{"sim_wall_s": wall, "engine_steps": float64(steps), "virtual_s": s.now,
		"hit_rate_ceiling": s.ceil.rate(func(i int) int { return s.recs[i].PromptTokens }, func(i int) bool { return s.recs[i].Done() })}
	if s.ecfg.MaxLoRAs > 0 {
		s.loraExtras(res.Extra)
	}
	if spec.Fleet.Disaggregation != nil {
		// P/D is about decode stalls: the tail of the inter-token latency tells.
		res.Extra["itl_p90_ms"] = 1000 * metrics.Percentile(s.itl, 90)
		res.Extra["itl_p99_ms"] = 1000 * metrics.Percentile(s.itl, 99)
		res.Extra["pd_split_share"] = 0
	}
	if s.pd != nil {
		s.pd.extras(res.Extra)
	}
	if s.link != nil {
		s.link.extras(res.Extra)
	}
	if sr, ok := s.pol.(peers.StatsReporter); ok {
		for k, v := range sr.Stats() {
			res.Extra[k] = v
		}
	}
	return res, nil
}

func (s *sim) push(t float64, k evKind, i int, b any) {
	s.seq++
	heap.Push(&s.q, event{t: t, seq: s.seq, kind: k, i: i, b: b})
}

// arrive routes request i and hands it to the chosen engine.
func (s *sim) arrive(i int) {
	st := &s.reqs[i]
	w := st.w
	rec := &s.recs[i]
	rec.Arrival = s.now
	if w.Parent >= 0 {
		p := &s.reqs[w.Parent]
		st.prompt = make([]uint32, 0, len(p.prompt)+len(p.output)+w.PromptLen())
		st.prompt = append(append(st.prompt, p.prompt...), p.output...)
		if p.children--; p.children == 0 {
			p.prompt, p.output = nil, nil
		}
	}
	for _, seg := range w.Segments {
		st.prompt = seg.AppendTokens(st.prompt)
	}
	rec.PromptTokens = len(st.prompt)
	s.ceil.arrive(i, st.prompt, w.Adapter)
	eps := s.endpoints()
	st.pr = peers.Request{ID: i, Tokens: st.prompt, MaxTokens: w.MaxTokens, Session: w.Session, Adapter: w.Adapter}
	if s.pd != nil {
		s.arrivePD(i, eps)
		return
	}
	j := s.pol.Pick(&st.pr, eps)
	if j == peers.Hold && s.queuer != nil {
		return // in the policy's router queue until release
	}
	if j < 0 || j >= s.active {
		j = 0
	}
	s.dispatch(i, j, 0)
}

// release dispatches what the policy's router queue lets go now (see peers.Queuer).
func (s *sim) release() {
	if s.queuer == nil || s.queuer.Queued() == 0 {
		return
	}
	eps := s.endpoints()
	for {
		r, j, ok := s.queuer.Release(eps)
		if !ok {
			return
		}
		i := r.ID
		if j < 0 {
			// Shed by the policy's bound: the client got a fast 429.
			s.recs[i].Failed = true
			s.recs[i].Shed = true
			s.finishOne(i)
			continue
		}
		if j >= s.active {
			j = 0
		}
		s.dispatch(i, j, 0)
		eps = s.endpoints()
	}
}

// endpoints is the policy's view of the active engines now (their pools in a P/D run).
func (s *sim) endpoints() []peers.Endpoint {
	eps := make([]peers.Endpoint, s.active)
	for j, e := range s.engines[:s.active] {
		eps[j] = e.scrape
		eps[j].Name = e.name
		eps[j].InFlight = s.inflt[j]
		if eps[j].NumBlocks == 0 {
			eps[j].NumBlocks = e.eng.Config().NumBlocks
		}
		if s.pd != nil {
			eps[j].Role = e.role
		}
	}
	return eps
}

// dispatch hands request i to engine j: whole, or as the decode leg of a disaggregated request
// whose first transferred prompt tokens arrived from the prefill engine.
func (s *sim) dispatch(i, j, transferred int) {
	st, w, rec := &s.reqs[i], s.reqs[i].w, &s.recs[i]
	e := s.engines[j]
	st.ep = j
	rec.Endpoint = e.name
	s.pol.Dispatched(&st.pr, e.name)
	// MaxTokens is the client's cap; EOSAfter the true length, which only the engine knows.
	st.er = &engine.Request{ID: strconv.Itoa(i), Prompt: st.prompt, MaxTokens: w.MaxTokens, EOSAfter: w.OutputLen, Seed: s.cfg.Spec.Seed + uint64(i), LoRA: w.Adapter,
		KVTransferred: transferred}
	if !e.busy {
		e.eng.AdvanceTo(s.now)
	}
	if err := e.eng.Submit(st.er); err != nil {
		// Too long for the model, or similar: the engine would answer 400.
		rec.Failed = true
		s.pol.Finished(&st.pr, e.name)
		s.finishOne(i)
		return
	}
	s.inflt[j]++
	if !e.busy {
		s.kick(j)
	}
}

// kick starts the next step of engine j at s.now if it has work.
func (s *sim) kick(j int) {
	e := s.engines[j]
	for e.eng.HasWork() {
		res := e.eng.Step()
		if res.Duration > 0 {
			e.busy, e.res = true, res
			e.steps++
			s.push(res.Start+res.Duration, evStepDone, j, nil)
			return
		}
		// Nothing schedulable (e.g. only events to hand out): publish and stop.
		s.publish(j, res)
		if len(res.Tokens) == 0 && len(res.Finished) == 0 {
			return
		}
	}
}

func (s *sim) stepDone(j int) {
	e := s.engines[j]
	e.busy = false
	res := e.res
	e.res = engine.StepResult{}
	s.publish(j, res)
	s.kick(j)
	if len(res.Finished) > 0 || hasFirst(res.Tokens) {
		s.release()
	}
}

func hasFirst(toks []engine.Token) bool {
	for i := range toks {
		if toks[i].First {
			return true
		}
	}
	return false
}

// publish makes one step's results visible at s.now: tokens, finished requests, KV events.
func (s *sim) publish(j int, res engine.StepResult) {
	e := s.engines[j]
	for _, tok := range res.Tokens {
		i, prefillLeg := reqIndex(tok.Req)
		if prefillLeg {
			// The prefill leg's one token is discarded (the decode leg generates the answer).
			continue
		}
		st, rec := &s.reqs[i], &s.recs[i]
		if tok.First || rec.FirstToken == 0 {
			rec.FirstToken = s.now
			s.pol.FirstToken(&st.pr, e.name, s.now-rec.Arrival)
		} else {
			s.itl = append(s.itl, s.now-st.lastTok)
		}
		st.lastTok = s.now
	}
	for _, r := range res.Finished {
		i, prefillLeg := reqIndex(r)
		if prefillLeg {
			s.inflt[j]--
			s.prefillDone(i, j, r)
			continue
		}
		st, rec := &s.reqs[i], &s.recs[i]
		rec.Finish = s.now
		rec.OutputTokens = len(r.Output)
		rec.CachedTokens = r.CachedTokens()
		if st.pd.split {
			// The prompt was computed on the prefill engine: its cache hit is what saved compute.
			rec.CachedTokens = st.pd.cached
		}
		rec.Preemptions = r.Preemptions()
		s.inflt[j]--
		st.pr.Output = len(r.Output)
		s.pol.Finished(&st.pr, e.name)
		if st.children > 0 {
			st.output = append([]uint32(nil), r.Output...)
			s.ceil.finish(st.prompt, st.output, st.w.Adapter)
		} else {
			st.prompt = nil
		}
		st.er = nil
		s.finishOne(i)
	}
	if len(res.Events) > 0 {
		name := e.name
		if s.exact != nil {
			s.exact.Apply(kvindex.SourceID{Endpoint: name}, toBatch(res.Events, s.now))
		}
		if s.events != nil {
			s.send(j, toBatch(res.Events, s.now))
		}
	}
}

// finishOne counts a request out and releases its follow-ups.
func (s *sim) finishOne(i int) {
	s.left--
	for c := i + 1; c < len(s.reqs) && s.reqs[i].children > 0; c++ {
		if s.reqs[c].w.Parent == i {
			if s.recs[i].Failed {
				// A conversation whose turn failed ends; its later turns fail too.
				s.recs[c].Failed = true
				s.reqs[i].children--
				s.finishOne(c)
				continue
			}
			s.push(s.now+s.reqs[c].w.At, evArrival, c, nil)
			break // one follow-up per request
		}
	}
}

// loraExtras adds the adapter figures of a LoRA run: adapter loads into GPU slots over the
// fleet, loads per thousand adapter requests, and how concentrated each adapter's requests were
// (the mean over adapters of the share of its requests that its busiest engine served: 1 when
// every adapter stayed on one engine, 1/engines when spread evenly).
func (s *sim) loraExtras(extra map[string]float64) {
	var loads uint64
	for _, e := range s.engines {
		loads += e.eng.Stats().LoRALoads
	}
	perEngine := map[string]map[string]int{}
	total := 0
	for i := range s.reqs {
		a := s.reqs[i].w.Adapter
		if a == "" || s.recs[i].Endpoint == "" {
			continue
		}
		if perEngine[a] == nil {
			perEngine[a] = map[string]int{}
		}
		perEngine[a][s.recs[i].Endpoint]++
		total++
	}
	share := 0.0
	for _, eps := range perEngine {
		n, top := 0, 0
		for _, c := range eps {
			n += c
			top = max(top, c)
		}
		share += float64(top) / float64(n)
	}
	extra["lora_loads"] = float64(loads)
	if total > 0 {
		extra["lora_loads_per_1k_requests"] = 1000 * float64(loads) / float64(total)
		extra["lora_top_engine_share"] = share / float64(len(perEngine))
	}
}

// reqIndex recovers the request index from the engine request ID kvbench gave it, and whether
// the engine request is a prefill leg (its ID carries prefillPrefix).
func reqIndex(r *engine.Request) (int, bool) {
	id, leg := strings.CutPrefix(r.ID, prefillPrefix)
	i, _ := strconv.Atoi(id)
	return i, leg
}
