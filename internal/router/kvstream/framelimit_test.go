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
	"net"
	"sync"
	"testing"
	"time"
)

// frame is one ZMTP 3 frame as a peer writes it.
func frame(flags byte, body []byte) []byte {
	if len(body) > 255 {
		return binary.BigEndian.AppendUint64([]byte{flags | zmtpLong}, uint64(len(body)))
	}
	return append([]byte{flags, byte(len(body))}, body...)
}

// longHeader declares a frame of size bytes without sending it.
func longHeader(flags byte, size uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{flags | zmtpLong}, size)
}

// scanAll feeds stream to a fresh limitConn's parser in chunks of n bytes, as reads of any size
// deliver it, and returns the first error.
func scanAll(max uint64, stream []byte, n int) error {
	c := &limitConn{max: max, greeting: zmtpGreetingLen, Conn: nopConn{}}
	for len(stream) > 0 {
		k := min(n, len(stream))
		if err := c.scan(stream[:k]); err != nil {
			return err
		}
		stream = stream[k:]
	}
	return nil
}

type nopConn struct{ net.Conn }

func (nopConn) SetDeadline(time.Time) error { return nil }

// The parser follows the framing whatever the read sizes: frames up to the limit pass, a frame
// or a message over it fails, commands are bounded too.
func TestLimitConnFraming(t *testing.T) {
	greeting := make([]byte, zmtpGreetingLen)
	greeting[0] = 0xff // the parser does not check the greeting: the library does
	ready := frame(zmtpCommand, []byte("\x05READYpadding"))
	body300 := make([]byte, 300)
	long300 := append(frame(zmtpMore, body300), body300...)
	ok := concat(greeting, ready,
		frame(zmtpMore, []byte("topic")), frame(zmtpMore, []byte("12345678")), long300, frame(0, []byte("payload")),
		frame(0, nil))
	const limit = 1000
	for _, n := range []int{1, 2, 7, 9, 64, 1 << 20} {
		if err := scanAll(limit, ok, n); err != nil {
			t.Fatalf("chunks of %d: %v", n, err)
		}
	}
	for name, stream := range map[string][]byte{
		"1 TiB frame":             concat(greeting, ready, longHeader(0, 1<<40)),
		"2^62 frame":              concat(greeting, ready, longHeader(zmtpMore, 1<<62)),
		"2^64-1 frame":            concat(greeting, ready, longHeader(0, 1<<64-1)),
		"one over the limit":      concat(greeting, ready, longHeader(0, limit+1)),
		"huge command":            concat(greeting, longHeader(zmtpCommand, 1<<40)),
		"message over the limit":  concat(greeting, ready, repeatFrames(zmtpMore, 200, 6)),
		"after a valid long body": concat(greeting, ready, long300, longHeader(0, 1<<40)),
	} {
		for _, n := range []int{1, 3, 1 << 20} {
			if err := scanAll(limit, stream, n); !errors.Is(err, ErrFrameTooLarge) {
				t.Errorf("%s in chunks of %d: %v, want ErrFrameTooLarge", name, n, err)
			}
		}
	}
	// A message of many frames is fine as long as it stays under the limit in total.
	if err := scanAll(limit, concat(greeting, ready, repeatFrames(zmtpMore, 200, 4), frame(0, nil)), 5); err != nil {
		t.Fatal(err)
	}
}

func repeatFrames(flags byte, size, n int) []byte {
	var out []byte
	for range n {
		out = append(out, frame(flags, make([]byte, size))...)
	}
	return out
}

func concat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// A peer that accepts the connection and never greets fails the dial within the handshake bound
// instead of holding the subscriber forever.
func TestSilentPeerFailsTheHandshake(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	start := time.Now()
	_, err = GoZMQ{}.Replay(context.Background(), "tcp://"+ln.Addr().String(), 0, 300*time.Millisecond)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("replay against a silent peer: %v after %v", err, time.Since(start))
	}
}

// The reconnect backoff doubles from ReconnectMin to ReconnectMax, each wait jittered by up to
// half, so that replicas disconnected together do not reconnect in step.
func TestReconnectBackoff(t *testing.T) {
	cfg := Config{ReconnectMin: 100 * time.Millisecond, ReconnectMax: time.Second}
	fillDefaults(&cfg)
	s := &subscriber{cfg: &cfg}
	b := s.newBackoff()
	base := 100 * time.Millisecond
	seen := map[time.Duration]bool{}
	for i := range 12 {
		d := b.Step()
		if d < base || d > base+base/2 {
			t.Fatalf("step %d: %v, want within [%v, %v]", i, d, base, base+base/2)
		}
		seen[d] = true
		base = min(2*base, time.Second)
	}
	if len(seen) < 6 {
		t.Fatalf("waits not jittered: %v", seen)
	}
}
