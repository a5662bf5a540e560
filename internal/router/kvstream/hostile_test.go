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

package kvstream_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"

	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/kvstream"
	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/kvevent"
	"github.com/kvrouter/kvrouter/internal/sim/kvpublish"
)

// HostilePeer is a ZMQ peer on loopback that completes the ZMTP handshake as sockType (PUB for
// the events port, ROUTER for the replay port; a ROUTER first reads the replay request) and
// then, when declare is not zero, sends a frame header declaring declare bytes and a few bytes
// of it. With declare zero it says nothing, and closes the connection after closeAfter when that
// is set. It counts the connections it got.
type hostilePeer struct {
	ln    net.Listener
	conns atomic.Int64
	wg    sync.WaitGroup
}

func startHostilePeer(t *testing.T, sockType zmq4.SocketType, declare uint64, closeAfter time.Duration) *hostilePeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &hostilePeer{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer c.Close()
				if _, err := zmq4.Open(c, null.Security(), sockType, zmq4.SocketIdentity("hostile"), true, nil); err != nil {
					return
				}
				p.conns.Add(1)
				if sockType == zmq4.Router {
					var req [12]byte // ["", seq]: an empty MORE frame, then 8 bytes
					if _, err := io.ReadFull(c, req[:]); err != nil {
						return
					}
				}
				if declare == 0 && closeAfter > 0 {
					time.Sleep(closeAfter)
					return
				}
				if declare != 0 {
					hdr := binary.BigEndian.AppendUint64([]byte{0x02}, declare) // LONG, last frame
					if _, err := c.Write(append(hdr, make([]byte, 4096)...)); err != nil {
						return
					}
				}
				_, _ = io.Copy(io.Discard, c) // until the subscriber drops the connection
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *hostilePeer) url() string { return "tcp://" + p.ln.Addr().String() }

// A peer declaring a 1 TiB or a 2^62-byte frame, on the events connection or on the replay one,
// is dropped before anything of that size is allocated: the connection is counted as oversized,
// the source is marked partial, the subscriber reconnects (and is dropped again), and another
// source's events keep flowing meanwhile.
func TestHostilePeerFrameSize(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replay  bool
		declare uint64
	}{
		{"live-1TiB", false, 1 << 40},
		{"live-2^62", false, 1 << 62},
		{"replay-1TiB", true, 1 << 40},
		{"replay-2^62", true, 1 << 62},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var events, replay *hostilePeer
			if tc.replay {
				// A quiet publisher that drops each connection after a moment: the subscriber
				// reconnects and asks for a catch-up replay each time.
				events = startHostilePeer(t, zmq4.Pub, 0, 100*time.Millisecond)
				replay = startHostilePeer(t, zmq4.Router, tc.declare, 0)
			} else {
				events = startHostilePeer(t, zmq4.Pub, tc.declare, 0)
				replay = startHostilePeer(t, zmq4.Router, 0, 0) // never answers: the replay times out
			}
			const bs = 16
			pub, err := kvpublish.New(kvpublish.Config{Endpoint: "tcp://127.0.0.1:0", ForceBind: true,
				ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv@good@m", BufferSteps: 100,
				Encoder: kvpublish.Encoder{Encoding: kvpublish.Map, IntHashes: true}})
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()

			ix := kvindex.New(kvindex.Config{BlockSize: bs})
			m := kvstream.NewManager(ix, kvstream.Config{Logger: testr.New(t), ReplayTimeout: 300 * time.Millisecond,
				ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			ctx, cancel := context.WithCancel(context.Background())
			stopped := make(chan struct{})
			go func() { _ = m.Start(ctx); close(stopped) }()
			defer func() { cancel(); <-stopped }()
			m.SetEndpoints([]kvstream.Endpoint{
				{Name: "good", Topic: "kv@", EventsURL: "tcp://" + pub.Addr().String(), ReplayURL: "tcp://" + pub.ReplayAddr().String()},
				{Name: "hostile", Topic: "kv@", EventsURL: events.url(), ReplayURL: replay.url()},
			})
			status := func(name string) kvstream.SourceStatus {
				for _, st := range m.Status() {
					if st.Source.Endpoint == name {
						return st
					}
				}
				return kvstream.SourceStatus{}
			}
			waitFor(t, func() bool { return status("good").Connected }, "good source connected")

			seed := "0"
			hasher, err := blockhash.New("sha256_cbor", &seed)
			if err != nil {
				t.Fatal(err)
			}
			published := 0
			publish := func() {
				tokens := make([]uint32, bs)
				for i := range tokens {
					tokens[i] = uint32(published*bs + i)
				}
				h := hasher.Block(hasher.NoneHash(), tokens, nil)
				pub.Publish(kvevent.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: []kvevent.Event{{
					Kind: kvevent.BlockStored, BlockSize: bs, Medium: kvevent.MediumGPU, Tokens: tokens,
					Hashes: []blockhash.Hash{h}}}})
				published++
			}
			// The hostile peer is dropped again and again while the good source keeps applying.
			deadline := time.Now().Add(15 * time.Second)
			for status("hostile").OversizedFrames < 3 || status("good").Batches < 5 {
				if time.Now().After(deadline) {
					t.Fatalf("hostile %+v, good %+v", status("hostile"), status("good"))
				}
				publish()
				time.Sleep(20 * time.Millisecond)
			}
			hs := status("hostile")
			if !hs.Partial || hs.PartialReason == "" {
				t.Errorf("hostile source not partial: %+v", hs)
			}
			hostileConns := events.conns.Load()
			if tc.replay {
				hostileConns = replay.conns.Load()
			}
			if hostileConns < 3 {
				t.Errorf("hostile peer saw %d connections: the subscriber did not reconnect", hostileConns)
			}
			gs := status("good")
			if gs.Partial || gs.OversizedFrames != 0 || gs.Gaps != 0 {
				t.Errorf("good source disturbed: %+v", gs)
			}
			// Every batch published reaches the index: the good source is unaffected.
			waitFor(t, func() bool { return status("good").Batches == uint64(published) }, "every good batch applied")
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
				t.Errorf("heap grew by %d MiB with a peer declaring %d bytes", grew>>20, tc.declare)
			}
			if after.Sys > before.Sys+256<<20 {
				t.Errorf("memory obtained from the OS grew from %d to %d MiB", before.Sys>>20, after.Sys>>20)
			}
			t.Logf("hostile %+v; good batches %d; heap %d -> %d MiB", hs, gs.Batches, before.HeapAlloc>>20, after.HeapAlloc>>20)
		})
	}
}

// A restarted router's index must be filled from the engines' replay buffers before it takes
// traffic: WaitCaughtUp returns once every source has ended its first catch-up, successful
// (here) or not.
func TestWaitCaughtUp(t *testing.T) {
	pub, err := kvpublish.New(kvpublish.Config{Endpoint: "tcp://127.0.0.1:0", ForceBind: true,
		ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv@a@m", BufferSteps: 100,
		Encoder: kvpublish.Encoder{Encoding: kvpublish.Map, IntHashes: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for i := range 5 {
		pub.Publish(kvevent.Batch{TS: float64(i), Events: []kvevent.Event{{Kind: kvevent.AllBlocksCleared}}})
	}
	silent := startHostilePeer(t, zmq4.Router, 0, 0) // a replay endpoint that never answers
	ix := kvindex.New(kvindex.Config{BlockSize: 16})
	m := kvstream.NewManager(ix, kvstream.Config{Logger: testr.New(t), ReplayTimeout: time.Second})
	if _, known := m.CatchingUp(); known {
		t.Fatal("caught up before any endpoint was set")
	}
	m.SetEndpoints([]kvstream.Endpoint{
		{Name: "a", Topic: "kv@", EventsURL: "tcp://" + pub.Addr().String(), ReplayURL: "tcp://" + pub.ReplayAddr().String()},
		{Name: "b", Topic: "kv@", EventsURL: "tcp://" + pub.Addr().String(), ReplayURL: silent.url()},
	})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { _ = m.Start(ctx); close(stopped) }()
	defer func() { cancel(); <-stopped }()

	start := time.Now()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := m.WaitCaughtUp(wctx); err != nil {
		t.Fatalf("WaitCaughtUp: %v; catching up: %v", err, must(m.CatchingUp()))
	}
	waited := time.Since(start)
	st := m.Status()
	if st[0].Batches != 5 || st[0].Replays != 1 || st[0].Partial {
		t.Errorf("a: the catch-up replay was not applied before WaitCaughtUp returned: %+v", st[0])
	}
	if st[1].ReplayFailures != 1 || !st[1].Partial {
		t.Errorf("b: a failed catch-up must end as partial: %+v", st[1])
	}
	if waited < 900*time.Millisecond {
		t.Errorf("returned after %v, before b's replay timed out", waited)
	}
}

func must[T any](v T, _ bool) T { return v }
