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

// Package server serves one simulated engine over vLLM's HTTP API (OpenAI completions and chat,
// /tokenize, /metrics, ...) and runs the engine core in real time: each step sleeps for its
// simulated duration divided by the time scale, then delivers its tokens and publishes its KV events.
// ParseFlags reads vllm-sim's command line (vLLM's, plus sim-only flags) from a flag table, and
// Serve runs the engines it describes.
package server

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/sim/engine"
	"github.com/kvrouter/kvrouter/internal/sim/kvevent"
	"github.com/kvrouter/kvrouter/internal/sim/kvpublish"
	"github.com/kvrouter/kvrouter/internal/sim/tokenizer"
	hftok "github.com/kvrouter/kvrouter/internal/tokenizer"
)

// Options configure a Server.
type Options struct {
	// ServedModelNames are the names clients may ask for; the first is reported in responses and
	// metrics. ModelPath is vLLM's --model (the "root" in /v1/models).
	ServedModelNames []string
	ModelPath        string
	// LoRAModules maps adapter names (accepted as model names) to their paths.
	LoRAModules map[string]string
	// TimeScale runs simulated time this many times faster than wall time (1 = real time).
	TimeScale float64
	// PrefixCaching false makes every lookup miss (vLLM --no-enable-prefix-caching).
	PrefixCaching bool
	HashAlgo      string
	// Publisher receives each step's KV events; nil disables events.
	Publisher *kvpublish.Publisher
	// KVEventSources is what GET /kv_event_sources reports.
	KVEventSources []KVEventSource
	Tokenizer      *tokenizer.Tokenizer
	// RealTokenizer, when set, replaces Tokenizer: a model's tokenizer.json and chat template
	// (--tokenizer). The engine's OutputVocab should then come from it (outputVocab).
	RealTokenizer *hftok.Tokenizer
	Faults        Faults
	Logger        *slog.Logger
	// APIKeys, when any, are required as "Authorization: Bearer <key>" on every route but
	// /health, /ping, /load, /version and /metrics (vLLM's --api-key, VLLM_API_KEY).
	APIKeys []string
	// SimAPI serves the simulator's own /sim/faults, /sim/stats and /sim/cache, and
	// /reset_prefix_cache (--enable-sim-api). Off, as a deployed engine has no such routes:
	// anyone who reaches the port could inject faults or read the cache's contents.
	SimAPI bool
	// ResetPrefixCache serves POST /reset_prefix_cache, which vLLM serves only in its dev mode
	// (VLLM_SERVER_DEV_MODE=1); SimAPI turns it on too.
	ResetPrefixCache bool
	// KVTransfer, when set, makes the engine play disaggregated prefill and decode legs
	// (--kv-transfer-config); nil: kv_transfer_params are ignored.
	KVTransfer *KVTransferOptions
}

// KVEventSource is one entry of GET /kv_event_sources.
type KVEventSource struct {
	DataParallelRank int    `json:"data_parallel_rank"`
	Endpoint         string `json:"endpoint"`
	ReplayEndpoint   string `json:"replay_endpoint,omitempty"`
	Topic            string `json:"topic"`
}

// Faults are the injectable failures; they can be changed at run time through POST /sim/faults.
type Faults struct {
	// FailFraction of requests fail with HTTP 500 before reaching the engine.
	FailFraction float64 `json:"failFraction"`
	// TokenizeDelay is added to every tokenization (a slow tokenizer).
	TokenizeDelay time.Duration `json:"tokenizeDelay"`
	// EventDelay holds KV event batches back before they are sent.
	EventDelay time.Duration `json:"eventDelay"`
	// TokenizeFailFraction of /tokenize calls fail with HTTP 500 (a failing tokenizer).
	TokenizeFailFraction float64 `json:"tokenizeFailFraction"`
	// ReplayDown makes the replay socket ignore requests (replay unavailable: subscribers
	// time out).
	ReplayDown bool `json:"replayDown"`
	// KVTransferFailFraction of KV pulls fail (the decode engine then recomputes the prompt).
	KVTransferFailFraction float64 `json:"kvTransferFailFraction"`
	// KVTransferDelay is added (wall clock) to every KV pull.
	KVTransferDelay time.Duration `json:"kvTransferDelay"`
}

// Server is one simulated engine with its HTTP API.
type Server struct {
	opt  Options
	log  *slog.Logger
	tok  textTokenizer
	met  *metrics
	lag  *stepLag
	wake chan struct{}

	mu       sync.Mutex // guards eng, inflight, faults, anchors
	eng      *engine.Engine
	inflight map[*engine.Request]*flight
	faults   Faults
	// Wall-clock anchor of virtual time: virtual = virtAnchor + (wall - wallAnchor)·scale.
	wallAnchor time.Time
	virtAnchor float64
	seq        uint64
	rng        *rand.Rand
	// unpublished counts steps whose cache changes are made but whose events are not yet
	// handed to the publisher (the step "runs" between the two): GET /sim/cache is settled
	// only at zero.
	unpublished int
	// generation counts restarts, so that a step that straddles one publishes nothing.
	generation uint64
	// kv is the disaggregation state (nil without KVTransfer).
	kv *kvState
}

// flight is the HTTP side of one engine request.
type flight struct {
	ch          chan delivery
	lastTokenAt float64
	reason      string // finish reason reported when the engine stops at MaxTokens
}

type delivery struct {
	token  uint32
	first  bool
	last   bool
	cached int
	err    error
}

const minSleep = time.Millisecond

var errRestarted = errors.New("engine restarted; request dropped")

// New wraps eng. Run must be called to make progress.
func New(eng *engine.Engine, opt Options) *Server {
	if opt.TimeScale <= 0 {
		opt.TimeScale = 1
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Tokenizer == nil {
		opt.Tokenizer = tokenizer.New()
	}
	if len(opt.ServedModelNames) == 0 {
		opt.ServedModelNames = []string{opt.ModelPath}
	}
	s := &Server{
		opt:      opt,
		log:      opt.Logger,
		tok:      synthetic{opt.Tokenizer},
		met:      newMetrics(opt.ServedModelNames[0], eng.Config(), opt.HashAlgo, opt.PrefixCaching),
		wake:     make(chan struct{}, 1),
		eng:      eng,
		inflight: make(map[*engine.Request]*flight),
		faults:   opt.Faults,
		rng:      rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x5eed)),
	}
	s.lag = newStepLag(s.met.reg, time.Now)
	if opt.RealTokenizer != nil {
		s.tok = hfTokenizer{opt.RealTokenizer}
	}
	if opt.Publisher != nil && opt.Faults.EventDelay > 0 {
		opt.Publisher.SetDelay(opt.Faults.EventDelay)
	}
	if opt.Publisher != nil && opt.Faults.ReplayDown {
		opt.Publisher.SetReplayDown(true)
	}
	if opt.KVTransfer != nil {
		s.kv = newKVState(opt.KVTransfer, s.met)
	}
	return s
}

// virtualNow must be called with s.mu held.
func (s *Server) virtualNow() float64 {
	return s.virtAnchor + time.Since(s.wallAnchor).Seconds()*s.opt.TimeScale
}

// Run drives the engine until ctx ends.
func (s *Server) Run(ctx context.Context) {
	s.mu.Lock()
	s.wallAnchor, s.virtAnchor = time.Now(), s.eng.Now()
	s.mu.Unlock()
	for {
		s.mu.Lock()
		if !s.eng.HasWork() {
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
			}
			continue
		}
		res := s.eng.Step()
		gen := s.generation
		if res.Sequences == 0 && len(res.Events) == 0 && len(res.Preempted) == 0 {
			// Work is waiting but nothing fits (blocks held for remote decode engines): only a
			// release, an abort or a new request can change that, and each wakes the loop.
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
			}
			// The engine stood idle meanwhile: its clock catches up, as when it has no work.
			s.mu.Lock()
			s.eng.AdvanceTo(s.virtualNow())
			s.wallAnchor, s.virtAnchor = time.Now(), s.eng.Now()
			s.mu.Unlock()
			continue
		}
		if s.opt.Publisher != nil && len(res.Events) > 0 {
			s.unpublished++
		}
		st := s.eng.Stats()
		s.met.observeStep(res, st)
		end := s.eng.Now()
		wait := s.wallAnchor.Add(time.Duration((end - s.virtAnchor) / s.opt.TimeScale * float64(time.Second)))
		s.mu.Unlock()

		// The step "runs on the GPU" for its duration; its results appear at its end. Sleeps
		// shorter than a timer tick are skipped: the anchor is cumulative, so a later sleep makes
		// up for them, and tiny timers would make a high time scale wait on timer latency instead.
		if d := -s.lag.stepDone(wait, res.Duration, s.opt.TimeScale); d > minSleep {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		} else if d < -50*time.Millisecond {
			// The host cannot keep up with the time scale: let virtual time run slower rather
			// than rush through a backlog of steps.
			s.lag.writeOff(-d)
			s.mu.Lock()
			s.wallAnchor, s.virtAnchor = time.Now(), end
			s.mu.Unlock()
		}
		if s.opt.Publisher != nil && len(res.Events) > 0 {
			// Under s.mu, so that a Restart during the step cannot slip in between: the events
			// of a step of the engine before a restart describe a cache that no longer exists
			// and must not be published under the new process's sequence.
			s.mu.Lock()
			if s.generation == gen {
				s.opt.Publisher.Publish(kvevent.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: res.Events})
			}
			s.unpublished--
			s.mu.Unlock()
		}
		s.deliver(res, gen)
	}
}

func (s *Server) deliver(res engine.StepResult, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range res.Tokens {
		if t.Last && t.Req.HoldKV && s.kv != nil && s.generation == gen {
			// Whether or not the client still waits: the engine holds the blocks either way,
			// and only a pull or the timeout frees them.
			s.holdKV(t.Req)
		}
		f := s.inflight[t.Req]
		if f == nil {
			continue
		}
		if t.First {
			s.met.ttft.With(s.met.labels).Observe(t.Req.FirstTokenAt - t.Req.Arrival)
			s.met.queue.With(s.met.labels).Observe(t.Req.ScheduledAt - t.Req.Arrival)
		} else {
			s.met.itl.With(s.met.labels).Observe(res.Start + res.Duration - f.lastTokenAt)
		}
		f.lastTokenAt = res.Start + res.Duration
		if t.Last {
			// Counted before the answer can reach the client, so that a client that reads
			// /metrics after its answer sees its request there.
			s.met.observeFinished(t.Req, f.reason)
			delete(s.inflight, t.Req)
		}
		// The channel holds every delivery the request can get, so this never blocks the engine.
		f.ch <- delivery{token: t.ID, first: t.First, last: t.Last, cached: t.Req.CachedTokens()}
	}
}

// submit queues r and returns its delivery channel. arrived, when positive, is the virtual time
// the request reached the server (before a KV pull), which the latency metrics count from.
func (s *Server) submit(r *engine.Request, reason string, arrived float64) (*flight, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.eng.HasWork() {
		// Idle time passes in virtual time too.
		s.eng.AdvanceTo(s.virtualNow())
		s.wallAnchor, s.virtAnchor = time.Now(), s.eng.Now()
	}
	if err := s.eng.Submit(r); err != nil {
		return nil, err
	}
	// While a step runs, the engine's clock already reads the step's end; the request arrived
	// at the wall clock's virtual time, as vLLM stamps arrival when the request comes in, not when
	// the running step finishes. Without this, TTFT, queue time and E2E in /metrics would leave
	// out up to one step that every client measures.
	if now := s.virtualNow(); now < r.Arrival {
		r.Arrival = now
	}
	if arrived > 0 && arrived < r.Arrival {
		r.Arrival = arrived
	}
	// The engine stops a request at MaxTokens outputs or at the context length, whichever comes
	// first; sizing by the second keeps a huge MaxTokens from sizing the channel.
	deliveries := min(r.MaxTokens, s.eng.Config().MaxModelLen-len(r.Prompt))
	f := &flight{ch: make(chan delivery, deliveries+1), reason: reason}
	s.inflight[r] = f
	s.met.waiting.With(s.met.labels).Set(float64(s.eng.Stats().Waiting))
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return f, nil
}

// abort cancels an unfinished request (client gone).
func (s *Server) abort(r *engine.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.inflight[r]; !ok {
		return
	}
	delete(s.inflight, r)
	s.eng.Abort(r.ID)
	s.poke()
	s.met.success.WithLabelValues(s.met.labels["model_name"], "0", "abort").Inc()
}

// Restart simulates an engine process restart: in-flight requests fail, the cache empties and the
// KV event sequence starts again at 0.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	dropped, err := s.eng.Restart()
	if err != nil {
		return err
	}
	s.generation++
	if s.kv != nil {
		s.kv.restart()
	}
	for _, r := range dropped {
		if f := s.inflight[r]; f != nil {
			f.ch <- delivery{err: errRestarted}
			delete(s.inflight, r)
		}
	}
	if s.opt.Publisher != nil {
		s.opt.Publisher.Reset()
	}
	s.log.Info("engine restarted", "dropped_requests", len(dropped))
	return nil
}

// poke wakes the step loop after a change that may let waiting requests in.
func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Server) nextID(prefix string) string {
	s.mu.Lock()
	s.seq++
	n := s.seq
	s.mu.Unlock()
	return prefix + "-" + itoa36(n) + "-" + itoa36(uint64(time.Now().UnixNano())&0xffffff)
}

func itoa36(n uint64) string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	if n == 0 {
		return "0"
	}
	var b [16]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = digits[n%36]
		n /= 36
	}
	return string(b[i:])
}
