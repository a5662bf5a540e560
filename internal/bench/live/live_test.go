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

package live

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
	"github.com/kvrouter/kvrouter/internal/bench/workload"
	"github.com/kvrouter/kvrouter/internal/sim/engine"
	"github.com/kvrouter/kvrouter/internal/sim/server"
	"github.com/kvrouter/kvrouter/internal/sim/timing"
)

// startSim serves one real simulated engine (the vllm-sim HTTP server) on a loopback port.
func startSim(t *testing.T, scale float64) string {
	t.Helper()
	eng, err := engine.New(engine.Config{Profile: timing.ForModel("llama-8b", 1), BlockSize: 16, NumBlocks: 400})
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(eng, server.Options{ServedModelNames: []string{"sim"}, TimeScale: scale, PrefixCaching: true,
		Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); cancel(); <-done })
	return ts.URL
}

func TestLiveAgainstSimulatedEngine(t *testing.T) {
	url := startSim(t, 1)
	spec := &workload.Spec{
		Name: "live-test", Kind: workload.KindMultiTurn, Seed: 3, Fleet: workload.Fleet{Engines: 1},
		Load: workload.Load{Rates: []float64{40}, Requests: 24}, SLO: workload.SLO{TTFTSeconds: 5, ITLSeconds: 1},
		MultiTurn: &workload.Sessions{SystemPrompts: 1, SystemTokens: 200, Turns: 3, FirstTokens: 20, NewTokens: 10, OutputTokens: 6, ThinkSeconds: 0.01},
	}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	reqs, err := workload.Generate(spec, 40, workload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Config{Target: url, Requests: reqs, MaxDuration: time.Minute,
		SLO: metrics.SLO{TTFT: 5, ITL: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 24 {
		t.Fatalf("%d of 24 completed", res.Completed)
	}
	if res.TTFTP50 <= 0 || res.ITLP50 <= 0 || res.E2EP99 < res.TTFTP99 {
		t.Fatalf("latencies look wrong: %+v", res)
	}
	if res.OutputThroughput <= 0 || res.Goodput <= 0 {
		t.Fatalf("no throughput: %+v", res)
	}
	// One shared system prompt and conversations that resend their history: the engine's own
	// usage report must show cached prompt tokens.
	if res.HitRate < 0.3 {
		t.Fatalf("hit rate %.2f: follow-up turns did not reuse the cache", res.HitRate)
	}
}

func TestLoopbackOnly(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:8080", "http://localhost:1", "http://[::1]:80"} {
		if err := CheckLoopback(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://10.0.0.1:8080", "http://example.com", "ftp://127.0.0.1", "::"} {
		if CheckLoopback(bad) == nil {
			t.Errorf("%s must be refused", bad)
		}
	}
}
