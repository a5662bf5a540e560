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

package kvstream_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"

	"github.com/kvrouter/kvrouter/internal/router/kvstream"
)

// With libzmq the limit is ZMQ_MAXMSGSIZE, which libzmq applies by dropping the peer itself: a
// replay whose batch is over the limit brings nothing (and times out), one under it brings the
// batch.
//
//	go test -tags libzmq -run TestLibZMQFrameLimit ./internal/router/kvstream
func TestLibZMQFrameLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const batch = 2 << 20
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := zmq4.Open(c, null.Security(), zmq4.Router, zmq4.SocketIdentity("peer"), true, nil); err != nil {
					return
				}
				var req [12]byte
				if _, err := io.ReadFull(c, req[:]); err != nil {
					return
				}
				// One replayed batch as a DEALER sees it: ["", seq 7, payload], no end marker.
				msg := []byte{0x01, 0x00, 0x01, 0x08, 0, 0, 0, 0, 0, 0, 0, 7, 0x02}
				msg = binary.BigEndian.AppendUint64(msg, batch)
				_, _ = c.Write(append(msg, make([]byte, batch)...))
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	url := "tcp://" + ln.Addr().String()
	for _, tc := range []struct {
		limit int64
		want  int
	}{{batch / 2, 0}, {2 * batch, 1}} {
		msgs, err := kvstream.LibZMQ{MaxFrameBytes: tc.limit}.Replay(context.Background(), url, 7, 500*time.Millisecond)
		if err == nil || len(msgs) != tc.want {
			t.Errorf("limit %d: %d batches (%v), want %d and a timeout", tc.limit, len(msgs), err, tc.want)
		}
	}
}
