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

package proxy

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/router/disagg"
	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/policy"
)

// Engines are named by a gateway as host:port; a URL without a port has its scheme's.
func TestAddresses(t *testing.T) {
	for raw, want := range map[string]string{
		"http://10.0.0.7:8000":       "10.0.0.7:8000",
		"http://10.0.0.7":            "10.0.0.7:80",
		"https://engine.example/v1/": "engine.example:443",
		"http://[fd00::7]:8000":      "[fd00::7]:8000",
		"not a url":                  "",
	} {
		if got := urlHostPort(raw); got != want {
			t.Errorf("%s: %q, want %q", raw, got, want)
		}
	}
	rt := func(hp string) *route { return &route{hostport: hp, dest: hp} }
	allow := subsetFilter([]string{" 10.0.0.7:8000", "fd00::9", "[fd00::8]", "[fd00::7]:8001", ""})
	for hp, want := range map[string]bool{
		"10.0.0.7:8000": true, "10.0.0.7:8001": false, "[fd00::9]:1": true, "[fd00::8]:8000": true,
		"[fd00::7]:8001": true, "[fd00::7]:8000": false,
	} {
		if allow(rt(hp)) != want {
			t.Errorf("subset allows %s: %v, want %v", hp, !want, want)
		}
	}
	if none := subsetFilter([]string{}); none == nil || none(rt("10.0.0.7:8000")) {
		t.Error("an empty subset must allow nothing")
	}
	if subsetFilter(nil) != nil {
		t.Error("no subset must allow everything")
	}
	for _, c := range []struct {
		method, path string
		want         bool
	}{
		{"POST", "/v1/completions", true}, {"POST", "/v1/chat/completions?stream=1", true},
		{"POST", "//v1/completions", false}, {"POST", "/v1/completions/", false}, {"GET", "/v1/completions", false}, {"GET", "/v1/models", false},
		{"POST", "/v1/embeddings", false},
	} {
		if NeedsBody(c.method, c.path) != c.want {
			t.Errorf("NeedsBody(%s %s) = %v", c.method, c.path, !c.want)
		}
	}
}

// A gateway that served a request on a data-parallel engine's address charges the rank the
// request asked for when that engine has it, and the served route is what the flight names.
func TestFlightServedOnAnotherRank(t *testing.T) {
	e0, dp := newFakeEngine(t, "e0"), newFakeEngine(t, "dp")
	h := newHarness(t, Config{Model: "m", Policy: policy.Config{Kind: policy.RoundRobin}}, nil, e0)
	h.srv.SetEndpoints([]discovery.Endpoint{{Name: "e0", URL: e0.URL, Ready: true},
		{Name: "dp", URL: dp.URL, Ready: true, DPRanks: 2}})
	dpAddr := strings.TrimPrefix(dp.URL, "http://")
	for range 3 {
		f, ref := h.srv.Pick(context.Background(), PickInput{Method: http.MethodPost, Path: "/v1/completions",
			Header: http.Header{}, Body: []byte(`{"model":"m","prompt":"hello","stream":true}`)})
		if ref != nil {
			t.Fatalf("refused: %d %s", ref.Status, ref.Body)
		}
		picked := f.Endpoint()
		moved := f.Served(dpAddr)
		switch {
		case strings.HasPrefix(picked, "dp/"):
			if moved || f.Endpoint() != picked {
				t.Fatalf("served where picked (%s): moved to %s", picked, f.Endpoint())
			}
		case !moved || f.Endpoint() != "dp/dp0":
			t.Fatalf("picked %s, served on dp: charged %s (moved %v)", picked, f.Endpoint(), moved)
		}
		if st := h.tracker.Stats(f.Endpoint()); st.InFlight != 1 {
			t.Fatalf("%s: %+v", f.Endpoint(), st)
		}
		f.ResponseHeaders(200)
		f.ResponseBody([]byte("data: x\n\n"), false)
		f.ResponseBody(nil, true)
		f.Done() // idempotent
		if st := h.tracker.Stats(f.Endpoint()); st.InFlight != 0 {
			t.Fatalf("after the end, %s: %+v", f.Endpoint(), st)
		}
	}
	if n := counterValue(t, h.srv.metrics.requests.WithLabelValues("dp/dp0", "200")); n < 1 {
		t.Fatalf("answers on dp/dp0: %v", n)
	}
}

// With a destination port, the gateway is sent to each engine's host on that port (the
// pd-sidecar in front of it), and its subset hint and served address are read there; the
// prefill engine named for the sidecar keeps the engine's own port, which the sidecar calls.
func TestDestinationPort(t *testing.T) {
	p, d := newPDEngine(t, "p0", discovery.RolePrefill), newPDEngine(t, "d0", discovery.RoleDecode)
	// The prefill engine is named on 127.0.0.2 so that the two engines' hosts differ, as pods'
	// IPs do: on one host they would share the destination. (Nothing here dials it.)
	s := New(Config{PD: PDConfig{Mode: disagg.Always}, Policy: configBlock4(), DestinationPort: 8200},
		logr.Discard(), nil, nil, loadsignal.NewTracker(), prometheus.NewRegistry())
	pURL := strings.Replace(p.URL, "127.0.0.1", "127.0.0.2", 1)
	s.SetEndpoints([]discovery.Endpoint{{Name: "p0", URL: pURL, Ready: true, Role: discovery.RolePrefill},
		{Name: "d0", URL: d.URL, Ready: true, Role: discovery.RoleDecode}})
	pick := func(subset []string) (*Flight, *Refusal) {
		return s.Pick(context.Background(), PickInput{Method: http.MethodPost, Path: "/v1/completions",
			Header: http.Header{}, Body: []byte(pdStream), Subset: subset})
	}
	f, ref := pick(nil)
	if ref != nil {
		t.Fatalf("refused: %d %s", ref.Status, ref.Body)
	}
	if len(f.Destinations) == 0 || f.Destinations[0] != "127.0.0.1:8200" {
		t.Fatalf("destinations %v, want the decode engine's host on port 8200 first", f.Destinations)
	}
	if got := f.SetHeaders.Get(PrefillerHeader); got != urlHostPort(pURL) {
		t.Fatalf("prefiller %q, want the prefill engine's own address %s", got, urlHostPort(pURL))
	}
	// Served where picked, on the destination port: nothing moves.
	if f.Served("127.0.0.1:8200") || f.Endpoint() != "d0" {
		t.Fatalf("served on the picked destination: charged %s", f.Endpoint())
	}
	// The engine's own port is not an address the gateway uses: not recognised.
	if f.Served(urlHostPort(d.URL)) || f.Endpoint() != "d0" {
		t.Fatalf("served on the engine port: charged %s", f.Endpoint())
	}
	f.Done()
	// Served on the other engine's destination: the accounting moves there.
	if f, ref = pick(nil); ref != nil || !f.Served("127.0.0.2:8200") || f.Endpoint() != "p0" {
		t.Fatalf("served on the prefill engine's destination: charged %s", f.Endpoint())
	}
	f.Done()
	// The gateway's subset names the sidecar addresses: the hint is honoured.
	// Only the prefill engine is eligible: no decode engine, so it is served whole there.
	f, ref = pick([]string{"127.0.0.2:8200"})
	if ref != nil {
		t.Fatalf("subset on the destination port refused: %d %s", ref.Status, ref.Body)
	}
	if f.Destinations[0] != "127.0.0.2:8200" || f.Endpoint() != "p0" {
		t.Fatalf("subset of the prefill engine: destinations %v, endpoint %s", f.Destinations, f.Endpoint())
	}
	f.Done()
	if _, ref = pick([]string{urlHostPort(d.URL)}); ref == nil || ref.Status != http.StatusServiceUnavailable {
		t.Fatalf("a subset on the engine port matched an engine the gateway reaches on another")
	}
	// Without the port, destinations are the engines' own addresses.
	s2 := New(Config{PD: PDConfig{Mode: disagg.Always}, Policy: configBlock4()},
		logr.Discard(), nil, nil, loadsignal.NewTracker(), prometheus.NewRegistry())
	s2.SetEndpoints([]discovery.Endpoint{{Name: "p0", URL: pURL, Ready: true, Role: discovery.RolePrefill},
		{Name: "d0", URL: d.URL, Ready: true, Role: discovery.RoleDecode}})
	f, ref = s2.Pick(context.Background(), PickInput{Method: http.MethodPost, Path: "/v1/completions",
		Header: http.Header{}, Body: []byte(pdStream)})
	if ref != nil || f.Destinations[0] != urlHostPort(d.URL) {
		t.Fatalf("no destination port: %v %v", f, ref)
	}
	f.Done()
}
