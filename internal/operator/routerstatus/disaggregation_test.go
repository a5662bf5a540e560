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
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/routerapi"
)

// pdDoc is a fleet of two prefill engines (hit rates 0.9 and 0.5, one data-parallel rank 1 that
// must not count twice) and one decode engine without queries.
func pdDoc() *routerapi.Status {
	d := doc(4, 0.6, 0)
	d.Endpoints[0].Role, d.Endpoints[0].Engine.HitRate = RolePrefill, 0.9
	d.Endpoints[1].Role, d.Endpoints[1].Engine.HitRate = RolePrefill, 0.5
	d.Endpoints[2].Role, d.Endpoints[2].Rank, d.Endpoints[2].Engine.HitRate = RolePrefill, 1, 0.0
	d.Endpoints[3].Role, d.Endpoints[3].Engine.HitRateValid = RoleDecode, false
	d.Disaggregation = &routerapi.Disaggregation{Mode: "Threshold", ThresholdTokens: 2048, SplitRequests: 10, WholeRequests: 30,
		SplitShare: 0.25, Fallbacks: 2, Pools: map[string]routerapi.Pool{
			RolePrefill: {Engines: 2, ReadyEngines: 2, InFlight: 4, QueuedPrefillTokens: 9000},
			RoleDecode:  {Engines: 1, ReadyEngines: 1, InFlight: 12},
		}}
	return d
}

func TestApplyDisaggregation(t *testing.T) {
	// The reconciler's replica counts are on the status already and must survive.
	st := &v1alpha1.KVRouterStatus{Disaggregation: &v1alpha1.DisaggregationStatus{Pools: v1alpha1.DisaggregationPools{
		Prefill: v1alpha1.PoolStatus{Desired: 2, Ready: 2}, Decode: v1alpha1.PoolStatus{Desired: 1, Ready: 0}}}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	Apply(st, 7, want, pdDoc(), now, &Memo{}, DefaultThresholds())
	got := st.Disaggregation
	wantPD := &v1alpha1.DisaggregationStatus{Mode: "Threshold", SplitShare: "25.0%", SplitRequests: 10, WholeRequests: 30, Fallbacks: 2,
		Pools: v1alpha1.DisaggregationPools{
			Prefill: v1alpha1.PoolStatus{Desired: 2, Ready: 2, HitRate: "70.0%", QueuedPrefillTokens: 9000, InFlight: 4},
			Decode:  v1alpha1.PoolStatus{Desired: 1, Ready: 0, InFlight: 12},
		}}
	if got == nil || *got != *wantPD {
		t.Fatalf("disaggregation = %+v, want %+v", got, wantPD)
	}
	if st.Endpoints[0].Role != RolePrefill || st.Endpoints[3].Role != RoleDecode {
		t.Errorf("endpoint roles %q, %q", st.Endpoints[0].Role, st.Endpoints[3].Role)
	}

	// The router stops reporting a split (the spec dropped it): the router's figures go, the
	// replica counts stay until the reconciler removes the section.
	d := pdDoc()
	d.Disaggregation = nil
	Apply(st, 7, want, d, now.Add(time.Second), &Memo{}, DefaultThresholds())
	if got := st.Disaggregation; got == nil || got.Mode != "" || got.SplitShare != "" || got.Pools.Prefill.HitRate != "" ||
		got.Pools.Prefill.Desired != 2 {
		t.Errorf("after the router stopped reporting: %+v", got)
	}

	// An aggregated fleet never grows the section.
	agg := &v1alpha1.KVRouterStatus{}
	Apply(agg, 7, want, doc(2, 0.5, 0), now, &Memo{}, DefaultThresholds())
	if agg.Disaggregation != nil {
		t.Errorf("aggregated fleet: disaggregation = %+v", agg.Disaggregation)
	}
}
