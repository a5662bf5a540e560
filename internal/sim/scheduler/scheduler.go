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

// Package scheduler is the simulator's continuous-batching scheduler, modelled on vLLM v1's: a
// waiting and a running queue, at most MaxNumSeqs running requests, a per-step token budget shared
// by decodes and (chunked) prefills, prefix-cache lookup when a request is admitted, and preemption
// by recomputation (the newest running request gives back its blocks) when the cache is full.
//
// It decides what runs in a step and keeps the block tables; it has no notion of time. The engine
// (internal/sim/engine) times the step and feeds the sampled tokens back through Complete.
package scheduler

import (
	"fmt"
	"sort"

	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/kvcache"
)

// Config bounds the batch.
type Config struct {
	MaxNumSeqs          int // running requests at most (vLLM --max-num-seqs)
	MaxNumBatchedTokens int // tokens per step (vLLM --max-num-batched-tokens)
	MaxModelLen         int // prompt + output tokens at most
	// MaxLoRAs bounds the distinct LoRA adapters among running requests (vLLM --max-loras, the
	// GPU adapter slots); 0 means no bound (LoRA disabled).
	MaxLoRAs int
}

// Status of a request.
type Status uint8

// Request states.
const (
	Waiting Status = iota
	Running
	Finished
)

// Request is one sequence. The caller fills the exported input fields before Add; the scheduler
// owns the rest.
type Request struct {
	ID        string
	Prompt    []uint32
	MaxTokens int // output tokens at most (> 0)
	// EOSAfter, when positive, is where the model samples its end-of-sequence token: the
	// request finishes after that many outputs if MaxTokens has not stopped it first.
	EOSAfter   int
	LoRA       string // LoRA adapter name, hashed into every block
	CacheSalt  string // hashed into the first block
	ReportFull bool   // kv_cache_report_mode "full": re-announce hit blocks
	// HoldKV keeps the request's blocks referenced after it finishes, until Release (vLLM's
	// delay_free_blocks for a prefill whose KV a remote decode engine will pull).
	HoldKV bool
	// KVTransferred is the prompt tokens whose KV arrived from a remote prefill: at the first
	// admission those blocks are allocated and stored without being computed (clamped to full
	// blocks and to the prompt less its last token, which is always recomputed to sample).
	KVTransferred int

	Output       []uint32
	NumComputed  int // tokens whose KV is in the cache
	Status       Status
	Preemptions  int
	CachedTokens int // prompt tokens served by the prefix cache at the first admission
	// TransferredTokens is the prompt tokens whose KV the first admission took from KVTransferred
	// rather than from the local prefix cache or computation.
	TransferredTokens int

	tokens    []uint32 // prompt then output
	hashes    []blockhash.Hash
	blocks    []kvcache.BlockID
	numStored int // leading blocks already put into the prefix cache
	admitted  bool
}

// Blocks returns the block ids the request holds now (for a held request: its KV to hand over).
func (r *Request) Blocks() []kvcache.BlockID { return append([]kvcache.BlockID(nil), r.blocks...) }

// outputLimit is the number of outputs after which the request stops: its cap, or its EOS
// when that comes first.
func (r *Request) outputLimit() int {
	if r.EOSAfter > 0 && r.EOSAfter < r.MaxTokens {
		return r.EOSAfter
	}
	return r.MaxTokens
}

// NumTokens is prompt plus output length.
func (r *Request) NumTokens() int { return len(r.tokens) }

// Scheduled is one request's share of a step.
type Scheduled struct {
	Req *Request
	// NumNew tokens are computed this step, starting at context position Context.
	NumNew  int
	Context int
	// Samples is true when the step ends this request's prompt (or is a decode), so the model
	// emits a token for it.
	Samples bool
}

// Output is the plan of one step.
type Output struct {
	Scheduled []Scheduled
	Preempted []*Request
	// PrefixQueries/PrefixHits count tokens looked up in / served by the prefix cache this step
	// (vllm:prefix_cache_queries / _hits).
	PrefixQueries, PrefixHits int
	// TransferredTokens counts prompt tokens admitted with KV from a remote prefill.
	TransferredTokens int
}

// NumTokens is the step's total scheduled tokens.
func (o *Output) NumTokens() int {
	n := 0
	for _, s := range o.Scheduled {
		n += s.NumNew
	}
	return n
}

// Scheduler is not safe for concurrent use.
type Scheduler struct {
	cfg     Config
	cache   *kvcache.Cache
	hasher  *blockhash.Hasher
	waiting []*Request
	running []*Request
	// held are finished HoldKV requests whose blocks stay referenced until Release.
	held       map[string]*Request
	heldBlocks int
}

// New returns a scheduler over cache, hashing blocks with hasher.
func New(cfg Config, cache *kvcache.Cache, hasher *blockhash.Hasher) (*Scheduler, error) {
	if cfg.MaxNumSeqs <= 0 || cfg.MaxNumBatchedTokens <= 0 || cfg.MaxModelLen <= 0 {
		return nil, fmt.Errorf("scheduler limits must be positive: %+v", cfg)
	}
	return &Scheduler{cfg: cfg, cache: cache, hasher: hasher, held: map[string]*Request{}}, nil
}

// Add queues a request. It rejects requests that could never run.
func (s *Scheduler) Add(r *Request) error {
	if len(r.Prompt) == 0 {
		return fmt.Errorf("request %s: empty prompt", r.ID)
	}
	if r.MaxTokens <= 0 {
		return fmt.Errorf("request %s: max tokens must be positive", r.ID)
	}
	if r.KVTransferred < 0 {
		return fmt.Errorf("request %s: transferred KV tokens must not be negative, got %d", r.ID, r.KVTransferred)
	}
	if _, ok := s.held[r.ID]; ok {
		return fmt.Errorf("request %s: a finished request of that id still holds its KV blocks (release it first)", r.ID)
	}
	if len(r.Prompt) >= s.cfg.MaxModelLen {
		return fmt.Errorf("request %s: prompt of %d tokens does not fit max model length %d", r.ID, len(r.Prompt), s.cfg.MaxModelLen)
	}
	need := (len(r.Prompt) + 1 + s.cache.BlockSize() - 1) / s.cache.BlockSize()
	if need > s.cache.NumBlocks() {
		return fmt.Errorf("request %s: prompt needs %d KV blocks, the cache has %d", r.ID, need, s.cache.NumBlocks())
	}
	// The request ends at MaxTokens outputs or at MaxModelLen tokens: the second bounds the
	// buffer whatever MaxTokens says (a client may send 2^63-1).
	r.tokens = append(make([]uint32, 0, len(r.Prompt)+min(r.outputLimit(), s.cfg.MaxModelLen-len(r.Prompt))), r.Prompt...)
	r.Status = Waiting
	r.admitted = false
	r.TransferredTokens = 0
	s.waiting = append(s.waiting, r)
	return nil
}

// Release frees the blocks of a finished HoldKV request. It reports whether id was held.
func (s *Scheduler) Release(id string) bool {
	r, ok := s.held[id]
	if !ok {
		return false
	}
	delete(s.held, id)
	s.heldBlocks -= len(r.blocks)
	s.release(r)
	return true
}

// Held returns a finished request whose blocks are held, or nil.
func (s *Scheduler) Held(id string) *Request { return s.held[id] }

// NumHeld counts the finished requests holding blocks and the blocks they hold.
func (s *Scheduler) NumHeld() (requests, blocks int) { return len(s.held), s.heldBlocks }

// CachedPrefixTokens is the number of leading prompt tokens, in full blocks, whose KV the prefix
// cache holds now for a request with this adapter and cache salt. It hashes only as far as the
// cache matches.
func (s *Scheduler) CachedPrefixTokens(prompt []uint32, lora, cacheSalt string) int {
	bs := s.cache.BlockSize()
	var parent blockhash.Hash
	n := 0
	for ; (n+1)*bs <= len(prompt); n++ {
		h := s.hasher.Block(parent, prompt[n*bs:(n+1)*bs], blockhash.ExtraKeys(lora, cacheSalt, n))
		if len(s.cache.Lookup([]blockhash.Hash{h})) == 0 {
			break
		}
		parent = h
	}
	return n * bs
}

// Abort removes a request wherever it is and frees its blocks. It reports whether it was found.
func (s *Scheduler) Abort(id string) bool {
	for i, r := range s.waiting {
		if r.ID == id {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			s.release(r)
			r.Status = Finished
			return true
		}
	}
	for i, r := range s.running {
		if r.ID == id {
			s.running = append(s.running[:i], s.running[i+1:]...)
			s.release(r)
			r.Status = Finished
			return true
		}
	}
	return false
}

// NumWaiting and NumRunning are the queue lengths.
func (s *Scheduler) NumWaiting() int { return len(s.waiting) }

// NumRunning is the number of admitted requests.
func (s *Scheduler) NumRunning() int { return len(s.running) }

// HasWork reports whether Schedule could do anything.
func (s *Scheduler) HasWork() bool { return len(s.waiting)+len(s.running) > 0 }

// Schedule plans one step.
func (s *Scheduler) Schedule() Output {
	var out Output
	budget := s.cfg.MaxNumBatchedTokens
	bs := s.cache.BlockSize()

	// Running requests first, in admission order; when blocks run out the newest running request is
	// preempted (possibly the one being scheduled).
	for i := 0; i < len(s.running) && budget > 0; i++ {
		r := s.running[i]
		n := min(r.NumTokens()-r.NumComputed, budget)
		if n <= 0 {
			continue
		}
		need := blocksFor(r.NumComputed+n, bs) - len(r.blocks)
		scheduled := true
		for need > s.cache.NumFree() {
			victim := s.running[len(s.running)-1]
			s.running = s.running[:len(s.running)-1]
			s.preempt(victim)
			out.Preempted = append(out.Preempted, victim)
			if victim == r {
				scheduled = false
				break
			}
		}
		if !scheduled {
			break
		}
		if need > 0 {
			ids, _ := s.cache.Allocate(need)
			r.blocks = append(r.blocks, ids...)
		}
		out.Scheduled = append(out.Scheduled, s.plan(r, n))
		budget -= n
	}

	// Admit waiting requests while there is budget, room and memory; never in a step that had to
	// preempt (the cache is already short). As in vLLM, a request whose adapter would be one too
	// many for the batch's adapter slots is skipped (it keeps its place at the head of the queue)
	// and the requests behind it may still be admitted.
	loras := s.runningLoRAs()
	var skipped []*Request
	for len(out.Preempted) == 0 && len(s.waiting) > 0 && budget > 0 && len(s.running) < s.cfg.MaxNumSeqs {
		r := s.waiting[0]
		if r.LoRA != "" && s.cfg.MaxLoRAs > 0 && !loras[r.LoRA] && len(loras) >= s.cfg.MaxLoRAs {
			skipped = append(skipped, r)
			s.waiting = s.waiting[1:]
			continue
		}
		s.extendHashes(r)
		// The block holding the last token is never reused: its token must be computed to sample.
		maxHit := (r.NumTokens() - 1) / bs
		hits := s.cache.Lookup(r.hashes[:min(maxHit, len(r.hashes))])
		hitTokens := len(hits) * bs
		// Blocks that arrived from a remote prefill count only at the first admission: once
		// preempted, the request finds them in the prefix cache or recomputes them, as vLLM does.
		remote := 0
		if !r.admitted {
			remote = max(0, min(r.KVTransferred/bs, maxHit, len(r.hashes))-len(hits))
		}
		start := hitTokens + remote*bs
		n := min(r.NumTokens()-start, budget)
		need := blocksFor(start+n, bs) - len(hits)
		if need > s.cache.NumFree()-s.cache.NumEvictable(hits) {
			break
		}
		s.cache.Touch(hits)
		ids, _ := s.cache.Allocate(need)
		r.blocks = append(append(r.blocks[:0], hits...), ids...)
		r.NumComputed = start
		r.numStored = len(hits)
		if !r.admitted {
			// vLLM reports what the prefix cache served at the first admission only
			// (num_cached_tokens): a preempted request readmitted to the blocks it computed
			// itself found no cache hit the client or a router could have earned.
			r.CachedTokens = start
		}
		r.Status = Running
		out.PrefixQueries += r.NumTokens()
		out.PrefixHits += hitTokens
		if r.ReportFull && len(hits) > 0 {
			s.cache.Announce(r.hashes[:len(hits)], blockhash.Hash{}, r.tokens[:hitTokens], r.LoRA, s.extraKeys(r, 0, len(hits)))
		}
		if remote > 0 {
			// The transferred blocks enter the prefix cache as they land, with their BlockStored
			// event, before the step computes anything after them.
			s.storeUpTo(r, len(hits)+remote)
			r.TransferredTokens = remote * bs
			out.TransferredTokens += remote * bs
		}
		r.admitted = true
		s.waiting = s.waiting[1:]
		s.running = append(s.running, r)
		if r.LoRA != "" && loras != nil {
			loras[r.LoRA] = true
		}
		out.Scheduled = append(out.Scheduled, s.plan(r, n))
		budget -= n
	}
	if len(skipped) > 0 {
		s.waiting = append(skipped, s.waiting...)
	}
	return out
}

// runningLoRAs is the set of adapters the running requests use; nil when adapters are not
// bounded (no need to track them, and no allocation per step).
func (s *Scheduler) runningLoRAs() map[string]bool {
	if s.cfg.MaxLoRAs <= 0 {
		return nil
	}
	out := map[string]bool{}
	for _, r := range s.running {
		if r.LoRA != "" {
			out[r.LoRA] = true
		}
	}
	return out
}

// LoRAs returns the distinct adapters of the running and of the waiting requests, sorted (what
// vLLM reports as running_lora_adapters and waiting_lora_adapters).
func (s *Scheduler) LoRAs() (running, waiting []string) {
	return distinctLoRAs(s.running), distinctLoRAs(s.waiting)
}

func distinctLoRAs(reqs []*Request) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range reqs {
		if r.LoRA != "" && !seen[r.LoRA] {
			seen[r.LoRA] = true
			out = append(out, r.LoRA)
		}
	}
	sort.Strings(out)
	return out
}

// plan records the step for r and caches the blocks it fills; vLLM caches full blocks when their
// slots are allocated, so their BlockStored events belong to this step.
func (s *Scheduler) plan(r *Request, n int) Scheduled {
	sc := Scheduled{Req: r, NumNew: n, Context: r.NumComputed, Samples: r.NumComputed+n >= r.NumTokens()}
	s.extendHashes(r)
	s.storeUpTo(r, (r.NumComputed+n)/s.cache.BlockSize())
	return sc
}

// storeUpTo puts r's blocks up to full (exclusive) into the prefix cache.
func (s *Scheduler) storeUpTo(r *Request, full int) {
	full = min(full, len(r.hashes))
	if full <= r.numStored {
		return
	}
	bs := s.cache.BlockSize()
	var parent blockhash.Hash
	if r.numStored > 0 {
		parent = r.hashes[r.numStored-1]
	}
	s.cache.Store(r.blocks[r.numStored:full], r.hashes[r.numStored:full], parent,
		r.tokens[r.numStored*bs:full*bs], r.LoRA, s.extraKeys(r, r.numStored, full))
	r.numStored = full
}

// Complete applies a step's results: computed tokens advance, sampled tokens are appended (tokens
// maps each sampling request to its new token). It returns the requests that finished, whose
// blocks go back to the free queue. A request finishes at MaxTokens outputs, at its EOS, or at
// MaxModelLen.
func (s *Scheduler) Complete(out Output, tokens func(r *Request) uint32) []*Request {
	var done []*Request
	for _, sc := range out.Scheduled {
		r := sc.Req
		if r.Status != Running {
			continue
		}
		r.NumComputed += sc.NumNew
		if !sc.Samples {
			continue
		}
		t := tokens(r)
		r.Output = append(r.Output, t)
		r.tokens = append(r.tokens, t)
		if len(r.Output) >= r.outputLimit() || r.NumTokens() >= s.cfg.MaxModelLen {
			done = append(done, r)
		}
	}
	for _, r := range done {
		for i, x := range s.running {
			if x == r {
				s.running = append(s.running[:i], s.running[i+1:]...)
				break
			}
		}
		r.Status = Finished
		if r.HoldKV {
			s.held[r.ID] = r
			s.heldBlocks += len(r.blocks)
			continue
		}
		s.release(r)
	}
	return done
}

// ResetPrefixCache clears the prefix cache if no request holds blocks.
func (s *Scheduler) ResetPrefixCache() bool { return s.cache.Reset() }

func (s *Scheduler) preempt(r *Request) {
	s.release(r)
	r.NumComputed = 0
	r.numStored = 0
	r.Status = Waiting
	r.Preemptions++
	s.waiting = append([]*Request{r}, s.waiting...)
}

// release frees r's blocks last-first so the end of the sequence is evicted before its prefix.
func (s *Scheduler) release(r *Request) {
	for i, j := 0, len(r.blocks)-1; i < j; i, j = i+1, j-1 {
		r.blocks[i], r.blocks[j] = r.blocks[j], r.blocks[i]
	}
	s.cache.Free(r.blocks)
	r.blocks = r.blocks[:0]
}

// extendHashes hashes every full block of r's known tokens not hashed yet.
func (s *Scheduler) extendHashes(r *Request) {
	bs := s.cache.BlockSize()
	for n := len(r.hashes); (n+1)*bs <= len(r.tokens); n++ {
		var parent blockhash.Hash
		if n > 0 {
			parent = r.hashes[n-1]
		}
		r.hashes = append(r.hashes, s.hasher.Block(parent, r.tokens[n*bs:(n+1)*bs], blockhash.ExtraKeys(r.LoRA, r.CacheSalt, n)))
	}
}

func (s *Scheduler) extraKeys(r *Request, from, to int) [][]string {
	out := make([][]string, to-from)
	for i := range out {
		out[i] = blockhash.ExtraKeys(r.LoRA, r.CacheSalt, from+i)
	}
	return out
}

func blocksFor(tokens, blockSize int) int { return (tokens + blockSize - 1) / blockSize }
