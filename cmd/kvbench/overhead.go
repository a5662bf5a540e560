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
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench/overhead"
)

func runOverhead(args []string, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return overheadCmd(ctx, args, log, os.Stdout)
}

// overheadCmd is runOverhead without the signals and with the table's writer, for a test.
func overheadCmd(ctx context.Context, args []string, log *slog.Logger, stdout io.Writer) error {
	fs := flag.NewFlagSet("overhead", flag.ContinueOnError)
	self, _ := os.Executable()
	binDir := fs.String("bin-dir", filepath.Dir(self), "directory holding vllm-sim and router")
	selfBin := fs.String("kvbench", self, "kvbench binary that serves the plain proxy (kvbench plainproxy)")
	routers := fs.String("routers", "", "router binaries to measure, name=path,name=path (default: router=BIN-DIR/router); several run side by side in each round, e.g. new=bin/router,old=/tmp/old/bin/router")
	engines := fs.Int("engines", 4, "simulated engines (one vllm-sim process)")
	rates := fs.String("rates", "100,200,300", "request rates (req/s), one series of rounds each")
	conns := fs.Int("conns", 64, "client keep-alive connections the load is spread over")
	rounds := fs.Int("rounds", 5, "interleaved rounds per rate (direct, plain, each router)")
	duration := fs.Duration("duration", 10*time.Second, "measured time of each phase")
	warmup := fs.Duration("warmup", time.Second, "load sent before each phase's measurement, not counted")
	prompt := fs.String("prompt", "ids", "ids (token-id completion prompts) or text (text completion prompts, which the router tokenizes)")
	promptTokens := fs.Int("prompt-tokens", 128, "prompt length in tokens (text: in words)")
	stream := fs.Bool("stream", false, "ask for streamed (SSE) answers")
	maxTokens := fs.Int("max-tokens", 8, "max_tokens of every request")
	timeScale := fs.Float64("time-scale", 100, "the engines' --time-scale (simulated seconds per wall second: high answers fast, so the proxies' share shows)")
	routerArgs := fs.String("router-args", "", "extra router flags, space-separated (e.g. \"--tokenizer local --tokenizer-dir DIR\")")
	engineArgs := fs.String("engine-args", "", "extra vllm-sim flags, space-separated (e.g. \"--tokenizer DIR\")")
	profileDir := fs.String("profile-dir", "", "write a CPU profile of each router phase here")
	out := fs.String("out", "", "also write the Markdown table to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("overhead: unexpected arguments %v", fs.Args())
	}
	cfg := overhead.Config{
		BinDir: *binDir, Self: *selfBin, Engines: *engines, Conns: *conns, Rounds: *rounds, Duration: *duration,
		Warmup: *warmup, Prompt: *prompt, PromptTokens: *promptTokens, Stream: *stream, MaxTokens: *maxTokens,
		TimeScale: *timeScale, RouterArgs: strings.Fields(*routerArgs), EngineArgs: strings.Fields(*engineArgs),
		ProfileDir: *profileDir, Log: log,
	}
	for _, r := range strings.Split(*rates, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil {
			return fmt.Errorf("overhead: --rates %q: %w", *rates, err)
		}
		cfg.Rates = append(cfg.Rates, v)
	}
	if *routers != "" {
		for _, r := range strings.Split(*routers, ",") {
			name, path, ok := strings.Cut(r, "=")
			if !ok {
				return fmt.Errorf("overhead: --routers %q: want name=path", r)
			}
			cfg.Routers = append(cfg.Routers, overhead.Router{Name: name, Path: path})
		}
	}
	res, err := overhead.Run(ctx, cfg)
	if err != nil {
		return err
	}
	var w io.Writer = stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = io.MultiWriter(stdout, f)
	}
	fmt.Fprintf(w, "kvbench overhead %s\n", strings.Join(args, " "))
	res.Markdown(w)
	return nil
}

// runPlainProxy serves `kvbench plainproxy`, the baseline of `kvbench overhead`, until SIGINT or
// SIGTERM.
func runPlainProxy(args []string) error {
	fs := flag.NewFlagSet("plainproxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8090", "address to serve on (loopback only)")
	ups := fs.String("upstreams", "", "engine base URLs, comma-separated (round-robin)")
	idle := fs.Int("max-idle-conns-per-host", 256, "idle connections kept per engine (at least the client concurrency)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkLoopbackListen(*listen); err != nil {
		return err
	}
	var upstreams []*url.URL
	for _, u := range strings.Split(*ups, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil || p.Host == "" {
			return fmt.Errorf("plainproxy: --upstreams %q: want http://host:port URLs", *ups)
		}
		upstreams = append(upstreams, p)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: overhead.PlainProxy(upstreams, *idle), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
