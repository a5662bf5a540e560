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
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/kvrouter/kvrouter/internal/router/epp"
	"github.com/kvrouter/kvrouter/internal/router/epp/epptest"
	"github.com/kvrouter/kvrouter/internal/router/epp/protocol"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/router/proxy"
)

// The health services: liveness while the process runs; readiness and the ext_proc service
// while the router takes traffic (the ReadyGate lets it, an engine is ready), on the health port
// and on the ext_proc port alike; watchers hear the changes.
func TestHealthServices(t *testing.T) {
	e0 := newEngine(t, "e0")
	var gate atomic.Bool
	cfg := proxy.Config{ReadyGate: func() (bool, string) { return gate.Load(), "replaying the engines' KV events" }}
	r := newRouter(t, cfg, endpointsOf(e0), false)
	p := startPicker(t, r)
	var clients []healthgrpc.HealthClient
	for _, addr := range []string{p.healthAddr, p.addr} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		clients = append(clients, healthgrpc.NewHealthClient(conn))
	}
	check := func(c healthgrpc.HealthClient, service string) healthgrpc.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := c.Check(context.Background(), &healthgrpc.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("%s: %v", service, err)
		}
		return resp.GetStatus()
	}
	const serving, notServing = healthgrpc.HealthCheckResponse_SERVING, healthgrpc.HealthCheckResponse_NOT_SERVING
	expect := func(when string, ready healthgrpc.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for i, c := range clients {
			if got := check(c, protocol.LivenessService); got != serving {
				t.Fatalf("%s, port %d: liveness %v", when, i, got)
			}
			for _, svc := range []string{protocol.ReadinessService, protocol.ExtProcService} {
				if got := check(c, svc); got != ready {
					t.Fatalf("%s, port %d: %s %v, want %v", when, i, svc, got, ready)
				}
			}
		}
	}

	watch, err := clients[0].Watch(context.Background(), &healthgrpc.HealthCheckRequest{Service: protocol.ReadinessService})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := watch.Recv(); err != nil || first.GetStatus() != notServing {
		t.Fatalf("watch: %v %v", first, err)
	}
	expect("index not replayed", notServing)
	gate.Store(true)
	expect("ready", serving)
	if next, err := watch.Recv(); err != nil || next.GetStatus() != serving {
		t.Fatalf("watch after the gate opened: %v %v", next, err)
	}
	eps := endpointsOf(e0)
	eps[0].Ready = false
	r.srv.SetEndpoints(eps)
	expect("no engine ready", notServing)
	if _, err := clients[0].Check(context.Background(), &healthgrpc.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown service: %v", err)
	}
}

// Every router replica holds the whole index (each subscribes to every engine) and is active:
// two pickers over the same fleet both answer, and place a held prefix on its holder alike.
func TestTwoReplicasBothAnswer(t *testing.T) {
	engines := []*engine{newEngine(t, "e0"), newEngine(t, "e1"), newEngine(t, "e2")}
	cfg := proxy.Config{Policy: policy.Config{Kind: policy.PrefixOnly}}
	var replicas []*router
	var gateways []string
	for range 2 {
		r := newRouter(t, cfg, endpointsOf(engines...), true)
		replicas = append(replicas, r)
		p := startPicker(t, r)
		gateways = append(gateways, p.gateway(t, epptest.FullDuplex).URL)
	}
	prompt := func(i int) string { return strconv.Itoa(i*104729) + strings.Repeat(" tokens", 6+i) }
	var wg sync.WaitGroup
	picks := make([][2]string, 12)
	for i := range picks {
		for k, g := range gateways {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, b := post(t, g+"/v1/completions", completion(prompt(i), i%2 == 0), nil)
				if resp.StatusCode != 200 {
					t.Errorf("replica %d, request %d: %d %s", k, i, resp.StatusCode, b)
				}
				picks[i][k] = resp.Header.Get(proxy.EndpointHeader)
			}()
		}
	}
	wg.Wait()
	held := 0
	for i, p := range picks {
		// Where the index says a prompt is held, both replicas send it there; the others are
		// placed by each replica's own view of the load.
		text := prompt(i)
		toks := make([]uint32, len(text))
		for j := range text {
			toks[j] = uint32(text[j])
		}
		m := replicas[0].idx.AppendLookupKeys(nil, kvindex.RequestKeys(nil, toks, 4, kvindex.KeyParams{}))
		if len(m) == 0 {
			continue
		}
		held++
		if p[0] != m[0].Source.Endpoint || p[1] != m[0].Source.Endpoint {
			t.Errorf("request %d held by %s: replica 0 picked %q, replica 1 %q", i, m[0].Source.Endpoint, p[0], p[1])
		}
	}
	if held < 4 {
		t.Fatalf("only %d of the prompts are held: the test says little", held)
	}
	for k, r := range replicas {
		if n := r.metric(t, "kvrouter_epp_requests_total", map[string]string{"outcome": "routed"}); n != float64(len(picks)) {
			t.Errorf("replica %d routed %v requests, want %d", k, n, len(picks))
		}
	}
}

// With client keys, the picker checks them as the proxy does (the same 401), and the engine
// gets the engines' key, or none, in place of the client's.
func TestClientAndEngineKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e0 := newEngine(t, "e0")
	for _, engineKey := range []string{"", "engine-secret"} {
		engineFile := ""
		if engineKey != "" {
			engineFile = write("engine", engineKey)
		}
		auth, err := proxy.LoadAuth(ctx, write("clients", "client-key\n"), engineFile, time.Hour, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		r := newRouter(t, proxy.Config{Auth: auth}, endpointsOf(e0), false)
		p := startPicker(t, r)
		c := p.client(epptest.FullDuplex)
		x, err := c.Start(ctx, epptest.Request{Method: "POST", Path: "/v1/completions", Body: []byte(completion("x", false))})
		if err != nil {
			t.Fatal(err)
		}
		_ = x.Close()
		im := x.Decision.Immediate
		if im == nil || im.Status != 401 || im.Header.Get("Www-Authenticate") != `Bearer realm="kvrouter"` ||
			!strings.Contains(string(im.Body), `"code":"invalid_api_key"`) {
			t.Fatalf("no key: %+v", x.Decision)
		}
		x, err = c.Start(ctx, epptest.Request{Method: "POST", Path: "/v1/completions", Body: []byte(completion("x", false)),
			Header: http.Header{"Authorization": {"Bearer client-key"}}})
		if err != nil {
			t.Fatal(err)
		}
		x.Abort()
		d := x.Decision
		switch {
		case d.Destination == "":
			t.Fatalf("with the key: %+v", d)
		case engineKey == "" && !slices.ContainsFunc(d.RemoveHeaders, func(h string) bool { return strings.EqualFold(h, "authorization") }):
			t.Fatalf("the client's key must not reach the engine: %+v", d)
		case engineKey != "" && d.SetHeaders.Get("Authorization") != "Bearer "+engineKey:
			t.Fatalf("the engine's key must replace the client's: %+v", d)
		}
	}
}

// --kv-cache-report-mode full rewrites the body the engine gets, in both body modes.
func TestReportModeRewritesTheBody(t *testing.T) {
	e0 := newEngine(t, "e0")
	r := newRouter(t, proxy.Config{ReportModeFull: true}, endpointsOf(e0), false)
	p := startPicker(t, r)
	for _, mode := range []epptest.Mode{epptest.FullDuplex, epptest.Buffered} {
		resp, body := post(t, p.gateway(t, mode).URL+"/v1/completions", completion("hello", false), nil)
		e0.mu.Lock()
		got, dest := e0.lastBody, e0.lastDest
		e0.mu.Unlock()
		if resp.StatusCode != 200 || !strings.Contains(got, `"kv_cache_report_mode":"full"`) || dest != e0.addr() {
			t.Fatalf("%v: %d %s; the engine got %q (destination header %q)", mode, resp.StatusCode, body, got, dest)
		}
	}
}

// Neither the prompt nor its token ids reach the logs, whatever the verbosity.
func TestNoPromptsInLogs(t *testing.T) {
	var mu sync.Mutex
	var logs strings.Builder
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		logs.WriteString(prefix + " " + args + "\n")
		mu.Unlock()
	}, funcr.Options{Verbosity: 10})
	e0, e1 := newEngine(t, "e0"), newEngine(t, "e1")
	srv := proxy.New(proxy.Config{Model: "m", Policy: policy.Config{BlockSize: 4}}, log, nil, nil, loadsignal.NewTracker(), prometheus.NewRegistry())
	srv.SetEndpoints(endpointsOf(e0, e1))
	p := servePicker(t, epp.New(srv, log, nil, epp.Options{ShutdownGrace: time.Second}))
	g := p.gateway(t, epptest.FullDuplex)
	for _, body := range []string{completion("the secret launch code is swordfish", true), tokenIDs([]int{987654, 876543, 765432}, false),
		chat("swordfish again", false), `{"model":"m","prompt":"swordfish",`} {
		_, _ = post(t, g.URL+"/v1/completions", body, nil)
	}
	x, err := p.client(epptest.FullDuplex).Start(context.Background(), epptest.Request{Method: "POST", Path: "/v1/completions",
		Body: []byte(completion("swordfish served elsewhere", false))})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = x.ResponseHeaders(200, nil, x.Decision.Destinations()[len(x.Decision.Destinations())-1], false)
	x.Abort()
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	out := logs.String()
	if !strings.Contains(out, "picked") {
		t.Fatalf("no decision logged at V(2): %s", out)
	}
	for _, secret := range []string{"swordfish", "987654", "876543"} {
		if strings.Contains(out, secret) {
			t.Fatalf("%q in the logs:\n%s", secret, out)
		}
	}
}
