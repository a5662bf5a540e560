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

// Command vllm-sim is a simulated vLLM engine: vLLM's HTTP API, metrics and KV-cache event stream
// backed by a paged-cache and continuous-batching model that runs in scaled real time. It accepts
// the command line of "vllm serve" (so the operator can swap the image), plus sim-only flags.
// See docs/simulator.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvrouter/kvrouter/internal/sim/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, nil)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vllm-sim:", err)
		os.Exit(1)
	}
}

// run is main minus the process: it serves until ctx ends; ready, when not nil, receives the HTTP
// addresses once listening.
func run(ctx context.Context, args []string, stdout io.Writer, ready func([]string)) error {
	s, err := server.ParseFlags(args, os.LookupEnv)
	if errors.Is(err, server.ErrHelp) {
		_, err = io.WriteString(stdout, server.Usage())
		return err
	}
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: s.LogLevel}))
	slog.SetDefault(log)
	return server.Serve(ctx, s, log, ready)
}
