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
	"fmt"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/routerstatus"

	"github.com/kvrouter/kvrouter/internal/routerapi"
	"github.com/kvrouter/kvrouter/test/fleettest"
)

// With no fault, the index agrees exactly with the engines once they are idle: the baseline
// every fault test is held to.
func TestNoFaultBaseline(t *testing.T) {
	fleettest.NeedBinaries(t)
	es, r := fleetBehindRouter(t, 3, "2")
	load := startLoad(r.URL, 8, 16)
	time.Sleep(3 * time.Second)
	tally := load.Stop()
	tally.AssertNoneLost(t)
	if tally.Count(fleettest.ClearError) != 0 || tally.Total() < 20 {
		t.Errorf("no fault, yet: %s", tally)
	}
	cs := fleettest.CheckConsistent(t, r, es)
	report(t, tally, consistencyString(cs))
}

// An engine killed mid-stream: its streams end with an SSE error event (never a silent cut),
// its other requests fail over or get a JSON error, and once it is back (a new process on the
// same ports: empty cache, sequence 0) the index holds nothing stale for it.
func TestEngineKilledMidStream(t *testing.T) {
	fleettest.NeedBinaries(t)
	es, r := fleetBehindRouter(t, 3, "1")
	load := startLoad(r.URL, 12, 48)
	time.Sleep(time.Second)
	// Kill it while it serves several requests.
	r.WaitStatus(t, "requests in flight on e1", func(st routerapi.Status) bool { return endpointsOf(st)["e1"].InFlight >= 2 })
	before := load.Tally().Total()
	es[1].Proc.Kill()
	time.Sleep(2 * time.Second)
	es[1].Restart(t)
	r.WaitStatus(t, "restarted engine ready and connected", func(st routerapi.Status) bool {
		e := endpointsOf(st)["e1"]
		return e.Ready && e.Events != nil && e.Events.Connected
	})
	time.Sleep(2 * time.Second)
	tally := load.Stop()
	tally.AssertNoneLost(t)
	if tally.Total()-before < 20 {
		t.Errorf("too few requests after the kill: %s", tally)
	}
	cut := 0
	for _, res := range tally.Results() {
		if res.Endpoint == "e1" && res.Outcome == fleettest.ClearError {
			cut++
		}
	}
	if cut == 0 {
		t.Errorf("no request in flight on the killed engine ended in a clear error: %s", tally)
	}
	st := r.Status(t)
	if ev := endpointsOf(st)["e1"].Events; ev == nil || ev.Restarts+ev.ReplayFailures == 0 {
		t.Errorf("the router did not notice the new engine process: %+v", ev)
	}
	cs := fleettest.CheckConsistent(t, r, es)
	report(t, tally, consistencyString(cs), "cut on the killed engine with a clear error: "+itoa(cut),
		"retried on another engine: "+itoa(st.Router.Retries))
}

// An engine restarted in place (vllm-sim's restart fault: requests in flight fail, the cache
// empties, the event sequence starts again at 0, the connection stays up): the router sees the
// sequence go back, drops the engine's blocks, and follows the new cache exactly.
func TestEngineRestartResetsSequence(t *testing.T) {
	fleettest.NeedBinaries(t)
	es, r := fleetBehindRouter(t, 3, "1")
	load := startLoad(r.URL, 12, 32)
	time.Sleep(1500 * time.Millisecond)
	before := es[0].Cache(t)
	es[0].Faults(t, `{"restart":true}`)
	time.Sleep(2 * time.Second)
	tally := load.Stop()
	tally.AssertNoneLost(t)
	after := es[0].Cache(t)
	if after.NextSequence == 0 || after.NextSequence >= before.NextSequence+1000 {
		t.Fatalf("engine did not publish after its restart (sequence %d before, %d after)", before.NextSequence, after.NextSequence)
	}
	st := r.WaitStatus(t, "restart noticed", func(st routerapi.Status) bool {
		ev := endpointsOf(st)["e0"].Events
		return ev != nil && ev.Restarts >= 1
	})
	cs := fleettest.CheckConsistent(t, r, es)
	report(t, tally, consistencyString(cs), "restarts seen by the router: "+itoa(endpointsOf(st)["e0"].Events.Restarts))
}

// KV event batches lost on the way (the engine's PUB socket past its high-water mark drops
// them; vllm-sim's drop fault withholds them from the live stream and keeps them for replay):
// the router sees the sequence gap, replays the missing batches, and the index stays exact.
func TestDroppedEventsRepairedByReplay(t *testing.T) {
	fleettest.NeedBinaries(t)
	es, r := fleetBehindRouter(t, 3, "1")
	load := startLoad(r.URL, 12, 16)
	time.Sleep(time.Second)
	for _, e := range es {
		e.Faults(t, `{"dropNextBatches":25}`)
	}
	time.Sleep(3 * time.Second)
	tally := load.Stop()
	tally.AssertNoneLost(t)
	cs := fleettest.CheckConsistent(t, r, es)
	st := r.Status(t)
	var gaps, replays, failures uint64
	for _, e := range es {
		ev := endpointsOf(st)[e.Name].Events
		gaps, replays, failures = gaps+ev.Gaps, replays+ev.Replays, failures+ev.ReplayFailures
		if ev.Partial {
			t.Errorf("%s partial after gaps replay could repair: %+v", e.Name, ev)
		}
	}
	if gaps == 0 || replays < gaps || failures != 0 {
		t.Errorf("gaps %d, replays %d, replay failures %d: want every gap repaired", gaps, replays, failures)
	}
	report(t, tally, consistencyString(cs), fmt.Sprintf("gaps %d, repaired by replay %d, replay failures %d", gaps, replays, failures))
}

// Replay unavailable: a gap the engine cannot replay (its replay socket down, or its buffer
// shorter than the gap) makes the router drop the engine's entries rather than keep blocks it
// may have missed the removal of; the source is reported partial and EventsDegraded (on
// /v1/status and, through internal/operator/routerstatus, on the KVRouter). The index then holds a
// subset of the engine's cache, and is exact again after the engine resets its cache.
func TestReplayUnavailable(t *testing.T) {
	fleettest.NeedBinaries(t)
	es := []*fleettest.Engine{
		fleettest.StartEngine(t, "e0", "1"),
		fleettest.StartEngine(t, "e1", "1"),
		fleettest.StartEngineKV(t, "e2", "1", `"buffer_steps":4`),
	}
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, es))
	r.WaitConnected(t, 3)
	load := startLoad(r.URL, 12, 16)
	time.Sleep(time.Second)
	es[1].Faults(t, `{"replayDown":true,"dropNextBatches":10}`) // replay times out
	es[2].Faults(t, `{"dropNextBatches":20}`)                   // replay buffer too short
	st := r.WaitStatus(t, "both sources partial", func(st routerapi.Status) bool {
		eps := endpointsOf(st)
		return eps["e1"].Events.Partial && eps["e2"].Events.Partial
	})
	if !degraded(st, "EventsDegraded") {
		t.Errorf("partial sources not reported as EventsDegraded: %+v", st.Degradations)
	}
	cond := kvrouterCondition(t, st, routerstatus.ConditionEventsDegraded)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("KVRouter condition %s: %+v", routerstatus.ConditionEventsDegraded, cond)
	}
	time.Sleep(time.Second)
	tally := load.Stop()
	tally.AssertNoneLost(t)
	cs := fleettest.CheckConsistent(t, r, es)
	for _, c := range cs {
		if (c.Engine == "e0") == c.Partial {
			t.Errorf("%s", c)
		}
	}
	eps := endpointsOf(r.Status(t))
	figures := []string{consistencyString(cs),
		fmt.Sprintf("e1 (replay down): gaps %d, replay failures %d; e2 (buffer of 4): gaps %d, replay failures %d",
			eps["e1"].Events.Gaps, eps["e1"].Events.ReplayFailures, eps["e2"].Events.Gaps, eps["e2"].Events.ReplayFailures)}

	// An idle engine that resets its prefix cache (AllBlocksCleared) makes the index exact
	// again, and the degradation clears.
	es[1].Faults(t, `{"replayDown":false}`)
	for _, e := range es[1:] {
		resetPrefixCache(t, e)
	}
	r.WaitStatus(t, "sources exact again", func(st routerapi.Status) bool {
		eps := endpointsOf(st)
		return !eps["e1"].Events.Partial && !eps["e2"].Events.Partial && !degraded(st, "EventsDegraded")
	})
	cs = fleettest.CheckConsistent(t, r, es)
	for _, c := range cs {
		if c.Partial || c.Missing != 0 {
			t.Errorf("after the reset: %s", c)
		}
	}
	report(t, tally, append(figures, "after reset_prefix_cache: "+consistencyString(cs))...)
}

// KV events delayed by seconds: requests are unaffected, the lag shows on /v1/status, routing
// leans on predictions meanwhile (the hit rate is reported against the undelayed baseline),
// and the index catches up exactly once the events arrive.
func TestEventsDelayed(t *testing.T) {
	fleettest.NeedBinaries(t)
	es, r := fleetBehindRouter(t, 3, "1")
	// A new prefix every 24 requests: where each one went is known from events only after the
	// delay, so routing its followers depends on the router's own predictions meanwhile.
	load := &fleettest.Load{URL: r.URL, Workers: 12, Work: fleettest.NewPrefixes(24, 300, 16)}
	load.Start()
	time.Sleep(2 * time.Second)
	mark := time.Now()
	for _, e := range es {
		e.Faults(t, `{"eventDelayMs":2500}`)
	}
	r.WaitStatus(t, "lag reported", func(st routerapi.Status) bool {
		for _, e := range st.Endpoints {
			if e.Events != nil && e.Events.LagSeconds > 2 {
				return true
			}
		}
		return false
	})
	time.Sleep(3 * time.Second)
	tally := load.Stop()
	tally.AssertNoneLost(t)
	rs := tally.Results()
	base := hitRate(rs, time.Time{}, mark)
	delayed := hitRate(rs, mark.Add(time.Second), time.Now())
	cs := fleettest.CheckConsistent(t, r, es)
	if base > 0.3 && delayed < base/2 {
		t.Errorf("hit rate %.2f with delayed events, %.2f without", delayed, base)
	}
	report(t, tally, consistencyString(cs), fmt.Sprintf("engine-measured hit rate: %.3f before, %.3f with events delayed 2.5 s", base, delayed))
}

// hitRate is the engines' prefix-cache hit rate (cached prompt tokens over prompt tokens, from
// the answers' usage) of the requests started in [from, to).
func hitRate(rs []fleettest.Result, from, to time.Time) float64 {
	var cached, prompt int
	for _, r := range rs {
		if r.Outcome == fleettest.Completed && !r.Start.Before(from) && r.Start.Before(to) {
			cached += r.CachedTokens
			prompt += r.PromptTokens
		}
	}
	if prompt == 0 {
		return 0
	}
	return float64(cached) / float64(prompt)
}

// resetPrefixCache asks an idle engine to clear its prefix cache (vLLM's POST
// /reset_prefix_cache), retrying while requests still hold blocks.
func resetPrefixCache(t *testing.T, e *fleettest.Engine) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Post(e.URL+"/reset_prefix_cache", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: reset_prefix_cache: %s", e.Name, resp.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kvrouterCondition runs the operator's status code (internal/operator/routerstatus) over the router's
// status document, as the operator's poller does (twice: the conditions have hysteresis), and
// returns the condition of type typ.
func kvrouterCondition(t *testing.T, doc routerapi.Status, typ string) *metav1.Condition {
	t.Helper()
	var st v1alpha1.KVRouterStatus
	memo := &routerstatus.Memo{}
	for range 2 {
		routerstatus.Apply(&st, 1, routerstatus.Expect{BlockSize: 16, HashAlgo: "sha256_cbor"}, &doc, time.Now(), memo,
			routerstatus.DefaultThresholds())
	}
	return meta.FindStatusCondition(st.Conditions, typ)
}
