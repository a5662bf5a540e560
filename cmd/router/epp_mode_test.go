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

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvrouter/kvrouter/internal/router/epp/epptest"
	"github.com/kvrouter/kvrouter/internal/router/epp/protocol"
)

// freePorts reserves n loopback ports and releases them for the test to listen on.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// In epp mode the router answers ext_proc and gRPC health, serves its admin port, and has no
// HTTP inference listener; it stops when its context ends. With --grpc-tls the ext_proc port
// speaks TLS only (a self-signed certificate, which gateways do not verify), and the health port
// stays in clear text for the kubelet.
func TestEPPModeRun(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tlsOn), func(t *testing.T) { testEPPModeRun(t, tlsOn) })
	}
}

func testEPPModeRun(t *testing.T, tlsOn bool) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			_, _ = io.WriteString(w, "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n")
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer engine.Close()
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(file, []byte("endpoints:\n  - name: e0\n    url: "+engine.URL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 4)
	o, err := parseFlags(strings.Fields(fmt.Sprintf("--mode epp --host 127.0.0.1 --port %d --grpc-port %d --grpc-health-port %d "+
		"--admin-addr 127.0.0.1:%d --endpoints-file %s --no-kv-events --scrape-interval 100ms --shutdown-grace 2s --log-level error --grpc-tls=%v",
		ports[0], ports[1], ports[2], ports[3], file, tlsOn)), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, o) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not return after its context ended")
		}
	}()

	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", ports[2]), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthgrpc.NewHealthClient(conn)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := health.Check(context.Background(), &healthgrpc.HealthCheckRequest{Service: protocol.ReadinessService})
		if err == nil && resp.GetStatus() == healthgrpc.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readiness: %v %v", resp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	dial, wrong := epptest.Dial, epptest.DialTLS
	if tlsOn {
		dial, wrong = epptest.DialTLS, epptest.Dial
	}
	// A client that speaks the other protocol gets no decision.
	wc, wconn, err := wrong(fmt.Sprintf("127.0.0.1:%d", ports[1]))
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	if _, err := wc.Start(ctx2, epptest.Request{Method: "GET", Path: "/v1/models"}); err == nil {
		t.Errorf("a client dialling with tls=%v got a decision from a picker with tls=%v", !tlsOn, tlsOn)
	}
	cancel2()
	wconn.Close()
	client, pconn, err := dial(fmt.Sprintf("127.0.0.1:%d", ports[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer pconn.Close()
	x, err := client.Start(context.Background(), epptest.Request{Method: "GET", Path: "/v1/models"})
	if err != nil {
		t.Fatal(err)
	}
	_ = x.Close()
	if want := strings.TrimPrefix(engine.URL, "http://"); x.Decision.Destination != want {
		t.Fatalf("decision %+v, want %s", x.Decision, want)
	}
	if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0])); err == nil {
		c.Close()
		t.Fatal("epp mode listens on --port")
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[3]))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "kvrouter_epp_requests_total") {
		t.Fatal("the admin port's /metrics has no kvrouter_epp_ metrics")
	}
}
