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

package exported

import (
	"strings"
	"testing"
)

// The router's disaggregation metrics are registered as cmd/router builds it, under the names
// docs/router.md lists, and every router metric follows the naming the dashboards rely on.
func TestRouterMetricNames(t *testing.T) {
	names := RouterMetrics(t)
	for _, n := range []string{"kvrouter_pd_requests_total", "kvrouter_pd_fallbacks_total",
		"kvrouter_pd_prefill_leg_duration_seconds", "kvrouter_pd_transfer_seconds"} {
		if !names[n] {
			t.Errorf("%s is not registered", n)
		}
	}
	for n := range names {
		if strings.HasPrefix(n, "go_") || strings.HasPrefix(n, "process_") {
			continue
		}
		if !strings.HasPrefix(n, "kvrouter_") {
			t.Errorf("%s: router metrics are named kvrouter_*", n)
		}
	}
}
