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
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvrouter/kvrouter/internal/router/disagg"
	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/router/proxy"
)

// checkPD validates the disaggregation flags.
func checkPD(o *options) error {
	m, err := disagg.ParseMode(o.pdMode)
	if err != nil {
		return fmt.Errorf("--pd-mode: %w", err)
	}
	if o.pdThreshold < 0 {
		return fmt.Errorf("--pd-threshold-tokens %d: must not be negative", o.pdThreshold)
	}
	if m == disagg.Threshold && o.pdThreshold == 0 {
		return errors.New("--pd-mode Threshold needs --pd-threshold-tokens")
	}
	if o.pdWholeOn != proxy.WholeOnAny && o.pdWholeOn != proxy.WholeOnDecode {
		return fmt.Errorf("--pd-whole-on %q: want %s or %s", o.pdWholeOn, proxy.WholeOnAny, proxy.WholeOnDecode)
	}
	return nil
}

func pdConfig(o *options) proxy.PDConfig {
	m, _ := disagg.ParseMode(o.pdMode)
	return proxy.PDConfig{Mode: m, ThresholdTokens: o.pdThreshold, WholeOn: o.pdWholeOn}
}

// checkSidecar validates the flags of --mode sidecar, which has one engine and no discovery.
func checkSidecar(o *options) error {
	u, err := url.Parse(o.engineURL)
	if o.engineURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--mode sidecar needs --engine-url, the local engine's http(s) URL (got %q)", o.engineURL)
	}
	if o.discovery != "" || o.endpointsFile != "" || o.poolName != "" || o.selector != "" {
		return errors.New("--mode sidecar serves the one engine of --engine-url: drop --discovery, --endpoints-file, --pool-name and --selector")
	}
	if o.port < 0 || o.port > 65535 {
		return fmt.Errorf("--port %d: want a port within 0 and 65535", o.port)
	}
	return checkDestinationPort(o)
}

// checkDestinationPort validates --epp-destination-port: a port, and only where a picker names
// destinations.
func checkDestinationPort(o *options) error {
	switch {
	case o.eppDestinationPort < 0 || o.eppDestinationPort > 65535:
		return fmt.Errorf("--epp-destination-port %d: want a port within 1 and 65535, or 0 for the engine's own", o.eppDestinationPort)
	case o.eppDestinationPort != 0 && !o.serveEPP():
		return fmt.Errorf("--epp-destination-port is the endpoint picker's: it needs --mode epp or both, not %s", o.mode)
	}
	return nil
}

// runSidecar serves the sidecar of one decode engine until ctx ends: the proxy's legs, with
// that engine its whole table (no index, no admission: the endpoint picker decided).
func runSidecar(ctx context.Context, o *options, log logr.Logger) error {
	reg := prometheus.NewRegistry()
	auth, err := proxy.LoadAuth(ctx, "", o.engineAPIKeyFile, time.Second, log.WithName("auth"))
	if err != nil {
		return err
	}
	cfg := proxy.Config{Auth: auth, Policy: policy.Config{BlockSize: o.blockSize}, MaxBodyBytes: o.maxBody,
		UpstreamHeaderTimeout: o.headerTimeout, StreamIdleTimeout: o.streamIdle, BodyReadTimeout: o.bodyReadTimeout,
		TTFBWatchdogFactor: o.ttfbFactor, TTFBWatchdogFloor: o.ttfbFloor, TTFBWatchdogCap: o.ttfbCap,
		DisableAdmission: true, OutlierConsecutiveFailures: -1}
	if o.ttfbFactor == 0 {
		cfg.TTFBWatchdogFactor = -1
	}
	srv := proxy.New(cfg, log.WithName("sidecar"), nil, nil, loadsignal.NewTracker(), reg)
	srv.SetEndpoints([]discovery.Endpoint{{Name: "local", URL: o.engineURL, Ready: true}})
	addr := net.JoinHostPort(o.host, strconv.Itoa(o.port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	hs := &http.Server{Handler: srv.SidecarHandler(), ReadHeaderTimeout: o.readHeaderTimeout, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 2)
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	var admin *http.Server
	if o.adminAddr != "" {
		aln, err := net.Listen("tcp", o.adminAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("listen %s (--admin-addr): %w", o.adminAddr, err)
		}
		admin = &http.Server{Handler: srv.AdminHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})),
			ReadHeaderTimeout: o.readHeaderTimeout, WriteTimeout: time.Minute}
		go func() {
			if err := admin.Serve(aln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("admin listener: %w", err)
			}
		}()
	}
	log.Info("sidecar listening", "addr", ln.Addr().String(), "engine", o.engineURL)
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shutdown(hs, admin, new(sync.WaitGroup), o.shutdownGrace, log)
	return err
}
