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

package epp_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/internal/router/disagg"
	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/epp/epptest"
	"github.com/kvrouter/kvrouter/internal/router/proxy"
)

// A split request goes to the decode engine, the prefill engine named in llm-d's
// routing-sidecar header for the sidecar in front of it; a whole one names none, whatever
// the client sent.
func TestSplitNamesPrefiller(t *testing.T) {
	p, d := newEngine(t, "p0"), newEngine(t, "d0")
	eps := []discovery.Endpoint{{Name: "p0", URL: p.URL, Ready: true, Role: discovery.RolePrefill},
		{Name: "d0", URL: d.URL, Ready: true, Role: discovery.RoleDecode}}
	for _, tc := range []struct {
		mode  disagg.Mode
		split bool
	}{{disagg.Always, true}, {disagg.Never, false}} {
		r := newRouter(t, proxy.Config{PD: proxy.PDConfig{Mode: tc.mode, WholeOn: proxy.WholeOnDecode}}, eps, false)
		g := startPicker(t, r).gateway(t, epptest.FullDuplex)
		// A client's own prefiller header never reaches the engine's sidecar: only the picker
		// names a prefill engine.
		resp, _ := post(t, g.URL+"/v1/completions", completion("a prompt to split", true),
			http.Header{proxy.PrefillerHeader: {"192.0.2.1:80"}})
		if resp.StatusCode != 200 || resp.Header.Get(proxy.EndpointHeader) != "d0" {
			t.Fatalf("%s: %d, endpoint %q", tc.mode, resp.StatusCode, resp.Header.Get(proxy.EndpointHeader))
		}
		d.mu.Lock()
		got := d.lastPrefiller
		d.mu.Unlock()
		want, wantName := "", ""
		if tc.split {
			want, wantName = p.addr(), "p0"
		}
		if got != want || resp.Header.Get(proxy.PrefillEndpointHeader) != wantName {
			t.Fatalf("%s: prefiller header %q (want %q), response names %q", tc.mode, got, want, resp.Header.Get(proxy.PrefillEndpointHeader))
		}
		if p.requests.Load() != 0 {
			t.Fatalf("the picker itself sent a request to the prefill engine")
		}
		eventually(t, "both legs released", func() bool {
			return r.tracker.Stats("p0").InFlight == 0 && r.tracker.Stats("d0").InFlight == 0
		})
		// Nor do a client's own kv_transfer_params reach the engine: only the router drives
		// the connector.
		own := `{"model":"m","prompt":"own params","kv_transfer_params":{"do_remote_decode":true,"remote_host":"192.0.2.9"}}`
		if resp, _ := post(t, g.URL+"/v1/completions", own, nil); resp.StatusCode != 200 {
			t.Fatalf("%s: own params: %d", tc.mode, resp.StatusCode)
		}
		d.mu.Lock()
		got = d.lastBody
		d.mu.Unlock()
		if strings.Contains(got, "kv_transfer_params") || !strings.Contains(got, "own params") {
			t.Fatalf("%s: the engine got %s", tc.mode, got)
		}
	}
}

// The response names the prefill engine only when the sidecar in front of the decode engine
// says it ran the prefill leg: one whose leg failed served the request whole.
func TestSplitNamedOnlyWhenSidecarSplit(t *testing.T) {
	p, d := newEngine(t, "p0"), newEngine(t, "d0")
	d.prefillFails.Store(true)
	eps := []discovery.Endpoint{{Name: "p0", URL: p.URL, Ready: true, Role: discovery.RolePrefill},
		{Name: "d0", URL: d.URL, Ready: true, Role: discovery.RoleDecode}}
	r := newRouter(t, proxy.Config{PD: proxy.PDConfig{Mode: disagg.Always, WholeOn: proxy.WholeOnDecode}}, eps, false)
	g := startPicker(t, r).gateway(t, epptest.FullDuplex)
	resp, _ := post(t, g.URL+"/v1/completions", completion("a prompt to split", true), nil)
	d.mu.Lock()
	named := d.lastPrefiller
	d.mu.Unlock()
	if resp.StatusCode != 200 || named != p.addr() {
		t.Fatalf("%d, prefiller %q: want a split request to d0 naming %s", resp.StatusCode, named, p.addr())
	}
	if got := resp.Header.Get(proxy.PrefillEndpointHeader); got != "" {
		t.Fatalf("the sidecar served it whole, the response names prefill engine %q", got)
	}
	if resp.Header.Get(proxy.EndpointHeader) != "d0" {
		t.Fatalf("endpoint %q", resp.Header.Get(proxy.EndpointHeader))
	}
}

// With a destination port, the Gateway is sent to the pd-sidecar's port on the engine's host,
// and the prefill engine it is told of keeps the engine's own port, which the sidecar calls.
func TestDestinationPortNamesTheSidecar(t *testing.T) {
	p, d, sidecar := newEngine(t, "p0"), newEngine(t, "d0"), newEngine(t, "sidecar")
	_, port, err := net.SplitHostPort(sidecar.addr())
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	eps := []discovery.Endpoint{{Name: "p0", URL: p.URL, Ready: true, Role: discovery.RolePrefill},
		{Name: "d0", URL: d.URL, Ready: true, Role: discovery.RoleDecode}}
	r := newRouter(t, proxy.Config{PD: proxy.PDConfig{Mode: disagg.Always, WholeOn: proxy.WholeOnDecode}, DestinationPort: n}, eps, false)
	var served []string
	var mu sync.Mutex
	pk := startPicker(t, r)
	g := httptest.NewServer(&epptest.Gateway{Client: pk.client(epptest.FullDuplex), Served: func(_ *http.Request, _ []string, s string) {
		mu.Lock()
		served = append(served, s)
		mu.Unlock()
	}})
	t.Cleanup(g.Close)
	resp, _ := post(t, g.URL+"/v1/completions", completion("a prompt to split", true), nil)
	if resp.StatusCode != 200 || resp.Header.Get(proxy.EndpointHeader) != "d0" || resp.Header.Get(proxy.PrefillEndpointHeader) != "p0" {
		t.Fatalf("%d, endpoint %q, prefill %q", resp.StatusCode, resp.Header.Get(proxy.EndpointHeader), resp.Header.Get(proxy.PrefillEndpointHeader))
	}
	sidecar.mu.Lock()
	dest, prefiller := sidecar.lastDest, sidecar.lastPrefiller
	sidecar.mu.Unlock()
	if sidecar.requests.Load() != 1 || d.requests.Load() != 0 || p.requests.Load() != 0 {
		t.Fatalf("requests: sidecar port %d, decode engine port %d, prefill engine %d; want the sidecar port only",
			sidecar.requests.Load(), d.requests.Load(), p.requests.Load())
	}
	if dest != sidecar.addr() || prefiller != p.addr() {
		t.Fatalf("destination %q (want %s), prefiller %q (want the engine's own %s)", dest, sidecar.addr(), prefiller, p.addr())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(served) != 1 || served[0] != sidecar.addr() {
		t.Fatalf("served on %v", served)
	}
	eventually(t, "both legs released", func() bool {
		return r.tracker.Stats("p0").InFlight == 0 && r.tracker.Stats("d0").InFlight == 0
	})
}
