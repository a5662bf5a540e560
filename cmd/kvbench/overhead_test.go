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
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/test/fleettest"
)

// asTestKvbench makes the test binary run kvbench's main (TestMain).
const asTestKvbench = "KVBENCH_TEST_AS_KVBENCH"

// A tiny overhead run on loopback: engines, plain proxy and router start, every phase answers,
// and the table has a row per figure and a ratio column.
func TestOverheadQuick(t *testing.T) {
	fleettest.NeedBinaries(t)
	t.Setenv(asTestKvbench, "1")
	var out strings.Builder
	table := filepath.Join(t.TempDir(), "overhead.md")
	for _, prompt := range []string{"ids", "text"} {
		out.Reset()
		err := overheadCmd(context.Background(), []string{"--bin-dir", fleettest.BinDir(), "--kvbench", os.Args[0],
			"--engines", "2", "--conns", "4", "--rates", "20", "--rounds", "2", "--duration", "500ms", "--warmup", "0s",
			"--prompt", prompt, "--stream=" + map[string]string{"ids": "false", "text": "true"}[prompt], "--out", table},
			slog.New(slog.DiscardHandler), &out)
		if err != nil {
			t.Fatalf("%s: %v", prompt, err)
		}
		got := out.String()
		for _, want := range []string{"| | plain | router | router / plain |", "| added p50 (ms) |", "| added p90 (ms) |",
			"| added p99 (ms) |", "| CPU per request (ms) |", "| requests (errors) |", "direct to the engines: p50 ", "load average",
			"20 req/s, " + prompt + " prompts"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s: no %q in\n%s", prompt, want, got)
			}
		}
		if strings.Contains(got, "(0) | ") && !strings.Contains(got, "| requests (errors) | ") {
			t.Errorf("%s: malformed requests row:\n%s", prompt, got)
		}
		for _, row := range strings.Split(got, "\n") {
			if strings.HasPrefix(row, "| requests (errors) |") && !strings.Contains(row, " (0) | ") {
				t.Errorf("%s: errors in %q", prompt, row)
			}
		}
		if b, err := os.ReadFile(table); err != nil || string(b) != got {
			t.Errorf("%s: --out file differs from the output (%v)", prompt, err)
		}
	}
}

func TestOverheadRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--prompt", "images"},
		{"--rates", "fast"},
		{"--rates", "0"},
		{"--routers", "nopath"},
		{"--routers", "plain=/bin/true"},
		{"stray"},
	} {
		if err := overheadCmd(context.Background(), args, slog.New(slog.DiscardHandler), &strings.Builder{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
