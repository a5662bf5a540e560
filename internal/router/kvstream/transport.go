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
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Transport opens the two sockets a subscriber needs. The default is pure-Go ZMQ
// (github.com/go-zeromq/zmq4): no cgo, a static binary, and it met the throughput target against
// a libzmq publisher (docs/benchmarks.md has the comparison with libzmq via cgo).
type Transport interface {
	// Subscribe connects a SUB socket to url with the topic prefix.
	Subscribe(ctx context.Context, url, topic string, hwm int) (SubSocket, error)
	// Replay asks the replay ROUTER at url for every buffered batch from seq on and returns them
	// in order, stopping at the end marker. timeout bounds the whole exchange.
	Replay(ctx context.Context, url string, from uint64, timeout time.Duration) ([]Message, error)
}

// SubSocket is a connected SUB socket.
type SubSocket interface {
	// Recv returns the next message's frames; an error means the socket must be reopened.
	Recv() ([][]byte, error)
	Close() error
}

// Message is one sequenced batch.
type Message struct {
	Seq     uint64
	Payload []byte
}

// endSeq marks the end of a replay.
const endSeq = math.MaxUint64

// ParseFrames validates a published message: [topic, seq (8 bytes big-endian), payload].
func ParseFrames(frames [][]byte) (Message, error) {
	if len(frames) != 3 {
		return Message{}, fmt.Errorf("kv event message has %d frames, want 3", len(frames))
	}
	if len(frames[1]) != 8 {
		return Message{}, fmt.Errorf("kv event sequence frame has %d bytes, want 8", len(frames[1]))
	}
	return Message{Seq: binary.BigEndian.Uint64(frames[1]), Payload: frames[2]}, nil
}

// parseReplay reads one replay reply as a DEALER sees it: ["", topic, seq, payload] (vLLM with
// PR #45177) or ["", seq, payload] (older vLLM, SGLang); the end marker has seq 0xFF..FF and an
// empty payload. end reports the marker.
func parseReplay(frames [][]byte) (m Message, end bool, err error) {
	if len(frames) > 0 && len(frames[0]) == 0 {
		frames = frames[1:]
	}
	switch len(frames) {
	case 3:
		frames = frames[1:]
	case 2:
	default:
		return Message{}, false, fmt.Errorf("replay reply has %d frames after the delimiter, want 2 or 3", len(frames))
	}
	if len(frames[0]) != 8 {
		return Message{}, false, fmt.Errorf("replay sequence frame has %d bytes, want 8", len(frames[0]))
	}
	m = Message{Seq: binary.BigEndian.Uint64(frames[0]), Payload: frames[1]}
	return m, m.Seq == endSeq && len(m.Payload) == 0, nil
}

// RankURL offsets a tcp:// URL's port by rank, as engines do for data-parallel ranks.
func RankURL(u string, rank int) (string, error) {
	if rank == 0 || u == "" {
		return u, nil
	}
	pu, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %w", u, err)
	}
	host, port, err := net.SplitHostPort(pu.Host)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %w", u, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: port: %w", u, err)
	}
	pu.Host = net.JoinHostPort(host, strconv.Itoa(p+rank))
	return pu.String(), nil
}

// GoZMQ is the pure-Go transport. Every connection it opens refuses frames over MaxFrameBytes
// (see framelimit.go): the receive then fails with ErrFrameTooLarge and the connection is closed.
type GoZMQ struct {
	// MaxFrameBytes bounds a frame and a message from the peer; 0 means DefaultMaxFrameBytes.
	MaxFrameBytes int64
}

func (g GoZMQ) limits(handshake time.Duration) connLimits {
	l := connLimits{maxFrame: DefaultMaxFrameBytes, handshake: handshake, tripped: &tripWire{}}
	if g.MaxFrameBytes > 0 {
		l.maxFrame = uint64(g.MaxFrameBytes)
	}
	return l
}

type goSub struct {
	s       zmq4.Socket
	cancel  context.CancelFunc
	tripped *tripWire
}

func (g goSub) Recv() ([][]byte, error) {
	m, err := g.s.Recv()
	if err != nil {
		return nil, g.tripped.or(err)
	}
	return m.Frames, nil
}

func (g goSub) Close() error {
	err := g.s.Close()
	g.cancel()
	return err
}

// Subscribe implements Transport. go-zeromq's SUB has no receive high-water mark (it queues 10
// messages, then TCP back-pressure makes the engine's PUB apply its own HWM, and drops show up
// as sequence gaps, which replay repairs), so hwm is not used here.
func (g GoZMQ) Subscribe(ctx context.Context, u, topic string, _ int) (SubSocket, error) {
	registerLimitedTransports()
	l := g.limits(5 * time.Second)
	ctx, cancel := context.WithCancel(withConnLimits(ctx, l))
	s := zmq4.NewSub(ctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(5*time.Second))
	if err := s.Dial(limitedURL(u)); err != nil {
		_ = s.Close()
		cancel()
		return nil, l.tripped.or(err)
	}
	if err := s.SetOption(zmq4.OptionSubscribe, topic); err != nil {
		_ = s.Close()
		cancel()
		return nil, l.tripped.or(fmt.Errorf("subscribe %q: %w", topic, err))
	}
	return goSub{s: s, cancel: cancel, tripped: l.tripped}, nil
}

// Replay implements Transport.
func (g GoZMQ) Replay(ctx context.Context, u string, from uint64, timeout time.Duration) ([]Message, error) {
	registerLimitedTransports()
	l := g.limits(timeout)
	ctx, cancel := context.WithTimeout(withConnLimits(ctx, l), timeout)
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(timeout))
	defer d.Close()
	if err := d.Dial(limitedURL(u)); err != nil {
		return nil, l.tripped.or(err)
	}
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], from)
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, seq[:])); err != nil {
		return nil, l.tripped.or(fmt.Errorf("send replay request: %w", err))
	}
	// A peer could also stay under the frame limit and never send the end marker: the replay
	// is bounded in bytes as well as in time.
	budget, total := replayBudget*l.maxFrame, uint64(0)
	var out []Message
	for {
		m, err := d.Recv()
		if err != nil {
			if err := l.tripped.or(err); errors.Is(err, ErrFrameTooLarge) {
				return out, fmt.Errorf("replay from %d: %w", from, err)
			}
			if ctx.Err() != nil {
				return out, fmt.Errorf("replay from %d: no end marker within %v (%d batches received)", from, timeout, len(out))
			}
			return out, fmt.Errorf("replay from %d: %w", from, err)
		}
		msg, end, err := parseReplay(m.Frames)
		if err != nil {
			return out, err
		}
		if end {
			return out, nil
		}
		if total += uint64(len(msg.Payload)); total > budget {
			return out, fmt.Errorf("replay from %d: %w (%d batches, over %d bytes)", from, ErrReplayTooLarge, len(out), budget)
		}
		out = append(out, Message{Seq: msg.Seq, Payload: bytes.Clone(msg.Payload)})
	}
}

// replayBudget is how many frame limits of payload one replay may bring: 1 GiB at the default
// limit, ten thousand (vLLM's default buffer_steps) 100 KiB batches.
const replayBudget = 16

// ErrReplayTooLarge is a replay that brought more than its budget without reaching its end
// marker.
var ErrReplayTooLarge = errors.New("kv events: replay over its size budget")

var errNoReplay = errors.New("no replay endpoint")
