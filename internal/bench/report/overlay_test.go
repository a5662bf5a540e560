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

package report

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
)

func TestOverlayReplacesOnlyThePoliciesRunAgain(t *testing.T) {
	full := seeded("w", run("kvrouter", 10, 1, 100, 1), run("round-robin", 10, 1, 50, 2), run("dynamo", 10, 1, 90, 1.5))
	full.Policies = []metrics.Result{{Policy: "kvrouter", Rate: 10}, {Policy: "dynamo", Rate: 10}}
	other := seeded("v", run("kvrouter", 10, 1, 7, 1))
	again := seeded("w", run("kvrouter", 10, 1, 120, 0.8))
	got := Overlay([]*Report{full, other}, []*Report{again})
	if len(got) != 3 {
		t.Fatalf("reports: %d", len(got))
	}
	w := got[0]
	if len(w.Runs) != 2 || w.Runs[0].Policy != "round-robin" || w.Runs[1].Policy != "dynamo" {
		t.Errorf("w's runs: %+v", w.Runs)
	}
	if len(w.Policies) != 1 || w.Policies[0].Policy != "dynamo" {
		t.Errorf("w's headline: %+v", w.Policies)
	}
	if got[1] != other || got[2] != again {
		t.Error("a workload the overlay lacks must stay as it was, and the overlay be added")
	}
	if len(full.Runs) != 3 {
		t.Error("the base report was changed")
	}
	// The overlaid run is judged, not refused as a duplicate, and kvrouter's figure is the new one.
	v, err := ComputeVerdict(Overlay([]*Report{full}, []*Report{again}), nil, VerdictOptions{Criteria: DefaultCriteria(),
		Family: func(p string) string {
			return map[string]string{"dynamo": "dynamo", "round-robin": "baseline", "kvrouter": "kvrouter"}[p]
		}})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Rows) != 1 || v.Rows[0].Goodput.Median != 120 {
		t.Fatalf("verdict: %+v", v.Rows)
	}
	if _, err := ComputeVerdict([]*Report{full, again}, nil, VerdictOptions{Criteria: DefaultCriteria()}); err == nil {
		t.Fatal("without the overlay the same policy twice must be refused")
	}
}
