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
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/bench/report"
	"github.com/kvrouter/kvrouter/internal/sim/engine"
	"github.com/kvrouter/kvrouter/internal/sim/server"
	"github.com/kvrouter/kvrouter/internal/sim/timing"
)

// startKeyedSim serves a vllm-sim engine that requires an API key, on loopback.
func startKeyedSim(t *testing.T, key string) string {
	t.Helper()
	eng, err := engine.New(engine.Config{Profile: timing.ForModel("llama-8b", 1), BlockSize: 16, NumBlocks: 2000})
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(eng, server.Options{ServedModelNames: []string{"sim"}, TimeScale: 10, PrefixCaching: true,
		APIKeys: []string{key}, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); cancel(); <-done })
	return ts.URL
}

// The CLI end to end against a keyed engine: the key comes from $KVBENCH_API_KEY, the target URL
// carries credentials of its own, and neither may appear in anything written.
func TestLiveWritesTicketReport(t *testing.T) {
	const key = "sk-kvbench-test-secret"
	url := startKeyedSim(t, key)
	t.Setenv("KVBENCH_API_KEY", key)
	t.Setenv("OPENAI_API_KEY", "")
	out := t.TempDir()
	target := strings.Replace(url, "http://", "http://someone:hunter2@", 1)
	wl := filepath.Join("..", "..", "bench", "workloads", "demo.yaml")
	for _, ep := range []string{"completions", "chat"} {
		dir := filepath.Join(out, ep)
		err := runLive([]string{"--target", target, "--workload", wl, "--requests", "12", "--rate", "50", "--endpoint", ep,
			"--time-scale", "10", "--progress", "none", "--goodput", "ttft:60000", "--goodput", "e2el:600000", "--out", dir},
			slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		md, err := os.ReadFile(filepath.Join(dir, "report.md"))
		if err != nil {
			t.Fatal(err)
		}
		var run report.LiveRun
		j, _ := os.ReadFile(filepath.Join(dir, "live.json"))
		if err := json.Unmarshal(j, &run); err != nil {
			t.Fatal(err)
		}
		if run.Serving.Completed != 12 || run.Sent != 12 || run.Requests != 12 || run.Endpoint != ep || run.Model != "sim" || run.Serving.GoodRequests != 12 || len(run.WorkloadSHA256) != 64 {
			t.Fatalf("%s: %+v", ep, run)
		}
		var rep report.Report
		rj, _ := os.ReadFile(filepath.Join(dir, "report.json"))
		if err := json.Unmarshal(rj, &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Requests) != 1 || len(rep.Requests[0].Requests) != 12 {
			t.Fatalf("report.json carries %d runs of per-request times", len(rep.Requests))
		}
		if run.TokenSources["usage"] != 12 || run.FinishReasons["length"] != 12 {
			t.Fatalf("token sources %v", run.TokenSources)
		}
		for _, f := range []string{"report.md", "live.json", "report.json", "report.html"} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte(key)) || bytes.Contains(b, []byte("hunter2")) {
				t.Fatalf("%s leaks a credential", f)
			}
		}
		for _, want := range []string{"| target | " + url + " |", "| endpoint | " + ep + " |", "| TTFT |", "| TPOT (excl. 1st token) |",
			"ttft:60000 e2el:600000", "12 of 12 completed", "usage (12 requests)", "## Failures\n\nNone."} {
			if !strings.Contains(string(md), want) {
				t.Fatalf("report.md lacks %q:\n%s", want, md)
			}
		}
	}
	// $OPENAI_API_KEY is not sent unless asked for: it may be meant for another server than the
	// target. Without a key the engine refuses, the run fails, and says why.
	t.Setenv("KVBENCH_API_KEY", "")
	t.Setenv("OPENAI_API_KEY", key)
	err := runLive([]string{"--target", url, "--workload", wl, "--requests", "2", "--progress", "none", "--out", filepath.Join(out, "nokey")},
		slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("err %v", err)
	}
	// Asked for with --api-key "$OPENAI_API_KEY", it is.
	err = runLive([]string{"--target", url, "--workload", wl, "--requests", "2", "--rate", "50", "--time-scale", "10", "--progress", "none",
		"--api-key", os.Getenv("OPENAI_API_KEY"), "--out", filepath.Join(out, "flag")}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
}

func TestLiveFlagErrors(t *testing.T) {
	wl := filepath.Join("..", "..", "bench", "workloads", "demo.yaml")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--target", "ftp://x", "--workload", wl}, "http:// or https://"},
		{[]string{"--target", "http://x", "--workload", wl, "--endpoint", "embeddings"}, "completions or chat"},
		{[]string{"--target", "http://x", "--workload", wl, "--progress", "fancy"}, "auto, bar, lines or none"},
		{[]string{"--target", "http://x", "--workload", wl, "--usage", "some"}, "final, continuous or none"},
		{[]string{"--target", "http://x", "--workload", wl, "--goodput", "itl:5"}, "unknown metric"},
		{[]string{"--target", "http://x", "--workload", wl, "--max-wall", "0s"}, "always bounded"},
		{[]string{"--workload", wl}, "required"},
	} {
		err := runLive(c.args, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.args, err, c.want)
		}
	}
}

func TestRedactArgs(t *testing.T) {
	got := strings.Join(redactArgs([]string{"--api-key", "sk-1", "--target", "https://u:p@h/?k=v", "-api-key=sk-2",
		"--target=http://a:b@h2", "--label", "x"}), " ")
	want := "--api-key REDACTED --target https://h/ -api-key=REDACTED --target=http://h2 --label x"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
