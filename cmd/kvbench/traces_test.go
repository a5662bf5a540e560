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
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// The default --traces is bench/traces from the repository root; run from elsewhere (go test
// runs here, in cmd/kvbench) it resolves to the traces folder beside the workload's folder. A
// --traces given explicitly is never second-guessed.
func TestTracesDirDefault(t *testing.T) {
	wl := filepath.Join("..", "..", "bench", "workloads", "mooncake-synthetic.yaml")
	parse := func(args ...string) (*flag.FlagSet, string) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		v := tracesFlag(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return fs, *v
	}
	fs, v := parse()
	if got, want := tracesDir(fs, v, wl), filepath.Join("..", "..", "bench", "traces"); got != want {
		t.Fatalf("default from cmd/kvbench: %q, want %q", got, want)
	}
	fs, v = parse("--traces", "bench/traces")
	if got := tracesDir(fs, v, wl); got != "bench/traces" {
		t.Fatalf("explicit --traces rewritten to %q", got)
	}
	fs, v = parse("--traces", "/elsewhere")
	if got := tracesDir(fs, v, wl); got != "/elsewhere" {
		t.Fatalf("explicit --traces rewritten to %q", got)
	}
	// From the repository root the default is used as it is.
	t.Chdir(filepath.Join("..", ".."))
	fs, v = parse()
	if got := tracesDir(fs, v, filepath.Join("bench", "workloads", "mooncake-synthetic.yaml")); got != defaultTraces {
		t.Fatalf("default from the repository root: %q, want %q", got, defaultTraces)
	}
}

// A trace workload runs with no --traces at all: the vendored trace is found.
func TestSimulateTraceWorkloadWithDefaultTraces(t *testing.T) {
	out := t.TempDir()
	args := []string{"--policies", "round-robin", "--requests", "20", "--rates", "1", "--quiet", "--out", out,
		filepath.Join("..", "..", "bench", "workloads", "mooncake-synthetic.yaml")}
	if err := runSimulate(args, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "mooncake-synthetic", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Policies []struct {
			Completed int `json:"completed"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Policies) != 1 || r.Policies[0].Completed != 20 {
		t.Fatalf("unexpected report %s", b)
	}
}
