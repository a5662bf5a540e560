// Command vllm-sim is a simulated vLLM engine: vLLM's HTTP API, metrics and KV-cache event stream
// backed by a paged-cache and continuous-batching model that runs in scaled real time. It accepts
// the command line of "vllm serve" (so the operator can swap the image), plus sim-only flags.
// See docs/simulator.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/engine"
	"github.com/kvrouter/kvrouter/internal/sim/kvpublish"
	"github.com/kvrouter/kvrouter/internal/sim/server"
	"github.com/kvrouter/kvrouter/internal/sim/timing"
	"github.com/kvrouter/kvrouter/internal/sim/tokenizer"
)

var spec = map[string]argSpec{
	// vLLM flags the simulator models.
	"model": single, "served-model-name": multi, "host": single, "port": single, "block-size": single,
	"max-model-len": single, "tensor-parallel-size": single, "pipeline-parallel-size": single,
	"prefix-caching-hash-algo": single, "kv-events-config": single, "max-num-seqs": single,
	"max-num-batched-tokens": single, "gpu-memory-utilization": single, "num-gpu-blocks-override": single,
	"enable-prefix-caching": boolean, "lora-modules": multi, "data-parallel-rank": single, "api-key": multi,
	// Simulator flags.
	"sim-profile": single, "time-scale": single, "kv-events-encoding": single, "engines": single,
	"kv-events-port-stride": single, "legacy-replay": boolean, "fault-drop-batches": single,
	"fault-event-delay": single, "fault-fail-fraction": single, "fault-tokenize-delay": single,
	"fault-restart-every": single, "fault-tokenize-fail-fraction": single, "fault-replay-down": boolean,
	"log-level": single, "help": boolean,
}

const usage = `vllm-sim: a simulated vLLM engine (OpenAI API, /tokenize, vllm: metrics, KV events over ZMQ).

Usage: vllm-sim [serve] [MODEL] [vLLM flags] [sim flags]

vLLM flags (same meaning as vllm serve):
  --model M                     model path/name (default "meta-llama/Llama-3.1-8B-Instruct")
  --served-model-name N...      names accepted in requests (default: the model)
  --host H --port P             HTTP address (default 0.0.0.0:8000)
  --block-size B                tokens per KV block (default 16)
  --max-model-len L             context limit (default: the profile model's)
  --tensor-parallel-size N      TP size used by the time and memory model
  --pipeline-parallel-size N    accepted; not modelled
  --max-num-seqs N              running requests at most (default 256)
  --max-num-batched-tokens N    tokens per scheduler step (default 8192)
  --gpu-memory-utilization F    fraction of GPU memory for weights+KV (default 0.9)
  --num-gpu-blocks-override N   KV cache size in blocks (default: from the profile)
  --[no-]enable-prefix-caching  prefix caching (default on)
  --prefix-caching-hash-algo A  sha256_cbor (default) | xxhash_cbor (sha256/xxhash map to these)
  --kv-events-config JSON       {"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557",
                                 "replay_endpoint":"tcp://*:5558","topic":"...","hwm":100000,"buffer_steps":10000}
  --lora-modules name=path...   LoRA adapters accepted as model names
  --data-parallel-rank R        offsets KV event ports by R and sets the batch's rank
  --api-key K...                keys required as Authorization: Bearer K on every route but /health,
                                /ping, /load, /version and /metrics (default: $VLLM_API_KEY)
Environment: PYTHONHASHSEED (hash seed; unset = random), VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES (1 = int
hashes, default; 0 = bytes), VLLM_API_KEY (the key when --api-key is not given).
Other vLLM flags are accepted and ignored with one warning.

Simulator flags:
  --sim-profile NAME            timing/memory profile (default: chosen from model name and TP): ` + "%s" + `
  --time-scale F                simulated seconds per wall second (default 1)
  --kv-events-encoding E        map (vLLM >= 0.24, default) | array (vLLM <= 0.23)
  --legacy-replay               answer replays without the topic frame (vLLM <= ~0.23, SGLang)
  --engines N                   host N engines: engine i serves HTTP on port+i and KV events on the
                                event/replay ports + i*stride; "{engine}" in the topic becomes i
  --kv-events-port-stride S     port step between engines (default 2)
  --fault-drop-batches N        drop the first N event batches from the live stream (kept for replay)
  --fault-event-delay D         delay every event batch by D (e.g. 200ms)
  --fault-fail-fraction F       fail this fraction of requests with HTTP 500
  --fault-tokenize-delay D      add D to every tokenization
  --fault-tokenize-fail-fraction F  fail this fraction of /tokenize calls with HTTP 500
  --fault-replay-down           leave replay requests unanswered (replay unavailable)
  --fault-restart-every D       restart each engine every D (sequence back to 0, cache empty)
  --log-level L                 debug | info | warn | error (default info)
Faults can also be changed at run time: POST /sim/faults.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], nil); err != nil {
		fmt.Fprintln(os.Stderr, "vllm-sim:", err)
		os.Exit(1)
	}
}

// settings is the parsed command line.
type settings struct {
	model, host             string
	served                  []string
	port                    int
	engineCfg               engine.Config
	prefixCaching           bool
	kv                      kvEventsConfig
	encoding                kvpublish.Encoding
	intHashes               bool
	legacyReplay            bool
	engines, stride, dpRank int
	timeScale               float64
	faults                  server.Faults
	dropBatches             int
	restartEvery            time.Duration
	lora                    map[string]string
	hashAlgo                string
	hashSubstituted         bool
	apiKeys                 []string
	unknown                 []string
	logLevel                slog.Level
}

// kvEventsConfig is vLLM's --kv-events-config JSON.
type kvEventsConfig struct {
	Enable         bool   `json:"enable_kv_cache_events"`
	Publisher      string `json:"publisher"`
	Endpoint       string `json:"endpoint"`
	ReplayEndpoint string `json:"replay_endpoint"`
	Topic          string `json:"topic"`
	HWM            *int   `json:"hwm"`
	BufferSteps    int    `json:"buffer_steps"`
	MaxQueueSize   int    `json:"max_queue_size"`
}

func (k kvEventsConfig) enabled() bool { return k.Enable && k.Publisher != "null" }

func parseSettings(args []string) (*settings, error) {
	p, err := parseArgs(args, spec)
	if err != nil {
		return nil, err
	}
	if _, ok := p.values["help"]; ok {
		fmt.Printf(usage, strings.Join(timing.Names(), ", "))
		os.Exit(0)
	}
	get := func(name, def string) string {
		if v, ok := p.values[name]; ok {
			return v[len(v)-1]
		}
		return def
	}
	var errs []error
	num := func(name string, def int) int {
		v := get(name, "")
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %q is not an integer", name, v))
		}
		return n
	}
	float := func(name string, def float64) float64 {
		v := get(name, "")
		if v == "" {
			return def
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %q is not a number", name, v))
		}
		return f
	}
	dur := func(name string) time.Duration {
		v := get(name, "")
		if v == "" {
			return 0
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %q is not a duration", name, v))
		}
		return d
	}
	boolean := func(name string, def bool) bool {
		v := get(name, "")
		if v == "" {
			return def
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %q is not a boolean", name, v))
		}
		return b
	}

	s := &settings{unknown: p.unknown, lora: map[string]string{}}
	s.model = get("model", "")
	if s.model == "" && len(p.positional) > 0 {
		s.model = p.positional[0]
		p.positional = p.positional[1:]
	}
	if len(p.positional) > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %s", strings.Join(p.positional, " ")))
	}
	if s.model == "" {
		s.model = "meta-llama/Llama-3.1-8B-Instruct"
	}
	s.served = p.values["served-model-name"]
	if len(s.served) == 0 {
		s.served = []string{s.model}
	}
	s.host = get("host", "0.0.0.0")
	s.port = num("port", 8000)
	tp := num("tensor-parallel-size", 0)
	var prof timing.Profile
	if name := get("sim-profile", ""); name != "" {
		prof, err = timing.Lookup(name)
		if err != nil {
			errs = append(errs, err)
		} else if tp > 0 && tp != prof.TP {
			errs = append(errs, fmt.Errorf("--sim-profile %s is for TP %d, but --tensor-parallel-size is %d", name, prof.TP, tp))
		}
	} else {
		prof = timing.ForModel(s.model, tp)
	}
	s.hashAlgo, s.hashSubstituted, err = blockhash.Canonical(get("prefix-caching-hash-algo", blockhash.SHA256CBOR))
	if err != nil {
		errs = append(errs, err)
	}
	var seed *string
	if v, ok := os.LookupEnv("PYTHONHASHSEED"); ok {
		seed = &v
	}
	s.engineCfg = engine.Config{
		Profile: prof, BlockSize: num("block-size", 16), NumBlocks: num("num-gpu-blocks-override", 0),
		GPUMemoryUtilization: float("gpu-memory-utilization", 0.9), MaxNumSeqs: num("max-num-seqs", 256),
		MaxNumBatchedTokens: num("max-num-batched-tokens", 8192), MaxModelLen: num("max-model-len", 0),
		HashAlgo: s.hashAlgo, HashSeed: seed,
	}
	s.prefixCaching = boolean("enable-prefix-caching", true)
	// As in vLLM, --api-key wins over VLLM_API_KEY.
	s.apiKeys = p.values["api-key"]
	if k := os.Getenv("VLLM_API_KEY"); len(s.apiKeys) == 0 && k != "" {
		s.apiKeys = []string{k}
	}
	for _, m := range p.values["lora-modules"] {
		name, path, ok := strings.Cut(m, "=")
		if !ok {
			// vLLM also accepts a JSON object per module.
			var j struct{ Name, Path string }
			if json.Unmarshal([]byte(m), &j) != nil || j.Name == "" {
				errs = append(errs, fmt.Errorf("--lora-modules: %q is neither name=path nor JSON", m))
				continue
			}
			name, path = j.Name, j.Path
		}
		s.lora[name] = path
	}
	if raw := get("kv-events-config", ""); raw != "" {
		if err := json.Unmarshal([]byte(raw), &s.kv); err != nil {
			errs = append(errs, fmt.Errorf("--kv-events-config: %w", err))
		}
		if s.kv.Publisher == "" && s.kv.Enable {
			s.kv.Publisher = "zmq"
		}
		if s.kv.Publisher != "zmq" && s.kv.Publisher != "null" && s.kv.Publisher != "" {
			errs = append(errs, fmt.Errorf("--kv-events-config: publisher %q is not supported (zmq or null)", s.kv.Publisher))
		}
		if s.kv.Endpoint == "" {
			s.kv.Endpoint = "tcp://*:5557"
		}
	}
	s.encoding, err = kvpublish.ParseEncoding(get("kv-events-encoding", "map"))
	if err != nil {
		errs = append(errs, err)
	}
	s.intHashes = os.Getenv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES") != "0"
	s.legacyReplay = boolean("legacy-replay", false)
	s.engines = num("engines", 1)
	s.stride = num("kv-events-port-stride", 2)
	s.dpRank = num("data-parallel-rank", 0)
	s.timeScale = float("time-scale", 1)
	s.faults = server.Faults{FailFraction: float("fault-fail-fraction", 0), TokenizeDelay: dur("fault-tokenize-delay"),
		EventDelay: dur("fault-event-delay"), TokenizeFailFraction: float("fault-tokenize-fail-fraction", 0),
		ReplayDown: boolean("fault-replay-down", false)}
	s.dropBatches = num("fault-drop-batches", 0)
	s.restartEvery = dur("fault-restart-every")
	if err := s.logLevel.UnmarshalText([]byte(get("log-level", "info"))); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	switch {
	case s.engines < 1:
		errs = append(errs, errors.New("--engines must be at least 1"))
	case s.timeScale <= 0:
		errs = append(errs, errors.New("--time-scale must be positive"))
	case s.faults.FailFraction < 0 || s.faults.FailFraction > 1:
		errs = append(errs, errors.New("--fault-fail-fraction must be within [0, 1]"))
	case s.faults.TokenizeFailFraction < 0 || s.faults.TokenizeFailFraction > 1:
		errs = append(errs, errors.New("--fault-tokenize-fail-fraction must be within [0, 1]"))
	}
	return s, errors.Join(errs...)
}

// offsetEndpoint adds delta to the port of a tcp endpoint (vLLM's DP offset rule); port 0 (an
// ephemeral port) and non-tcp endpoints get a suffix-free copy or "_<delta>" suffix respectively.
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

// run serves until ctx ends; ready, when not nil, receives the HTTP addresses once listening.
func run(ctx context.Context, args []string, ready func([]string)) error {
	s, err := parseSettings(args)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: s.logLevel}))
	slog.SetDefault(log)
	if len(s.unknown) > 0 {
		// Names only: a value may be a secret (--hf-token).
		log.Warn("ignoring vLLM flags the simulator does not model", "flags", strings.Join(flagNames(s.unknown), " "))
	}
	if s.hashSubstituted {
		log.Warn("pickle-based prefix caching hash cannot be reproduced outside Python; using its CBOR variant", "algo", s.hashAlgo)
	}
	if os.Getenv("PYTHONHASHSEED") == "" {
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
	errc := make(chan error, s.engines)
	for i := 0; i < s.engines; i++ {
		eng, err := engine.New(withEvents(s.engineCfg, s.kv.enabled()))
		if err != nil {
			return fmt.Errorf("engine %d: %w", i, err)
		}
		opt := server.Options{
			ServedModelNames: s.served, ModelPath: s.model, LoRAModules: s.lora, TimeScale: s.timeScale,
			PrefixCaching: s.prefixCaching, HashAlgo: s.hashAlgo, Tokenizer: tok, Faults: s.faults,
			Logger: log.With("engine", i), APIKeys: s.apiKeys,
		}
		if s.kv.enabled() {
			pub, src, err := openPublisher(s, i, log.With("engine", i))
			if err != nil {
				return fmt.Errorf("engine %d: %w", i, err)
			}
			closers = append(closers, func() { _ = pub.Close() })
			if s.dropBatches > 0 {
				pub.DropNext(s.dropBatches)
			}
			opt.Publisher, opt.KVEventSources = pub, []server.KVEventSource{src}
		}
		srv := server.New(eng, opt)
		addr := net.JoinHostPort(s.host, strconv.Itoa(s.port+i))
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
		if s.restartEvery > 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.NewTicker(s.restartEvery)
				defer t.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-t.C:
						if err := srv.Restart(); err != nil {
							log.Error("restart failed", "engine", i, "err", err)
						}
					}
				}
			}()
		}
		if i == 0 || s.logLevel <= slog.LevelDebug {
			cfg := eng.Config()
			log.Info("engine ready", "engine", i, "http", ln.Addr().String(), "model", s.served[0], "profile", cfg.Profile.Name,
				"num_gpu_blocks", cfg.NumBlocks, "block_size", cfg.BlockSize, "max_model_len", cfg.MaxModelLen,
				"kv_events", s.kv.enabled(), "encoding", s.encoding.String(), "int_hashes", s.intHashes, "time_scale", s.timeScale)
		}
	}
	if s.engines > 1 {
		log.Info("engines ready", "count", s.engines, "http_ports", fmt.Sprintf("%d-%d", s.port, s.port+s.engines-1))
	}
	if ready != nil {
		ready(addrs)
	}
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

// flagNames strips the values from unknown flags ("--hf-token=x", "--hf-token x" -> "--hf-token").
func flagNames(unknown []string) []string {
	names := make([]string, len(unknown))
	for i, u := range unknown {
		names[i], _, _ = strings.Cut(u, " ")
		names[i], _, _ = strings.Cut(names[i], "=")
	}
	return names
}

func withEvents(c engine.Config, on bool) engine.Config {
	c.EmitEvents = on
	return c
}

func openPublisher(s *settings, i int, log *slog.Logger) (*kvpublish.Publisher, server.KVEventSource, error) {
	delta := s.dpRank + i*s.stride
	ep, err := offsetEndpoint(s.kv.Endpoint, delta)
	if err != nil {
		return nil, server.KVEventSource{}, err
	}
	rep, err := offsetEndpoint(s.kv.ReplayEndpoint, delta)
	if err != nil {
		return nil, server.KVEventSource{}, err
	}
	topic := strings.ReplaceAll(s.kv.Topic, "{engine}", strconv.Itoa(i))
	hwm := 100000
	if s.kv.HWM != nil {
		hwm = *s.kv.HWM
	}
	pub, err := kvpublish.New(kvpublish.Config{
		Endpoint: ep, ReplayEndpoint: rep, Topic: topic, HWM: hwm, BufferSteps: s.kv.BufferSteps,
		MaxQueueSize: s.kv.MaxQueueSize, DPRank: s.dpRank, LegacyReplay: s.legacyReplay, Logger: log,
		Encoder: kvpublish.Encoder{Encoding: s.encoding, IntHashes: s.intHashes},
	})
	if err != nil {
		return nil, server.KVEventSource{}, err
	}
	return pub, server.KVEventSource{DataParallelRank: s.dpRank, Endpoint: ep, ReplayEndpoint: rep, Topic: topic}, nil
}
