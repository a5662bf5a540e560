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

	"github.com/kvrouter/kvrouter/internal/router/discovery"
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
	rt := func(hp string) *route { return &route{hostport: hp} }
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
