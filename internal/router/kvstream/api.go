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

// Package kvstream subscribes to engines' KV-event streams over ZMQ and feeds an index.
//
// One subscriber runs per (endpoint, data-parallel rank): a SUB socket on the events port (+rank)
// and, for repairs, a DEALER on the replay port (+rank). Each subscriber tracks the 8-byte
// big-endian batch sequence: a gap is repaired by asking the engine's replay ROUTER for the
// missing range; a gap that replay cannot cover clears the source's entries (the index then
// rebuilds from what arrives) and marks the source stale-repaired in stats; a sequence going
// backwards means the engine restarted, which also clears the source. At start a subscriber
// replays from sequence 0, so a restarted router rebuilds its index from the engines' buffers;
// Manager.WaitCaughtUp tells when every source has done so. An engine's ports are network peers
// like any other: every connection refuses frames over Config.MaxFrameBytes (framelimit.go), and
// reconnects back off with jitter.
package kvstream

import (
	"time"

	"github.com/go-logr/logr"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
)

// Sink receives decoded batches; *kvindex.Index implements it.
type Sink interface {
	Apply(src kvindex.SourceID, b *kvevents.Batch) kvindex.ApplyStats
	ClearSource(src kvindex.SourceID)
}

// Endpoint is one engine to subscribe to.
type Endpoint struct {
	// Name identifies the endpoint (the pod name or its host:port); it becomes
	// kvindex.SourceID.Endpoint, so use the same name the router routes by.
	Name string
	// EventsURL is rank 0's PUB endpoint, e.g. "tcp://10.0.0.7:5557"; rank r uses port + r.
	EventsURL string
	// ReplayURL is rank 0's replay ROUTER, e.g. "tcp://10.0.0.7:5558"; rank r uses port + r.
	// Empty: no replay, so every gap clears the source.
	ReplayURL string
	// DPRanks is the number of data-parallel ranks (each publishes separately); 0 means 1.
	DPRanks int
	// Topic is the subscription prefix; "" receives every topic.
	Topic string
}

// Config configures a Manager. Zero values take the documented defaults.
type Config struct {
	// HWM is the SUB socket's receive high-water mark in messages. Default 10000.
	HWM int
	// ReconnectMin and ReconnectMax bound the exponential reconnect backoff (each wait jittered
	// up to half again). Defaults 100ms, 5s.
	ReconnectMin, ReconnectMax time.Duration
	// ReplayTimeout bounds one replay exchange (no reply within it = replay failure). Default 2s.
	ReplayTimeout time.Duration
	// MaxFrameBytes is the largest frame (and message) a peer may send on the events or the
	// replay connection; a larger one drops the connection (NewManager's transport). 0 means
	// DefaultMaxFrameBytes.
	MaxFrameBytes int64
	// StaleAfter marks a connected source stale when no batch arrived for this long (idle engines
	// publish nothing, so stale is a hint, not an error). 0 disables.
	StaleAfter time.Duration
	// Logger receives structured logs; never token ids or prompt text.
	Logger logr.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// SourceStatus is one subscriber's health, for the router's /v1/status.
type SourceStatus struct {
	Source    kvindex.SourceID `json:"source"`
	EventsURL string           `json:"eventsURL"`
	Connected bool             `json:"connected"`
	// LastSeq is the last applied sequence number (valid when Batches > 0).
	LastSeq uint64 `json:"lastSeq"`
	// Batches and Blocks count applied batches and blocks (stored + removed).
	Batches uint64 `json:"batches"`
	Blocks  uint64 `json:"blocks"`
	// Gaps counts sequence gaps seen; Replays the gaps repaired by replay; ReplayFailures the
	// gaps replay could not cover (each cleared the source).
	Gaps           uint64 `json:"gaps"`
	Replays        uint64 `json:"replays"`
	ReplayFailures uint64 `json:"replayFailures"`
	// Restarts counts sequence resets (engine restarts), each of which cleared the source.
	Restarts     uint64 `json:"restarts"`
	DecodeErrors uint64 `json:"decodeErrors"`
	// OversizedFrames counts connections (events or replay) dropped because the peer declared
	// a frame over Config.MaxFrameBytes, or a replay that brought more than its budget.
	OversizedFrames uint64 `json:"oversizedFrames"`
	// Lag is now minus the last batch's engine timestamp (clock skew included).
	Lag time.Duration `json:"lag"`
	// LastBatch is when the last batch was applied (zero if none).
	LastBatch time.Time `json:"lastBatch"`
	// Partial is true after the source's entries were dropped because a gap could not be
	// repaired (replay buffer too short, no replay endpoint, undecodable batch): the index holds
	// a subset of the engine's cache (never more) until events re-announce the rest. A restart
	// or an AllBlocksCleared event resets it (the engine's cache is empty then). PartialReason
	// says what happened.
	Partial       bool   `json:"partial"`
	PartialReason string `json:"partialReason,omitempty"`
	// Stale is true when the index may not follow the engine now: not connected, or no batch for
	// StaleAfter. Reason says which (or repeats why the source is partial).
	Stale  bool   `json:"stale"`
	Reason string `json:"reason,omitempty"`
}
