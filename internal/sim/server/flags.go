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
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/engine"
	"github.com/kvrouter/kvrouter/internal/sim/kvpublish"
	"github.com/kvrouter/kvrouter/internal/sim/timing"
)

// ErrHelp is ParseFlags' answer to --help: the caller prints Usage and exits successfully.
var ErrHelp = errors.New("help requested")

// Settings is a parsed vllm-sim command line: what Serve needs to run its engines.
type Settings struct {
	Model            string
	ServedModelNames []string
	Host             string
	Port             int
	// Engine is the configuration every engine starts from; Serve turns events on when the KV
	// events config enables them.
	Engine          engine.Config
	PrefixCaching   bool
	HashSubstituted bool // a pickle-based --prefix-caching-hash-algo was mapped to its CBOR variant
	KVEvents        KVEventsConfig
	// KVTransfer is vLLM's --kv-transfer-config; nil when absent (kv_transfer_params are then
	// ignored, as vLLM does without a connector).
	KVTransfer *KVTransferConfig
	// SideChannelHost and SideChannelPort are where engine 0's KV side channel listens and what
	// its prefill responses advertise (VLLM_NIXL_SIDE_CHANNEL_HOST / _PORT); engine i adds
	// DataParallelRank + i to the port. KVTransport prices the transfers; KVTransferTimeout is
	// how long (simulated) a prefill keeps blocks nobody pulls (VLLM_NIXL_ABORT_REQUEST_TIMEOUT).
	SideChannelHost   string
	SideChannelPort   int
	KVTransport       timing.Transport
	KVTransferTimeout time.Duration
	Encoding          kvpublish.Encoding
	IntHashes         bool
	LegacyReplay      bool
	LoRAModules       map[string]string
	// EnableLoRA is vLLM's --enable-lora; MaxLoRAs, MaxCPULoRAs and MaxLoRARank its adapter
	// limits (the GPU slots are Engine.MaxLoRAs once LoRA is on).
	EnableLoRA  bool
	MaxLoRAs    int
	MaxCPULoRAs int
	MaxLoRARank int
	APIKeys     []string
	// TokenizerDir is vLLM's --tokenizer: a directory holding the model's tokenizer.json (and
	// tokenizer_config.json); empty: the synthetic tokenizer.
	TokenizerDir string
	// Engines is how many engines the process hosts; engine i listens on Port+i and offsets its
	// event ports by DataParallelRank + i*PortStride.
	Engines          int
	PortStride       int
	DataParallelRank int
	TimeScale        float64
	Faults           Faults
	DropBatches      int
	RestartEvery     time.Duration
	LogLevel         slog.Level
	// SimAPI serves /sim/* and /reset_prefix_cache (--enable-sim-api); DevMode serves
	// /reset_prefix_cache alone, as vLLM does with VLLM_SERVER_DEV_MODE=1.
	SimAPI  bool
	DevMode bool
	// IgnoredFlags are the vLLM flags the simulator does not model, names only (see scan).
	IgnoredFlags []string

	// Inputs to the profile choice, which waits for the model (possibly positional).
	tensorParallel int
	profile        string
}

// KVEventsConfig is vLLM's --kv-events-config JSON.
type KVEventsConfig struct {
	Enable         bool   `json:"enable_kv_cache_events"`
	Publisher      string `json:"publisher"`
	Endpoint       string `json:"endpoint"`
	ReplayEndpoint string `json:"replay_endpoint"`
	Topic          string `json:"topic"`
	HWM            *int   `json:"hwm"`
	BufferSteps    int    `json:"buffer_steps"`
	MaxQueueSize   int    `json:"max_queue_size"`
}

// Enabled is true when events are to be published.
func (k KVEventsConfig) Enabled() bool { return k.Enable && k.Publisher != "null" }

// kind is how a flag takes its value on the command line and how the value is read.
type kind int

const (
	stringKind   kind = iota // --flag VALUE or --flag=VALUE, taken as is
	intKind                  // as stringKind; empty means the default
	floatKind                // as stringKind; empty means the default
	durationKind             // as stringKind; empty means the default
	boolKind                 // --flag, --flag=true|false, --no-flag; empty means the default
	listKind                 // --flag V1 V2 ... (vLLM's nargs="+"), repeatable
)

// value is a flag's value read according to its kind; only the field of that kind is set.
type value struct {
	str   string
	list  []string
	num   int
	float float64
	dur   time.Duration
	on    bool
}

// flagDef is one row of the flag table.
type flagDef struct {
	name    string
	aliases []string // vLLM's short forms
	kind    kind
	def     string // used when the flag is absent, or given empty unless it is a string
	// sim marks simulator-only flags, listed apart from vLLM's in the help.
	sim bool
	// arg names the value in the help; usage replaces "--name arg" where that reads badly.
	arg, usage string
	// help is the text of the flag's row, "\n" starting a continuation line; an empty help leaves
	// the flag out (its row is another flag's, or it is --help itself).
	help string
	// set stores the value. It runs whether or not the flag is given, and after a bad value too
	// (with what strconv made of it), so that resolve's range checks always have a value to check.
	set func(s *Settings, v value) error
}

// defaultModel is the model when neither --model nor a positional one is given.
const defaultModel = "meta-llama/Llama-3.1-8B-Instruct"

// flagTable is every flag vllm-sim knows, in help order; anything else is an ignored vLLM flag.
var flagTable = []flagDef{
	// vLLM flags the simulator models.
	{name: "model", kind: stringKind, arg: "M", help: `model path/name (default "` + defaultModel + `")`,
		set: func(s *Settings, v value) error { s.Model = v.str; return nil }},
	{name: "served-model-name", kind: listKind, arg: "N...", help: "names accepted in requests (default: the model)",
		set: func(s *Settings, v value) error { s.ServedModelNames = v.list; return nil }},
	{name: "host", kind: stringKind, def: "0.0.0.0", usage: "--host H --port P", help: "HTTP address (default 0.0.0.0:8000)",
		set: func(s *Settings, v value) error { s.Host = v.str; return nil }},
	{name: "port", kind: intKind, def: "8000",
		set: func(s *Settings, v value) error { s.Port = v.num; return nil }},
	{name: "block-size", kind: intKind, def: "16", arg: "B", help: "tokens per KV block (default 16)",
		set: func(s *Settings, v value) error { s.Engine.BlockSize = v.num; return nil }},
	{name: "max-model-len", kind: intKind, arg: "L", help: "context limit (default: the profile model's)",
		set: func(s *Settings, v value) error { s.Engine.MaxModelLen = v.num; return nil }},
	{name: "tensor-parallel-size", aliases: []string{"tp"}, kind: intKind, arg: "N", help: "TP size used by the time and memory model",
		set: func(s *Settings, v value) error { s.tensorParallel = v.num; return nil }},
	{name: "pipeline-parallel-size", aliases: []string{"pp"}, kind: stringKind, arg: "N", help: "accepted; not modelled",
		set: func(*Settings, value) error { return nil }},
	{name: "max-num-seqs", kind: intKind, def: "256", arg: "N", help: "running requests at most (default 256)",
		set: func(s *Settings, v value) error { s.Engine.MaxNumSeqs = v.num; return nil }},
	{name: "max-num-batched-tokens", kind: intKind, def: "8192", arg: "N", help: "tokens per scheduler step (default 8192)",
		set: func(s *Settings, v value) error { s.Engine.MaxNumBatchedTokens = v.num; return nil }},
	{name: "gpu-memory-utilization", kind: floatKind, def: "0.9", arg: "F", help: "fraction of GPU memory for weights+KV (default 0.9)",
		set: func(s *Settings, v value) error { s.Engine.GPUMemoryUtilization = v.float; return nil }},
	{name: "num-gpu-blocks-override", kind: intKind, arg: "N", help: "KV cache size in blocks (default: from the profile)",
		set: func(s *Settings, v value) error { s.Engine.NumBlocks = v.num; return nil }},
	{name: "enable-prefix-caching", kind: boolKind, def: "true", usage: "--[no-]enable-prefix-caching", help: "prefix caching (default on)",
		set: func(s *Settings, v value) error { s.PrefixCaching = v.on; return nil }},
	{name: "prefix-caching-hash-algo", kind: stringKind, def: blockhash.SHA256CBOR, arg: "A",
		help: "sha256_cbor (default) | xxhash_cbor (sha256/xxhash map to these)",
		set: func(s *Settings, v value) (err error) {
			s.Engine.HashAlgo, s.HashSubstituted, err = blockhash.Canonical(v.str)
			return err
		}},
	{name: "kv-events-config", kind: stringKind, arg: "JSON",
		help: `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557",` + "\n" +
			` "replay_endpoint":"tcp://*:5558","topic":"...","hwm":100000,"buffer_steps":10000}`,
		set: func(s *Settings, v value) error { return s.KVEvents.parse(v.str) }},
	{name: "kv-transfer-config", kind: stringKind, arg: "JSON",
		help: `{"kv_connector":"NixlConnector","kv_role":"kv_both"|"kv_producer"|` + "\n" +
			`"kv_consumer"}: serve disaggregated prefill/decode legs (kv_transfer_params)`,
		set: func(s *Settings, v value) error { return s.parseKVTransfer(v.str) }},
	{name: "lora-modules", kind: listKind, arg: "name=path...",
		help: "LoRA adapters accepted as model names (or {\"name\":..,\"path\":..});\nneeds --enable-lora",
		set:  setLoRAModules},
	{name: "enable-lora", kind: boolKind, help: "serve LoRA adapters (bounded GPU adapter slots, see --max-loras)",
		set: func(s *Settings, v value) error { s.EnableLoRA = v.on; return nil }},
	{name: "max-loras", kind: intKind, def: "1", arg: "N", help: "distinct adapters in a batch, the GPU adapter slots (default 1)",
		set: func(s *Settings, v value) error { s.MaxLoRAs = v.num; return nil }},
	{name: "max-cpu-loras", kind: intKind, arg: "N", help: "adapters kept in host memory (default --max-loras); checked, not modelled",
		set: func(s *Settings, v value) error { s.MaxCPULoRAs = v.num; return nil }},
	{name: "max-lora-rank", kind: intKind, def: "16", arg: "R", help: "largest adapter rank (default 16); checked, not modelled",
		set: func(s *Settings, v value) error { s.MaxLoRARank = v.num; return nil }},
	{name: "data-parallel-rank", kind: intKind, arg: "R", help: "offsets KV event ports by R and sets the batch's rank",
		set: func(s *Settings, v value) error { s.DataParallelRank = v.num; return nil }},
	{name: "api-key", kind: listKind, arg: "K...",
		help: "keys required as Authorization: Bearer K on every route but /health,\n/ping, /load, /version and /metrics (default: $VLLM_API_KEY)",
		set:  func(s *Settings, v value) error { s.APIKeys = v.list; return nil }},
	{name: "tokenizer", kind: stringKind, arg: "DIR",
		help: "directory of a tokenizer.json (+ tokenizer_config.json) to tokenize and\ntemplate with, as vLLM does (default: the synthetic tokenizer)",
		set:  func(s *Settings, v value) error { s.TokenizerDir = v.str; return nil }},
	{name: "help", kind: boolKind},

	// Simulator flags.
	{name: "sim-profile", sim: true, kind: stringKind, arg: "NAME",
		help: "timing/memory profile (default: chosen from model name and TP): " + strings.Join(timing.Names(), ", "),
		set:  func(s *Settings, v value) error { s.profile = v.str; return nil }},
	{name: "time-scale", sim: true, kind: floatKind, def: "1", arg: "F", help: "simulated seconds per wall second (default 1)",
		set: func(s *Settings, v value) error { s.TimeScale = v.float; return nil }},
	{name: "kv-events-encoding", sim: true, kind: stringKind, def: "map", arg: "E", help: "map (vLLM >= 0.24, default) | array (vLLM <= 0.23)",
		set: func(s *Settings, v value) (err error) { s.Encoding, err = kvpublish.ParseEncoding(v.str); return err }},
	{name: "legacy-replay", sim: true, kind: boolKind, help: "answer replays without the topic frame (vLLM <= ~0.23, SGLang)",
		set: func(s *Settings, v value) error { s.LegacyReplay = v.on; return nil }},
	{name: "lora-load-time", sim: true, kind: floatKind, def: "0.025", arg: "S",
		help: "seconds to load an adapter into a GPU slot, added to the step that first\nruns it (default 0.025: a rank-16 adapter from host memory)",
		set:  func(s *Settings, v value) error { s.Engine.LoRALoadTime = v.float; return nil }},
	{name: "step-noise", sim: true, kind: floatKind, def: "0", arg: "CV",
		help: "coefficient of variation of a mean-1 lognormal factor on every step's\nduration (default 0: deterministic steps; kvbench simulate uses 0.05)",
		set:  func(s *Settings, v value) error { s.Engine.StepNoise = v.float; return nil }},
	{name: "engines", sim: true, kind: intKind, def: "1", arg: "N",
		help: "host N engines: engine i serves HTTP on port+i and KV events on the\nevent/replay ports + i*stride; \"{engine}\" in the topic becomes i",
		set:  func(s *Settings, v value) error { s.Engines = v.num; return nil }},
	{name: "kv-events-port-stride", sim: true, kind: intKind, def: "2", arg: "S", help: "port step between engines (default 2)",
		set: func(s *Settings, v value) error { s.PortStride = v.num; return nil }},
	{name: "fault-drop-batches", sim: true, kind: intKind, arg: "N", help: "drop the first N event batches from the live stream (kept for replay)",
		set: func(s *Settings, v value) error { s.DropBatches = v.num; return nil }},
	{name: "fault-event-delay", sim: true, kind: durationKind, arg: "D", help: "delay every event batch by D (e.g. 200ms)",
		set: func(s *Settings, v value) error { s.Faults.EventDelay = v.dur; return nil }},
	{name: "fault-fail-fraction", sim: true, kind: floatKind, arg: "F", help: "fail this fraction of requests with HTTP 500",
		set: func(s *Settings, v value) error { s.Faults.FailFraction = v.float; return nil }},
	{name: "fault-tokenize-delay", sim: true, kind: durationKind, arg: "D", help: "add D to every tokenization",
		set: func(s *Settings, v value) error { s.Faults.TokenizeDelay = v.dur; return nil }},
	{name: "fault-tokenize-fail-fraction", sim: true, kind: floatKind, arg: "F", help: "fail this fraction of /tokenize calls with HTTP 500",
		set: func(s *Settings, v value) error { s.Faults.TokenizeFailFraction = v.float; return nil }},
	{name: "fault-replay-down", sim: true, kind: boolKind, help: "leave replay requests unanswered (replay unavailable)",
		set: func(s *Settings, v value) error { s.Faults.ReplayDown = v.on; return nil }},
	{name: "kv-transport", sim: true, kind: stringKind, def: "rdma", arg: "T",
		help: "link the KV of a disaggregated request crosses: " + strings.Join(timing.TransportNames(), " | ") + " (default rdma)",
		set: func(s *Settings, v value) (err error) {
			s.KVTransport, err = timing.LookupTransport(v.str)
			if err != nil {
				err = fmt.Errorf("--kv-transport: %w", err)
			}
			return err
		}},
	{name: "kv-transfer-timeout", sim: true, kind: durationKind, arg: "D",
		help: "simulated time a prefill engine keeps KV blocks no decode engine pulls\n(default $VLLM_NIXL_ABORT_REQUEST_TIMEOUT seconds, else 480s)",
		set:  func(s *Settings, v value) error { s.KVTransferTimeout = v.dur; return nil }},
	{name: "fault-kv-transfer-fail-fraction", sim: true, kind: floatKind, arg: "F",
		help: "fail this fraction of KV pulls (the decode engine recomputes the prompt)",
		set:  func(s *Settings, v value) error { s.Faults.KVTransferFailFraction = v.float; return nil }},
	{name: "fault-kv-transfer-delay", sim: true, kind: durationKind, arg: "D", help: "add D (wall clock) to every KV pull",
		set: func(s *Settings, v value) error { s.Faults.KVTransferDelay = v.dur; return nil }},
	{name: "fault-restart-every", sim: true, kind: durationKind, arg: "D", help: "restart each engine every D (sequence back to 0, cache empty)",
		set: func(s *Settings, v value) error { s.RestartEvery = v.dur; return nil }},
	{name: "enable-sim-api", sim: true, kind: boolKind,
		help: "serve /sim/faults, /sim/stats, /sim/cache and /reset_prefix_cache (for tests;\noff by default, as a deployed engine has none of them)",
		set:  func(s *Settings, v value) error { s.SimAPI = v.on; return nil }},
	{name: "log-level", sim: true, kind: stringKind, def: "info", arg: "L", help: "debug | info | warn | error (default info)",
		set: func(s *Settings, v value) error {
			if err := s.LogLevel.UnmarshalText([]byte(v.str)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			return nil
		}},
}

// flagIndex finds a table row by name or alias.
var flagIndex = func() map[string]*flagDef {
	m := map[string]*flagDef{}
	for i := range flagTable {
		f := &flagTable[i]
		for _, n := range append([]string{f.name}, f.aliases...) {
			m[n] = f
		}
	}
	return m
}()

func lookupFlag(name string) *flagDef { return flagIndex[name] }

// ParseFlags reads vllm-sim's command line, which is vLLM's ("vllm serve MODEL --flag ...") plus
// sim-only flags; lookupEnv (os.LookupEnv) supplies the environment variables vLLM reads too.
// Every bad value is reported, joined into one error; --help gives ErrHelp.
func ParseFlags(args []string, lookupEnv func(string) (string, bool)) (*Settings, error) {
	c, err := scan(args)
	if err != nil {
		return nil, err
	}
	if _, ok := c.given["help"]; ok {
		return nil, ErrHelp
	}
	s := &Settings{IgnoredFlags: c.ignored, LoRAModules: map[string]string{}}
	var errs []error
	for i := range flagTable {
		f := &flagTable[i]
		if f.set == nil {
			continue
		}
		v, bad := f.read(c.given[f.name])
		if err := f.set(s, v); err != nil {
			errs = append(errs, err)
		}
		if bad != nil {
			errs = append(errs, bad)
		}
	}
	errs = append(errs, s.resolve(c.positional, lookupEnv)...)
	return s, errors.Join(errs...)
}

// read turns the values given for f (none when absent) into its kind. A bad value still yields
// what strconv made of it, as the setters expect.
func (f *flagDef) read(given []string) (value, error) {
	if f.kind == listKind {
		return value{list: given}, nil
	}
	raw := f.def
	if len(given) > 0 {
		raw = given[len(given)-1]
	}
	if f.kind == stringKind {
		return value{str: raw}, nil // "--host=" means the empty host, not the default
	}
	if raw == "" {
		raw = f.def
	}
	if raw == "" {
		return value{}, nil
	}
	var v value
	var err error
	var what string
	switch f.kind {
	case intKind:
		v.num, err = strconv.Atoi(raw)
		what = "an integer"
	case floatKind:
		v.float, err = strconv.ParseFloat(raw, 64)
		what = "a number"
	case durationKind:
		v.dur, err = time.ParseDuration(raw)
		what = "a duration"
	case boolKind:
		v.on, err = strconv.ParseBool(raw)
		what = "a boolean"
	}
	if err != nil {
		return v, fmt.Errorf("--%s: %q is not %s", f.name, raw, what)
	}
	return v, nil
}

// resolve fills what depends on several flags, on positional arguments or on the environment,
// and checks the ranges no single flag can.
func (s *Settings) resolve(positional []string, lookupEnv func(string) (string, bool)) []error {
	var errs []error
	if s.Model == "" && len(positional) > 0 {
		s.Model, positional = positional[0], positional[1:]
	}
	if len(positional) > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %s", strings.Join(positional, " ")))
	}
	if s.Model == "" {
		s.Model = defaultModel
	}
	if len(s.ServedModelNames) == 0 {
		s.ServedModelNames = []string{s.Model}
	}
	if s.profile != "" {
		prof, err := timing.Lookup(s.profile)
		if err != nil {
			errs = append(errs, err)
		} else if s.tensorParallel > 0 && s.tensorParallel != prof.TP {
			errs = append(errs, fmt.Errorf("--sim-profile %s is for TP %d, but --tensor-parallel-size is %d", s.profile, prof.TP, s.tensorParallel))
		}
		s.Engine.Profile = prof
	} else {
		s.Engine.Profile = timing.ForModel(s.Model, s.tensorParallel)
	}
	if seed, ok := lookupEnv("PYTHONHASHSEED"); ok {
		s.Engine.HashSeed = &seed
	}
	// As in vLLM, --api-key wins over VLLM_API_KEY.
	if k, _ := lookupEnv("VLLM_API_KEY"); len(s.APIKeys) == 0 && k != "" {
		s.APIKeys = []string{k}
	}
	dev, _ := lookupEnv("VLLM_SERVER_DEV_MODE")
	s.DevMode = dev == "1"
	ints, _ := lookupEnv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES")
	s.IntHashes = ints != "0"
	errs = append(errs, s.resolveLoRA()...)
	errs = append(errs, s.resolveKVTransfer(lookupEnv)...)
	if s.Engine.StepNoise < 0 {
		errs = append(errs, fmt.Errorf("--step-noise must not be negative, got %v", s.Engine.StepNoise))
	}
	switch {
	case s.Engines < 1:
		errs = append(errs, errors.New("--engines must be at least 1"))
	case s.TimeScale <= 0:
		errs = append(errs, errors.New("--time-scale must be positive"))
	case s.Faults.FailFraction < 0 || s.Faults.FailFraction > 1:
		errs = append(errs, errors.New("--fault-fail-fraction must be within [0, 1]"))
	case s.Faults.TokenizeFailFraction < 0 || s.Faults.TokenizeFailFraction > 1:
		errs = append(errs, errors.New("--fault-tokenize-fail-fraction must be within [0, 1]"))
	case s.Faults.KVTransferFailFraction < 0 || s.Faults.KVTransferFailFraction > 1:
		errs = append(errs, errors.New("--fault-kv-transfer-fail-fraction must be within [0, 1]"))
	case s.Faults.KVTransferDelay < 0:
		errs = append(errs, errors.New("--fault-kv-transfer-delay must not be negative"))
	}
	return errs
}

// vLLM's accepted --max-lora-rank values.
var loraRanks = []int{1, 8, 16, 32, 64, 128, 256, 320, 512}

// resolveLoRA checks the LoRA flags as vLLM does and turns the adapter slots on.
func (s *Settings) resolveLoRA() []error {
	var errs []error
	if s.Engine.LoRALoadTime < 0 {
		errs = append(errs, fmt.Errorf("--lora-load-time must not be negative, got %v", s.Engine.LoRALoadTime))
	}
	if !s.EnableLoRA {
		if len(s.LoRAModules) > 0 {
			errs = append(errs, errors.New("--lora-modules needs --enable-lora (vLLM refuses adapters when LoRA is not enabled)"))
		}
		return errs
	}
	if s.MaxLoRAs < 1 {
		errs = append(errs, fmt.Errorf("--max-loras must be at least 1, got %d", s.MaxLoRAs))
	}
	if s.MaxCPULoRAs == 0 {
		s.MaxCPULoRAs = s.MaxLoRAs
	} else if s.MaxCPULoRAs < s.MaxLoRAs {
		errs = append(errs, fmt.Errorf("--max-cpu-loras (%d) must be at least --max-loras (%d)", s.MaxCPULoRAs, s.MaxLoRAs))
	}
	if !slices.Contains(loraRanks, s.MaxLoRARank) {
		errs = append(errs, fmt.Errorf("--max-lora-rank must be one of %v, got %d", loraRanks, s.MaxLoRARank))
	}
	s.Engine.MaxLoRAs = max(0, s.MaxLoRAs)
	return errs
}

const usageIntro = `vllm-sim: a simulated vLLM engine (OpenAI API, /tokenize, vllm: metrics, KV events over ZMQ).

Usage: vllm-sim [serve] [MODEL] [vLLM flags] [sim flags]

vLLM flags (same meaning as vllm serve):
`

const usageVLLMNotes = `Environment: PYTHONHASHSEED (hash seed; unset = random), VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES (1 = int
hashes, default; 0 = bytes), VLLM_API_KEY (the key when --api-key is not given), VLLM_SERVER_DEV_MODE
(1 = serve POST /reset_prefix_cache, as vLLM does only in dev mode). With --kv-transfer-config:
VLLM_NIXL_SIDE_CHANNEL_HOST (advertised KV side-channel host; default --host, or localhost for 0.0.0.0),
VLLM_NIXL_SIDE_CHANNEL_PORT (default 5600; engine i listens on it + data-parallel rank + i),
VLLM_NIXL_ABORT_REQUEST_TIMEOUT (seconds, default of --kv-transfer-timeout).
Other vLLM flags are accepted and ignored with one warning.

Simulator flags:
`

const usageSimNotes = "Faults can also be changed at run time: POST /sim/faults (with --enable-sim-api).\n"

// helpColumn is where a row's help text starts, after the two-space indent.
const helpColumn = 30

// Usage is the --help text, written from the flag table.
func Usage() string {
	var b strings.Builder
	b.WriteString(usageIntro)
	writeFlagRows(&b, false)
	b.WriteString(usageVLLMNotes)
	writeFlagRows(&b, true)
	b.WriteString(usageSimNotes)
	return b.String()
}

func writeFlagRows(b *strings.Builder, sim bool) {
	for _, f := range flagTable {
		if f.sim != sim || f.help == "" {
			continue
		}
		left := f.usage
		if left == "" {
			left = strings.TrimSpace("--" + f.name + " " + f.arg)
		}
		lines := strings.Split(f.help, "\n")
		fmt.Fprintf(b, "  %-*s%s\n", max(helpColumn, len(left)+2), left, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(b, "  %*s%s\n", helpColumn, "", l)
		}
	}
}

// parse reads the JSON of --kv-events-config ("" leaves events off) and fills vLLM's defaults.
func (k *KVEventsConfig) parse(raw string) error {
	if raw == "" {
		return nil
	}
	var errs []error
	if err := json.Unmarshal([]byte(raw), k); err != nil {
		errs = append(errs, fmt.Errorf("--kv-events-config: %w", err))
	}
	if k.Publisher == "" && k.Enable {
		k.Publisher = "zmq"
	}
	if k.Publisher != "zmq" && k.Publisher != "null" && k.Publisher != "" {
		errs = append(errs, fmt.Errorf("--kv-events-config: publisher %q is not supported (zmq or null)", k.Publisher))
	}
	if k.Endpoint == "" {
		k.Endpoint = "tcp://*:5557"
	}
	return errors.Join(errs...)
}

func setLoRAModules(s *Settings, v value) error {
	var errs []error
	for _, m := range v.list {
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
		s.LoRAModules[name] = path
	}
	return errors.Join(errs...)
}
