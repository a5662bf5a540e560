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

package simulate

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
	"github.com/kvrouter/kvrouter/internal/bench/peers"
	"github.com/kvrouter/kvrouter/internal/bench/workload"
)

func tinySpec() *workload.Spec {
	s := &workload.Spec{
		Name: "tiny", Kind: workload.KindSharedPrefix, Seed: 5,
		Fleet:        workload.Fleet{Engines: 3, Profile: "h100-llama-3.1-8b-tp1", BlockSize: 16, NumBlocks: 160},
		Load:         workload.Load{Rates: []float64{40}, Requests: 120},
		SLO:          workload.SLO{TTFTSeconds: 1, ITLSeconds: 0.1},
		SharedPrefix: &workload.SharedPrefix{Groups: 6, PromptsPerGroup: 3, SystemTokens: 640, QuestionTokens: 48, OutputTokens: 8},
	}
	if err := s.Validate(); err != nil {
		panic(err)
	}
	return s
}

func run(t *testing.T, s *workload.Spec, name string) metrics.Result {
	t.Helper()
	f, err := peers.Select([]string{name})
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := workload.Generate(s, s.Load.Rates[0], workload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(Config{Spec: s, Rate: s.Load.Rates[0], Requests: reqs, Policy: f[0], Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != res.Requests || res.Requests != 120 {
		t.Fatalf("%s: %d of %d requests completed", name, res.Completed, res.Requests)
	}
	return res
}

func TestDeterministic(t *testing.T) {
	s := tinySpec()
	a, b := run(t, s, "kvrouter"), run(t, s, "kvrouter")
	if a.TTFTP99 != b.TTFTP99 || a.HitRate != b.HitRate || a.OutputThroughput != b.OutputThroughput {
		t.Fatalf("two runs with one seed differ: %+v vs %+v", a, b)
	}
}

func TestCacheAwareRoutingHitsMore(t *testing.T) {
	// Six 640-token prefixes do not fit in one engine's 160 blocks (2,560 tokens) but do fit in
	// the fleet's: round-robin thrashes every cache, prefix-aware routing partitions the groups.
	s := tinySpec()
	rr, kv, or := run(t, s, "round-robin"), run(t, s, "kvrouter"), run(t, s, "oracle")
	if kv.HitRate <= rr.HitRate+0.2 {
		t.Fatalf("kvrouter hit rate %.2f, round-robin %.2f: want a clear gain", kv.HitRate, rr.HitRate)
	}
	if or.HitRate < rr.HitRate {
		t.Fatalf("oracle hit rate %.2f below round-robin %.2f", or.HitRate, rr.HitRate)
	}
	if kv.ITLP50 <= 0 || kv.TTFTP50 <= 0 || kv.E2EP99 < kv.E2EP50 {
		t.Fatalf("latency figures look wrong: %+v", kv)
	}
}

func TestMultiTurnContinuesConversations(t *testing.T) {
	s := tinySpec()
	s.Kind, s.SharedPrefix = workload.KindMultiTurn, nil
	s.MultiTurn = &workload.Sessions{SystemPrompts: 2, SystemTokens: 256, Turns: 4, FirstTokens: 64, NewTokens: 32, OutputTokens: 16, ThinkSeconds: 0.2}
	res := run(t, s, "session-affinity")
	// Later turns resend earlier turns on the same engine: most of each prompt is cached.
	if res.HitRate < 0.5 {
		t.Fatalf("session affinity on multi-turn chat hit only %.2f", res.HitRate)
	}
}

func TestScaleUpShare(t *testing.T) {
	s := tinySpec()
	s.ScaleUp = &workload.ScaleUp{AtFraction: 0.3, Add: 1}
	res := run(t, s, "round-robin")
	if res.ScaledUpShare == nil || *res.ScaledUpShare < 0.2 || *res.ScaledUpFairShare != 0.25 {
		t.Fatalf("round-robin should give the new replica about its fair share: %v of %v", res.ScaledUpShare, res.ScaledUpFairShare)
	}
}

// The scale-up workload end to end: 4 engines loaded with shared-prefix groups, 4 more added
// half-way. Auto moves traffic onto the added engines once the original ones' decode batches
// cost more than a recompute there (the decode model is fed by the streams the harness times);
// PrefillBound, which prices prefill only, leaves them idle.
func TestScaleUpGetsTrafficOnDecodeCost(t *testing.T) {
	s, err := workload.LoadFile("../../../bench/workloads/scale-up.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := workload.Generate(s, 20, workload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	share := map[string]float64{}
	for _, name := range []string{"kvrouter", "kvrouter-prefill"} {
		f, err := peers.Select([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(Config{Spec: s, Rate: 20, Requests: reqs, Policy: f[0], Seed: s.Seed})
		if err != nil {
			t.Fatal(err)
		}
		if res.Failed != 0 || res.ScaledUpShare == nil {
			t.Fatalf("%s: %d failed, share %v", name, res.Failed, res.ScaledUpShare)
		}
		share[name] = *res.ScaledUpShare
	}
	if share["kvrouter"] < 0.35 || share["kvrouter-prefill"] >= share["kvrouter"] {
		t.Fatalf("added engines' share: Auto %.2f, PrefillBound %.2f (fair 0.50)", share["kvrouter"], share["kvrouter-prefill"])
	}
}
