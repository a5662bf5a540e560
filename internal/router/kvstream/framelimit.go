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
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// DefaultMaxFrameBytes is the largest ZMTP frame (and, with the pure-Go transport, the largest
// message) a KV-event peer may send. The largest batch a real vLLM sends is one scheduler step
// that stores every block of its prompts: at most max_num_seqs (256) prompts of 8K tokens at
// block size 16 in one step (no chunked prefill, max_num_batched_tokens raised to 2M) is 2M
// token ids at up to 5 bytes of msgpack each (10 MiB) plus 131K blocks at ~40 bytes of hash and
// framing each (5 MiB): about 16 MiB. vLLM's defaults (8K batched tokens a step) make ~100 KiB.
// 64 MiB is four times the extreme case; docs/architecture.md has the estimate.
const DefaultMaxFrameBytes = 64 << 20

// ErrFrameTooLarge is the receive error of a KV-event connection whose peer declared a frame (or
// a message) over the limit. The connection is closed before anything of that size is
// allocated.
var ErrFrameTooLarge = errors.New("kv events: ZMTP frame over the size limit")

// go-zeromq/zmq4 reads a frame by allocating the size its header declares, so one peer claiming
// a 1 TiB frame kills the process (runtime: out of memory), and neither the library nor its
// options bound it. Its sockets dial through a registry of transports, though, and hand the
// transport the socket's context: the limited schemes below dial as tcp and ipc do, and wrap the
// connection in limitConn, which follows the ZMTP 3 framing in the bytes the library reads and
// fails the read that would deliver a header over the limit. That keeps the library's sockets,
// queues and reconnection as they are; replacing its reader would mean forking the library.
var limitedSchemes = map[string]string{"tcp": "kvrouter-tcp", "ipc": "kvrouter-ipc"}

var registerOnce sync.Once

func registerLimitedTransports() {
	registerOnce.Do(func() {
		for network, scheme := range map[string]string{"tcp": limitedSchemes["tcp"], "unix": limitedSchemes["ipc"]} {
			if err := zmq4.RegisterTransport(scheme, limitTransport{inner: transport.New(network)}); err != nil {
				panic(fmt.Sprintf("kvstream: registering the %s transport: %v", scheme, err))
			}
		}
	})
}

// limitedURL rewrites a tcp:// or ipc:// endpoint to its limited scheme; other schemes (inproc,
// in tests) are returned as they are.
func limitedURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	if s, ok := limitedSchemes[scheme]; ok {
		return s + "://" + rest
	}
	return u
}

// connLimits travel in the context a socket is created with, which go-zeromq passes to the
// transport's Dial: the transports are registered once per process, the limits are per socket.
type connLimits struct {
	maxFrame uint64
	// handshake bounds the ZMTP greeting and handshake: a peer that accepts the TCP connection
	// and never speaks would otherwise hold the dial forever (go-zeromq sets no deadline).
	handshake time.Duration
	// tripped keeps the first oversized-frame error of the socket's connections. go-zeromq may
	// report the dropped connection otherwise (a failed subscription send, a closed connection)
	// depending on which of its goroutines notices first; the socket's owner asks here.
	tripped *tripWire
}

// tripWire holds the first error set on it.
type tripWire struct{ err atomic.Pointer[error] }

func (w *tripWire) set(err error) { w.err.CompareAndSwap(nil, &err) }

// or returns the oversized-frame error if one was recorded, else err.
func (w *tripWire) or(err error) error {
	if p := w.err.Load(); p != nil && err != nil {
		return *p
	}
	return err
}

type connLimitsKey struct{}

func withConnLimits(ctx context.Context, l connLimits) context.Context {
	return context.WithValue(ctx, connLimitsKey{}, l)
}

type limitTransport struct{ inner transport.Transport }

func (t limitTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := t.inner.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	l, _ := ctx.Value(connLimitsKey{}).(connLimits)
	if l.maxFrame == 0 {
		l.maxFrame = DefaultMaxFrameBytes
	}
	if l.handshake <= 0 {
		l.handshake = 5 * time.Second
	}
	// go-zeromq does not close a connection whose handshake failed; the socket's context ends
	// when the socket is closed, and takes its connections with it.
	context.AfterFunc(ctx, func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(l.handshake))
	return &limitConn{Conn: c, max: l.maxFrame, greeting: zmtpGreetingLen, tripped: l.tripped}, nil
}

func (t limitTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	return nil, errors.New("kvstream: the size-limited transport only dials")
}

func (t limitTransport) Addr(ep string) (string, error) { return t.inner.Addr(ep) }

// ZMTP 3 framing (rfc.zeromq.org/spec/23): a 64-byte greeting, then frames of a flags byte, a
// 1-byte size (or an 8-byte big-endian one with the LONG flag) and the body. Commands (READY in
// the handshake) are frames too.
const (
	zmtpGreetingLen = 64
	zmtpMore        = 0x01
	zmtpLong        = 0x02
	zmtpCommand     = 0x04
)

// limitConn passes the bytes through and tracks the framing. Only the goroutine reading the
// connection calls Read, so its state needs no lock.
type limitConn struct {
	net.Conn
	max      uint64
	greeting int     // greeting bytes still to come
	hdr      [9]byte // the frame header being read
	hdrN     int
	body     uint64 // body bytes of the current frame still to come
	msg      uint64 // bytes of the current message's frames so far
	cmd      bool   // the current frame is a command
	ready    bool   // the first command (the handshake's READY) has passed
	err      error
	tripped  *tripWire
	// go-zeromq reads each frame's header and body with separate unbuffered reads, a system
	// call each (six or more per event batch, and a router takes one batch per engine step):
	// small reads are served from a read-ahead buffer instead. ahead[pos:] is scanned and not
	// yet handed on; aheadErr came with it and is returned once it is.
	ahead    []byte
	pos      int
	aheadErr error
}

// readAhead is the read-ahead buffer's size: an engine step's batch is a few KB at most.
const readAhead = 16 << 10

func (c *limitConn) Read(p []byte) (int, error) {
	if c.pos < len(c.ahead) {
		n := copy(p, c.ahead[c.pos:])
		c.pos += n
		return n, nil
	}
	if err := c.aheadErr; err != nil {
		c.aheadErr = nil
		return 0, err
	}
	if c.err != nil {
		return 0, c.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	buf := p
	if len(p) < readAhead {
		if c.ahead == nil {
			c.ahead = make([]byte, readAhead)
		}
		buf = c.ahead[:readAhead]
	}
	n, err := c.Conn.Read(buf)
	if ferr := c.scan(buf[:n]); ferr != nil {
		// Nothing of this read reaches the library: it would allocate the declared size.
		c.err = ferr
		c.ahead, c.pos = nil, 0
		if c.tripped != nil {
			c.tripped.set(ferr)
		}
		_ = c.Conn.Close()
		return 0, ferr
	}
	if err != nil && !c.ready {
		_ = c.Conn.Close() // a failed handshake: go-zeromq would leave the connection open
	}
	if len(p) >= readAhead {
		return n, err
	}
	c.ahead, c.pos = buf[:n], copy(p, buf[:n])
	if c.pos < n {
		c.aheadErr = err
		return c.pos, nil
	}
	return c.pos, err
}

func (c *limitConn) scan(b []byte) error {
	for len(b) > 0 {
		switch {
		case c.greeting > 0:
			k := min(c.greeting, len(b))
			c.greeting -= k
			b = b[k:]
		case c.body > 0:
			k := min(c.body, uint64(len(b)))
			c.body -= k
			b = b[k:]
			if c.body == 0 {
				c.frameDone()
			}
		default:
			c.hdr[c.hdrN] = b[0]
			c.hdrN++
			b = b[1:]
			flags := c.hdr[0]
			need := 2
			if flags&zmtpLong != 0 {
				need = 9
			}
			if c.hdrN < need {
				continue
			}
			c.hdrN = 0
			size := uint64(c.hdr[1])
			if need == 9 {
				size = binary.BigEndian.Uint64(c.hdr[1:9])
			}
			c.cmd = flags&zmtpCommand != 0
			if size > c.max || (!c.cmd && c.msg+size > c.max) {
				return fmt.Errorf("%w: the peer declared a %d-byte frame (%d bytes of its message before it), limit %d",
					ErrFrameTooLarge, size, c.msg, c.max)
			}
			if !c.cmd {
				c.msg += size
				if flags&zmtpMore == 0 {
					c.msg = 0
				}
			}
			c.body = size
			if size == 0 {
				c.frameDone()
			}
		}
	}
	return nil
}

// frameDone ends the handshake's deadline at the peer's first command (READY): from then on an
// idle peer is an idle engine, not a stuck dial.
func (c *limitConn) frameDone() {
	if c.cmd && !c.ready {
		c.ready = true
		_ = c.Conn.SetDeadline(time.Time{})
	}
}
