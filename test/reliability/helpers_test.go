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

// Package reliability proves the router's promises under faults, load and bad input, end to end
// on loopback: real vllm-sim engines and a real router (test/fleettest starts them). Every
// test drives a known load, classifies each request's outcome (fleettest.Outcome: completed,
// clear error, lost), requires zero lost, and then checks that the router's index agrees with
// what the engines hold (fleettest.CheckConsistent). docs/reliability.md has the figures.
// -short skips everything here.
package reliability

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/routerapi"
	"github.com/kvrouter/kvrouter/test/fleettest"
)

var (
	soakFor  = flag.Duration("soak", envDuration("KVROUTER_SOAK", 20*time.Second), "soak test duration (env KVROUTER_SOAK)")
	churnFor = flag.Duration("churn", envDuration("KVROUTER_CHURN", 10*time.Second), "endpoint churn duration (env KVROUTER_CHURN)")
)

func envDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

func TestMain(m *testing.M) { fleettest.Main(m) }

// fleet starts n engines named e0, e1, ... with extra vllm-sim flags.
func fleet(t *testing.T, n int, timeScale string, extra ...string) []*fleettest.Engine {
	t.Helper()
	var es []*fleettest.Engine
	for i := range n {
		es = append(es, fleettest.StartEngine(t, fmt.Sprintf("e%d", i), timeScale, extra...))
	}
	return es
}

// fleetBehindRouter starts n engines and a router over them (routerArgs add router flags), and
// waits until the router follows every engine's events.
func fleetBehindRouter(t *testing.T, n int, timeScale string, routerArgs ...string) ([]*fleettest.Engine, *fleettest.Router) {
	t.Helper()
	es := fleet(t, n, timeScale)
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, es), routerArgs...)
	r.WaitConnected(t, n)
	return es, r
}

// endpointsOf returns the endpoint rows of the router's status by name.
func endpointsOf(st routerapi.Status) map[string]routerapi.Endpoint {
	out := map[string]routerapi.Endpoint{}
	for _, e := range st.Endpoints {
		out[e.Name] = e
	}
	return out
}

// degraded reports whether the status lists a degradation of type typ.
func degraded(st routerapi.Status, typ string) bool {
	for _, d := range st.Degradations {
		if d.Type == typ {
			return true
		}
	}
	return false
}

// report logs a fault test's figures in the form docs/reliability.md quotes.
func report(t *testing.T, tally *fleettest.Tally, extra ...string) {
	t.Helper()
	t.Logf("%s: %s", t.Name(), tally)
	for _, e := range extra {
		t.Logf("%s: %s", t.Name(), e)
	}
}

func consistencyString(cs []fleettest.Consistency) string {
	var b []string
	for _, c := range cs {
		b = append(b, c.String())
	}
	return strings.Join(b, "; ")
}

// startLoad starts a closed-loop load of the shared-prefix workload through url.
func startLoad(url string, workers, maxTokens int) *fleettest.Load {
	l := &fleettest.Load{URL: url, Workers: workers, Work: fleettest.SharedPrefix(6, 300, 8, maxTokens)}
	l.Start()
	return l
}

func itoa[T ~int | ~uint64 | ~int64](v T) string { return fmt.Sprint(v) }
