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

package kvpublish

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvrouter/kvrouter/internal/sim/kvevent"
)

// EndSeq is the sequence number of the replay end marker ((-1) as signed 8-byte big-endian).
const EndSeq = ^uint64(0)

// Config is the publisher part of vLLM's --kv-events-config plus the simulator's wire options.
type Config struct {
	Endpoint string // PUB endpoint; bound when it contains "*" or "::" or is ipc/inproc, else connected
	// ForceBind binds Endpoint whatever the heuristic says (tests bind tcp://127.0.0.1:0).
	ForceBind      bool
	ReplayEndpoint string // ROUTER endpoint (always bound); empty disables replay
	Topic          string
	HWM            int // PUB high-water mark in batches (0: unlimited)
	BufferSteps    int // replay buffer length in batches
	MaxQueueSize   int // batches waiting for the sender; Publish blocks beyond it, like vLLM
	DPRank         int
	Encoder        Encoder
	// LegacyReplay answers replays without the topic frame (vLLM <= ~0.23 and SGLang).
	LegacyReplay bool
	Logger       *slog.Logger
}

// Stats counts what the publisher did.
type Stats struct {
	Published  uint64 `json:"published"`  // batches given a sequence number
	Dropped    uint64 `json:"dropped"`    // batches withheld from the live stream by fault injection
	Replays    uint64 `json:"replays"`    // replay requests served
	BadReplays uint64 `json:"badReplays"` // malformed replay requests ignored
	// IgnoredReplays counts replay requests left unanswered by fault injection (replay down).
	IgnoredReplays uint64 `json:"ignoredReplays"`
	NextSequence   uint64 `json:"nextSequence"`
}

type entry struct {
	seq     uint64
	payload []byte
	due     time.Time
	epoch   uint64
}

// Publisher sends event batches over ZMQ. Publish may be called from one goroutine at a time.
type Publisher struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	pub    zmq4.Socket
	router zmq4.Socket
	queue  chan entry
	wg     sync.WaitGroup

	mu       sync.Mutex
	seq      uint64
	epoch    uint64 // bumped by Reset so queued batches of the old process are not sent
	ring     []entry
	ringNext int
	dropNext int
	delay    time.Duration
	// replayDown ignores replay requests (fault injection: replay unavailable).
	replayDown bool
	stats      Stats
}

// IsBindEndpoint applies vLLM's heuristic for the PUB endpoint.
func IsBindEndpoint(ep string) bool {
	return strings.Contains(ep, "*") || strings.Contains(ep, "::") ||
		strings.HasPrefix(ep, "ipc://") || strings.HasPrefix(ep, "inproc://")
}

// New opens the sockets and starts the sender and the replay server.
func New(cfg Config) (*Publisher, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("kv events endpoint is empty")
	}
	if cfg.BufferSteps <= 0 {
		cfg.BufferSteps = 10000
	}
	if cfg.MaxQueueSize <= 0 {
		cfg.MaxQueueSize = 100000
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{cfg: cfg, log: log, ctx: ctx, cancel: cancel,
		queue: make(chan entry, min(cfg.MaxQueueSize, 1<<16)), ring: make([]entry, 0, min(cfg.BufferSteps, 1<<12))}

	p.pub = zmq4.NewPub(ctx, zmq4.WithLogger(discardLogger()))
	if cfg.HWM > 0 {
		if err := p.pub.SetOption(zmq4.OptionHWM, cfg.HWM); err != nil {
			cancel()
			return nil, fmt.Errorf("setting PUB high-water mark: %w", err)
		}
	}
	var err error
	if cfg.ForceBind || IsBindEndpoint(cfg.Endpoint) {
		err = p.pub.Listen(cfg.Endpoint)
	} else {
		err = p.pub.Dial(cfg.Endpoint)
	}
	if err != nil {
		p.pub.Close()
		cancel()
		return nil, fmt.Errorf("opening KV events PUB socket on %s: %w", cfg.Endpoint, err)
	}
	if cfg.ReplayEndpoint != "" {
		p.router = zmq4.NewRouter(ctx, zmq4.WithLogger(discardLogger()))
		if err := p.router.Listen(cfg.ReplayEndpoint); err != nil {
			p.pub.Close()
			p.router.Close()
			cancel()
			return nil, fmt.Errorf("binding KV events replay socket on %s: %w", cfg.ReplayEndpoint, err)
		}
		p.wg.Add(1)
		go p.serveReplay()
	}
	p.wg.Add(1)
	go p.send()
	return p, nil
}

// Addr is the bound PUB address (nil when the endpoint was connected).
func (p *Publisher) Addr() net.Addr { return p.pub.Addr() }

// ReplayAddr is the bound ROUTER address (nil without replay).
func (p *Publisher) ReplayAddr() net.Addr {
	if p.router == nil {
		return nil
	}
	return p.router.Addr()
}

// Publish assigns the next sequence number to b, keeps it for replay and queues it for the PUB
// socket (unless fault injection drops it from the live stream).
func (p *Publisher) Publish(b kvevent.Batch) {
	b.DPRank = p.cfg.DPRank
	p.mu.Lock()
	payload := p.cfg.Encoder.Append(make([]byte, 0, 512), b)
	e := entry{seq: p.seq, payload: payload, epoch: p.epoch, due: time.Now().Add(p.delay)}
	p.seq++
	p.stats.Published++
	p.stats.NextSequence = p.seq
	if len(p.ring) < p.cfg.BufferSteps {
		p.ring = append(p.ring, e)
	} else {
		p.ring[p.ringNext] = e
		p.ringNext = (p.ringNext + 1) % len(p.ring)
	}
	drop := p.dropNext > 0
	if drop {
		p.dropNext--
		p.stats.Dropped++
	}
	p.mu.Unlock()
	if drop {
		return
	}
	select {
	case p.queue <- e:
	case <-p.ctx.Done():
	}
}

// DropNext withholds the next n batches from the live stream; they stay in the replay buffer, so a
// subscriber sees a sequence gap it can repair by replay.
func (p *Publisher) DropNext(n int) {
	p.mu.Lock()
	p.dropNext += n
	p.mu.Unlock()
}

// SetDelay holds every batch published from now on for d before sending it.
func (p *Publisher) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// SetReplayDown makes the replay socket ignore requests while down is true: subscribers get no
// answer and time out, as with an unreachable replay endpoint.
func (p *Publisher) SetReplayDown(down bool) {
	p.mu.Lock()
	p.replayDown = down
	p.mu.Unlock()
}

// Reset models a process restart: the sequence starts again at 0, the replay buffer is empty and
// batches still queued are discarded.
func (p *Publisher) Reset() {
	p.mu.Lock()
	p.seq = 0
	p.epoch++
	p.ring = p.ring[:0]
	p.ringNext = 0
	p.dropNext = 0
	p.stats.NextSequence = 0
	p.mu.Unlock()
}

// Stats returns the counters.
func (p *Publisher) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Close stops the publisher; batches not yet sent are lost.
func (p *Publisher) Close() error {
	p.cancel()
	err := p.pub.Close()
	if p.router != nil {
		if e := p.router.Close(); err == nil {
			err = e
		}
	}
	p.wg.Wait()
	return err
}

func (p *Publisher) send() {
	defer p.wg.Done()
	for {
		select {
		case <-p.ctx.Done():
			return
		case e := <-p.queue:
			if d := time.Until(e.due); d > 0 {
				select {
				case <-time.After(d):
				case <-p.ctx.Done():
					return
				}
			}
			p.mu.Lock()
			stale := e.epoch != p.epoch
			p.mu.Unlock()
			if stale {
				continue
			}
			// zmq4 drops the message when its queue is above the high-water mark: a sequence gap.
			err := p.pub.Send(zmq4.NewMsgFrom([]byte(p.cfg.Topic), seqBytes(e.seq), e.payload))
			if err != nil && p.ctx.Err() == nil {
				p.log.Warn("sending KV event batch failed", "seq", e.seq, "err", err)
			}
		}
	}
}

func (p *Publisher) serveReplay() {
	defer p.wg.Done()
	for {
		msg, err := p.router.Recv()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			p.log.Warn("receiving replay request failed", "err", err)
			continue
		}
		// [identity, empty delimiter, start sequence]: anything else is ignored, as in vLLM.
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 0 || len(msg.Frames[2]) != 8 {
			p.mu.Lock()
			p.stats.BadReplays++
			p.mu.Unlock()
			p.log.Warn("invalid replay request", "frames", len(msg.Frames))
			continue
		}
		id := msg.Frames[0]
		start := binary.BigEndian.Uint64(msg.Frames[2])
		p.mu.Lock()
		if p.replayDown {
			p.stats.IgnoredReplays++
			p.mu.Unlock()
			continue
		}
		var batch []entry
		n := len(p.ring)
		for i := 0; i < n; i++ {
			e := p.ring[(p.ringNext+i)%n]
			if e.seq >= start {
				batch = append(batch, e)
			}
		}
		p.stats.Replays++
		p.mu.Unlock()
		for _, e := range batch {
			if err := p.router.Send(p.replayFrames(id, seqBytes(e.seq), e.payload, []byte(p.cfg.Topic))); err != nil {
				p.log.Warn("sending replay batch failed", "err", err)
				break
			}
		}
		end := p.replayFrames(id, seqBytes(EndSeq), []byte{}, []byte{})
		if err := p.router.Send(end); err != nil && p.ctx.Err() == nil {
			p.log.Warn("sending replay end marker failed", "err", err)
		}
	}
}

func (p *Publisher) replayFrames(id, seq, payload, topic []byte) zmq4.Msg {
	if p.cfg.LegacyReplay {
		return zmq4.NewMsgFrom(id, []byte{}, seq, payload)
	}
	return zmq4.NewMsgFrom(id, []byte{}, topic, seq, payload)
}

func seqBytes(s uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), s) }
