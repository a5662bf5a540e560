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

package routerstatus

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/routerapi"
)

var want = Expect{BlockSize: 16, HashAlgo: "sha256_cbor"}

// doc builds a status document of n ready engines with the given fleet numbers.
func doc(n int, hitRate, preemptionsPerMinute float64) *routerapi.Status {
	d := &routerapi.Status{ReadyEndpoints: n, Fleet: routerapi.Fleet{
		HitRate: hitRate, HitRateValid: true, PreemptionsPerMinute: preemptionsPerMinute}}
	for i := range n {
		d.Endpoints = append(d.Endpoints, routerapi.Endpoint{
			Name: fmt.Sprintf("e%d", i), Ready: true,
			Engine: &routerapi.EngineMetrics{HitRate: hitRate, HitRateValid: true, KVUsage: 0.5,
				PreemptionsPerMinute: preemptionsPerMinute / float64(n), PrefixCacheQueries: 100,
				BlockSize: "16", HashAlgo: "sha256_cbor"},
			Events: &routerapi.EventHealth{Connected: true, Batches: 10, LagSeconds: 0.01},
		})
	}
	return d
}

func cond(t *testing.T, st *v1alpha1.KVRouterStatus, typ string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(st.Conditions, typ)
	if c == nil {
		t.Fatalf("%s not set: %+v", typ, st.Conditions)
	}
	if c.ObservedGeneration != 7 {
		t.Errorf("%s observedGeneration %d, want 7", typ, c.ObservedGeneration)
	}
	return *c
}

func TestApplyFieldsAndRounding(t *testing.T) {
	st := &v1alpha1.KVRouterStatus{}
	d := doc(2, 0.87654, 0.333)
	d.Router = routerapi.RouterStats{PromptTokens: 1000, CachedPromptTokens: 800, RoutedHitRate: 0.8}
	now := time.Date(2026, 1, 1, 0, 0, 0, 500, time.UTC)
	Apply(st, 7, want, d, now, &Memo{}, DefaultThresholds())
	c := st.Cache
	if c == nil || c.HitRate != "87.7%" || c.PredictedHitRate != "80.0%" || c.PreemptionsPerMinute != "0.3" ||
		c.Window.Duration != time.Minute || !c.LastSampleTime.Time.Equal(now.Truncate(time.Second)) {
		t.Fatalf("cache = %+v", c)
	}
	if len(st.Endpoints) != 2 || st.Endpoints[0] != (v1alpha1.EndpointStatus{Name: "e0", Ready: true, HitRate: "87.7%",
		KVUsage: "50%", PreemptionsPerMinute: "0.2", EventLag: "<1s", EventsHealthy: true}) {
		t.Fatalf("endpoints = %+v", st.Endpoints)
	}
	if got := cond(t, st, ConditionRouterStatusAvailable); got.Status != metav1.ConditionTrue {
		t.Errorf("RouterStatusAvailable = %+v", got)
	}
	for _, typ := range []string{ConditionCacheThrashing, ConditionEventsDegraded, ConditionTokenizerDegraded, ConditionEngineConfigMismatch} {
		if got := cond(t, st, typ); got.Status != metav1.ConditionFalse {
			t.Errorf("%s = %s (%s)", typ, got.Status, got.Message)
		}
	}

	// The router's windowed prediction wins over its lifetime one.
	d.Router.Window = &routerapi.RoutedWindow{Seconds: 60, PromptTokens: 100, CachedPromptTokens: 25, RoutedHitRate: 0.25}
	Apply(st, 7, want, d, now, &Memo{}, DefaultThresholds())
	if st.Cache.PredictedHitRate != "25.0%" {
		t.Errorf("predicted hit rate %q, want the window's 25.0%%", st.Cache.PredictedHitRate)
	}

	// No queries (no prompts routed) in the window: no rate rather than 0%.
	d.Fleet.HitRateValid = false
	d.Router.Window = &routerapi.RoutedWindow{Seconds: 60}
	Apply(st, 7, want, d, now, &Memo{}, DefaultThresholds())
	if st.Cache.HitRate != "" || st.Cache.PredictedHitRate != "" {
		t.Errorf("rates without traffic = %q, %q", st.Cache.HitRate, st.Cache.PredictedHitRate)
	}
}

// A steady fleet, and numbers that only move below the display precision, change nothing, so
// the reconciler writes nothing; lastSampleTime is refreshed after RefreshEvery.
func TestApplyNoChurn(t *testing.T) {
	th := DefaultThresholds()
	st := &v1alpha1.KVRouterStatus{}
	memo := &Memo{}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	Apply(st, 7, want, doc(3, 0.9, 0.3), t0, memo, th)
	before := st.DeepCopy()
	d := doc(3, 0.90001, 0.3001)
	d.Endpoints[1].Events.LagSeconds = 0.3
	Apply(st, 7, want, d, t0.Add(30*time.Second), memo, th)
	if !equality.Semantic.DeepEqual(before, st) {
		t.Fatalf("status changed for an unchanged fleet:\n%+v\n%+v", before.Cache, st.Cache)
	}
	Apply(st, 7, want, d, t0.Add(th.RefreshEvery), memo, th)
	if !st.Cache.LastSampleTime.Time.Equal(t0.Add(th.RefreshEvery)) {
		t.Errorf("lastSampleTime not refreshed: %v", st.Cache.LastSampleTime)
	}
	Apply(st, 7, want, doc(3, 0.5, 0.3), t0.Add(th.RefreshEvery+time.Second), memo, th)
	if st.Cache.HitRate != "50.0%" {
		t.Errorf("a real change was not written: %q", st.Cache.HitRate)
	}
}

func TestCacheThrashingHysteresis(t *testing.T) {
	th := DefaultThresholds()
	st := &v1alpha1.KVRouterStatus{}
	memo := &Memo{}
	now := time.Now()
	steps := []struct {
		name        string
		hit, perMin float64 // fleet of 2 engines: perMin is the fleet total
		want        metav1.ConditionStatus
	}{
		{"calm", 0.9, 0, metav1.ConditionFalse},
		{"preempting with a low hit rate is load, not thrashing", 0.2, 10, metav1.ConditionFalse},
		{"preempting with a high hit rate", 0.9, 4, metav1.ConditionTrue},
		{"between the thresholds it stays on", 0.9, 2, metav1.ConditionTrue},
		{"the hit rate drops but preemptions go on: still on", 0.1, 2, metav1.ConditionTrue},
		{"below the exit threshold it ends", 0.9, 0.5, metav1.ConditionFalse},
		{"between the thresholds it stays off", 0.9, 2, metav1.ConditionFalse},
	}
	for _, s := range steps {
		Apply(st, 7, want, doc(2, s.hit, s.perMin), now, memo, th)
		if got := cond(t, st, ConditionCacheThrashing); got.Status != s.want {
			t.Fatalf("%s: CacheThrashing = %s (%s)", s.name, got.Status, got.Message)
		}
	}
}

func TestEventsDegraded(t *testing.T) {
	th := DefaultThresholds()
	st := &v1alpha1.KVRouterStatus{}
	memo := &Memo{}
	now := time.Now()
	status := func() metav1.Condition { return cond(t, st, ConditionEventsDegraded) }

	bad := doc(2, 0.5, 0)
	bad.Degradations = []routerapi.Degradation{{Type: "EventsDegraded", Message: "KV events not current from 1 endpoint(s), e.g. e1"}}
	Apply(st, 7, want, bad, now, memo, th)
	if status().Status != metav1.ConditionFalse {
		t.Fatal("one bad sample turned EventsDegraded on")
	}
	Apply(st, 7, want, bad, now, memo, th)
	if c := status(); c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "e.g. e1") {
		t.Fatalf("two bad samples: %+v", c)
	}
	Apply(st, 7, want, doc(2, 0.5, 0), now, memo, th)
	if status().Status != metav1.ConditionTrue {
		t.Fatal("one clean sample cleared EventsDegraded")
	}
	Apply(st, 7, want, doc(2, 0.5, 0), now, memo, th)
	if status().Status != metav1.ConditionFalse {
		t.Fatal("two clean samples did not clear EventsDegraded")
	}

	// An engine that serves prompts but whose events never arrive: --kv-events-config is not
	// in effect. The router itself sees a connected, idle stream.
	silent := doc(2, 0.5, 0)
	silent.Endpoints[1].Events = &routerapi.EventHealth{Connected: true, Stale: true, StaleReason: "idle"}
	Apply(st, 7, want, silent, now, memo, th)
	Apply(st, 7, want, silent, now, memo, th)
	if c := status(); c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "e1") || !strings.Contains(c.Message, "kv-events-config") {
		t.Fatalf("silent engine: %+v", c)
	}
	if st.Endpoints[1].EventsHealthy || !st.Endpoints[0].EventsHealthy {
		t.Errorf("endpoint rows: %+v", st.Endpoints)
	}
	// A not-ready endpoint does not count.
	silent.Endpoints[1].Ready = false
	memo = &Memo{}
	st = &v1alpha1.KVRouterStatus{}
	Apply(st, 7, want, silent, now, memo, th)
	Apply(st, 7, want, silent, now, memo, th)
	if status().Status != metav1.ConditionFalse {
		t.Fatal("a not-ready endpoint's events degraded the KVRouter")
	}
}

func TestTokenizerDegraded(t *testing.T) {
	th := DefaultThresholds()
	st := &v1alpha1.KVRouterStatus{}
	memo := &Memo{}
	bad := doc(1, 0.5, 0)
	bad.Degradations = []routerapi.Degradation{{Type: "TokenizerUnavailable", Message: "requests are routed by load alone while /tokenize fails: 503"}}
	Apply(st, 7, want, bad, time.Now(), memo, th)
	if c := cond(t, st, ConditionTokenizerDegraded); c.Status != metav1.ConditionTrue || c.Reason != ReasonTokenizeFailing {
		t.Fatalf("%+v", c)
	}
	Apply(st, 7, want, doc(1, 0.5, 0), time.Now(), memo, th)
	if cond(t, st, ConditionTokenizerDegraded).Status != metav1.ConditionTrue {
		t.Fatal("cleared after one clean sample")
	}
	Apply(st, 7, want, doc(1, 0.5, 0), time.Now(), memo, th)
	if cond(t, st, ConditionTokenizerDegraded).Status != metav1.ConditionFalse {
		t.Fatal("not cleared after two clean samples")
	}
}

// TestTokenizerMismatch: the condition says who tokenizes, turns True on the router's first
// disagreement with an engine, and its messages do not change with the counters (no write per
// poll).
func TestTokenizerMismatch(t *testing.T) {
	st := &v1alpha1.KVRouterStatus{}
	apply := func(tk *routerapi.Tokenizer) metav1.Condition {
		t.Helper()
		d := doc(1, 0.5, 0)
		d.Tokenizer = tk
		Apply(st, 7, want, d, time.Now(), &Memo{}, DefaultThresholds())
		return cond(t, st, ConditionTokenizerMismatch)
	}
	if c := apply(nil); c.Status != metav1.ConditionFalse || c.Reason != ReasonEnginesTokenize {
		t.Fatalf("router without a tokenizer block: %+v", c)
	}
	if c := apply(&routerapi.Tokenizer{Mode: "auto", Source: "engine", Reason: "loading the tokenizer"}); c.Status != metav1.ConditionFalse ||
		c.Reason != ReasonEnginesTokenize || !strings.Contains(c.Message, "loading the tokenizer") {
		t.Fatalf("loading: %+v", c)
	}
	local := &routerapi.Tokenizer{Mode: "auto", Source: "local", Origin: "hub:org/model@main", Verified: true, LocalRequests: 10}
	c := apply(local)
	if c.Status != metav1.ConditionFalse || c.Reason != ReasonTokenizesInProcess || !strings.Contains(c.Message, "hub:org/model@main") ||
		!strings.Contains(c.Message, "checked against") {
		t.Fatalf("in process: %+v", c)
	}
	local.LocalRequests, local.Verifications = 5000, 50
	if again := apply(local); again.Message != c.Message {
		t.Errorf("the message follows the counters: %q then %q", c.Message, again.Message)
	}
	now := time.Now()
	c = apply(&routerapi.Tokenizer{Mode: "auto", Source: "engine", Origin: "/models/llama", Reason: "mismatch", Mismatches: 1, LastMismatch: &now})
	if c.Status != metav1.ConditionTrue || c.Reason != ReasonDisagreesWithEngines || !strings.Contains(c.Message, "/models/llama") {
		t.Fatalf("mismatch: %+v", c)
	}
	if again := apply(&routerapi.Tokenizer{Mode: "auto", Source: "engine", Origin: "/models/llama", Reason: "mismatch", Mismatches: 3, LastMismatch: &now}); again.Message != c.Message {
		t.Errorf("the message follows the mismatch count: %q then %q", c.Message, again.Message)
	}
}

func TestEngineConfigMismatch(t *testing.T) {
	st := &v1alpha1.KVRouterStatus{}
	d := doc(2, 0.5, 0)
	d.Endpoints[1].Engine.BlockSize = "32"
	Apply(st, 7, want, d, time.Now(), &Memo{}, DefaultThresholds())
	c := cond(t, st, ConditionEngineConfigMismatch)
	if c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "e1 reports block size 32") || !strings.Contains(c.Message, "block size 16") {
		t.Fatalf("%+v", c)
	}
	d = doc(2, 0.5, 0)
	d.Endpoints[0].Engine.HashAlgo = "xxhash"
	d.Endpoints[1].Engine.BlockSize, d.Endpoints[1].Engine.HashAlgo = "", "" // not reported: no verdict
	Apply(st, 7, want, d, time.Now(), &Memo{}, DefaultThresholds())
	if c := cond(t, st, ConditionEngineConfigMismatch); c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "hash algorithm xxhash") {
		t.Fatalf("%+v", c)
	}
	Apply(st, 7, want, doc(2, 0.5, 0), time.Now(), &Memo{}, DefaultThresholds())
	if c := cond(t, st, ConditionEngineConfigMismatch); c.Status != metav1.ConditionFalse {
		t.Fatalf("%+v", c)
	}
}

func TestEndpointRowsCapped(t *testing.T) {
	st := &v1alpha1.KVRouterStatus{}
	th := DefaultThresholds()
	th.MaxEndpoints = 3
	Apply(st, 7, want, doc(5, 0.5, 0), time.Now(), &Memo{}, th)
	if len(st.Endpoints) != 3 || st.EndpointsOmitted != 2 {
		t.Fatalf("%d rows, %d omitted", len(st.Endpoints), st.EndpointsOmitted)
	}
}

func TestUnavailableKeepsLastValues(t *testing.T) {
	st := &v1alpha1.KVRouterStatus{}
	Apply(st, 7, want, doc(1, 0.5, 0), time.Now(), &Memo{}, DefaultThresholds())
	Unavailable(st, 7, ReasonUnreachable, "GET http://x/v1/status: connection refused")
	if c := cond(t, st, ConditionRouterStatusAvailable); c.Status != metav1.ConditionFalse || c.Reason != ReasonUnreachable {
		t.Fatalf("%+v", c)
	}
	if st.Cache == nil || st.Cache.HitRate != "50.0%" {
		t.Errorf("last values dropped: %+v", st.Cache)
	}
}

func TestFetch(t *testing.T) {
	want := doc(1, 0.25, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ok/v1/status", func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(want) })
	mux.HandleFunc("GET /down/v1/status", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "starting", http.StatusServiceUnavailable) })
	mux.HandleFunc("GET /garbage/v1/status", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>")) })
	mux.HandleFunc("GET /slow/v1/status", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx := context.Background()

	got, err := Fetch(ctx, srv.Client(), srv.URL+"/ok/", time.Second)
	if err != nil || got.Fleet.HitRate != 0.25 || len(got.Endpoints) != 1 {
		t.Fatalf("ok: %+v, %v", got, err)
	}
	for path, wantErr := range map[string]string{"down": "HTTP 503: starting", "garbage": "decoding", "slow": "deadline exceeded"} {
		start := time.Now()
		_, err := Fetch(ctx, srv.Client(), srv.URL+"/"+path, 200*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), wantErr) || !strings.Contains(err.Error(), "/v1/status") {
			t.Errorf("%s: error %v, want one containing %q and the URL", path, err, wantErr)
		}
		if time.Since(start) > 2*time.Second {
			t.Errorf("%s: the timeout was not applied", path)
		}
	}
}

// An endpoint the router holds out of routing as unresponsive shows so on its row, and a poll
// that finds the same ejection writes nothing new.
func TestSuspectEndpointRow(t *testing.T) {
	st := &v1alpha1.KVRouterStatus{}
	d := doc(2, 0.5, 0)
	since := time.Date(2026, 1, 1, 0, 0, 1, 700_000_000, time.UTC)
	d.Endpoints[1].Ready, d.Endpoints[1].NotReadyReason = false, "suspect"
	d.Endpoints[1].Suspect = &routerapi.Suspect{Reason: "ttfb-timeout", Since: since, ProbeAfter: since.Add(2 * time.Second)}
	t0 := since.Add(time.Second)
	Apply(st, 7, want, d, t0, &Memo{}, DefaultThresholds())
	row := st.Endpoints[1]
	if row.Ready || row.NotReadyReason != "suspect" || row.Suspect != "ttfb-timeout" || row.SuspectSince == nil ||
		!row.SuspectSince.Time.Equal(since.Truncate(time.Second)) {
		t.Fatalf("suspect row %+v", row)
	}
	if st.Endpoints[0].Suspect != "" || st.Endpoints[0].SuspectSince != nil {
		t.Fatalf("healthy row %+v", st.Endpoints[0])
	}
	// What the API server hands back, then the next poll.
	b, _ := json.Marshal(st)
	var stored v1alpha1.KVRouterStatus
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatal(err)
	}
	sample := stored.Cache.LastSampleTime.DeepCopy()
	Apply(&stored, 7, want, d, t0.Add(30*time.Second), &Memo{}, DefaultThresholds())
	if !stored.Cache.LastSampleTime.Equal(sample) {
		t.Fatal("an unchanged ejection rewrote the status")
	}
}
