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
