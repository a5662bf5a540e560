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

package kvpublish

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/kvevent"
)

const testTopic = "kv@pod-a@model"

func startPublisher(t *testing.T, legacy bool) *Publisher {
	t.Helper()
	p, err := New(Config{Endpoint: "tcp://127.0.0.1:0", ForceBind: true, ReplayEndpoint: "tcp://127.0.0.1:0", Topic: testTopic,
		HWM: 1000, BufferSteps: 100, DPRank: 2, LegacyReplay: legacy, Encoder: Encoder{Encoding: Map, IntHashes: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func endpoint(a net.Addr) string { return "tcp://" + a.String() }

func storedBatch(i int) kvevent.Batch {
	h, _ := blockhash.FromBytes(binary.BigEndian.AppendUint64(nil, uint64(1000+i)))
	return kvevent.Batch{TS: float64(i), Events: []kvevent.Event{{Kind: kvevent.BlockStored, Hashes: []blockhash.Hash{h},
		Tokens: make([]uint32, 16), BlockSize: 16, Medium: kvevent.MediumGPU}}}
}

// subscribe connects a SUB socket and waits until the publisher sees the subscription (PUB drops
// messages for subscribers it does not know yet).
func subscribe(t *testing.T, p *Publisher) zmq4.Socket {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sub := zmq4.NewSub(ctx)
	t.Cleanup(func() { sub.Close(); cancel() })
	if err := sub.Dial(endpoint(p.Addr())); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, "kv@"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(p.pub.(zmq4.Topics).Topics()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("subscription never reached the publisher")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return sub
}

func recvSeq(t *testing.T, sub zmq4.Socket) (uint64, []any) {
	t.Helper()
	msg, err := sub.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Frames) != 3 || string(msg.Frames[0]) != testTopic || len(msg.Frames[1]) != 8 {
		t.Fatalf("frames %q", msg.Frames)
	}
	var payload []any
	if err := msgpack.Unmarshal(msg.Frames[2], &payload); err != nil {
		t.Fatal(err)
	}
	return binary.BigEndian.Uint64(msg.Frames[1]), payload
}

func TestLiveStreamDropsShowAsGapsAndReplayFills(t *testing.T) {
	p := startPublisher(t, false)
	sub := subscribe(t, p)

	p.Publish(storedBatch(0))
	p.DropNext(2)
	for i := 1; i <= 4; i++ {
		p.Publish(storedBatch(i))
	}
	var got []uint64
	for range 3 {
		seq, payload := recvSeq(t, sub)
		if toUint(payload[2]) != 2 {
			t.Fatalf("rank %v, want 2", payload[2])
		}
		got = append(got, seq)
	}
	if fmt.Sprint(got) != "[0 3 4]" {
		t.Fatalf("live sequences %v, want [0 3 4] (1 and 2 dropped)", got)
	}

	frames := replay(t, p, 1)
	var seqs []uint64
	for _, f := range frames[:len(frames)-1] {
		if len(f) != 4 || len(f[0]) != 0 || string(f[1]) != testTopic {
			t.Fatalf("replay frames %q", f)
		}
		seqs = append(seqs, binary.BigEndian.Uint64(f[2]))
	}
	if fmt.Sprint(seqs) != "[1 2 3 4]" {
		t.Fatalf("replayed %v", seqs)
	}
	end := frames[len(frames)-1]
	if len(end) != 4 || len(end[1]) != 0 || binary.BigEndian.Uint64(end[2]) != EndSeq || len(end[3]) != 0 {
		t.Fatalf("end marker %q", end)
	}
	if st := p.Stats(); st.Published != 5 || st.Dropped != 2 || st.Replays != 1 {
		t.Fatalf("stats %+v", st)
	}

	// A restart starts the sequence again at 0 and forgets the replay buffer.
	p.Reset()
	p.Publish(storedBatch(9))
	if seq, _ := recvSeq(t, sub); seq != 0 {
		t.Fatalf("sequence after restart = %d", seq)
	}
	if f := replay(t, p, 1); len(f) != 1 {
		t.Fatalf("replay after restart returned %d frame sets", len(f))
	}
}

func TestLegacyReplayHasNoTopicFrame(t *testing.T) {
	p := startPublisher(t, true)
	p.Publish(storedBatch(0))
	frames := replay(t, p, 0)
	if len(frames) != 2 || len(frames[0]) != 3 || binary.BigEndian.Uint64(frames[0][1]) != 0 {
		t.Fatalf("legacy replay %q", frames)
	}
	if end := frames[1]; len(end) != 3 || binary.BigEndian.Uint64(end[1]) != EndSeq || len(end[2]) != 0 {
		t.Fatalf("legacy end marker %q", end)
	}
}

func TestMalformedReplayIsIgnored(t *testing.T) {
	p := startPublisher(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := zmq4.NewDealer(ctx)
	defer d.Close()
	if err := d.Dial(endpoint(p.ReplayAddr())); err != nil {
		t.Fatal(err)
	}
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, []byte{1, 2, 3})); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().BadReplays == 0 {
		if time.Now().After(deadline) {
			t.Fatal("malformed request not counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The server keeps serving after a bad request.
	p.Publish(storedBatch(0))
	if f := replay(t, p, 0); len(f) != 2 {
		t.Fatalf("replay after bad request returned %d frame sets", len(f))
	}
}

// askReplay sends a replay request from start on a new DEALER, which closes when the test ends
// (or its receives fail after timeout).
func askReplay(t *testing.T, p *Publisher, start uint64, timeout time.Duration) zmq4.Socket {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	d := zmq4.NewDealer(ctx)
	t.Cleanup(func() { d.Close(); cancel() })
	if err := d.Dial(endpoint(p.ReplayAddr())); err != nil {
		t.Fatal(err)
	}
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, binary.BigEndian.AppendUint64(nil, start))); err != nil {
		t.Fatal(err)
	}
	return d
}

// replay asks for batches from start with a DEALER and returns every reply up to the end marker.
func replay(t *testing.T, p *Publisher, start uint64) [][][]byte {
	t.Helper()
	d := askReplay(t, p, start, 10*time.Second)
	var out [][][]byte
	for {
		msg, err := d.Recv()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, msg.Frames)
		if last := msg.Frames[len(msg.Frames)-1]; len(last) == 0 {
			return out
		}
	}
}

func TestBindHeuristic(t *testing.T) {
	for ep, want := range map[string]bool{"tcp://*:5557": true, "tcp://[::]:5557": true, "ipc:///tmp/x": true,
		"inproc://x": true, "tcp://0.0.0.0:5557": false, "tcp://collector:5557": false} {
		if IsBindEndpoint(ep) != want {
			t.Errorf("IsBindEndpoint(%q) = %v", ep, !want)
		}
	}
}

// TestLibzmqInterop checks the wire against a real libzmq (pyzmq) SUB and DEALER.
func TestLibzmqInterop(t *testing.T) {
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import zmq, msgpack").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but %s lacks zmq/msgpack (install python3-zmq python3-msgpack): %v", py, err)
		}
		t.Skipf("%s lacks zmq/msgpack (Debian python3-zmq python3-msgpack): %v", py, err)
	}
	p := startPublisher(t, false)
	cmd := exec.Command(py, "testdata/interop_sub.py", endpoint(p.Addr()), endpoint(p.ReplayAddr()), testTopic, "3")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	next := func() map[string]any {
		if !lines.Scan() {
			t.Fatalf("subscriber ended early: %s", stderr.String())
		}
		var m map[string]any
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatalf("bad line %q", lines.Text())
		}
		return m
	}
	next() // ready
	deadline := time.Now().Add(10 * time.Second)
	for len(p.pub.(zmq4.Topics).Topics()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("libzmq subscription never reached the publisher")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.Publish(storedBatch(0))
	p.Publish(kvevent.Batch{TS: 1, Events: []kvevent.Event{{Kind: kvevent.AllBlocksCleared}}})
	p.Publish(storedBatch(2))
	for i := range 3 {
		m := next()
		if m["live"] != float64(i) || m["rank"] != float64(2) {
			t.Fatalf("live line %v", m)
		}
		if i == 0 && fmt.Sprint(m["hashes"]) != "[[1000]]" {
			t.Fatalf("hashes %v", m["hashes"])
		}
	}
	for _, want := range []float64{1, 2} {
		if m := next(); m["replay"] != want {
			t.Fatalf("replay line %v, want seq %v", m, want)
		}
	}
	if m := next(); m["end"] != true {
		t.Fatalf("want end marker, got %v", m)
	}
}

func TestReplayBufferKeepsTheLastSteps(t *testing.T) {
	p, err := New(Config{Endpoint: "tcp://127.0.0.1:0", ForceBind: true, ReplayEndpoint: "tcp://127.0.0.1:0", Topic: testTopic,
		BufferSteps: 3, Encoder: Encoder{Encoding: Array, IntHashes: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 7 {
		p.Publish(storedBatch(i))
	}
	frames := replay(t, p, 0)
	var seqs []uint64
	for _, f := range frames[:len(frames)-1] {
		seqs = append(seqs, binary.BigEndian.Uint64(f[2]))
	}
	// Asking for 0 when the buffer starts at 4 yields 4..6: the client sees the first seq is not
	// the one it asked for and must rebuild.
	if fmt.Sprint(seqs) != "[4 5 6]" {
		t.Fatalf("replayed %v", seqs)
	}
}

// With replay down, requests get no answer at all (a subscriber times out), and are counted.
func TestReplayDownLeavesRequestsUnanswered(t *testing.T) {
	p := startPublisher(t, false)
	p.Publish(storedBatch(0))
	p.SetReplayDown(true)
	if msg, err := askReplay(t, p, 0, 500*time.Millisecond).Recv(); err == nil {
		t.Fatalf("replay answered while down: %q", msg.Frames)
	}
	if st := p.Stats(); st.IgnoredReplays != 1 || st.Replays != 0 {
		t.Fatalf("stats %+v", st)
	}
	p.SetReplayDown(false)
	if f := replay(t, p, 0); len(f) != 2 {
		t.Fatalf("replay after it came back returned %d frame sets", len(f))
	}
}
