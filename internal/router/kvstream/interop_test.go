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
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/kvindex/kvindextest"
	"github.com/kvrouter/kvrouter/internal/router/kvstream"
)

// systemPython is Debian's interpreter, which has python3-zmq (libzmq) and python3-msgpack.
const systemPython = "/usr/bin/python3"

func requirePeer(t *testing.T) {
	t.Helper()
	err := exec.Command(systemPython, "-c", "import zmq, msgpack").Run()
	if err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("CI is set but %s cannot import zmq and msgpack (apt-get install python3-zmq python3-msgpack): %v", systemPython, err)
	}
	t.Skipf("%s lacks zmq/msgpack: %v", systemPython, err)
}

// TestInteropLibzmqPeer subscribes, over the pure-Go transport, to a libzmq PUB + replay ROUTER
// run by python3-zmq, in both event encodings and both replay reply forms. The peer withholds
// two batches from the PUB (as a full HWM would), so the subscriber must detect the gaps and
// repair them by replay; the index it feeds must then equal one fed the batches directly.
func TestInteropLibzmqPeer(t *testing.T) {
	requirePeer(t)
	for _, encoding := range []string{"array", "map"} {
		t.Run(encoding, func(t *testing.T) {
			const bs = 4
			rnd := rand.New(rand.NewPCG(11, 12))
			e := kvindextest.NewEngine(rnd, bs, 60, false)
			e.ReplayLen = 1000
			next := kvindextest.Prompts(rnd, bs)
			want := kvindex.New(kvindex.Config{BlockSize: bs})
			src := kvindex.SourceID{Endpoint: "pod-a"}
			var payloads []string
			var d kvevents.Decoder
			var b kvevents.Batch
			for len(payloads) < 60 {
				if rnd.IntN(10) == 0 {
					e.Offload(2)
				} else {
					e.Serve(next(), rnd.IntN(8) == 0)
				}
				if _, p, ok := e.Flush(float64(time.Now().UnixNano()) / 1e9); ok {
					payloads = append(payloads, hex.EncodeToString(p))
					if err := d.Decode(p, &b); err != nil {
						t.Fatal(err)
					}
					want.Apply(src, &b)
				}
			}
			spec, _ := json.Marshal(map[string]any{"encoding": encoding, "topic": "kv@pod-a@m",
				"drop": []int{10, 30, 31}, "payloads": payloads})

			cmd := exec.Command(systemPython, "testdata/zmqpeer.py")
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = stdin.Close()
				done := make(chan struct{})
				go func() { _ = cmd.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					_ = cmd.Process.Kill()
					<-done
				}
			}()
			if _, err := stdin.Write(append(spec, '\n')); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewScanner(stdout)
			var pubPort, routerPort int
			if !lines.Scan() {
				t.Fatalf("peer exited before READY")
			}
			if _, err := fmt.Sscanf(lines.Text(), "READY %d %d", &pubPort, &routerPort); err != nil {
				t.Fatalf("peer said %q: %v", lines.Text(), err)
			}

			got := kvindex.New(kvindex.Config{BlockSize: bs})
			m := kvstream.NewManager(got, kvstream.Config{Logger: testr.New(t), ReplayTimeout: 3 * time.Second})
			ctx, cancel := context.WithCancel(context.Background())
			stopped := make(chan struct{})
			go func() { _ = m.Start(ctx); close(stopped) }()
			defer func() { cancel(); <-stopped }()
			m.SetEndpoints([]kvstream.Endpoint{{Name: "pod-a", Topic: "kv@",
				EventsURL: fmt.Sprintf("tcp://127.0.0.1:%d", pubPort), ReplayURL: fmt.Sprintf("tcp://127.0.0.1:%d", routerPort)}})
			waitFor(t, func() bool { st := m.Status(); return len(st) == 1 && st[0].Connected }, "connection")
			time.Sleep(200 * time.Millisecond) // let the subscription reach the PUB (lost messages would be replayed anyway)
			_, _ = io.WriteString(stdin, "GO\n")
			waitFor(t, func() bool { st := m.Status(); return st[0].Batches > 0 && st[0].LastSeq == uint64(len(payloads)-1) }, "last batch")
			st := m.Status()[0]
			if st.Gaps == 0 || st.Replays == 0 || st.ReplayFailures != 0 || st.Partial || st.Restarts != 0 {
				t.Fatalf("status %+v: want gaps repaired by replay", st)
			}
			if st.Batches != uint64(len(payloads)) {
				t.Fatalf("applied %d batches, want %d", st.Batches, len(payloads))
			}
			wantBlocks, gotBlocks := want.SourceBlocks(src), got.SourceBlocks(src)
			if len(wantBlocks) == 0 || len(gotBlocks) != len(wantBlocks) {
				t.Fatalf("index holds %d keys, want %d", len(gotBlocks), len(wantBlocks))
			}
			for k, v := range wantBlocks {
				if gotBlocks[k] != v {
					t.Fatalf("key %x: %v, want %v", k, gotBlocks[k], v)
				}
			}
			var sb strings.Builder
			for _, s := range m.Status() {
				fmt.Fprintf(&sb, "%+v ", s)
			}
			t.Log(sb.String())
		})
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
