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
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/sim/server"
)

func TestHelp(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"serve", "m", "--help"}, &out, nil); err != nil {
		t.Fatal(err)
	}
	if out.String() != server.Usage() {
		t.Errorf("--help printed %q", out.String())
	}
}

func TestBadFlagsServeNothing(t *testing.T) {
	err := run(context.Background(), []string{"--port", "x"}, nil, func([]string) { t.Error("serving") })
	if err == nil || err.Error() != `--port: "x" is not an integer` {
		t.Errorf("error %v", err)
	}
}

func TestServesSeveralEngines(t *testing.T) {
	// Two consecutive free ports.
	var port int
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+1))
		l.Close()
		if err == nil {
			l2.Close()
			break
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan []string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--host", "127.0.0.1", "--port", fmt.Sprint(port), "--engines", "2", "--time-scale", "1000",
			"--log-level", "error"}, nil, func(a []string) { ready <- a })
	}()
	var addrs []string
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	if len(addrs) != 2 || addrs[1] != fmt.Sprintf("127.0.0.1:%d", port+1) {
		t.Fatalf("addresses %v", addrs)
	}
	for _, a := range addrs {
		resp, err := http.Post("http://"+a+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hello","max_tokens":2}`))
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 200 || body["model"] != "meta-llama/Llama-3.1-8B-Instruct" {
			t.Fatalf("%s: %d %v", a, resp.StatusCode, body)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
