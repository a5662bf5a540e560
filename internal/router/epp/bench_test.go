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
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	certutil "k8s.io/client-go/util/cert"

	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/epp"
	"github.com/kvrouter/kvrouter/internal/router/epp/epptest"
	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/router/proxy"
)

// BenchmarkDecisionLatency is the time from a request leaving its sender to an engine being
// named, for an 8K-token prompt (token ids in the JSON body, ~40 KB) over 16 endpoints of a real
// index where endpoint i holds the first 32·(i+1) of the prompt's 512 blocks. The three paths
// run interleaved, one request each per iteration, so that a busy machine slows them alike:
//
//   - epp: the router as an endpoint picker, driven as Envoy's ext_proc filter drives it (full
//     duplex, 16 KiB body chunks), until its answer to the headers names the engine;
//   - proxy: the router as a proxy, until the request has reached the engine it picked (a proxy
//     names its engine by sending the request there);
//   - plain: httputil.ReverseProxy in front of one engine, until the request has reached it: the
//     cost of forwarding a 40 KB body at all, which any gateway pays.
//
// The metrics are the p50 and p99 of each, and the ratios of the picker's to the proxy's.
// The EPP path still carries the request to its engine afterwards (through the gateway), and
// the proxy's figure includes that hop, so epp/proxy < 1 does not mean the gateway path is
// faster end to end: it means the decision is no slower to reach than the proxy's.
func BenchmarkDecisionLatency(b *testing.B) {
	// "tls" is the picker as the operator runs it (--grpc-tls: the gateway dials it over TLS).
	for _, tlsOn := range []bool{false, true} {
		name := "clear"
		if tlsOn {
			name = "tls"
		}
		b.Run(name, func(b *testing.B) { benchmarkDecisionLatency(b, tlsOn) })
	}
}

func benchmarkDecisionLatency(b *testing.B, tlsOn bool) {
	const blockSize, nEnd, nBlocks = 16, 16, 512
	prompt := make([]uint32, nBlocks*blockSize)
	ids := make([]string, len(prompt))
	for i := range prompt {
		prompt[i] = uint32(i*7919) % 151000
		ids[i] = fmt.Sprint(prompt[i])
	}
	body := []byte(`{"model":"m","prompt":[` + strings.Join(ids, ",") + `],"max_tokens":1}`)

	// arrived is when the last request reached an engine, whole.
	var arrived atomic.Int64
	engineMux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived.Store(time.Now().UnixNano())
		switch r.URL.Path {
		case "/v1/models":
			_, _ = io.WriteString(w, `{"data":[{"id":"m"}]}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"x","object":"text_completion","choices":[{"text":"ok"}]}`)
		}
	})
	ix := kvindex.New(kvindex.Config{BlockSize: blockSize})
	var eps []discovery.Endpoint
	for e := 0; e < nEnd; e++ {
		srv := httptest.NewServer(engineMux)
		b.Cleanup(srv.Close)
		name := fmt.Sprintf("engine-%02d", e)
		eps = append(eps, discovery.Endpoint{Name: name, URL: srv.URL, Ready: true})
		n := 32 * (e + 1)
		ev := kvevents.Event{Kind: kvevents.KindBlockStored, BlockSize: blockSize, TokenIDs: prompt[:n*blockSize]}
		for j := 0; j < n; j++ {
			ev.BlockHashes = append(ev.BlockHashes, uint64(e)<<32|uint64(j)+1)
		}
		ix.Apply(kvindex.SourceID{Endpoint: name}, &kvevents.Batch{Events: []kvevents.Event{ev}})
	}
	newRouter := func() *proxy.Server {
		s := proxy.New(proxy.Config{Model: "m", Policy: policy.Config{Kind: policy.Auto, BlockSize: blockSize}},
			logr.Discard(), ix, nil, loadsignal.NewTracker(), prometheus.NewRegistry())
		s.SetEndpoints(eps)
		return s
	}

	// The proxy and the picker are separate routers over the same index, so that neither's
	// in-flight accounting steers the other's picks.
	proxied := httptest.NewServer(newRouter().Handler())
	b.Cleanup(proxied.Close)
	target, _ := url.Parse(eps[0].URL)
	plain := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
	b.Cleanup(plain.Close)

	opts := epp.Options{}
	dial := epptest.Dial
	if tlsOn {
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("picker", nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			b.Fatal(err)
		}
		opts.TLS, dial = &tls.Config{Certificates: []tls.Certificate{cert}}, epptest.DialTLS
	}
	picker := epp.New(newRouter(), logr.Discard(), prometheus.NewRegistry(), opts)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- picker.Serve(ctx, lis) }()
	b.Cleanup(func() {
		cancel()
		<-served
	})
	client, conn, err := dial(lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	client.ChunkBytes = 16 << 10

	httpClient := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}}
	viaHTTP := func(base string) time.Duration {
		t0 := time.Now()
		resp, err := httpClient.Post(base+"/v1/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("HTTP %d", resp.StatusCode)
		}
		return time.Unix(0, arrived.Load()).Sub(t0)
	}
	header := http.Header{"Content-Type": {"application/json"}}
	viaEPP := func() time.Duration {
		t0 := time.Now()
		x, err := client.Start(context.Background(), epptest.Request{Method: http.MethodPost, Path: "/v1/completions",
			Authority: "gw", Header: header, Body: body})
		if err != nil {
			b.Fatal(err)
		}
		d := x.Decision
		if d.Immediate != nil || d.Destination == "" {
			b.Fatalf("no decision: %+v", d.Immediate)
		}
		// The response phase completes the router's accounting, as the gateway's would.
		if _, err := x.ResponseHeaders(http.StatusOK, http.Header{"Content-Type": {"application/json"}}, d.Destinations()[0], false); err != nil {
			b.Fatal(err)
		}
		if _, err := x.ResponseBody([]byte(`{"choices":[{"text":"ok"}]}`), true); err != nil {
			b.Fatal(err)
		}
		if err := x.Close(); err != nil {
			b.Fatal(err)
		}
		return d.At.Sub(t0)
	}
	// Warm connections, pools and the policy's first-request paths.
	for i := 0; i < 20; i++ {
		viaEPP()
		viaHTTP(proxied.URL)
		viaHTTP(plain.URL)
	}

	eppD := make([]time.Duration, 0, b.N)
	proxyD := make([]time.Duration, 0, b.N)
	plainD := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Rotate the order so that none of the three always follows another's garbage.
		for k := 0; k < 3; k++ {
			switch (i + k) % 3 {
			case 0:
				eppD = append(eppD, viaEPP())
			case 1:
				proxyD = append(proxyD, viaHTTP(proxied.URL))
			case 2:
				plainD = append(plainD, viaHTTP(plain.URL))
			}
		}
	}
	b.StopTimer()
	pct := func(d []time.Duration, q int) float64 {
		slices.Sort(d)
		return float64(d[(len(d)-1)*q/100].Nanoseconds()) / 1e6
	}
	e50, e99 := pct(eppD, 50), pct(eppD, 99)
	p50, p99 := pct(proxyD, 50), pct(proxyD, 99)
	b.ReportMetric(e50, "epp-p50-ms")
	b.ReportMetric(e99, "epp-p99-ms")
	b.ReportMetric(p50, "proxy-p50-ms")
	b.ReportMetric(p99, "proxy-p99-ms")
	b.ReportMetric(pct(plainD, 50), "plain-p50-ms")
	b.ReportMetric(pct(plainD, 99), "plain-p99-ms")
	b.ReportMetric(e50/p50, "epp/proxy-p50")
	b.ReportMetric(e99/p99, "epp/proxy-p99")
}
