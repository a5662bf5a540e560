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
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/sim/engine"
	"github.com/kvrouter/kvrouter/internal/sim/kvpublish"
	"github.com/kvrouter/kvrouter/internal/sim/tokenizer"
	hftok "github.com/kvrouter/kvrouter/internal/tokenizer"
)

// Serve runs the engines s describes, each with its HTTP API and KV event publisher, until ctx
// ends or one HTTP server fails; ready, when not nil, receives the HTTP addresses once all listen.
func Serve(ctx context.Context, s *Settings, log *slog.Logger, ready func(addrs []string)) error {
	if len(s.IgnoredFlags) > 0 {
		log.Warn("ignoring vLLM flags the simulator does not model", "flags", strings.Join(s.IgnoredFlags, " "))
	}
	if s.HashSubstituted {
		log.Warn("pickle-based prefix caching hash cannot be reproduced outside Python; using its CBOR variant", "algo", s.Engine.HashAlgo)
	}
	if s.Engine.HashSeed == nil || *s.Engine.HashSeed == "" {
		log.Warn("PYTHONHASHSEED is not set: block hashes are random per process, as in vLLM")
	}

	ctx, stop := context.WithCancel(ctx)
	defer stop()

	var wg sync.WaitGroup
	var servers []*http.Server
	var addrs []string
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	tok := tokenizer.New()
	errc := make(chan error, 2*s.Engines) // an HTTP server and a KV side channel per engine
	cfg := s.Engine
	cfg.EmitEvents = s.KVEvents.Enabled()
	var real *hftok.Tokenizer
	if s.TokenizerDir != "" {
		t, err := LoadTokenizer(s.TokenizerDir)
		if err != nil {
			return err
		}
		real, cfg.OutputVocab = t, outputVocab(t)
		log.Info("tokenizing with a real tokenizer", "dir", s.TokenizerDir, "vocab_size", t.VocabSize(), "output_vocab", len(cfg.OutputVocab))
	}
	for i := 0; i < s.Engines; i++ {
		// Engines of one process draw their own step noise (fixed per index: reruns repeat it).
		cfg.NoiseSeed = s.Engine.NoiseSeed + uint64(i)
		eng, err := engine.New(cfg)
		if err != nil {
			return fmt.Errorf("engine %d: %w", i, err)
		}
		opt := Options{
			ServedModelNames: s.ServedModelNames, ModelPath: s.Model, LoRAModules: s.LoRAModules, TimeScale: s.TimeScale,
			PrefixCaching: s.PrefixCaching, HashAlgo: s.Engine.HashAlgo, Tokenizer: tok, RealTokenizer: real, Faults: s.Faults,
			Logger: log.With("engine", i), APIKeys: s.APIKeys, SimAPI: s.SimAPI, ResetPrefixCache: s.DevMode,
		}
		if s.KVEvents.Enabled() {
			pub, src, err := openPublisher(s, i, log.With("engine", i))
			if err != nil {
				return fmt.Errorf("engine %d: %w", i, err)
			}
			closers = append(closers, func() { _ = pub.Close() })
			if s.DropBatches > 0 {
				pub.DropNext(s.DropBatches)
			}
			opt.Publisher, opt.KVEventSources = pub, []KVEventSource{src}
		}
		var sideLn net.Listener
		if s.KVTransfer != nil {
			// As vLLM's NIXL connector: the side channel listens where it is advertised, one
			// port per engine (offset by the data-parallel rank, like the event ports).
			port := s.SideChannelPort
			if port != 0 {
				port += s.DataParallelRank + i
			}
			sideLn, err = net.Listen("tcp", net.JoinHostPort(s.SideChannelHost, strconv.Itoa(port)))
			if err != nil {
				return fmt.Errorf("engine %d KV side channel: %w", i, err)
			}
			closers = append(closers, func() { _ = sideLn.Close() })
			opt.KVTransfer = &KVTransferOptions{
				Connector: s.KVTransfer.Connector, Role: s.KVTransfer.Role, EngineID: engineIDFor(s.KVTransfer.EngineID, i, s.Engines),
				LoadFailurePolicy: s.KVTransfer.LoadFailurePolicy, Host: s.SideChannelHost, Port: sideLn.Addr().(*net.TCPAddr).Port,
				Transport: s.KVTransport, Timeout: s.KVTransferTimeout,
			}
		}
		srv := New(eng, opt)
		if sideLn != nil {
			hs := &http.Server{Handler: srv.SideChannelHandler(), ReadHeaderTimeout: 10 * time.Second}
			servers = append(servers, hs)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := hs.Serve(sideLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
					errc <- fmt.Errorf("engine %d KV side channel: %w", i, err)
				}
			}()
			log.Info("KV transfer ready", "engine", i, "connector", s.KVTransfer.Connector, "role", s.KVTransfer.Role,
				"side_channel", net.JoinHostPort(s.SideChannelHost, strconv.Itoa(opt.KVTransfer.Port)), "engine_id", srv.EngineID(),
				"transport", s.KVTransport.Name, "timeout", s.KVTransferTimeout)
		}
		addr := net.JoinHostPort(s.Host, strconv.Itoa(s.Port+i))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("engine %d: %w", i, err)
		}
		addrs = append(addrs, ln.Addr().String())
		hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, hs)
		wg.Add(2)
		go func() { defer wg.Done(); srv.Run(ctx) }()
		go func() {
			defer wg.Done()
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("engine %d HTTP: %w", i, err)
			}
		}()
		if s.RestartEvery > 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				restartEvery(ctx, srv, s.RestartEvery, log.With("engine", i))
			}()
		}
		if i == 0 || s.LogLevel <= slog.LevelDebug {
			c := eng.Config()
			log.Info("engine ready", "engine", i, "http", ln.Addr().String(), "model", s.ServedModelNames[0], "profile", c.Profile.Name,
				"num_gpu_blocks", c.NumBlocks, "block_size", c.BlockSize, "max_model_len", c.MaxModelLen,
				"kv_events", s.KVEvents.Enabled(), "encoding", s.Encoding.String(), "int_hashes", s.IntHashes, "time_scale", s.TimeScale)
		}
	}
	if s.Engines > 1 {
		log.Info("engines ready", "count", s.Engines, "http_ports", fmt.Sprintf("%d-%d", s.Port, s.Port+s.Engines-1))
	}
	if ready != nil {
		ready(addrs)
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		stop()
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, hs := range servers {
		_ = hs.Shutdown(shutdown)
	}
	wg.Wait()
	return err
}

// engineIDFor gives engine i of n a configured engine id, distinct per engine; "" stays random.
func engineIDFor(id string, i, n int) string {
	if id == "" || n == 1 {
		return id
	}
	return id + "-" + strconv.Itoa(i)
}

// restartEvery is the --fault-restart-every fault.
func restartEvery(ctx context.Context, srv *Server, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := srv.Restart(); err != nil {
				log.Error("restart failed", "err", err)
			}
		}
	}
}

func openPublisher(s *Settings, i int, log *slog.Logger) (*kvpublish.Publisher, KVEventSource, error) {
	delta := s.DataParallelRank + i*s.PortStride
	ep, err := offsetEndpoint(s.KVEvents.Endpoint, delta)
	if err != nil {
		return nil, KVEventSource{}, err
	}
	rep, err := offsetEndpoint(s.KVEvents.ReplayEndpoint, delta)
	if err != nil {
		return nil, KVEventSource{}, err
	}
	topic := strings.ReplaceAll(s.KVEvents.Topic, "{engine}", strconv.Itoa(i))
	hwm := 100000
	if s.KVEvents.HWM != nil {
		hwm = *s.KVEvents.HWM
	}
	pub, err := kvpublish.New(kvpublish.Config{
		Endpoint: ep, ReplayEndpoint: rep, Topic: topic, HWM: hwm, BufferSteps: s.KVEvents.BufferSteps,
		MaxQueueSize: s.KVEvents.MaxQueueSize, DPRank: s.DataParallelRank, LegacyReplay: s.LegacyReplay, Logger: log,
		Encoder: kvpublish.Encoder{Encoding: s.Encoding, IntHashes: s.IntHashes},
	})
	if err != nil {
		return nil, KVEventSource{}, err
	}
	return pub, KVEventSource{DataParallelRank: s.DataParallelRank, Endpoint: ep, ReplayEndpoint: rep, Topic: topic}, nil
}

// offsetEndpoint adds delta to the port of a tcp endpoint (vLLM's DP offset rule); port 0 (an
// ephemeral port) is kept, and a non-tcp endpoint gets a "_dp<delta>" suffix.
func offsetEndpoint(ep string, delta int) (string, error) {
	if delta == 0 || ep == "" {
		return ep, nil
	}
	if !strings.HasPrefix(ep, "tcp://") {
		return fmt.Sprintf("%s_dp%d", ep, delta), nil
	}
	i := strings.LastIndex(ep, ":")
	port, err := strconv.Atoi(ep[i+1:])
	if err != nil {
		return "", fmt.Errorf("endpoint %q has no numeric port", ep)
	}
	if port == 0 {
		return ep, nil
	}
	return ep[:i+1] + strconv.Itoa(port+delta), nil
}
