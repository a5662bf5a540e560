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

package e2e

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/routerstatus"
	"github.com/kvrouter/kvrouter/internal/routerapi"
	"github.com/kvrouter/kvrouter/test/fleettest"
)

const (
	mQueries     = "vllm:prefix_cache_queries_total"
	mHits        = "vllm:prefix_cache_hits_total"
	mPreemptions = "vllm:num_preemptions_total"
)

// The hit rate and preemptions that reach the KVRouter status are the engines' own counters:
// the router's /v1/status agrees with what the test scrapes from each vllm-sim, and the
// operator's status code turns that into the same numbers.
func TestStatusMatchesEngineCounters(t *testing.T) {
	fleettest.NeedBinaries(t)
	// A KV cache of 40 blocks (640 tokens) cannot hold four ~400-token sequences at once, so the
	// engines preempt; shared prefixes make hits.
	var engines []*fleettest.Engine
	for i := range 2 {
		engines = append(engines, fleettest.StartEngine(t, fmt.Sprintf("e%d", i), "5", "--num-gpu-blocks-override", "40"))
	}
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	fleettest.ReplaceFile(t, file, fleettest.EndpointsYAML(engines))
	// Every sample the router's rates are computed from is taken after this instant, so a window
	// measured from here bounds the router's own from above.
	began := time.Now()
	router := fleettest.StartRouter(t, file)
	router.WaitConnected(t, 2)
	// The router's rates start from its first scrape of each engine: take it before the traffic,
	// so that the window covers all of it.
	router.WaitStatus(t, "a scrape of every idle engine", func(st routerapi.Status) bool {
		for _, ep := range st.Endpoints {
			if ep.Engine == nil {
				return false
			}
		}
		return len(st.Endpoints) == 2
	})

	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 4 {
				prompt := strings.Repeat(fmt.Sprintf("shared context %d ", w%3), 60) + fmt.Sprintf("question %d-%d", w, i)
				post(t, router.URL, fleettest.Completion(prompt, 150, false))
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// The engines are idle now; wait for the router's next scrape of every engine.
	own := map[string]map[string]float64{}
	for _, e := range engines {
		own[e.Name] = fleettest.EngineCounters(t, e.URL, mQueries, mHits, mPreemptions)
	}
	st := router.WaitStatus(t, "a scrape of the final counters", func(st routerapi.Status) bool {
		for _, ep := range st.Endpoints {
			if ep.Engine == nil || ep.Engine.PrefixCacheQueries != own[ep.Name][mQueries] ||
				ep.Engine.Preemptions != own[ep.Name][mPreemptions] {
				return false
			}
		}
		return len(st.Endpoints) == 2
	})
	elapsed := time.Since(began)

	var queries, hits, preemptions, perMinute float64
	for _, ep := range st.Endpoints {
		c := own[ep.Name]
		if ep.Engine.PrefixCacheHits != c[mHits] {
			t.Errorf("%s: router says %v prefix-cache hits, the engine %v", ep.Name, ep.Engine.PrefixCacheHits, c[mHits])
		}
		// Each engine's window covers the whole run (it is shorter than a minute, and the
		// router's first sample predates the traffic), so its rate is its counters' ratio.
		if want := c[mHits] / c[mQueries]; !ep.Engine.HitRateValid || math.Abs(ep.Engine.HitRate-want) > 1e-9 {
			t.Errorf("%s: hit rate %v (valid %v), engine counters give %v", ep.Name, ep.Engine.HitRate, ep.Engine.HitRateValid, want)
		}
		queries += c[mQueries]
		hits += c[mHits]
		preemptions += c[mPreemptions]
		perMinute += ep.Engine.PreemptionsPerMinute
	}
	if preemptions == 0 || hits == 0 {
		t.Fatalf("the workload caused %v preemptions and %v hit tokens; the test needs both", preemptions, hits)
	}
	wantRate := hits / queries
	if !st.Fleet.HitRateValid || math.Abs(st.Fleet.HitRate-wantRate) > 1e-9 {
		t.Errorf("fleet hit rate %v, engines' counters give %v", st.Fleet.HitRate, wantRate)
	}
	if math.Abs(st.Fleet.PreemptionsPerMinute-perMinute) > 1e-9 {
		t.Errorf("fleet preemptions/min %v, sum of the endpoints' %v", st.Fleet.PreemptionsPerMinute, perMinute)
	}
	// The rate's window (first to last scrape) lies inside [began, now], so the rate is at least
	// the count over that span. (Starting the span after the first scrape, as this test once did,
	// made it shorter than the window now and then, and the bound fail.)
	if lower := preemptions / elapsed.Minutes(); st.Fleet.PreemptionsPerMinute < lower*0.999 {
		t.Errorf("fleet preemptions/min %v below %v preemptions over %s", st.Fleet.PreemptionsPerMinute, preemptions, elapsed)
	}

	// The router's prediction over its window covers the whole run too.
	if w := st.Router.Window; w == nil || w.PromptTokens != st.Router.PromptTokens || w.PromptTokens == 0 ||
		math.Abs(w.RoutedHitRate-st.Router.RoutedHitRate) > 1e-9 {
		t.Errorf("router window %+v, lifetime %v prompt tokens at %v", w, st.Router.PromptTokens, st.Router.RoutedHitRate)
	}

	// The operator's own client reads the document on the router's admin port, where the status
	// poller reads it; the public port does not serve it.
	if fetched, err := routerstatus.Fetch(context.Background(), nil, router.AdminURL, 0); err != nil || fetched.Router.PromptTokens != st.Router.PromptTokens {
		t.Errorf("the operator's read on the admin port: %v (%+v)", err, fetched)
	}
	if _, err := routerstatus.Fetch(context.Background(), nil, router.URL, 0); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Errorf("the operator's read on the public port: %v, want HTTP 404", err)
	}

	// What the operator writes onto the KVRouter.
	kvr := &v1alpha1.KVRouterStatus{}
	routerstatus.Apply(kvr, 1, routerstatus.Expect{BlockSize: 16, HashAlgo: "sha256_cbor"}, &st, time.Now(), &routerstatus.Memo{}, routerstatus.DefaultThresholds())
	if want := fmt.Sprintf("%.1f%%", wantRate*100); kvr.Cache.HitRate != want {
		t.Errorf("status.cache.hitRate %q, want %q", kvr.Cache.HitRate, want)
	}
	if want := fmt.Sprintf("%.1f", st.Fleet.PreemptionsPerMinute); kvr.Cache.PreemptionsPerMinute != want {
		t.Errorf("status.cache.preemptionsPerMinute %q, want %q", kvr.Cache.PreemptionsPerMinute, want)
	}
	if want := fmt.Sprintf("%.1f%%", st.Router.RoutedHitRate*100); kvr.Cache.PredictedHitRate != want {
		t.Errorf("status.cache.predictedHitRate %q, want %q", kvr.Cache.PredictedHitRate, want)
	}
	if len(kvr.Endpoints) != 2 || kvr.Endpoints[0].Name != "e0" || kvr.Endpoints[0].HitRate == "" || !kvr.Endpoints[0].EventsHealthy {
		t.Errorf("status.endpoints %+v", kvr.Endpoints)
	}
	for _, c := range kvr.Conditions {
		if c.Type == routerstatus.ConditionEngineConfigMismatch && c.Status != "False" {
			t.Errorf("engines with the spec's block size and hash algorithm reported as mismatched: %s", c.Message)
		}
	}
	t.Logf("hit rate %.3f over %v query tokens, %v preemptions (%.1f/min), predicted hit rate %.3f",
		wantRate, queries, preemptions, st.Fleet.PreemptionsPerMinute, st.Router.RoutedHitRate)
}

// Scale-down: an endpoint that turns not ready (a terminating pod, during its preStop pause)
// gets no new request at once, and the stream it is serving runs to its end.
func TestLeavingEndpointDrains(t *testing.T) {
	fleettest.NeedBinaries(t)
	// Slowed down so that one stream outlasts the steps below.
	engines := []*fleettest.Engine{fleettest.StartEngine(t, "e0", "0.3"), fleettest.StartEngine(t, "e1", "0.3")}
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	fleettest.ReplaceFile(t, file, fleettest.EndpointsYAML(engines))
	router := fleettest.StartRouter(t, file)
	router.WaitConnected(t, 2)

	resp, err := http.Post(router.URL+"/v1/completions", "application/json",
		strings.NewReader(fleettest.Completion(strings.Repeat("a long running story ", 20), 200, true)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: HTTP %d", resp.StatusCode)
	}
	leaving := resp.Header.Get("X-Kvrouter-Endpoint")
	staying := "e0"
	if leaving == "e0" {
		staying = "e1"
	}
	var finished atomic.Bool
	type result struct {
		chunks int
		done   bool
	}
	streamed := make(chan result, 1)
	go func() {
		chunks, done := readStream(resp.Body)
		finished.Store(true)
		streamed <- result{chunks, done}
	}()

	fleettest.ReplaceFile(t, file, fleettest.EndpointsYAML(engines, leaving))
	router.WaitStatus(t, leaving+" not ready", func(st routerapi.Status) bool { return st.ReadyEndpoints == 1 })
	if finished.Load() {
		t.Fatal("the stream ended before the endpoint left; the test proves nothing (slow the engines down)")
	}
	for i := range 6 {
		if got := post(t, router.URL, fleettest.Completion(fmt.Sprintf("new request %d", i), 2, false)); got != staying {
			t.Errorf("request %d went to %q while %s was leaving", i, got, leaving)
		}
	}

	select {
	case r := <-streamed:
		if !r.done || r.chunks < 100 {
			t.Fatalf("the leaving endpoint's stream was cut: %d chunks, [DONE]=%v", r.chunks, r.done)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the leaving endpoint's stream did not finish")
	}

	// The pod is gone: the endpoint leaves the list.
	fleettest.ReplaceFile(t, file, fleettest.EndpointsYAML([]*fleettest.Engine{engines[map[string]int{"e0": 0, "e1": 1}[staying]]}))
	router.WaitStatus(t, "one endpoint listed", func(st routerapi.Status) bool { return len(st.Endpoints) == 1 })
}
