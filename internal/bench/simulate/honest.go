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

package simulate

// The honest-simulation switches of the event path: jitter, loss and replay of the KV event
// batches that feed the router's index. Live, each engine publishes numbered batches over ZMQ
// PUB/SUB, one TCP stream per engine: batches of one engine never overtake each other, but a
// PUB socket drops messages when a subscriber's queue passes its high-water mark or while it
// reconnects. internal/router/kvstream notices a drop as a jump in the sequence at the next
// batch, asks the engine's replay socket for the missing range, and applies the range and what
// queued behind it in order. eventLink reproduces that in virtual time. The Exact index (the
// oracle's) is fed at publication and never sees any of it.

import (
	"math/rand/v2"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
)

// noiseSeed is engine i's step-noise seed in a run with seed: the same engines get the same
// noise stream under every policy (common random numbers make policies comparable).
func noiseSeed(seed uint64, i int) uint64 {
	z := seed + uint64(i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// delivery is one batch on the wire.
type delivery struct {
	seq uint64
	b   *kvevents.Batch
}

// published is a batch in the engine's replay buffer until the router has applied it.
type published struct {
	b    *kvevents.Batch
	at   float64 // publication time
	lost bool
}

// linkState is one engine's stream: its publisher's side and the router's subscriber's side.
type linkState struct {
	rng  *rand.Rand
	sent uint64  // sequence of the next batch to publish
	wire float64 // arrival time of the last batch put on the wire
	buf  map[uint64]published
	// The subscriber: the next sequence it expects, and, while a replay is in flight, the
	// newest sequence received (everything up to it is applied when the replay lands).
	next      uint64
	repairing bool
	upTo      uint64
	detected  float64
}

// eventLink is the event path of a run with jitter or loss; nil (the old harness) without.
type eventLink struct {
	jitter, loss, replay float64
	eng                  []linkState

	lost, gaps, lostRepaired int
	repairWait, lostDelay    float64 // summed: detection to repair; publication to application of lost batches
}

func newEventLink(cfg Config, engines int) *eventLink {
	if cfg.EventJitter <= 0 && cfg.EventLoss <= 0 {
		return nil
	}
	l := &eventLink{jitter: max(cfg.EventJitter, 0), loss: min(max(cfg.EventLoss, 0), 1), replay: max(cfg.ReplayDelay, 0),
		eng: make([]linkState, engines)}
	for j := range l.eng {
		l.eng[j] = linkState{rng: rand.New(rand.NewPCG(cfg.Seed, 0x6576656e7473+uint64(j))), buf: map[uint64]published{}}
	}
	return l
}

// send publishes engine j's batch now: it reaches the router's index after EventLag (plus
// jitter, never before the engine's previous batch), or never if it is lost.
func (s *sim) send(j int, b *kvevents.Batch) {
	if s.link == nil {
		s.push(s.now+s.cfg.EventLag, evDeliver, j, b)
		return
	}
	l := s.link
	ls := &l.eng[j]
	seq := ls.sent
	ls.sent++
	// Two draws per batch whatever the switches, so that one switch does not shift the other's
	// stream.
	u, x := ls.rng.Float64(), ls.rng.ExpFloat64()
	lost := u < l.loss
	ls.buf[seq] = published{b: b, at: s.now, lost: lost}
	if lost {
		l.lost++
		return
	}
	at := max(s.now+s.cfg.EventLag+x*l.jitter, ls.wire)
	ls.wire = at
	s.push(at, evDeliver, j, &delivery{seq: seq, b: b})
}

// deliver is a batch of engine j reaching the router's subscriber.
func (s *sim) deliver(j int, x any) {
	src := kvindex.SourceID{Endpoint: s.engines[j].name}
	if s.link == nil {
		s.events.Apply(src, x.(*kvevents.Batch))
		return
	}
	d := x.(*delivery)
	l := s.link
	ls := &l.eng[j]
	switch {
	case ls.repairing:
		// Queued behind the replay in flight.
		ls.upTo = max(ls.upTo, d.seq)
	case d.seq == ls.next:
		s.applySeq(j, src, d.seq)
		ls.next++
	default:
		// A jump in the sequence: at least one batch was lost. Ask for the range; the replay
		// and everything arriving until it lands are applied in order when it does.
		ls.repairing, ls.upTo, ls.detected = true, d.seq, s.now
		s.push(s.now+l.replay, evReplay, j, nil)
	}
}

// replay lands the replayed range of engine j and applies it with the batches held behind it.
func (s *sim) replay(j int) {
	l := s.link
	ls := &l.eng[j]
	src := kvindex.SourceID{Endpoint: s.engines[j].name}
	for seq := ls.next; seq <= ls.upTo; seq++ {
		s.applySeq(j, src, seq)
	}
	ls.next = ls.upTo + 1
	ls.repairing = false
	l.gaps++
	l.repairWait += s.now - ls.detected
}

// applySeq applies batch seq of engine j from the engine's replay buffer and drops it there.
func (s *sim) applySeq(j int, src kvindex.SourceID, seq uint64) {
	ls := &s.link.eng[j]
	p, ok := ls.buf[seq]
	if !ok {
		return
	}
	delete(ls.buf, seq)
	if p.lost {
		s.link.lostRepaired++
		s.link.lostDelay += s.now - p.at
	}
	s.events.Apply(src, p.b)
}

// extras reports the event path's figures: batches lost, gaps repaired, the mean wait from a
// gap's detection to its repair, the mean time from publication to application of a lost batch
// (how long the index missed it), and lost batches no later batch revealed before the run
// ended (the index still misses them).
func (l *eventLink) extras(extra map[string]float64) {
	extra["events_batches_lost"] = float64(l.lost)
	extra["events_gaps_repaired"] = float64(l.gaps)
	if l.gaps > 0 {
		extra["events_repair_wait_mean_s"] = l.repairWait / float64(l.gaps)
	}
	if l.lostRepaired > 0 {
		extra["events_repair_delay_mean_s"] = l.lostDelay / float64(l.lostRepaired)
	}
	extra["events_lost_unrepaired"] = float64(l.lost - l.lostRepaired)
}

// The honest defaults of kvbench simulate's switches (see docs/simulator.md, Honest simulation).
const (
	// DefaultStepNoise is the step-time CV: no published vLLM figure of per-step variability at
	// a fixed batch was found, so this is a conservative guess (docs/simulator.md says more).
	DefaultStepNoise = 0.05
	// DefaultEventJitter is the mean extra delay of an event batch: a few milliseconds of
	// publisher queueing, network and the subscriber's decode under load.
	DefaultEventJitter = 0.003
	// DefaultEventLoss is the share of batches a ZMQ PUB socket drops: rare (high-water mark
	// overflow under bursts, reconnects) but not never.
	DefaultEventLoss = 0.001
	// DefaultReplayDelay is one replay round trip to the engine's replay socket.
	DefaultReplayDelay = 0.002
)
