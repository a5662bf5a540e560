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

package reliability

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"

	"github.com/kvrouter/kvrouter/internal/routerapi"
	"github.com/kvrouter/kvrouter/test/fleettest"
)

// hostileZMQ listens on loopback as a ZMQ peer that completes the handshake as sockType (PUB
// for an events port, ROUTER for a replay port, which first reads the replay request) and then
// sends a frame header declaring declare bytes, followed by a few bytes of it, on every
// connection. It counts the connections that got that far.
type hostileZMQ struct {
	ln    net.Listener
	conns atomic.Int64
}

func startHostileZMQ(t *testing.T, sockType zmq4.SocketType, declare uint64) *hostileZMQ {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hostileZMQ{ln: ln}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(time.Minute))
				if _, err := zmq4.Open(c, null.Security(), sockType, zmq4.SocketIdentity("hostile"), true, nil); err != nil {
					return
				}
				if sockType == zmq4.Router {
					var req [12]byte // ["", seq]
					if _, err := io.ReadFull(c, req[:]); err != nil {
						return
					}
				}
				h.conns.Add(1)
				hdr := binary.BigEndian.AppendUint64([]byte{0x02}, declare) // LONG size, last frame
				if _, err := c.Write(append(hdr, make([]byte, 4096)...)); err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, c) // until the router drops the connection
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return h
}

func (h *hostileZMQ) url() string { return "tcp://" + h.ln.Addr().String() }

// vmRSS is a process's resident set size in bytes (/proc/<pid>/status).
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/<pid>/status")
	return 0
}

// A hostile KV-event peer: discovery lists a 4th engine whose events port declares a 1 TiB
// frame and whose replay port a 2^62-byte one, on every connection. Before the frame limit one
// such peer ended every router replica ("fatal error: runtime: out of memory"). The router must
// stay up with a flat RSS, drop and count every oversized connection, keep that source partial,
// reconnect with backoff, and meanwhile follow the other engines' events and serve every
// request: zero lost, index exact for the healthy engines.
func TestHostileEventPeer(t *testing.T) {
	fleettest.NeedBinaries(t)
	es := fleet(t, 4, "10")
	events := startHostileZMQ(t, zmq4.Pub, 1<<40)
	replay := startHostileZMQ(t, zmq4.Router, 1<<62)
	// e3 serves HTTP as usual, but discovery points the router at the hostile peer for its events.
	e3 := *es[3]
	e3.Events, e3.Replay = events.url(), replay.url()
	file := fleettest.WriteEndpoints(t, []*fleettest.Engine{es[0], es[1], es[2], &e3})
	r := fleettest.StartRouter(t, file)
	good := func(st routerapi.Status) bool {
		n := 0
		for _, e := range st.Endpoints {
			if e.Name != "e3" && e.Ready && e.Events != nil && e.Events.Connected {
				n++
			}
		}
		return n == 3
	}
	r.WaitStatus(t, "the healthy engines' event streams connected", good)

	// New prefixes all along, so that every engine keeps publishing events. Each healthy engine
	// also serves one client of its own, sent to it directly: what is checked below is that the
	// router keeps following every healthy engine's events, and that must not rest on where the
	// policy places new prefixes. At low load it can favour one engine for a while (a TTFT fit
	// left pessimistic keeps its engine out of the placement's TTFT cap until the fit is stale:
	// policy.predict), and meanwhile the others publish nothing.
	load := &fleettest.Load{URL: r.URL, Workers: 4, Work: fleettest.NewPrefixes(8, 100, 8)}
	load.Start()
	var direct []*fleettest.Load
	for _, e := range es[:3] {
		l := &fleettest.Load{URL: e.URL, Workers: 1, Work: fleettest.NewPrefixes(4, 60, 4)}
		l.Start()
		direct = append(direct, l)
	}
	time.Sleep(2 * time.Second) // warm-up: the baseline RSS includes a serving router's
	rssBefore := vmRSS(t, r.Proc.Pid())
	batchesBefore := map[string]uint64{}
	for _, e := range r.Status(t).Endpoints {
		if e.Events != nil {
			batchesBefore[e.Name] = e.Events.Batches
		}
	}
	time.Sleep(8 * time.Second)
	tally := load.Stop()
	for _, l := range direct {
		l.Stop().AssertNoneLost(t)
	}
	rssAfter := vmRSS(t, r.Proc.Pid())
	if r.Proc.Exited() {
		t.Fatalf("the router exited:\n%s", r.Proc.Output())
	}

	tally.AssertNoneLost(t)
	for _, res := range tally.Results() {
		if res.Outcome == fleettest.ClearError && res.Status >= 500 {
			t.Errorf("a request failed with %d: %s", res.Status, res.Reason)
		}
	}
	if tally.Count(fleettest.Completed) == 0 {
		t.Fatal("no request completed")
	}
	// Generous: a regression allocates the declared sizes (GiBs) or dies; a correct router's RSS
	// moves by a few MiB with the load.
	if grew := rssAfter - rssBefore; grew > 128<<20 {
		t.Errorf("router RSS grew from %d to %d MiB", rssBefore>>20, rssAfter>>20)
	}
	st := r.Status(t)
	for _, e := range st.Endpoints {
		switch {
		case e.Events == nil:
			t.Errorf("%s: no event stream", e.Name)
		case e.Name == "e3":
			if !e.Events.Partial || e.Events.Batches != 0 {
				t.Errorf("e3 (hostile): %+v, want partial and nothing applied", *e.Events)
			}
		case e.Events.Partial || e.Events.Batches <= batchesBefore[e.Name]:
			t.Errorf("%s: events stopped flowing or went partial: %+v (batches before %d)", e.Name, *e.Events, batchesBefore[e.Name])
		}
	}
	var oversized uint64
	for _, s := range r.IndexDump(t).Streams {
		if s.Source.Endpoint == "e3" {
			oversized = s.OversizedFrames
		} else if s.OversizedFrames != 0 {
			t.Errorf("%s: %d oversized frames counted", s.Source.Endpoint, s.OversizedFrames)
		}
	}
	// Both peers were dropped, and the router came back (with backoff) more than once.
	if events.conns.Load() < 2 || replay.conns.Load() < 2 || oversized < 4 {
		t.Errorf("hostile events peer connected %d times, replay peer %d times, %d oversized frames counted",
			events.conns.Load(), replay.conns.Load(), oversized)
	}
	cs := fleettest.CheckConsistent(t, r, es[:3])
	report(t, tally, consistencyString(cs), fmt.Sprintf(
		"router RSS %.1f MiB before, %.1f MiB after 8 s of a peer declaring 1 TiB (events) and 2^62 B (replay); hostile connections: events %d, replay %d; oversized frames counted %d",
		float64(rssBefore)/(1<<20), float64(rssAfter)/(1<<20), events.conns.Load(), replay.conns.Load(), oversized))
}

// Poison requests through the router: max_tokens of 2^63-1 (three at once used to overflow
// vllm-sim and drop its connections), 1e9, -1, 1.5 and beyond the context each get a 4xx
// OpenAI error, from the router or the engine; the ordinary requests running meanwhile and
// those sent right after all complete.
func TestPoisonRequests(t *testing.T) {
	fleettest.NeedBinaries(t)
	es := fleet(t, 3, "10", "--max-model-len", "4096")
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, es))
	r.WaitConnected(t, 3)
	load := startLoad(r.URL, 3, 8)
	time.Sleep(500 * time.Millisecond)
	poison := []fleettest.Request{}
	for _, v := range []string{"9223372036854775807", "1e9", "-1", "1.5", "5000", "18446744073709551616"} {
		poison = append(poison,
			fleettest.Request{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"poison","max_tokens":` + v + `}`)},
			fleettest.Request{Path: "/v1/chat/completions", Body: []byte(`{"model":"m","messages":[{"role":"user","content":"poison"}],"max_completion_tokens":` + v + `}`)},
			fleettest.Request{Path: "/v1/completions", Stream: true, Body: []byte(`{"model":"m","prompt":"poison","stream":true,"max_tokens":` + v + `}`)})
	}
	var mu sync.Mutex
	var bad []string
	var wg sync.WaitGroup
	for range 3 { // each three times at once
		for _, p := range poison {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := fleettest.Do(context.Background(), http.DefaultClient, r.URL, p, 30*time.Second)
				if res.Outcome != fleettest.ClearError || res.Status < 400 || res.Status >= 500 {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%s: %v %d %s", p.Body, res.Outcome, res.Status, res.Reason))
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond)
	tally := load.Stop()
	for _, b := range bad {
		t.Errorf("poison request not refused with a 4xx: %s", b)
	}
	// Right after: every ordinary request completes.
	after := &fleettest.Tally{}
	work := fleettest.SharedPrefix(3, 100, 8, 8)
	for i := range 24 {
		after.Add(fleettest.Do(context.Background(), http.DefaultClient, r.URL, work(i), 30*time.Second))
	}
	tally.AssertNoneLost(t)
	after.AssertNoneLost(t)
	if n := tally.Count(fleettest.Completed); n != tally.Total() {
		t.Errorf("ordinary requests during the poison: %s", tally)
	}
	if n := after.Count(fleettest.Completed); n != after.Total() {
		t.Errorf("ordinary requests after the poison: %s", after)
	}
	for _, e := range es {
		if e.Proc.Exited() {
			t.Errorf("%s exited", e.Name)
		}
	}
	report(t, tally, fmt.Sprintf("%d poison requests (3 at once each), all 4xx; right after: %s", 3*len(poison), after))
}
