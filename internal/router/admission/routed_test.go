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

package admission

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/policy"
)

// linear predicts 1 ms of TTFT per token of prefill work, calibrated.
type linear struct{}

func (linear) PredictTTFT(_ string, work int) (float64, bool) { return float64(work) / 1000, true }

func fleet(queued ...[2]int) []policy.Endpoint {
	eps := make([]policy.Endpoint, len(queued))
	for i, q := range queued {
		eps[i] = policy.Endpoint{Name: string(rune('a' + i)), Ready: true,
			Load: policy.Load{InFlight: q[0], QueuedRequests: q[0], QueuedPrefillTokens: q[1]}}
	}
	return eps
}

func TestCheckRoutedMovesToAFallbackThatAdmits(t *testing.T) {
	c := New(Config{TTFTBound: time.Second, FleetQueueCap: -1}, t0)
	// a: 3 queued with 4,000 tokens of prefill, b: 1 with 100, c: 2 with 2,000.
	eps := fleet([2]int{3, 4000}, [2]int{1, 100}, [2]int{2, 2000})
	d := policy.Decision{Endpoint: "a", Fallbacks: []string{"c", "b"}, Reason: policy.ReasonPrefix,
		UncachedTokens: 50, PrefillWork: 4050, PredictedTTFT: 4.05}
	got := c.CheckRouted(linear{}, Interactive, eps, &d, 200, "", t0)
	if !got.Admit {
		t.Fatalf("b could take it in 0.3 s: %+v", got)
	}
	want := policy.Decision{Endpoint: "b", Fallbacks: []string{"a", "c"}, Reason: policy.ReasonPrefix,
		UncachedTokens: 200, PrefillWork: 300, PredictedTTFT: 0.3}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("decision %+v, want %+v (c, 2.2 s, refused too; charged the whole prompt on b)", d, want)
	}
	// Batch requests are held to half the bound: b's 0.3 s still fits.
	d = policy.Decision{Endpoint: "a", Fallbacks: []string{"c"}, PrefillWork: 4050, PredictedTTFT: 4.05}
	got = c.CheckRouted(linear{}, Batch, eps, &d, 200, "", t0)
	if got.Admit || got.Reason != ReasonTTFT || math.Abs(got.Value-4.05) > 1e-9 || d.Endpoint != "a" {
		t.Fatalf("no fallback within the bound: %+v, decision %+v; want the first refusal, decision kept", got, d)
	}
}

func TestCheckRoutedFleetQueueTriesNoFallback(t *testing.T) {
	c := New(Config{TTFTBound: time.Second, FleetQueueCap: 4}, t0)
	eps := fleet([2]int{3, 10}, [2]int{1, 10})
	d := policy.Decision{Endpoint: "a", Fallbacks: []string{"b"}, PrefillWork: 20, PredictedTTFT: 0.02}
	if got := c.CheckRouted(linear{}, Interactive, eps, &d, 10, "", t0); got.Admit || got.Reason != ReasonFleetQueue || d.Endpoint != "a" {
		t.Fatalf("fleet queue full: %+v, decision %+v", got, d)
	}
	// No endpoint chosen (none ready): admitted, and routing answers it.
	d = policy.Decision{}
	if got := c.CheckRouted(linear{}, Interactive, eps, &d, 10, "", t0); !got.Admit {
		t.Fatalf("no decision: %+v", got)
	}
}

func TestCheckEarlyShedsOnlyWhenNoQueueFits(t *testing.T) {
	c := New(Config{TTFTBound: time.Second, FleetQueueCap: -1}, t0)
	eps := fleet([2]int{3, 4000}, [2]int{2, 900})
	if d := c.CheckEarly(linear{}, Interactive, eps, t0); !d.Admit {
		t.Fatalf("b's queue is 0.9 s: %+v", d)
	}
	eps[1].Load.QueuedPrefillTokens = 1500
	if d := c.CheckEarly(linear{}, Interactive, eps, t0); d.Admit || d.Reason != ReasonTTFT || math.Abs(d.Value-1.5) > 1e-9 {
		t.Fatalf("every queue past the bound: %+v, want the shortest, 1.5 s", d)
	}
	// An unready endpoint's empty queue does not count.
	eps = append(eps, policy.Endpoint{Name: "z"})
	if d := c.CheckEarly(linear{}, Interactive, eps, t0); d.Admit {
		t.Fatalf("unready endpoint admitted the request: %+v", d)
	}
}

// The policy's view carries what the scrape says the engine runs and how full its cache is, so
// the slot wait of a full engine is priced from the proxy and the simulation alike.
func TestCheckRoutedReadsAFullCache(t *testing.T) {
	c := New(Config{TTFTBound: 5 * time.Second, FleetQueueCap: -1}, t0)
	now := warm(t, c, Endpoint{Name: "a"}, 2)
	eps := fleet([2]int{70, 100})
	eps[0].Load.Running, eps[0].Load.KVUsage = 40, 0.5
	d := policy.Decision{Endpoint: "a", PrefillWork: 200, PredictedTTFT: 0.2}
	if got := c.CheckRouted(linear{}, Interactive, eps, &d, 100, "", now); !got.Admit {
		t.Fatalf("room in the cache: %+v", got)
	}
	eps[0].Load.KVUsage = 0.95 // 31 ahead of it at 2/s
	if got := c.CheckRouted(linear{}, Interactive, eps, &d, 100, "", now); got.Admit || got.Value < 15 {
		t.Fatalf("full cache: %+v, want a slot wait over 15 s", got)
	}
}
