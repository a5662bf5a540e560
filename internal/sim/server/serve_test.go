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

package server

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestOffsetEndpoint(t *testing.T) {
	for _, c := range []struct {
		in    string
		delta int
		want  string
	}{{"tcp://*:5557", 0, "tcp://*:5557"}, {"tcp://*:5557", 4, "tcp://*:5561"}, {"tcp://*:0", 3, "tcp://*:0"},
		{"ipc:///tmp/kv", 1, "ipc:///tmp/kv_dp1"}, {"", 2, ""}} {
		if got, err := offsetEndpoint(c.in, c.delta); err != nil || got != c.want {
			t.Errorf("offsetEndpoint(%q, %d) = %q, %v", c.in, c.delta, got, err)
		}
	}
	if _, err := offsetEndpoint("tcp://host:abc", 1); err == nil {
		t.Error("non-numeric port accepted")
	}
}

// syncBuffer is a log sink shared by the engines' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestServeWarnsOfIgnoredFlagsByNameOnly(t *testing.T) {
	s, err := ParseFlags([]string{"--host", "127.0.0.1", "--port", "0", "--time-scale", "1000", "--hf-token", "hf_secret",
		"--download-dir=/secret/path", "--trust-remote-code"}, env("PYTHONHASHSEED", "0"))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan []string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, s, slog.New(slog.NewTextHandler(&logs, nil)), func(a []string) { ready <- a })
	}()
	select {
	case addrs := <-ready:
		resp, err := http.Get("http://" + addrs[0] + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, `flags="--hf-token --download-dir --trust-remote-code"`) {
		t.Errorf("no warning naming the ignored flags:\n%s", out)
	}
	if strings.Contains(out, "secret") {
		t.Errorf("an ignored flag's value is logged:\n%s", out)
	}
}
