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
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/routerapi"
	"github.com/kvrouter/kvrouter/test/fleettest"
)

// phases splits a load's completed requests by when they finished: before, during and after a
// fault that lasted from start to end. Rates are per second of each phase.
type phases struct {
	before, during, after float64
}

func (p phases) String() string {
	return fmt.Sprintf("completions/s before %.0f, during %.0f (%.0f%%), after %.0f", p.before, p.during,
		100*p.during/max(p.before, 1e-9), p.after)
}

func ratesAround(rs []fleettest.Result, from, start, end, to time.Time) phases {
	var n [3]int
	for _, r := range rs {
		if r.Outcome != fleettest.Completed {
			continue
		}
		switch done := r.Start.Add(r.Latency); {
		case done.Before(from) || !done.Before(to):
		case done.Before(start):
			n[0]++
		case done.Before(end):
			n[1]++
		default:
			n[2]++
		}
	}
	return phases{float64(n[0]) / start.Sub(from).Seconds(), float64(n[1]) / end.Sub(start).Seconds(),
		float64(n[2]) / to.Sub(end).Seconds()}
}

// busiest is the engine that completed the most of rs since from: the one holding the hot
// prefixes.
func busiest(rs []fleettest.Result, from time.Time) string {
	count := map[string]int{}
	best := ""
	for _, r := range rs {
		if r.Outcome == fleettest.Completed && !r.Start.Before(from) {
			count[r.Endpoint]++
			if best == "" || count[r.Endpoint] > count[best] {
				best = r.Endpoint
			}
		}
	}
	return best
}

// backAfter is how long after at the engine name completed a request sent after at: its return
// to traffic (0 and false: it did not).
func backAfter(rs []fleettest.Result, name string, at time.Time) (time.Duration, bool) {
	var first time.Duration
	ok := false
	for _, r := range rs {
		if r.Endpoint != name || r.Outcome != fleettest.Completed || r.Start.Before(at) {
			continue
		}
		if d := r.Start.Add(r.Latency).Sub(at); !ok || d < first {
			first, ok = d, true
		}
	}
	return first, ok
}

func longest(rs []fleettest.Result) time.Duration {
	var m time.Duration
	for _, r := range rs {
		m = max(m, r.Latency)
	}
	return m
}

// An engine that stops answering without closing anything (SIGSTOP: its port still accepts
// connections, its kernel still takes the requests) while it holds the hot prefixes, for 10 s
// under closed-loop load. The router's TTFB watchdog finds it silent and ejects it: requests
// waiting there move to the other engines, streams it had started end with an error event, new
// requests go elsewhere, and none waits out the stop. Once it runs again (SIGCONT) its probe
// answers and it takes traffic within seconds. Nothing is lost, and the fleet keeps at least 60%
// of its completions during the stop (docs/reliability.md has the measured figures).
func TestHungEngineSIGSTOP(t *testing.T) {
	fleettest.NeedBinaries(t)
	// Admission control off: the figures are the watchdog's alone, not what shedding adds.
	es, r := fleetBehindRouter(t, 3, "1", "--admission=false")
	load := startLoad(r.URL, 8, 16)
	time.Sleep(2 * time.Second)
	from := time.Now()
	time.Sleep(4 * time.Second)
	victim := busiest(load.Tally().Results(), from)
	var e *fleettest.Engine
	for _, c := range es {
		if c.Name == victim {
			e = c
		}
	}
	if e == nil {
		t.Fatalf("no engine served the load: %s", load.Tally())
	}
	pid := e.Proc.Pid()
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	stop := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	st := r.Status(t)
	row := endpointsOf(st)[victim]
	var detected time.Duration
	if row.Suspect == nil || row.Ready {
		t.Errorf("stopped engine %s not suspect 3 s into the stop: %+v", victim, row)
	} else {
		detected = row.Suspect.Since.Sub(stop)
	}
	time.Sleep(7 * time.Second)
	cont := time.Now()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	r.WaitStatus(t, "the engine back in routing", func(st routerapi.Status) bool {
		e := endpointsOf(st)[victim]
		return e.Ready && e.Suspect == nil
	})
	time.Sleep(5 * time.Second)
	end := time.Now()
	tally := load.Stop()
	tally.AssertNoneLost(t)
	rs := tally.Results()
	rates := ratesAround(rs, from, stop, cont, end)
	if rates.during < 0.6*rates.before {
		t.Errorf("completions during the stop fell below 60%% of before: %s", rates)
	}
	back, ok := backAfter(rs, victim, cont)
	if !ok || back > 5*time.Second {
		t.Errorf("the engine did not take traffic within 5 s of SIGCONT (took %v, %v)", back, ok)
	}
	if l := longest(rs); l > 8*time.Second {
		t.Errorf("a request took %v: it waited out the stop", l)
	}
	st = r.Status(t)
	row = endpointsOf(st)[victim]
	if row.Ejections == 0 {
		t.Errorf("the stopped engine was never ejected: %+v", row)
	}
	cs := fleettest.CheckConsistent(t, r, es)
	report(t, tally, rates.String(), fmt.Sprintf("stopped %s for %v; ejected %v after SIGSTOP; it took traffic again %v after SIGCONT; longest request %v; moved to another engine %d; ejections of %s: %d",
		victim, cont.Sub(stop).Round(time.Millisecond), detected.Round(time.Millisecond), back.Round(time.Millisecond),
		longest(rs).Round(time.Millisecond), st.Router.Retries, victim, row.Ejections), consistencyString(cs))
}

// uniquePrompts is the shared-prefix workload with a question no other request asks, so that
// every request's /tokenize call reaches an engine (the router caches answers).
func uniquePrompts(maxTokens int) fleettest.Workload {
	base := fleettest.SharedPrefix(6, 300, 1, maxTokens)
	return func(i int) fleettest.Request {
		req := base(i)
		req.Body = bytes.Replace(req.Body, []byte("Question 0:"), []byte(fmt.Sprintf("Question %d:", i)), 1)
		return req
	}
}

// An engine whose tokenizer stalls for 10 s (vllm-sim's tokenize-delay fault: its /tokenize and
// the tokenization of the requests it serves both wait), longer than the router's 2 s tokenize
// timeout. The router's /tokenize calls leave it once one has been in flight for long, and skip it
// after one times out (for 2 s, doubling after each timeout that follows), so a handful of
// requests wait the timeout rather than one in three; its completions stall too, so the TTFB
// watchdog ejects it, and its /health, which still answers, brings it back on probation (one
// request at a time, ejected again for twice as long if that one stalls). Nothing is lost, the
// fleet keeps 60% of its completions, and the engine serves again within seconds of the end.
func TestTokenizerStall(t *testing.T) {
	fleettest.NeedBinaries(t)
	es, r := fleetBehindRouter(t, 3, "1", "--admission=false")
	load := &fleettest.Load{URL: r.URL, Workers: 8, Work: uniquePrompts(16)}
	load.Start()
	time.Sleep(2 * time.Second)
	from := time.Now()
	time.Sleep(4 * time.Second)
	victim := es[1]
	stall := time.Now()
	victim.Faults(t, `{"tokenizeDelayMs":10000}`)
	time.Sleep(10 * time.Second)
	victim.Faults(t, `{"tokenizeDelayMs":0}`)
	cont := time.Now()
	time.Sleep(10 * time.Second)
	end := time.Now()
	tally := load.Stop()
	tally.AssertNoneLost(t)
	rs := tally.Results()
	rates := ratesAround(rs, from, stall, cont, end)
	if rates.during < 0.6*rates.before {
		t.Errorf("completions while the tokenizer stalled fell below 60%% of before: %s", rates)
	}
	// Requests it had already accepted finish when the delay is lifted: count the ones sent later.
	back, ok := backAfter(rs, victim.Name, cont.Add(time.Second))
	if !ok || back > 15*time.Second {
		t.Errorf("%s did not take traffic again within 15 s of the stall's end (took %v, %v)", victim.Name, back, ok)
	}
	timeouts := routerCounter(t, r, "kvrouter_tokenize_timeouts_total", victim.Name)
	if timeouts == 0 || timeouts > float64(load.Workers) {
		t.Errorf("%v /tokenize timeouts on %s: want a few", timeouts, victim.Name)
	}
	slow := 0
	for _, res := range rs {
		if res.Latency > 1500*time.Millisecond {
			slow++
		}
	}
	row := endpointsOf(r.Status(t))[victim.Name]
	report(t, tally, rates.String(), fmt.Sprintf("tokenizer of %s stalled for %v: %v /tokenize timeouts, %d requests over 1.5 s, %d ejections; it served again %v after the stall (requests sent 1 s after its end)",
		victim.Name, cont.Sub(stall).Round(time.Millisecond), timeouts, slow, row.Ejections, (back+time.Second).Round(time.Millisecond)))
}

// A poison request, one that makes its engine drop the connection after reading it, sent through
// the router to a fleet of one engine: the client gets a clear error at once; the router does
// not take the engine out of routing for it (a fleet of one would answer 503 "no engine is ready"
// for a while), nor retry it; and the ordinary requests that follow all complete.
func TestEngineDropsRequestNotRetried(t *testing.T) {
	fleettest.NeedBinaries(t)
	sim := fleettest.StartEngine(t, "sim", "2")
	target, _ := url.Parse(sim.URL)
	relay := httputil.NewSingleHostReverseProxy(target)
	relay.FlushInterval = -1
	var poisoned atomic.Int32
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if strings.HasPrefix(req.URL.Path, "/v1/") && bytes.Contains(body, []byte("POISON")) {
			poisoned.Add(1)
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		relay.ServeHTTP(w, req)
	}))
	t.Cleanup(engine.Close)
	front := *sim
	front.Name, front.URL = "e0", engine.URL
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, []*fleettest.Engine{&front}))
	r.WaitConnected(t, 1)
	c := &http.Client{}
	for _, stream := range []bool{false, true} {
		req := fleettest.Request{Path: "/v1/completions", Body: []byte(fleettest.Completion("POISON pill", 8, stream)), Stream: stream}
		res := fleettest.Do(context.Background(), c, r.URL, req, 10*time.Second)
		if res.Outcome != fleettest.ClearError || res.Status != http.StatusBadGateway {
			t.Fatalf("poison request (stream %v): %s %d %s", stream, res.Outcome, res.Status, res.Reason)
		}
	}
	if n := poisoned.Load(); n != 2 {
		t.Fatalf("the engine saw the poison %d times for 2 requests", n)
	}
	row := endpointsOf(r.Status(t))["e0"]
	if !row.Ready || row.Suspect != nil {
		t.Fatalf("two poison requests took the engine out: %+v", row)
	}
	tally := &fleettest.Tally{}
	for i := range 20 {
		tally.Add(fleettest.Do(context.Background(), c, r.URL, fleettest.SharedPrefix(2, 50, 4, 8)(i), 10*time.Second))
	}
	if tally.Count(fleettest.Completed) != 20 {
		t.Fatalf("ordinary requests after the poison ones: %s", tally)
	}
	st := r.Status(t)
	if st.Router.Retries != 0 {
		t.Errorf("retries %d: a request the engine read was sent again", st.Router.Retries)
	}
	report(t, tally, fmt.Sprintf("2 poison requests answered 502, engine ready throughout, retries %d", st.Router.Retries))
}

// routerCounter reads one series of a counter from the router's /metrics.
func routerCounter(t *testing.T, r *fleettest.Router, name, endpoint string) float64 {
	t.Helper()
	resp, err := http.Get(r.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	prefix := name + `{endpoint="` + endpoint + `"} `
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			return f
		}
	}
	return 0
}
