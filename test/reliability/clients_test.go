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
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/internal/routerapi"
	"github.com/kvrouter/kvrouter/test/fleettest"
)

// A slow tokenizer (slower than --tokenize-timeout), then a failing one (/tokenize answers 500):
// the router routes those requests by load alone, loses none, reports TokenizerUnavailable,
// and tokenizes again once /tokenize works.
func TestSlowAndFailingTokenizer(t *testing.T) {
	fleettest.NeedBinaries(t)
	es, r := fleetBehindRouter(t, 3, "2", "--tokenize-timeout", "300ms")
	// New prompts all along: the router's tokenize cache would answer repeated ones.
	load := &fleettest.Load{URL: r.URL, Workers: 8, Work: fleettest.NewPrefixes(4, 200, 8)}
	load.Start()
	phase := func(faults string, d time.Duration) (failures uint64, st routerapi.Status) {
		before := r.Status(t).Router.TokenizeFailures
		for _, e := range es {
			e.Faults(t, faults)
		}
		time.Sleep(d)
		st = r.Status(t)
		return st.Router.TokenizeFailures - before, st
	}
	// vllm-sim's tokenize delay also slows its own serving, so the slow phase is short on
	// requests; 1 s against a 300 ms timeout.
	slowFails, slowSt := phase(`{"tokenizeDelayMs":1000}`, 4*time.Second)
	failFails, failSt := phase(`{"tokenizeDelayMs":0,"tokenizeFailFraction":1}`, 2*time.Second)
	phase(`{"tokenizeFailFraction":0}`, time.Second) // calls in flight may still fail
	okFails, _ := phase(`{}`, 2*time.Second)
	tally := load.Stop()
	tally.AssertNoneLost(t)
	if tally.Count(fleettest.ClearError) != 0 {
		t.Errorf("tokenizer faults turned into errors: %s", tally)
	}
	if slowFails == 0 || failFails == 0 || okFails != 0 {
		t.Errorf("tokenize failures: %d while slow, %d while failing, %d after recovery", slowFails, failFails, okFails)
	}
	for name, st := range map[string]routerapi.Status{"slow": slowSt, "failing": failSt} {
		if !degraded(st, "TokenizerUnavailable") {
			t.Errorf("%s tokenizer not reported: %+v", name, st.Degradations)
		}
	}
	cs := fleettest.CheckConsistent(t, r, es)
	report(t, tally, consistencyString(cs), fmt.Sprintf(
		"routed by load for lack of tokens: %d while /tokenize took 1 s (timeout 300 ms), %d while it failed, %d after it recovered",
		slowFails, failFails, okFails))
}

// slowClient's connections have a 4 KiB receive buffer, so that not reading pushes back on the
// router at once rather than after megabytes of kernel buffering. (Below the loopback MSS the
// window reopens only on the sender's persist timer, so such a connection stays slow even once
// read: fine for a slow client.)
func slowClient() *http.Client {
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		_ = c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, Proxy: nil}}
}

// A slow client (reading 2 KiB every 100 ms from a stream of two megabytes) holds only its
// own request: the router relays it with back-pressure instead of buffering what the engine
// produces, and other requests go on. When the client finally leaves, the engine request is
// cancelled.
func TestSlowClient(t *testing.T) {
	fleettest.NeedBinaries(t)
	es, r := fleetBehindRouter(t, 2, "50")
	heap0 := r.LiveHeap(t)

	const tokens = 12000 // ~2.2 MB of SSE
	body, _ := json.Marshal(map[string]any{"model": "m", "prompt": "tell me a very long story", "max_tokens": tokens, "stream": true})
	client := slowClient()
	resp, err := client.Post(r.URL+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	var got bytes.Buffer
	slowRead := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			n, err := resp.Body.Read(buf)
			got.Write(buf[:n])
			if err != nil {
				t.Fatalf("slow stream broke after %d bytes: %v", got.Len(), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Until the engine has generated the whole answer (vllm-sim counts tokens when a request
	// finishes): everything the client has not read is then buffered somewhere.
	waited := time.Now()
	for engineCounter(t, es, "vllm:generation_tokens_total", "") < tokens {
		if time.Since(waited) > 60*time.Second {
			t.Fatal("the engine did not finish generating the slow stream in 60 s")
		}
		slowRead(time.Second)
	}
	heapSlow := r.LiveHeap(t)
	readSlow := got.Len()
	load := startLoad(r.URL, 6, 8)
	slowRead(2 * time.Second)
	tally := load.Stop()
	tally.AssertNoneLost(t)
	if tally.Count(fleettest.Completed) < 20 {
		t.Errorf("other requests stalled behind the slow client: %s", tally)
	}
	// What the client did read is the stream's beginning, event for event.
	events := strings.Split(got.String(), "\n\n")
	for _, ev := range events[:len(events)-1] {
		var chunk struct{ Choices []struct{ Text string } }
		if json.Unmarshal([]byte(strings.TrimPrefix(ev, "data: ")), &chunk) != nil || len(chunk.Choices) != 1 {
			t.Fatalf("slow stream's event %q is not a completion chunk", ev)
		}
	}
	// With megabytes of the answer unread, the router's live heap must not have grown by
	// anything like that: the rest waits in the engine and in the kernel's socket buffers.
	unread := int64(tokens*bytesPerEvent(events) - readSlow)
	if grow := heapSlow - heap0; grow > 2<<20 || unread < 1<<20 {
		t.Errorf("router live heap grew %d bytes while a slow client lagged ~%d bytes behind", grow, unread)
	}
	resp.Body.Close()
	client.CloseIdleConnections()
	waitEnginesIdle(t, r, es)
	fleettest.CheckConsistent(t, r, es)
	report(t, tally, fmt.Sprintf(
		"slow client had read %d bytes in %v when the engine had generated all %d tokens (~%.1f MB unread); router live heap %d before, %d then (+%d); other requests meanwhile p50 %v p99 %v",
		readSlow, time.Since(waited).Round(time.Second), tokens, float64(unread)/(1<<20), heap0, heapSlow, heapSlow-heap0,
		fleettest.Percentile(tally.Results(), 0.5, nil).Round(time.Millisecond), fleettest.Percentile(tally.Results(), 0.99, nil).Round(time.Millisecond)))
}

// bytesPerEvent is the mean size of the complete SSE events (and their separators) in events.
func bytesPerEvent(events []string) int {
	n := 0
	for _, ev := range events[:len(events)-1] {
		n += len(ev) + 2
	}
	return n / max(len(events)-1, 1)
}

// waitEnginesIdle waits until no engine runs or queues a request and the router has none in
// flight.
func waitEnginesIdle(t *testing.T, r *fleettest.Router, es []*fleettest.Engine) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		running, inflight := 0, 0
		for _, e := range es {
			c := e.Cache(t)
			running += c.Running + c.Waiting
		}
		for _, e := range r.Status(t).Endpoints {
			inflight += e.InFlight
		}
		if running == 0 && inflight == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the clients left: %d engine requests running, %d in flight in the router", running, inflight)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Clients that disconnect mid-stream, or before a whole answer comes back: the router cancels
// the engine request (vllm-sim counts it aborted and its running count drops to zero), and
// nothing of them is left in the router (in-flight counts, goroutines).
func TestClientDisconnect(t *testing.T) {
	fleettest.NeedBinaries(t)
	es, r := fleetBehindRouter(t, 2, "1")
	total0, pooled0 := r.Goroutines(t)
	const streams, whole = 8, 4
	var wg sync.WaitGroup
	for i := range streams + whole {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := i < streams
			body, _ := json.Marshal(map[string]any{"model": "m", "prompt": fmt.Sprintf("story %d", i), "max_tokens": 3000, "stream": stream})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.URL+"/v1/completions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if !stream {
				time.AfterFunc(700*time.Millisecond, cancel) // gone before the answer
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			sc := bufio.NewScanner(resp.Body)
			for n := 0; n < 3 && sc.Scan(); {
				if strings.HasPrefix(sc.Text(), "data: ") {
					n++
				}
			}
			resp.Body.Close() // gone mid-stream
		}()
	}
	wg.Wait()
	waitEnginesIdle(t, r, es)
	aborted := engineCounter(t, es, "vllm:request_success_total", "abort")
	if aborted != streams+whole {
		t.Errorf("engines aborted %.0f requests, want %d", aborted, streams+whole)
	}
	http.DefaultClient.CloseIdleConnections()
	time.Sleep(500 * time.Millisecond)
	total1, pooled1 := r.Goroutines(t)
	if total1-pooled1 > total0-pooled0+2 {
		t.Errorf("router goroutines %d (+%d pooled) before, %d (+%d) after:\n%s", total0-pooled0, pooled0, total1-pooled1, pooled1, r.GoroutineProfile(t))
	}
	fleettest.CheckConsistent(t, r, es)
	t.Logf("%s: %d streams and %d whole requests abandoned: engines aborted %.0f; router goroutines %d before, %d after (pooled engine connections aside)",
		t.Name(), streams, whole, aborted, total0-pooled0, total1-pooled1)
}

// engineCounter sums a counter over the engines' /metrics, over the series whose
// finished_reason is reason (any series when reason is empty).
func engineCounter(t *testing.T, es []*fleettest.Engine, name, reason string) float64 {
	t.Helper()
	sum := 0.0
	for _, e := range es {
		resp, err := http.Get(e.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fams[name].GetMetric() {
			match := reason == ""
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == "finished_reason" && l.GetValue() == reason)
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
