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

package loadsignal

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/policy"
)

// vllmMetrics renders a /metrics page in vLLM's shape (two DP ranks for the counters).
func vllmMetrics(running, waiting int, kv float64, queries, hits, preempt float64) string {
	return fmt.Sprintf(`# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} %d
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} %d
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} %g
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} %g
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} %g
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="m"} %g
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",prefix_caching_hash_algo="sha256_cbor",engine="0"} 1
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",engine="0"} 3
vllm:time_to_first_token_seconds_bucket{le="+Inf",engine="0"} 4
vllm:time_to_first_token_seconds_sum{engine="0"} 0.9
vllm:time_to_first_token_seconds_count{engine="0"} 4
`, running, waiting, kv, queries, hits, preempt)
}

func TestParseMetrics(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(vllmMetrics(3, 2, 0.42, 1000, 750, 5)))
	if err != nil {
		t.Fatal(err)
	}
	want := EngineMetrics{Running: 3, Waiting: 2, KVUsage: 0.42, PrefixQueries: 1000, PrefixHits: 750,
		Preemptions: 5, BlockSize: "16", HashAlgo: "sha256_cbor"}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %+v\nwant %+v", m, want)
	}
	if _, err := ParseMetrics(strings.NewReader("vllm:num_requests_running{ 3\n")); err == nil {
		t.Fatal("malformed exposition parsed without error")
	}
}

// TestParseMetricsRenamedMetrics covers engines from before vLLM 0.9 renamed
// vllm:gpu_cache_usage_perc to vllm:kv_cache_usage_perc and vllm:gpu_prefix_cache_* to
// vllm:prefix_cache_*, and the versions in between that expose both names.
func TestParseMetricsRenamedMetrics(t *testing.T) {
	old := `# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.3
# TYPE vllm:gpu_prefix_cache_queries counter
vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 500
# TYPE vllm:gpu_prefix_cache_hits counter
vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 100
`
	m, err := ParseMetrics(strings.NewReader(old))
	if err != nil {
		t.Fatal(err)
	}
	if m.KVUsage != 0.3 || m.PrefixQueries != 500 || m.PrefixHits != 100 {
		t.Errorf("old names only: %+v, want KV usage 0.3, 500 queries, 100 hits", m)
	}
	both, err := ParseMetrics(strings.NewReader(vllmMetrics(3, 2, 0.42, 1000, 750, 5) + old))
	if err != nil {
		t.Fatal(err)
	}
	if both.KVUsage != 0.42 || both.PrefixQueries != 1000 || both.PrefixHits != 750 {
		t.Errorf("both names: %+v, want the current names' values (KV usage 0.42, 1000 queries, 750 hits), not the old ones or sums", both)
	}
}

func TestTicketAccounting(t *testing.T) {
	tr := NewTracker()
	a := tr.Dispatch("e0", 1000, 1500)
	b := tr.Dispatch("e0", 200, 300)
	loads := make([]policy.Load, 2)
	tr.Loads([]string{"e0", "e1"}, loads, nil)
	if loads[0].InFlight != 2 || loads[0].QueuedPrefillTokens != 1200 || loads[0].InFlightTokens != 1800 ||
		loads[1] != (policy.Load{}) {
		t.Fatalf("after dispatch %+v", loads)
	}
	a.FirstToken()
	a.FirstToken() // idempotent
	tr.Loads([]string{"e0"}, loads[:1], nil)
	if loads[0].InFlight != 2 || loads[0].QueuedPrefillTokens != 200 || loads[0].InFlightTokens != 1800 {
		t.Fatalf("after first token %+v", loads[0])
	}
	b.Done() // releases the prefill too
	tr.Loads([]string{"e0"}, loads[:1], nil)
	if loads[0].InFlight != 1 || loads[0].InFlightTokens != 1500 {
		t.Fatalf("after one done %+v", loads[0])
	}
	a.Done()
	a.Done()
	st := tr.Stats("e0")
	if st.InFlight != 0 || st.QueuedPrefillTokens != 0 || st.TokensInFlight != 0 {
		t.Fatalf("after done %+v", st)
	}
}

// The tracker times how long an engine has been on the head of the router's prefill queue: from
// the dispatch that found the queue empty, then from each first token, which ends the request
// ahead; a dispatch joining a queue under way does not restart the clock.
func TestPrefillElapsedTimesTheQueuesHead(t *testing.T) {
	now := time.Unix(1000, 0)
	at := func(s float64) { now = time.Unix(1000, 0).Add(time.Duration(s * float64(time.Second))) }
	tr := NewTracker()
	tr.SetClock(func() time.Time { return now })
	elapsed := func() float64 {
		var l [1]policy.Load
		tr.Loads([]string{"e0"}, l[:], nil)
		return l[0].PrefillElapsed
	}
	a := tr.Dispatch("e0", 2000, 2100)
	at(0.3)
	b := tr.Dispatch("e0", 2000, 2100)
	if got := elapsed(); math.Abs(got-0.3) > 1e-9 {
		t.Fatalf("0.3 s after the first dispatch, with a second queued behind it: elapsed %v, want 0.3", got)
	}
	at(0.5)
	a.FirstToken()
	at(0.6)
	if got := elapsed(); math.Abs(got-0.1) > 1e-9 {
		t.Fatalf("0.1 s after the first request's first token: elapsed %v, want 0.1 (the second is now at the head)", got)
	}
	b.Done()
	if got := elapsed(); got != 0 {
		t.Fatalf("empty queue: elapsed %v, want 0", got)
	}
	at(2)
	tr.Dispatch("e0", 500, 600)
	at(2.05)
	if got := elapsed(); math.Abs(got-0.05) > 1e-9 {
		t.Fatalf("after an idle spell: elapsed %v, want 0.05 from the new dispatch", got)
	}
}

func TestTicketsConcurrent(t *testing.T) {
	tr := NewTracker()
	var wg sync.WaitGroup
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				k := tr.Dispatch("e0", 10, 20)
				go k.FirstToken()
				k.Done()
			}
		}()
	}
	wg.Wait()
	if st := tr.Stats("e0"); st.InFlight != 0 || st.QueuedPrefillTokens != 0 {
		t.Fatalf("leaked load %+v", st)
	}
}

func TestRemoteLoadAndRates(t *testing.T) {
	tr := NewTracker()
	k := tr.Dispatch("e0", 500, 600) // this router: 1 request, prefilling
	t0 := time.Unix(1000, 0)
	// The engine holds 5 requests (4 from other routers), 3 of them waiting (2 remote).
	m := EngineMetrics{Running: 2, Waiting: 3, KVUsage: 0.95, PrefixQueries: 1000, PrefixHits: 500, Preemptions: 1}
	tr.RecordScrape("e0", m, t0)
	loads := make([]policy.Load, 1)
	tr.Loads([]string{"e0"}, loads, nil)
	if loads[0].RemoteInFlight != 4 || loads[0].RemotePrefillTokens != 1000 {
		t.Fatalf("remote estimate %+v", loads[0])
	}
	// Queued: this router's prefilling request and the 2 others' waiting ones; 2 running.
	if loads[0].QueuedRequests != 1 || loads[0].RemoteQueuedRequests != 2 || loads[0].PeakRunning != 2 {
		t.Fatalf("queue estimate %+v", loads[0])
	}
	// What it runs now and how full its cache is, for admission's slot wait.
	if loads[0].Running != 2 || loads[0].KVUsage != 0.95 {
		t.Fatalf("scraped running and KV usage %+v", loads[0])
	}
	if st := tr.Stats("e0"); st.HitRateOK {
		t.Fatal("hit rate from a single sample")
	}
	m.PrefixQueries, m.PrefixHits, m.Preemptions = 3000, 2100, 4
	tr.RecordScrape("e0", m, t0.Add(30*time.Second))
	st := tr.Stats("e0")
	if !st.HitRateOK || math.Abs(st.HitRate-0.8) > 1e-9 || math.Abs(st.PreemptionsPerMinute-6) > 1e-9 {
		t.Fatalf("rates %+v", st)
	}
	// Old samples leave the window.
	m.PrefixQueries, m.PrefixHits = 4000, 2100
	tr.RecordScrape("e0", m, t0.Add(100*time.Second))
	if st := tr.Stats("e0"); math.Abs(st.HitRate-0) > 1e-9 || !st.HitRateOK {
		t.Fatalf("window not applied: %+v", st)
	}
	// An engine restart resets its counters: no negative rate.
	tr.RecordScrape("e0", EngineMetrics{PrefixQueries: 10, PrefixHits: 5}, t0.Add(101*time.Second))
	if st := tr.Stats("e0"); st.HitRateOK || st.PreemptionsPerMinute < 0 {
		t.Fatalf("after restart %+v", st)
	}
	tr.RecordScrapeError("e0", fmt.Errorf("boom"))
	streak := make([]int, 1)
	tr.Loads([]string{"e0"}, loads, streak)
	if loads[0].RemoteInFlight != 0 || loads[0].RemoteQueuedRequests != 0 || tr.Stats("e0").ScrapeError != "boom" || streak[0] != 1 {
		t.Fatalf("scrape error kept the remote estimate %+v", loads[0])
	}
	k.Done()
	tr.Remove("e0")
	if st := tr.Stats("e0"); !reflect.DeepEqual(st, EndpointStats{}) {
		t.Fatalf("removed endpoint still has stats %+v", st)
	}
}

func TestScraperRound(t *testing.T) {
	var hits atomic.Int32
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		hits.Add(1)
		fmt.Fprint(w, vllmMetrics(1, 7, 0.5, 10, 5, 0))
	}))
	defer good.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nope", http.StatusInternalServerError)
	}))
	defer bad.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer slow.Close()

	tr := NewTracker()
	s := &Scraper{Tracker: tr, Interval: 100 * time.Millisecond, Targets: func() []Target {
		return []Target{{"good", good.URL}, {"bad", bad.URL}, {"slow", slow.URL}}
	}}
	start := time.Now()
	s.Round(context.Background())
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("round took %v: the timeout did not bound the slow engine", el)
	}
	if st := tr.Stats("good"); !st.Scraped || st.Metrics.Waiting != 7 || st.ScrapeError != "" {
		t.Fatalf("good %+v", st)
	}
	if st := tr.Stats("bad"); st.Scraped || !strings.Contains(st.ScrapeError, "500") {
		t.Fatalf("bad %+v", st)
	}
	if st := tr.Stats("slow"); st.ScrapeErrors != 1 {
		t.Fatalf("slow %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 350*time.Millisecond)
	defer cancel()
	s.Run(ctx)
	if n := hits.Load(); n < 3 {
		t.Fatalf("Run scraped the good engine %d times in 350 ms at 100 ms", n)
	}
}
