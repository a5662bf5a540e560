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
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvevents/kveventstest"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/test/cputime"
)

// BenchmarkTransport compares the pure-Go and libzmq SUB sockets receiving from a libzmq PUB
// (in the same process), receive only and with the whole pipeline (frame checks, decode, index
// apply). Each message is an
// engine's steady-state batch: 16 new 16-token blocks stored, 16 old ones removed.
//
//	go test -tags libzmq -run '^$' -bench Transport -cpu 1,2 ./internal/router/kvstream
func BenchmarkTransport(b *testing.B) {
	for _, tc := range []struct {
		name string
		tr   Transport
	}{{"gozmq", GoZMQ{}}, {"libzmq", LibZMQ{}}} {
		b.Run(tc.name+"/recv", func(b *testing.B) { benchTransport(b, tc.tr, false) })
		b.Run(tc.name+"/recv+decode+apply", func(b *testing.B) { benchTransport(b, tc.tr, true) })
	}
}

func benchTransport(b *testing.B, tr Transport, apply bool) {
	const perBatch, blockSize, nPayloads, lag = 16, 16, 256, 32
	hash := func(batch, i int) uint64 { return uint64(batch*perBatch+i)*0x9e3779b97f4a7c15 | 1 }
	payloads := make([][]byte, nPayloads)
	for i := range payloads {
		st := kveventstest.Stored{BlockSize: blockSize, Medium: "GPU"}
		if i > 0 {
			p := hash(i-1, perBatch-1)
			st.Parent = &p
		}
		for j := 0; j < perBatch; j++ {
			st.Hashes = append(st.Hashes, hash(i, j))
			for t := 0; t < blockSize; t++ {
				st.Tokens = append(st.Tokens, uint32(i*977+j*31+t))
			}
		}
		rm := kveventstest.Removed{Medium: "GPU"}
		for j := 0; j < perBatch; j++ {
			rm.Hashes = append(rm.Hashes, hash((i-lag+nPayloads)%nPayloads, j))
		}
		payloads[i] = kveventstest.Batch(float64(i), 0, true, st, rm)
	}
	pub, err := zmq.NewSocket(zmq.PUB)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	_ = pub.SetSndhwm(0) // no drops: the benchmark measures the subscriber
	_ = pub.SetLinger(0)
	if err := pub.Bind("tcp://127.0.0.1:*"); err != nil {
		b.Fatal(err)
	}
	ep, _ := pub.GetLastEndpoint()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub, err := tr.Subscribe(ctx, ep, "kv@", 100000)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	var seq [8]byte
	// Wait for the subscription to reach the PUB.
	got := make(chan struct{})
	go func() {
		if _, err := sub.Recv(); err == nil {
			close(got)
		}
	}()
	for done := false; !done; {
		_, _ = pub.SendMessage("kv@x", seq[:], payloads[0])
		select {
		case <-got:
			done = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	// Drain stragglers of the warm-up.
	time.Sleep(50 * time.Millisecond)
	ix := kvindex.New(kvindex.Config{BlockSize: blockSize})
	src := kvindex.SourceID{Endpoint: "e"}
	var d kvevents.Decoder
	var batch kvevents.Batch
	cpu0 := cputime.Process()
	b.ResetTimer()
	go func() {
		var s [8]byte
		for i := 0; i < b.N; i++ {
			binary.BigEndian.PutUint64(s[:], uint64(i+1))
			if _, err := pub.SendMessage("kv@x", s[:], payloads[i%nPayloads]); err != nil {
				return
			}
		}
	}()
	blocks := 0
	for received := 0; received < b.N; {
		frames, err := sub.Recv()
		if err != nil {
			b.Fatal(err)
		}
		m, err := ParseFrames(frames)
		if err != nil {
			b.Fatal(err)
		}
		if m.Seq == 0 {
			continue // warm-up message
		}
		received++
		blocks += 2 * perBatch
		if !apply {
			continue
		}
		if err := d.Decode(m.Payload, &batch); err != nil {
			b.Fatal(err)
		}
		ix.Apply(src, &batch)
	}
	b.StopTimer()
	// CPU time is steadier than throughput on a shared machine; it includes the libzmq
	// publisher's send (the same in both variants) and libzmq's I/O threads.
	b.ReportMetric(float64((cputime.Process()-cpu0).Microseconds())/float64(b.N), "cpu-µs/msg")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
}
