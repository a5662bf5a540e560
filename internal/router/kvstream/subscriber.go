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

package kvstream

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
)

// subscriber follows one source: one SUB socket, the sequence, and repairs.
type subscriber struct {
	src       kvindex.SourceID
	eventsURL string
	replayURL string
	topic     string
	sink      Sink
	tr        Transport
	cfg       *Config
	log       logr.Logger
	dec       kvevents.Decoder
	batch     kvevents.Batch

	// Sequence state, owned by the run goroutine.
	expected uint64
	lastTS   float64 // engine timestamp of batch expected-1, to recognise it after a reconnect
	resync   bool    // accept the next live sequence as is (nothing to repair from)
	// After a replay, live messages already delivered by it may still be queued: window
	// [winLo, winLo+len(winTS)) holds the replayed batches' timestamps to recognise them.
	winLo uint64
	winTS []float64

	// caughtUp is closed once the first catch-up has ended, however it ended.
	caughtUp     chan struct{}
	caughtUpOnce sync.Once

	mu sync.Mutex
	st SourceStatus
}

func newSubscriber(src kvindex.SourceID, eventsURL, replayURL, topic string, sink Sink, tr Transport,
	cfg *Config, m *kvevents.Metrics) *subscriber {
	s := &subscriber{src: src, eventsURL: eventsURL, replayURL: replayURL, topic: topic, sink: sink, tr: tr, cfg: cfg,
		log: cfg.Logger.WithValues("endpoint", src.Endpoint, "rank", src.Rank), caughtUp: make(chan struct{})}
	s.dec.Metrics = m
	s.st = SourceStatus{Source: src, EventsURL: eventsURL}
	return s
}

func (s *subscriber) status(now time.Time) SourceStatus {
	s.mu.Lock()
	st := s.st
	s.mu.Unlock()
	switch {
	case !st.Connected:
		st.Stale, st.Reason = true, "not connected"
	case s.cfg.StaleAfter > 0 && now.Sub(st.LastBatch) > s.cfg.StaleAfter:
		st.Stale, st.Reason = true, fmt.Sprintf("no batch for over %v", s.cfg.StaleAfter)
	}
	if st.Partial && st.Reason == "" {
		st.Reason = "entries dropped (" + st.PartialReason + "); rebuilding from new events"
	}
	return st
}

func (s *subscriber) update(f func(st *SourceStatus)) {
	s.mu.Lock()
	f(&s.st)
	s.mu.Unlock()
}

// newBackoff is the reconnect schedule: doubling from ReconnectMin to ReconnectMax, each wait
// stretched by up to half at random, so that the router replicas an engine restart (or a hostile
// peer) disconnected all at once do not come back in step.
func (s *subscriber) newBackoff() wait.Backoff {
	return wait.Backoff{Duration: s.cfg.ReconnectMin, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: s.cfg.ReconnectMax}
}

// run connects, reconnects with jittered exponential backoff, and handles messages until ctx is
// done.
func (s *subscriber) run(ctx context.Context) {
	defer s.markCaughtUp() // a subscriber stopped before its first catch-up holds nobody up
	backoff := s.newBackoff()
	for ctx.Err() == nil {
		sub, err := s.tr.Subscribe(ctx, s.eventsURL, s.topic, s.cfg.HWM)
		if err != nil {
			if errors.Is(err, ErrFrameTooLarge) {
				s.oversized(err)
			}
			// Nothing to replay from an engine we cannot reach: start-up is not held for it.
			s.markCaughtUp()
			d := backoff.Step()
			s.log.V(1).Info("kv events connect failed", "url", s.eventsURL, "err", err.Error(), "retryIn", d)
			if !sleep(ctx, d) {
				return
			}
			continue
		}
		s.update(func(st *SourceStatus) { st.Connected = true })
		s.log.V(1).Info("kv events connected", "url", s.eventsURL)
		// Catch up on whatever was published while we were away (everything, at start).
		s.catchUp(ctx)
		s.markCaughtUp()
		connectedAt := time.Now()
		for ctx.Err() == nil {
			frames, err := sub.Recv()
			if err != nil {
				switch {
				case ctx.Err() != nil:
				case errors.Is(err, ErrFrameTooLarge):
					s.oversized(err)
				default:
					s.log.Info("kv events connection lost", "url", s.eventsURL, "err", err.Error())
				}
				break
			}
			m, err := ParseFrames(frames)
			if err != nil {
				s.decodeError(err)
				continue
			}
			s.handle(ctx, m)
		}
		_ = sub.Close()
		s.update(func(st *SourceStatus) { st.Connected = false })
		if time.Since(connectedAt) > s.cfg.ReconnectMax {
			backoff = s.newBackoff() // the connection was healthy: start over
		}
		if !sleep(ctx, backoff.Step()) {
			return
		}
	}
}

// markCaughtUp records the end of the first catch-up (a replay from 0, or the finding that there
// is nothing to replay from): Manager.WaitCaughtUp waits for it.
func (s *subscriber) markCaughtUp() {
	s.caughtUpOnce.Do(func() { close(s.caughtUp) })
}

// oversized handles a peer that declared a frame over the limit: the transport dropped the
// connection before allocating it. What that message held is lost, so the source's entries are
// dropped as after any unrepairable gap; run then reconnects with backoff, and a peer that keeps
// doing it costs a connection attempt per backoff step, never the memory it claims.
func (s *subscriber) oversized(err error) {
	s.log.Info("kv events peer sent an oversized frame; connection dropped", "url", s.eventsURL, "err", err.Error())
	s.update(func(st *SourceStatus) { st.OversizedFrames++ })
	s.clear("oversized frame on the events connection")
}

// replay asks the replay endpoint for batches from seq on, counting an oversized frame.
func (s *subscriber) replay(ctx context.Context, from uint64) ([]Message, error) {
	msgs, err := s.tr.Replay(ctx, s.replayURL, from, s.cfg.ReplayTimeout)
	if errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrReplayTooLarge) {
		s.log.Info("kv events replay peer sent too much; replay dropped", "url", s.replayURL, "err", err.Error())
		s.update(func(st *SourceStatus) { st.OversizedFrames++ })
	}
	return msgs, err
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (s *subscriber) decodeError(err error) {
	s.log.V(1).Info("kv event message dropped", "err", err.Error())
	s.update(func(st *SourceStatus) { st.DecodeErrors++ })
}

// catchUp runs after every (re)connect. At start it replays from sequence 0, so a restarted
// router rebuilds its index from the engine's buffer. After a reconnect it asks from the last
// applied batch and checks that batch's timestamp: an engine that restarted while we were away
// would otherwise pass for the old one. When it cannot know what it missed (no replay endpoint,
// replay failing), it drops the source's entries: removals may have been missed, and the index
// must never claim blocks an engine no longer holds.
func (s *subscriber) catchUp(ctx context.Context) {
	if s.replayURL == "" {
		if s.expected > 0 {
			s.replayFailed("reconnected without a replay endpoint")
		}
		s.resync = true
		return
	}
	from := s.expected
	if from > 0 {
		from--
	}
	msgs, err := s.replay(ctx, from)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		s.log.Info("kv events catch-up replay failed", "err", err.Error())
		if s.expected > 0 || len(msgs) == 0 {
			s.replayFailed(fmt.Sprintf("catch-up replay from %d: %v", from, err))
			s.resync = true
			return
		}
	}
	if s.expected > 0 {
		switch {
		case len(msgs) > 0 && msgs[0].Seq == from && s.dec.Decode(msgs[0].Payload, &s.batch) == nil &&
			s.batch.TS == s.lastTS:
			msgs = msgs[1:] // the same engine: continue after the batch we have
		case len(msgs) == 0 || msgs[0].Seq <= from:
			// Nothing at or after our last batch (an idle engine still buffers it), or another
			// batch under its number: the engine restarted. The new process may already have
			// published batches below our old number, to nobody (we were away): fetch them
			// from 0, or its blocks stay unknown until it happens to publish again.
			s.restarted()
			if msgs, err = s.replay(ctx, 0); err != nil && ctx.Err() == nil {
				s.log.Info("kv events catch-up replay failed", "err", err.Error())
				if len(msgs) == 0 {
					s.replayFailed(fmt.Sprintf("catch-up replay from 0 after a restart: %v", err))
					s.resync = true
					return
				}
			}
		}
	}
	if len(msgs) == 0 {
		return
	}
	if msgs[0].Seq != s.expected {
		s.replayFailed(fmt.Sprintf("catch-up replay starts at %d, want %d", msgs[0].Seq, s.expected))
	} else {
		s.update(func(st *SourceStatus) { st.Replays++ })
	}
	s.applyReplayed(msgs)
}

func (s *subscriber) restarted() {
	s.log.Info("kv events engine restarted, clearing source", "expected", s.expected)
	s.sink.ClearSource(s.src)
	s.update(func(st *SourceStatus) { st.Restarts++; st.Partial, st.PartialReason = false, "" })
	s.expected = 0
	s.winTS = s.winTS[:0]
}

// handle processes one live message.
func (s *subscriber) handle(ctx context.Context, m Message) {
	if err := s.dec.Decode(m.Payload, &s.batch); err != nil {
		// The batch's removals are lost with it, so the index can no longer be trusted to be a
		// subset of the engine: rebuild.
		s.decodeError(err)
		s.clear(fmt.Sprintf("undecodable batch %d", m.Seq))
		s.expected = m.Seq + 1
		return
	}
	if s.duplicate(m.Seq) {
		return
	}
	if s.resync { // we do not know what came before: this message is the new baseline
		s.resync = false
		s.apply(m.Seq)
		return
	}
	switch {
	case m.Seq == s.expected:
		s.apply(m.Seq)
	case m.Seq > s.expected:
		s.gap(ctx, m)
	default:
		// The sequence went back: the engine restarted with an empty cache.
		s.restarted()
		if m.Seq == 0 {
			s.apply(0)
		} else {
			s.gap(ctx, m)
		}
	}
}

// duplicate reports whether a live message was already applied by a replay (same sequence,
// same engine timestamp); it closes the replay window once live messages pass it.
func (s *subscriber) duplicate(seq uint64) bool {
	if len(s.winTS) == 0 {
		return false
	}
	if seq >= s.winLo && seq < s.winLo+uint64(len(s.winTS)) {
		if s.winTS[seq-s.winLo] == s.batch.TS {
			return true
		}
	}
	if seq >= s.winLo+uint64(len(s.winTS)) || seq < s.winLo {
		s.winTS = s.winTS[:0]
	}
	return false
}

// gap repairs a jump from s.expected to m.Seq by replay; the live message (already decoded in
// s.batch) is applied after the repair if the replay did not include it.
func (s *subscriber) gap(ctx context.Context, m Message) {
	from := s.expected
	s.update(func(st *SourceStatus) { st.Gaps++ })
	s.log.V(1).Info("kv events gap", "from", from, "to", m.Seq)
	var msgs []Message
	err := errNoReplay
	if s.replayURL != "" {
		msgs, err = s.replay(ctx, from)
	}
	// The live message was decoded into s.batch, which the replayed batches reuse: it is
	// decoded again from its payload afterwards.
	live := m
	failed := true
	switch {
	case err != nil && len(msgs) == 0:
		s.replayFailed(fmt.Sprintf("gap %d..%d: %v", from, m.Seq-1, err))
	case len(msgs) == 0 || msgs[0].Seq != from:
		first := "nothing"
		if len(msgs) > 0 {
			first = fmt.Sprint(msgs[0].Seq)
		}
		s.replayFailed(fmt.Sprintf("gap %d..%d: replay buffer starts at %s", from, m.Seq-1, first))
	default:
		failed = false
		s.update(func(st *SourceStatus) { st.Replays++ })
	}
	s.applyReplayed(msgs)
	if live.Seq < s.expected {
		return // the replay delivered it
	}
	if err := s.dec.Decode(live.Payload, &s.batch); err != nil {
		return // it decoded a moment ago; cannot happen
	}
	if live.Seq > s.expected && !failed { // the replay stopped short of the live message
		s.replayFailed(fmt.Sprintf("replay ended at %d before live %d", s.expected, live.Seq))
	}
	s.apply(live.Seq)
}

// replayFailed drops the source's entries: the index keeps only what it can prove, and rebuilds
// from the events that follow.
func (s *subscriber) replayFailed(reason string) {
	s.log.Info("kv events gap not repaired, clearing source", "reason", reason)
	s.update(func(st *SourceStatus) { st.ReplayFailures++ })
	s.clear(reason)
}

func (s *subscriber) clear(reason string) {
	s.sink.ClearSource(s.src)
	s.update(func(st *SourceStatus) { st.Partial = true; st.PartialReason = reason })
}

// applyReplayed applies replayed batches from s.expected on (after a failed replay, from their
// first) and opens the duplicate window over them.
func (s *subscriber) applyReplayed(msgs []Message) {
	s.winTS = s.winTS[:0]
	started := false
	for _, r := range msgs {
		if started && r.Seq != s.expected {
			break // a hole inside the replay: stop, the next live message finds the gap
		}
		if !started && r.Seq < s.expected {
			continue
		}
		if err := s.dec.Decode(r.Payload, &s.batch); err != nil {
			s.decodeError(err)
			s.clear(fmt.Sprintf("undecodable replayed batch %d", r.Seq))
			s.expected = r.Seq + 1
			s.winTS = s.winTS[:0]
			started = true
			continue
		}
		if !started {
			s.winLo = r.Seq
			started = true
		}
		s.winTS = append(s.winTS, s.batch.TS)
		s.expected = r.Seq
		s.apply(r.Seq)
	}
}

// apply feeds s.batch (sequence seq) to the sink.
func (s *subscriber) apply(seq uint64) {
	st := s.sink.Apply(s.src, &s.batch)
	s.expected = seq + 1
	s.lastTS = s.batch.TS
	now := s.cfg.Now()
	lag := now.Sub(time.Unix(0, int64(s.batch.TS*1e9)))
	s.update(func(ss *SourceStatus) {
		if st.Cleared {
			// The engine emptied its cache (reset_prefix_cache): whatever the index missed
			// before is gone from the engine too, so from here on it follows it exactly.
			ss.Partial, ss.PartialReason = false, ""
		}
		ss.LastSeq = seq
		ss.Batches++
		ss.Blocks += uint64(st.BlocksStored + st.BlocksRemoved)
		ss.Lag = lag
		ss.LastBatch = now
	})
}
