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

// Package engine is the simulated vLLM engine core: a paged KV cache, a continuous-batching
// scheduler and a step-time model, advanced one scheduler step at a time in virtual time. It owns no
// goroutines and reads no clock, so kvbench can drive thousands of engines in a discrete-event
// simulation; the HTTP server (internal/sim/server) runs it in real time.
//
// An Engine is not safe for concurrent use.
package engine

import (
	"fmt"

	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/kvcache"
	"github.com/kvrouter/kvrouter/internal/sim/kvevent"
	"github.com/kvrouter/kvrouter/internal/sim/scheduler"
	"github.com/kvrouter/kvrouter/internal/sim/timing"
	"github.com/kvrouter/kvrouter/internal/sim/tokenizer"
)

// Config describes one engine.
type Config struct {
	Profile timing.Profile
	// BlockSize is tokens per KV block (vLLM --block-size, default 16).
	BlockSize int
	// NumBlocks overrides the KV capacity derived from the profile (vLLM --num-gpu-blocks-override).
	NumBlocks int
	// GPUMemoryUtilization is the fraction of GPU memory vLLM may use (default 0.9).
	GPUMemoryUtilization float64
	MaxNumSeqs           int // default 256
	MaxNumBatchedTokens  int // default 8192
	MaxModelLen          int // default: the model's native length
	// HashAlgo and HashSeed select the block hash (see internal/sim/blockhash); a nil seed means
	// PYTHONHASHSEED unset: random per engine start.
	HashAlgo string
	HashSeed *string
	// EmitEvents records KV events in each StepResult.
	EmitEvents bool
	// MaxLoRAs is the GPU adapter slots (vLLM --max-loras); 0 disables LoRA, and adapters are
	// then neither bounded nor loaded. LoRALoadTime (seconds) is what loading an adapter into a
	// slot adds to the step that first runs it.
	MaxLoRAs     int
	LoRALoadTime float64
	// OutputVocab, when not empty, are the ids the simulated model samples its output from (a
	// real tokenizer's: see tokenizer.NewGeneratorOver); empty: the synthetic tokenizer's words.
	OutputVocab []uint32
	// StepNoise is the coefficient of variation of a mean-1 lognormal factor on every step's
	// duration (the run-to-run jitter of a real forward pass: kernels, launches, the Python
	// scheduler); 0 keeps step times deterministic. NoiseSeed seeds the factors, so an engine's
	// noise is the same on every run with the same seed.
	StepNoise float64
	NoiseSeed uint64
}

func (c *Config) defaults() error {
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.GPUMemoryUtilization == 0 {
		c.GPUMemoryUtilization = 0.9
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = 256
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = 8192
	}
	if c.MaxModelLen == 0 {
		c.MaxModelLen = c.Profile.Model.MaxLen
	}
	if c.NumBlocks == 0 {
		c.NumBlocks = c.Profile.NumBlocks(c.BlockSize, c.GPUMemoryUtilization)
	}
	switch {
	case c.BlockSize < 1:
		return fmt.Errorf("block size must be positive, got %d", c.BlockSize)
	case c.NumBlocks < 1:
		return fmt.Errorf("profile %s leaves no memory for the KV cache", c.Profile.Name)
	case c.MaxModelLen < 2:
		return fmt.Errorf("max model length must be at least 2, got %d", c.MaxModelLen)
	case c.StepNoise < 0:
		return fmt.Errorf("step noise must not be negative, got %v", c.StepNoise)
	case c.MaxLoRAs < 0 || c.LoRALoadTime < 0:
		return fmt.Errorf("max LoRAs and LoRA load time must not be negative, got %d and %v", c.MaxLoRAs, c.LoRALoadTime)
	case c.Profile.TP < 1:
		return fmt.Errorf("profile %q has no tensor-parallel size", c.Profile.Name)
	}
	return nil
}

// Request is one generation request. Fill the input fields before Submit.
type Request struct {
	ID        string
	Prompt    []uint32
	MaxTokens int
	// EOSAfter, when positive, is the true output length: the engine samples end of sequence
	// after that many tokens unless MaxTokens stops it first. 0: it runs to MaxTokens.
	EOSAfter int
	// Seed selects the deterministic output stream.
	Seed       uint64
	LoRA       string
	CacheSalt  string
	ReportFull bool // vllm_xargs kv_cache_report_mode "full"
	// HoldKV keeps the request's KV blocks referenced when it finishes (neither freed nor
	// evictable) until Release: vLLM's delay_free_blocks for a prefill leg (do_remote_decode)
	// whose KV a decode engine will pull.
	HoldKV bool
	// KVTransferred is the prompt tokens whose KV arrived from a remote prefill (a decode leg,
	// do_remote_prefill). At the first admission the engine allocates those blocks and stores them
	// in its prefix cache without compute cost, emitting BlockStored like any stored block. It is
	// clamped to full blocks and to len(Prompt)-1: the last prompt token is always recomputed.
	KVTransferred int

	// Set by the engine, in virtual seconds: arrival, first admission to the batch, first token,
	// completion.
	Arrival, ScheduledAt, FirstTokenAt, FinishedAt float64
	scheduled                                      bool
	Output                                         []uint32

	s   scheduler.Request
	gen *tokenizer.Generator
}

// CachedTokens is the number of prompt tokens the prefix cache served at the first admission
// (vLLM's num_cached_tokens: a readmission after a preemption does not change it).
func (r *Request) CachedTokens() int { return r.s.CachedTokens }

// TransferredTokens is the prompt tokens whose KV the request took from KVTransferred (after the
// clamps, and less what the local prefix cache already held).
func (r *Request) TransferredTokens() int { return r.s.TransferredTokens }

// BlockIDs returns the physical ids of the KV blocks the request holds now: for a finished HoldKV
// request, the blocks a decode engine pulls (vLLM's remote_block_ids).
func (r *Request) BlockIDs() []int {
	ids := r.s.Blocks()
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

// Preemptions counts how often the request was preempted.
func (r *Request) Preemptions() int { return r.s.Preemptions }

// Token is one sampled token of one request.
type Token struct {
	Req   *Request
	ID    uint32
	First bool // first output token of the request
	Last  bool // the request finished with this token
}

// StepResult is everything one step did.
type StepResult struct {
	Start, Duration float64 // virtual seconds
	Tokens          []Token
	Finished        []*Request
	Preempted       []*Request
	Events          []kvevent.Event
	// Batch shape, for metrics and tests.
	ScheduledTokens, Sequences int
	PrefixQueries, PrefixHits  int
	// LoRALoads is the adapters loaded into GPU slots for this step (each adds LoRALoadTime).
	LoRALoads int
}

// Stats are the engine's gauges and counters.
type Stats struct {
	Running          int     `json:"running"`
	Waiting          int     `json:"waiting"`
	KVUsage          float64 `json:"kvUsage"`
	NumBlocks        int     `json:"numBlocks"`
	FreeBlocks       int     `json:"freeBlocks"`
	CachedBlocks     int     `json:"cachedBlocks"`
	PrefixQueries    uint64  `json:"prefixQueries"`
	PrefixHits       uint64  `json:"prefixHits"`
	Preemptions      uint64  `json:"preemptions"`
	PromptTokens     uint64  `json:"promptTokens"`
	GenerationTokens uint64  `json:"generationTokens"`
	Steps            uint64  `json:"steps"`
	LoRALoads        uint64  `json:"loraLoads"`
	// HeldRequests and HeldBlocks are the finished HoldKV requests not yet released and the
	// blocks they keep; TransferredTokens counts prompt tokens admitted with remote KV.
	HeldRequests      int    `json:"heldRequests"`
	HeldBlocks        int    `json:"heldBlocks"`
	TransferredTokens uint64 `json:"transferredTokens"`
	// With LoRA on: the adapters of the running and of the waiting requests.
	RunningLoRAs []string `json:"runningLoRAs,omitempty"`
	WaitingLoRAs []string `json:"waitingLoRAs,omitempty"`
}

// Engine is one simulated vLLM engine.
type Engine struct {
	cfg    Config
	cache  *kvcache.Cache
	sched  *scheduler.Scheduler
	now    float64
	byID   map[string]*Request
	stats  Stats
	scheds map[*scheduler.Request]*Request
	// slots are the adapters resident in GPU slots, least recently used first.
	slots []string
	// noise draws the step-time factors (nil without StepNoise); it survives Restart.
	noise *stepNoise
}

// New builds an engine with an empty cache at virtual time 0.
func New(cfg Config) (*Engine, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, noise: newStepNoise(cfg.StepNoise, cfg.NoiseSeed)}
	if err := e.reset(); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Engine) reset() error {
	h, err := blockhash.New(e.cfg.HashAlgo, e.cfg.HashSeed)
	if err != nil {
		return err
	}
	e.cache = kvcache.New(e.cfg.NumBlocks, e.cfg.BlockSize, e.cfg.EmitEvents)
	e.sched, err = scheduler.New(scheduler.Config{
		MaxNumSeqs: e.cfg.MaxNumSeqs, MaxNumBatchedTokens: e.cfg.MaxNumBatchedTokens, MaxModelLen: e.cfg.MaxModelLen,
		MaxLoRAs: e.cfg.MaxLoRAs,
	}, e.cache, h)
	if err != nil {
		return err
	}
	e.byID = make(map[string]*Request)
	e.scheds = make(map[*scheduler.Request]*Request)
	e.slots = nil
	return nil
}

// Config returns the effective configuration (defaults filled in).
func (e *Engine) Config() Config { return e.cfg }

// Now is the engine's virtual time in seconds.
func (e *Engine) Now() float64 { return e.now }

// AdvanceTo moves virtual time forward to t (idle time); it never goes back.
func (e *Engine) AdvanceTo(t float64) {
	if t > e.now {
		e.now = t
	}
}

// Submit queues a request arriving now. The ID must be unique among unfinished requests.
func (e *Engine) Submit(r *Request) error {
	if _, dup := e.byID[r.ID]; dup {
		return fmt.Errorf("request %q is already in flight", r.ID)
	}
	r.s = scheduler.Request{ID: r.ID, Prompt: r.Prompt, MaxTokens: r.MaxTokens, EOSAfter: r.EOSAfter, LoRA: r.LoRA, CacheSalt: r.CacheSalt, ReportFull: r.ReportFull,
		HoldKV: r.HoldKV, KVTransferred: r.KVTransferred}
	if err := e.sched.Add(&r.s); err != nil {
		return err
	}
	r.Arrival = e.now
	r.Output = nil
	r.scheduled = false
	r.gen = tokenizer.NewGeneratorOver(r.Seed, e.cfg.OutputVocab)
	e.byID[r.ID] = r
	e.scheds[&r.s] = r
	return nil
}

// Abort cancels a request (client went away); its blocks return to the free queue.
func (e *Engine) Abort(id string) bool {
	r, ok := e.byID[id]
	if !ok {
		return false
	}
	e.forget(r)
	return e.sched.Abort(id)
}

// Release frees the KV blocks of a finished HoldKV request (the decode engine pulled them, or the
// transfer timed out). It reports whether id was held. The blocks join the free queue and stay in
// the prefix cache until evicted, like any finished request's.
func (e *Engine) Release(id string) bool { return e.sched.Release(id) }

// CachedPrefixTokens is the number of leading prompt tokens, in full blocks, whose KV the prefix
// cache holds now for a request with this adapter and cache salt: what a decode engine need not
// pull. It may count the block holding the last prompt token, which admission recomputes anyway.
func (e *Engine) CachedPrefixTokens(prompt []uint32, lora, cacheSalt string) int {
	return e.sched.CachedPrefixTokens(prompt, lora, cacheSalt)
}

// HasWork reports whether Step would schedule anything or has events to hand out.
func (e *Engine) HasWork() bool { return e.sched.HasWork() || e.cache.HasEvents() }

// Step runs one scheduler step and advances virtual time by its duration. With nothing to do it
// returns a zero-duration result (carrying any pending events, e.g. from a cache reset).
func (e *Engine) Step() StepResult {
	res := StepResult{Start: e.now}
	out := e.sched.Schedule()
	var b timing.Batch
	for _, sc := range out.Scheduled {
		b.Add(sc.NumNew, sc.Context)
	}
	res.ScheduledTokens, res.Sequences = b.Tokens, len(out.Scheduled)
	res.PrefixQueries, res.PrefixHits = out.PrefixQueries, out.PrefixHits
	res.Duration = e.cfg.Profile.StepTime(b)
	if e.cfg.MaxLoRAs > 0 {
		res.LoRALoads = e.activate(out.Scheduled)
		res.Duration += float64(res.LoRALoads) * e.cfg.LoRALoadTime
		e.stats.LoRALoads += uint64(res.LoRALoads)
	}
	if e.noise != nil && res.Duration > 0 {
		res.Duration *= e.noise.factor()
	}
	e.now += res.Duration

	for _, sc := range out.Scheduled {
		if r := e.scheds[sc.Req]; r != nil && !r.scheduled {
			r.scheduled, r.ScheduledAt = true, res.Start
		}
	}
	for _, r := range out.Preempted {
		res.Preempted = append(res.Preempted, e.scheds[r])
	}
	done := e.sched.Complete(out, func(sr *scheduler.Request) uint32 {
		id, _ := e.scheds[sr].gen.Next()
		return id
	})
	finished := make(map[*scheduler.Request]bool, len(done))
	for _, sr := range done {
		finished[sr] = true
	}
	for _, sc := range out.Scheduled {
		if !sc.Samples || sc.Req.Status == scheduler.Waiting {
			continue
		}
		r := e.scheds[sc.Req]
		if r == nil {
			continue
		}
		tok := Token{Req: r, ID: sc.Req.Output[len(sc.Req.Output)-1], First: len(sc.Req.Output) == 1, Last: finished[sc.Req]}
		if tok.First {
			r.FirstTokenAt = e.now
		}
		r.Output = sc.Req.Output
		res.Tokens = append(res.Tokens, tok)
	}
	for _, sr := range done {
		r := e.scheds[sr]
		r.FinishedAt = e.now
		res.Finished = append(res.Finished, r)
		e.stats.PromptTokens += uint64(len(r.Prompt))
		e.stats.GenerationTokens += uint64(len(r.Output))
		e.forget(r)
	}
	res.Events = e.cache.DrainEvents()
	if len(out.Scheduled) > 0 {
		e.stats.Steps++
	}
	e.stats.PrefixQueries += uint64(out.PrefixQueries)
	e.stats.PrefixHits += uint64(out.PrefixHits)
	e.stats.TransferredTokens += uint64(out.TransferredTokens)
	e.stats.Preemptions += uint64(len(out.Preempted))
	return res
}

// activate makes the adapters of a step's batch resident, as vLLM's worker-side LRU adapter cache
// does before the forward pass: an adapter already in a slot is only marked recently used; one
// that is not takes a free slot or the least recently used adapter's that the batch does not use
// (the scheduler never puts more than MaxLoRAs adapters in a batch, so there is always one). It
// returns the number of adapters loaded.
func (e *Engine) activate(batch []scheduler.Scheduled) int {
	inBatch := map[string]bool{}
	var order []string
	for _, sc := range batch {
		if l := sc.Req.LoRA; l != "" && !inBatch[l] {
			inBatch[l] = true
			order = append(order, l)
		}
	}
	loads := 0
	for _, l := range order {
		if i := indexOf(e.slots, l); i >= 0 {
			e.slots = append(e.slots[:i], e.slots[i+1:]...)
		} else {
			loads++
			if len(e.slots) >= e.cfg.MaxLoRAs {
				for j, v := range e.slots {
					if !inBatch[v] {
						e.slots = append(e.slots[:j], e.slots[j+1:]...)
						break
					}
				}
			}
		}
		e.slots = append(e.slots, l)
	}
	return loads
}

func indexOf(list []string, v string) int {
	for i, x := range list {
		if x == v {
			return i
		}
	}
	return -1
}

// LoRAs reports the adapters of the running and of the waiting requests (vLLM's
// running_lora_adapters and waiting_lora_adapters) and the adapters resident in GPU slots.
func (e *Engine) LoRAs() (running, waiting, resident []string) {
	running, waiting = e.sched.LoRAs()
	return running, waiting, append([]string(nil), e.slots...)
}

// ResetPrefixCache clears the prefix cache (AllBlocksCleared in the next StepResult). Like vLLM
// it fails while requests hold blocks (held HoldKV requests included).
func (e *Engine) ResetPrefixCache() bool { return e.sched.ResetPrefixCache() }

// Restart simulates a process restart: every in-flight request is dropped (returned so that the
// caller can fail them), held KV blocks are dropped, the cache is emptied and, with an unset hash seed, NONE_HASH changes.
// Counters survive (a real restart would reset them; the fault-injection user wants continuity).
func (e *Engine) Restart() ([]*Request, error) {
	var dropped []*Request
	for _, r := range e.byID {
		dropped = append(dropped, r)
	}
	if err := e.reset(); err != nil {
		return nil, err
	}
	return dropped, nil
}

// CachedHashes returns the distinct block hashes in the prefix cache (see kvcache.CachedHashes).
func (e *Engine) CachedHashes() []blockhash.Hash { return e.cache.CachedHashes() }

// Stats returns the current gauges and counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Running = e.sched.NumRunning()
	s.Waiting = e.sched.NumWaiting()
	s.KVUsage = e.cache.Usage()
	s.NumBlocks = e.cache.NumBlocks()
	s.FreeBlocks = e.cache.NumFree()
	s.CachedBlocks = e.cache.NumCached()
	s.HeldRequests, s.HeldBlocks = e.sched.NumHeld()
	if e.cfg.MaxLoRAs > 0 {
		s.RunningLoRAs, s.WaitingLoRAs = e.sched.LoRAs()
	}
	return s
}

func (e *Engine) forget(r *Request) {
	delete(e.byID, r.ID)
	delete(e.scheds, &r.s)
}
