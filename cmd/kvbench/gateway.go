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
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/epp/epptest"
)

// runGateway serves `kvbench gateway` until SIGINT or SIGTERM.
func runGateway(args []string, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return gateway(ctx, args, log, nil)
}

// gateway is runGateway without the signals, so a test can end it; listening, when not nil, is
// told the address once the listener is open.
func gateway(ctx context.Context, args []string, log *slog.Logger, listening func(net.Addr)) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	pickerAddr := fs.String("epp", "127.0.0.1:9002", "the router's ext_proc address (its --mode epp --grpc-port), host:port")
	listen := fs.String("listen", "127.0.0.1:8081", "HTTP address to serve clients on (loopback only)")
	bodyMode := fs.String("body-mode", "full-duplex", "how the request body goes to the picker, as the gateway's ext_proc filter would send it: full-duplex (FULL_DUPLEX_STREAMED, what the Inference Extension configures) or buffered (BUFFERED)")
	chunk := fs.Int("chunk-bytes", 16<<10, "full-duplex: size of the request body's chunks to the picker")
	grace := fs.Duration("shutdown-grace", 30*time.Second, "on SIGINT/SIGTERM, how long requests in flight may take to finish")
	useTLS := fs.Bool("epp-tls", true, "dial the picker over TLS without verifying its certificate, as Inference Gateways do (the router's --grpc-tls, its default); false for a picker run with --grpc-tls=false")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("gateway: unexpected arguments %v", fs.Args())
	}
	if err := checkLoopbackListen(*listen); err != nil {
		return err
	}
	var mode epptest.Mode
	switch *bodyMode {
	case "full-duplex":
		mode = epptest.FullDuplex
	case "buffered":
		mode = epptest.Buffered
	default:
		return fmt.Errorf("gateway: --body-mode %q: want full-duplex or buffered", *bodyMode)
	}
	if *chunk <= 0 {
		return fmt.Errorf("gateway: --chunk-bytes %d: want a positive size", *chunk)
	}
	if _, _, err := net.SplitHostPort(*pickerAddr); err != nil {
		return fmt.Errorf("gateway: --epp %q: want host:port: %w", *pickerAddr, err)
	}

	dial := epptest.DialTLS
	if !*useTLS {
		dial = epptest.Dial
	}
	client, conn, err := dial(*pickerAddr)
	if err != nil {
		return fmt.Errorf("gateway: --epp %s: %w", *pickerAddr, err)
	}
	defer conn.Close()
	client.RequestMode, client.ChunkBytes = mode, *chunk
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	srv := &http.Server{
		Handler: &epptest.Gateway{Client: client},
		// A slow client must not hold a connection open for ever; streamed answers can last
		// minutes, so only the request headers are bounded.
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	log.Info("gateway listening", "addr", lis.Addr().String(), "epp", *pickerAddr, "body-mode", *bodyMode)
	if listening != nil {
		listening(lis.Addr())
	}

	select {
	case err := <-served:
		return fmt.Errorf("gateway: %w", err)
	case <-ctx.Done():
	}
	log.Info("gateway shutting down", "grace", *grace)
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Past the grace the streams still open are cut, as Envoy's drain timeout cuts them.
		_ = srv.Close()
		log.Warn("gateway: requests still in flight at the end of the grace period were cut", "err", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// checkLoopbackListen refuses a listen address other than loopback: the gateway forwards to the fleet whoever reaches it, with no keys or TLS of its own,
// so it is for this machine only. An empty host would listen on every interface.
func checkLoopbackListen(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("gateway: --listen %q: want host:port: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("gateway: --listen %q: kvbench gateway only listens on loopback (127.0.0.1, ::1, localhost)", addr)
	}
	return nil
}
