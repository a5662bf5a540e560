//go:build libzmq

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
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// LibZMQ is the transport over libzmq via cgo (build tag libzmq; needs libzmq3-dev). It exists
// to compare with the pure-Go default; see docs/benchmarks.md for why the default stays GoZMQ.
type LibZMQ struct {
	// MaxFrameBytes is set as ZMQ_MAXMSGSIZE (0: DefaultMaxFrameBytes). libzmq applies it per
	// frame and drops a peer that exceeds it inside the library, then reconnects by itself: the
	// subscriber sees no error, so nothing is counted as oversized; the batches lost show up as a
	// sequence gap and their replay fails the same way, which marks the source partial.
	MaxFrameBytes int64
}

func (l LibZMQ) maxMsgSize() int64 {
	if l.MaxFrameBytes > 0 {
		return l.MaxFrameBytes
	}
	return DefaultMaxFrameBytes
}

type libSub struct {
	ctx context.Context
	s   *zmq.Socket
}

// poll bounds how long a blocking libzmq receive ignores context cancellation.
const poll = 200 * time.Millisecond

func (l libSub) Recv() ([][]byte, error) {
	for {
		frames, err := l.s.RecvMessageBytes(0)
		if err == nil {
			return frames, nil
		}
		if zmq.AsErrno(err) != zmq.Errno(11) { // EAGAIN: the receive timeout passed
			return nil, err
		}
		if l.ctx.Err() != nil {
			return nil, l.ctx.Err()
		}
	}
}

func (l libSub) Close() error { return l.s.Close() }

// Subscribe implements Transport; libzmq reconnects by itself and applies hwm as RCVHWM.
func (l LibZMQ) Subscribe(ctx context.Context, url, topic string, hwm int) (SubSocket, error) {
	s, err := zmq.NewSocket(zmq.SUB)
	if err != nil {
		return nil, err
	}
	err = errors.Join(s.SetRcvhwm(hwm), s.SetRcvtimeo(poll), s.SetLinger(0), s.SetMaxmsgsize(l.maxMsgSize()),
		s.Connect(url), s.SetSubscribe(topic))
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	return libSub{ctx: ctx, s: s}, nil
}

// Replay implements Transport.
func (l LibZMQ) Replay(ctx context.Context, url string, from uint64, timeout time.Duration) ([]Message, error) {
	s, err := zmq.NewSocket(zmq.DEALER)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if err := errors.Join(s.SetRcvtimeo(timeout), s.SetLinger(0), s.SetMaxmsgsize(l.maxMsgSize()), s.Connect(url)); err != nil {
		return nil, err
	}
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], from)
	if _, err := s.SendMessage([]byte{}, seq[:]); err != nil {
		return nil, err
	}
	var out []Message
	for ctx.Err() == nil {
		frames, err := s.RecvMessageBytes(0)
		if err != nil {
			return out, fmt.Errorf("replay from %d: %w", from, err)
		}
		m, end, err := parseReplay(frames)
		if err != nil {
			return out, err
		}
		if end {
			return out, nil
		}
		out = append(out, m)
	}
	return out, ctx.Err()
}
