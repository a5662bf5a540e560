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
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/test/fleettest"
)

// The end-to-end tests start vllm-sim and a router process; in -short mode nothing is built and
// they are skipped. `kvbench overhead` starts its plain proxy as `kvbench plainproxy`: the test
// binary serves that itself when asTestKvbench is set, rather than linking kvbench once more.
func TestMain(m *testing.M) {
	if os.Getenv(asTestKvbench) == "1" {
		main()
		os.Exit(0)
	}
	fleettest.Main(m)
}

// The gateway forwards whatever reaches it to the fleet, with no keys or TLS: it must refuse to
// listen where another machine could reach it, before it dials or listens at all.
func TestGatewayRefusesNonLoopbackListen(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:8081", "example.com:8081", "127.0.0.1"} {
		err := gateway(context.Background(), []string{"--epp", "127.0.0.1:1", "--listen", addr}, slog.New(slog.DiscardHandler), nil)
		if err == nil || !strings.Contains(err.Error(), "--listen") {
			t.Errorf("--listen %s: got %v, want a refusal naming --listen", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:8081", "[::1]:8081", "localhost:8081", "127.0.0.2:0"} {
		if err := checkLoopbackListen(addr); err != nil {
			t.Errorf("--listen %s refused: %v", addr, err)
		}
	}
	for _, args := range [][]string{
		{"--body-mode", "streamed"},
		{"--chunk-bytes", "0"},
		{"--epp", "no-port"},
		{"stray"},
	} {
		if err := gateway(context.Background(), append([]string{"--listen", "127.0.0.1:0"}, args...), slog.New(slog.DiscardHandler), nil); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// startGateway runs the gateway in this process until the test ends (or stop is called) and
// returns its URL; stop ends it and returns what it returned.
func startGateway(t *testing.T, args ...string) (url string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- gateway(ctx, append([]string{"--listen", "127.0.0.1:0"}, args...), slog.New(slog.DiscardHandler),
			func(a net.Addr) { addr <- a })
	}()
	stopped := false
	var result error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case result = <-done:
			case <-time.After(20 * time.Second):
				result = errors.New("the gateway did not stop within 20 s of its context ending")
			}
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	select {
	case a := <-addr:
		return "http://" + a.String(), stop
	case err := <-done:
		t.Fatalf("gateway: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway did not listen within 10 s")
	}
	return "", nil
}

// Through a real router process in --mode epp, in both request body modes: completions and chat,
// streamed and whole, come back complete and name the engine that served them, as the proxy's
// answers do; GET /v1/models reaches an engine. SIGINT's path (the context) drains a stream in
// flight before the gateway returns.
func TestGatewayThroughRouter(t *testing.T) {
	fleettest.NeedBinaries(t)
	engine := fleettest.StartEngine(t, "e0", "1")
	r := fleettest.StartEPPRouter(t, fleettest.WriteEndpoints(t, []*fleettest.Engine{engine}))
	fleettest.WaitOK(t, r.AdminURL+"/ready")
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	work := fleettest.SharedPrefix(1, 200, 8, 8)

	for _, mode := range [][]string{{"--body-mode", "full-duplex"}, {"--body-mode", "buffered"}, {"--chunk-bytes", "7"}} {
		t.Run(strings.Join(mode, "="), func(t *testing.T) {
			url, stop := startGateway(t, append([]string{"--epp", r.EPPAddr}, mode...)...)
			for i := range 4 { // completions and chat, whole and streamed (fleettest's mixed kinds)
				req := work(i) // one group: request i is kind i
				res := fleettest.Do(context.Background(), client, url, req, 20*time.Second)
				if res.Outcome != fleettest.Completed || res.Endpoint != "e0" {
					t.Fatalf("%s (stream %v): %v %q, endpoint %q", req.Path, req.Stream, res.Outcome, res.Reason, res.Endpoint)
				}
			}
			resp, err := client.Get(url + "/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"m"`) {
				t.Fatalf("GET /v1/models: %d %s", resp.StatusCode, b)
			}
			if err := stop(); err != nil {
				t.Fatalf("gateway returned %v after its context ended", err)
			}
		})
	}

	t.Run("drains on shutdown", func(t *testing.T) {
		url, stop := startGateway(t, "--epp", r.EPPAddr)
		// 200 tokens at the 8B profile's few milliseconds each: the stream is still running when
		// the gateway is told to stop.
		req, err := http.NewRequest(http.MethodPost, url+"/v1/completions", strings.NewReader(fleettest.Completion("drain me", 200, true)))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		if !sc.Scan() {
			t.Fatalf("no first line: %v", sc.Err())
		}
		stopped := make(chan error, 1)
		go func() { stopped <- stop() }()
		lines, done := 1, false
		for sc.Scan() {
			lines++
			done = done || sc.Text() == "data: [DONE]"
		}
		if !done || sc.Err() != nil {
			t.Fatalf("the stream in flight was cut by the shutdown after %d lines (%v)", lines, sc.Err())
		}
		if err := <-stopped; err != nil {
			t.Fatalf("gateway returned %v", err)
		}
		if c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://")); err == nil {
			c.Close()
			t.Fatal("the gateway still listens after it returned")
		}
	})
}
