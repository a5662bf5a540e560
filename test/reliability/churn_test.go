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
	"path/filepath"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/routerapi"
	"github.com/kvrouter/kvrouter/test/fleettest"
)

// idleGoroutines is the router's goroutine count once the load's connections are closed and
// the router has let go of them, less those of its pooled engine connections (see
// fleettest.Router.Goroutines), and the number of those.
func idleGoroutines(t *testing.T, r *fleettest.Router, l *fleettest.Load) (own, pooled int) {
	t.Helper()
	l.Client.CloseIdleConnections()
	time.Sleep(500 * time.Millisecond)
	total, pooled := r.Goroutines(t)
	return total - pooled, pooled
}

// Endpoint churn: every second the endpoints file adds or removes an engine, under a new name
// each time it comes back (as a re-created pod would), for -churn (CI: 10 s; make soak: 60 s).
// Requests never get lost, the router ends with exactly one subscriber and one index source per
// listed endpoint (nothing left behind by the removed names), its goroutines come back to where
// they were, and the index agrees with the engines.
func TestEndpointChurn(t *testing.T) {
	fleettest.NeedBinaries(t)
	es := fleet(t, 4, "1")
	stable, churned := es[:3], es[3]
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	fleettest.ReplaceFile(t, file, fleettest.EndpointsYAML(stable))
	r := fleettest.StartRouter(t, file)
	r.WaitConnected(t, 3)

	// Baseline: the same load, then idle.
	warm := startLoad(r.URL, 12, 8)
	time.Sleep(time.Second)
	warm.Stop().AssertNoneLost(t)
	base, basePool := idleGoroutines(t, r, warm)

	load := startLoad(r.URL, 12, 8)
	listed := stable
	changes, peak := 0, 0
	end := time.Now().Add(*churnFor)
	for gen := 0; time.Now().Before(end); gen++ {
		time.Sleep(time.Second)
		if gen%2 == 0 {
			// The churned engine comes back as a new pod: same address, new name.
			back := *churned
			back.Name = fmt.Sprintf("e3-g%d", gen)
			listed = append(stable[:3:3], &back)
		} else {
			listed = stable
		}
		fleettest.ReplaceFile(t, file, fleettest.EndpointsYAML(listed))
		changes++
		total, _ := r.Goroutines(t)
		peak = max(peak, total)
	}
	names := map[string]bool{}
	for _, e := range listed {
		names[e.Name] = true
	}
	r.WaitStatus(t, "last endpoints file applied", func(st routerapi.Status) bool {
		if len(st.Endpoints) != len(listed) {
			return false
		}
		for _, e := range st.Endpoints {
			if !names[e.Name] || !e.Ready || e.Events == nil || !e.Events.Connected {
				return false
			}
		}
		return true
	})
	time.Sleep(time.Second)
	tally := load.Stop()
	tally.AssertNoneLost(t)
	after, afterPool := idleGoroutines(t, r, load)

	d := r.IndexDump(t)
	if len(d.Streams) != len(listed) {
		t.Errorf("%d subscribers for %d endpoints", len(d.Streams), len(listed))
	}
	for _, s := range d.Sources {
		if !names[s.Endpoint] {
			t.Errorf("index keeps source %s (%d blocks) of a removed endpoint", s.Endpoint, s.GPUBlocks)
		}
	}
	// A leaked subscriber costs several goroutines (its socket's reader and writer, the
	// subscriber loop): one per change would add dozens.
	if after > base+5 {
		t.Errorf("goroutines %d before the churn, %d after %d changes:\n%s", base, after, changes, r.GoroutineProfile(t))
	}
	cs := fleettest.CheckConsistent(t, r, listed)
	report(t, tally, consistencyString(cs), fmt.Sprintf(
		"%d endpoint changes in %v; router goroutines idle before %d (+%d for pooled engine connections), peak during %d in all, idle after %d (+%d); index sources after %d",
		changes, *churnFor, base, basePool, peak, after, afterPool, len(d.Sources)))
}
