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
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/kvpublish"
	"github.com/kvrouter/kvrouter/internal/sim/timing"
)

// env is a fixed environment for ParseFlags, so that the tests do not depend on the real one.
func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func mustParse(t *testing.T, args ...string) *Settings {
	t.Helper()
	s, err := ParseFlags(args, env())
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return s
}

// The exact argument list the operator renders (contracts), plus unmodelled vLLM flags.
var operatorArgs = []string{
	"--model", "Qwen/Qwen2.5-32B-Instruct", "--served-model-name", "qwen", "--port", "8000",
	"--tensor-parallel-size", "2", "--pipeline-parallel-size", "1", "--block-size", "32", "--max-model-len", "16384",
	"--prefix-caching-hash-algo", "sha256_cbor",
	"--kv-events-config", `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558","topic":"kv@pod-1@qwen"}`,
	"--enable-chunked-prefill", "--gpu-memory-utilization", "0.85", "--trust-remote-code", "--swap-space", "4",
	"--max_num_seqs=128", "--no-enable-prefix-caching",
}

func TestOperatorCommandLine(t *testing.T) {
	s := mustParse(t, operatorArgs...)
	c := s.Engine
	if s.Model != "Qwen/Qwen2.5-32B-Instruct" || fmt.Sprint(s.ServedModelNames) != "[qwen]" || s.Port != 8000 || c.BlockSize != 32 ||
		c.MaxModelLen != 16384 || c.Profile.TP != 2 || c.GPUMemoryUtilization != 0.85 || c.MaxNumSeqs != 128 || s.PrefixCaching {
		t.Fatalf("settings %+v engine %+v", s, c)
	}
	if !strings.Contains(c.Profile.Name, "32b") {
		t.Fatalf("profile %s for a 32B model", c.Profile.Name)
	}
	if !s.KVEvents.Enabled() || s.KVEvents.Endpoint != "tcp://*:5557" || s.KVEvents.ReplayEndpoint != "tcp://*:5558" || s.KVEvents.Topic != "kv@pod-1@qwen" {
		t.Fatalf("kv %+v", s.KVEvents)
	}
	// "4" went with --swap-space: as a positional it would have been an unexpected argument.
	if got := strings.Join(s.IgnoredFlags, "|"); got != "--enable-chunked-prefill|--trust-remote-code|--swap-space" {
		t.Fatalf("ignored flags %q", got)
	}
}

func TestArgForms(t *testing.T) {
	s := mustParse(t, "serve", "my/model", "--served-model-name", "a", "b", "-tp", "4", "--enable-lora", "--lora-modules", "x=/p", `{"name":"y","path":"/q"}`)
	if s.Model != "my/model" || fmt.Sprint(s.ServedModelNames) != "[a b]" || s.Engine.Profile.TP != 4 || s.LoRAModules["x"] != "/p" || s.LoRAModules["y"] != "/q" {
		t.Fatalf("%+v", s)
	}
	for _, bad := range [][]string{{"--port"}, {"--port", "x"}, {"--engines", "0"}, {"--time-scale", "0"},
		{"--kv-events-encoding", "cbor"}, {"--prefix-caching-hash-algo", "md5"}, {"--kv-events-config", "{"},
		{"--sim-profile", "nope"}, {"m1", "m2"}} {
		if _, err := ParseFlags(bad, env()); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestAPIKeyFlagAndEnv(t *testing.T) {
	s, err := ParseFlags([]string{"--model", "m"}, env("VLLM_API_KEY", "from-env"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.APIKeys, []string{"from-env"}) {
		t.Errorf("VLLM_API_KEY alone: keys %q", s.APIKeys)
	}
	// As in vLLM, the flag wins; it takes several keys.
	s, err = ParseFlags([]string{"--model", "m", "--api-key", "a", "b"}, env("VLLM_API_KEY", "from-env"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.APIKeys, []string{"a", "b"}) {
		t.Errorf("--api-key a b with VLLM_API_KEY set: keys %q", s.APIKeys)
	}
	s, err = ParseFlags([]string{"--model", "m"}, env("VLLM_API_KEY", ""))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.APIKeys) != 0 {
		t.Errorf("no key configured: keys %q", s.APIKeys)
	}
}

func TestIgnoredFlagsKeepNoValues(t *testing.T) {
	s := mustParse(t, "--model", "m", "--hf-token", "hf_secret", "--download-dir=/secret/path", "--trust-remote-code",
		"--hf_token2", "-77777", "-dp", "2")
	if want := []string{"--hf-token", "--download-dir", "--trust-remote-code", "--hf_token2", "-dp"}; !slices.Equal(s.IgnoredFlags, want) {
		t.Errorf("ignored flags %q, want %q", s.IgnoredFlags, want)
	}
	if dump := fmt.Sprintf("%+v", *s); strings.Contains(dump, "secret") || strings.Contains(dump, "77777") {
		t.Errorf("an ignored flag's value is kept: %s", dump)
	}
}

func TestFlagDefaults(t *testing.T) {
	s := mustParse(t)
	c := s.Engine
	for _, x := range []struct {
		name      string
		got, want any
	}{
		{"model", s.Model, defaultModel}, {"served", s.ServedModelNames, []string{defaultModel}}, {"host", s.Host, "0.0.0.0"},
		{"port", s.Port, 8000}, {"block size", c.BlockSize, 16}, {"max model len", c.MaxModelLen, 0},
		{"profile", c.Profile.Name, timing.ForModel(defaultModel, 0).Name}, {"max seqs", c.MaxNumSeqs, 256},
		{"batched tokens", c.MaxNumBatchedTokens, 8192}, {"gpu memory", c.GPUMemoryUtilization, 0.9}, {"blocks", c.NumBlocks, 0},
		{"prefix caching", s.PrefixCaching, true}, {"hash algo", c.HashAlgo, blockhash.SHA256CBOR}, {"substituted", s.HashSubstituted, false},
		{"hash seed", c.HashSeed, (*string)(nil)}, {"kv events", s.KVEvents.Enabled(), false}, {"lora", s.LoRAModules, map[string]string{}},
		{"dp rank", s.DataParallelRank, 0}, {"api keys", s.APIKeys, []string(nil)}, {"time scale", s.TimeScale, 1.0},
		{"encoding", s.Encoding, kvpublish.Map}, {"int hashes", s.IntHashes, true}, {"legacy replay", s.LegacyReplay, false},
		{"engines", s.Engines, 1}, {"stride", s.PortStride, 2}, {"faults", s.Faults, Faults{}}, {"drop", s.DropBatches, 0},
		{"restart", s.RestartEvery, time.Duration(0)}, {"log level", s.LogLevel, slog.LevelInfo}, {"ignored", s.IgnoredFlags, []string(nil)},
		{"sim api", s.SimAPI, false}, {"dev mode", s.DevMode, false}, {"kv transfer", s.KVTransfer, (*KVTransferConfig)(nil)},
		{"kv transport", s.KVTransport.Name, "rdma"}, {"kv timeout", s.KVTransferTimeout, 480 * time.Second},
		{"side channel", []any{s.SideChannelHost, s.SideChannelPort}, []any{"", 0}},
	} {
		if !reflect.DeepEqual(x.got, x.want) {
			t.Errorf("%s: %#v, want %#v", x.name, x.got, x.want)
		}
	}
}

// TestEveryFlag sets each flag of the table and reads the field it feeds; a flag added to the
// table without a case here fails the test.
func TestEveryFlag(t *testing.T) {
	hwm := 7
	cases := []struct {
		args []string
		got  func(*Settings) any
		want any
	}{
		{[]string{"--model", "org/m"}, func(s *Settings) any { return []string{s.Model, s.ServedModelNames[0]} }, []string{"org/m", "org/m"}},
		{[]string{"--served-model-name", "a", "--served-model-name=b", "c"}, func(s *Settings) any { return s.ServedModelNames }, []string{"a", "b", "c"}},
		{[]string{"--host", "127.0.0.1"}, func(s *Settings) any { return s.Host }, "127.0.0.1"},
		{[]string{"--host="}, func(s *Settings) any { return s.Host }, ""},
		{[]string{"--port", "9000"}, func(s *Settings) any { return s.Port }, 9000},
		{[]string{"--port="}, func(s *Settings) any { return s.Port }, 8000},
		{[]string{"--block-size", "32"}, func(s *Settings) any { return s.Engine.BlockSize }, 32},
		{[]string{"--max-model-len", "2048"}, func(s *Settings) any { return s.Engine.MaxModelLen }, 2048},
		{[]string{"--tensor-parallel-size", "8"}, func(s *Settings) any { return s.Engine.Profile.TP }, 8},
		{[]string{"--tp=2"}, func(s *Settings) any { return s.Engine.Profile.TP }, 2},
		{[]string{"--pipeline-parallel-size", "x", "-pp", "4"}, func(s *Settings) any { return s.IgnoredFlags }, []string(nil)},
		{[]string{"--max-num-seqs", "12"}, func(s *Settings) any { return s.Engine.MaxNumSeqs }, 12},
		{[]string{"--max-num-batched-tokens", "1024"}, func(s *Settings) any { return s.Engine.MaxNumBatchedTokens }, 1024},
		{[]string{"--gpu-memory-utilization", "0.5"}, func(s *Settings) any { return s.Engine.GPUMemoryUtilization }, 0.5},
		{[]string{"--num-gpu-blocks-override", "100"}, func(s *Settings) any { return s.Engine.NumBlocks }, 100},
		{[]string{"--no-enable-prefix-caching"}, func(s *Settings) any { return s.PrefixCaching }, false},
		{[]string{"--no-enable-prefix-caching", "--enable-prefix-caching"}, func(s *Settings) any { return s.PrefixCaching }, true},
		{[]string{"--enable-prefix-caching=false"}, func(s *Settings) any { return s.PrefixCaching }, false},
		{[]string{"--prefix-caching-hash-algo", "xxhash_cbor"}, func(s *Settings) any { return []any{s.Engine.HashAlgo, s.HashSubstituted} }, []any{blockhash.XXHashCBOR, false}},
		{[]string{"--prefix-caching-hash-algo", "sha256"}, func(s *Settings) any { return []any{s.Engine.HashAlgo, s.HashSubstituted} }, []any{blockhash.SHA256CBOR, true}},
		{[]string{"--kv-events-config", `{"enable_kv_cache_events":true,"hwm":7,"topic":"t","buffer_steps":3,"max_queue_size":4}`},
			func(s *Settings) any { return s.KVEvents },
			KVEventsConfig{Enable: true, Publisher: "zmq", Endpoint: "tcp://*:5557", Topic: "t", HWM: &hwm, BufferSteps: 3, MaxQueueSize: 4}},
		{[]string{"--kv-events-config", `{"enable_kv_cache_events":true,"publisher":"null"}`}, func(s *Settings) any { return s.KVEvents.Enabled() }, false},
		{[]string{"--enable-lora", "--lora-modules", "a=/x", `{"name":"b","path":"/y"}`}, func(s *Settings) any { return s.LoRAModules }, map[string]string{"a": "/x", "b": "/y"}},
		{[]string{"--enable-lora"}, func(s *Settings) any { return []int{s.Engine.MaxLoRAs, s.MaxCPULoRAs, s.MaxLoRARank} }, []int{1, 1, 16}},
		{[]string{"--max-loras", "4"}, func(s *Settings) any { return s.Engine.MaxLoRAs }, 0}, // LoRA off: no slots
		{[]string{"--enable-lora", "--max-loras", "4"}, func(s *Settings) any { return []int{s.Engine.MaxLoRAs, s.MaxCPULoRAs} }, []int{4, 4}},
		{[]string{"--enable-lora", "--max-cpu-loras", "8"}, func(s *Settings) any { return s.MaxCPULoRAs }, 8},
		{[]string{"--enable-lora", "--max-lora-rank", "64"}, func(s *Settings) any { return s.MaxLoRARank }, 64},
		{[]string{"--lora-load-time", "0.1"}, func(s *Settings) any { return s.Engine.LoRALoadTime }, 0.1},
		{[]string{"--step-noise", "0.05"}, func(s *Settings) any { return s.Engine.StepNoise }, 0.05},
		{[]string{"--data-parallel-rank", "3"}, func(s *Settings) any { return s.DataParallelRank }, 3},
		{[]string{"--api-key", "k1", "--api-key", "k2"}, func(s *Settings) any { return s.APIKeys }, []string{"k1", "k2"}},
		{[]string{"--tokenizer", "/models/llama"}, func(s *Settings) any { return s.TokenizerDir }, "/models/llama"},
		{[]string{"--sim-profile", "h200-llama-3.1-8b-tp1"}, func(s *Settings) any { return s.Engine.Profile.Name }, "h200-llama-3.1-8b-tp1"},
		{[]string{"--time-scale", "100"}, func(s *Settings) any { return s.TimeScale }, 100.0},
		{[]string{"--kv-events-encoding", "array"}, func(s *Settings) any { return s.Encoding }, kvpublish.Array},
		{[]string{"--legacy-replay"}, func(s *Settings) any { return s.LegacyReplay }, true},
		{[]string{"--engines", "3"}, func(s *Settings) any { return s.Engines }, 3},
		{[]string{"--kv-events-port-stride", "10"}, func(s *Settings) any { return s.PortStride }, 10},
		{[]string{"--fault-drop-batches", "5"}, func(s *Settings) any { return s.DropBatches }, 5},
		{[]string{"--fault-event-delay", "200ms"}, func(s *Settings) any { return s.Faults.EventDelay }, 200 * time.Millisecond},
		{[]string{"--fault-fail-fraction", "0.25"}, func(s *Settings) any { return s.Faults.FailFraction }, 0.25},
		{[]string{"--fault-tokenize-delay", "1s"}, func(s *Settings) any { return s.Faults.TokenizeDelay }, time.Second},
		{[]string{"--fault-tokenize-fail-fraction", "1"}, func(s *Settings) any { return s.Faults.TokenizeFailFraction }, 1.0},
		{[]string{"--fault-replay-down"}, func(s *Settings) any { return s.Faults.ReplayDown }, true},
		{[]string{"--fault-restart-every", "1m"}, func(s *Settings) any { return s.RestartEvery }, time.Minute},
		{[]string{"--enable-sim-api"}, func(s *Settings) any { return []bool{s.SimAPI, s.DevMode} }, []bool{true, false}},
		{[]string{"--log-level", "debug"}, func(s *Settings) any { return s.LogLevel }, slog.LevelDebug},
		{[]string{"--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"kv_both"}`},
			func(s *Settings) any { return []any{*s.KVTransfer, s.SideChannelHost, s.SideChannelPort} },
			// vLLM's default policy: a failed pull fails the request.
			[]any{KVTransferConfig{Connector: "NixlConnector", Role: "kv_both", LoadFailurePolicy: "fail"}, "localhost", 5600}},
		{[]string{"--host", "10.0.0.7", "--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"kv_consumer","engine_id":"e","kv_load_failure_policy":"recompute"}`},
			func(s *Settings) any { return []any{*s.KVTransfer, s.SideChannelHost} },
			[]any{KVTransferConfig{Connector: "NixlConnector", Role: "kv_consumer", EngineID: "e", LoadFailurePolicy: "recompute"}, "10.0.0.7"}},
		{[]string{"--kv-transport", "tcp"}, func(s *Settings) any { return s.KVTransport.Name }, "tcp"},
		{[]string{"--kv-transport", "InfiniBand"}, func(s *Settings) any { return s.KVTransport.Name }, "rdma"},
		{[]string{"--kv-transfer-timeout", "30s"}, func(s *Settings) any { return s.KVTransferTimeout }, 30 * time.Second},
		{[]string{"--fault-kv-transfer-fail-fraction", "0.5"}, func(s *Settings) any { return s.Faults.KVTransferFailFraction }, 0.5},
		{[]string{"--fault-kv-transfer-delay", "50ms"}, func(s *Settings) any { return s.Faults.KVTransferDelay }, 50 * time.Millisecond},
		{[]string{"--log_level=WARN"}, func(s *Settings) any { return s.LogLevel }, slog.LevelWarn},
	}
	covered := map[string]bool{"help": true}
	for _, c := range cases {
		s := mustParse(t, c.args...)
		if got := c.got(s); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %#v, want %#v", c.args, got, c.want)
		}
		cl, _ := scan(c.args)
		for name := range cl.given {
			covered[name] = true
		}
	}
	for _, f := range flagTable {
		if !covered[f.name] {
			t.Errorf("--%s has no case", f.name)
		}
	}
}

func TestBadFlagValues(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--port"}, "flag --port needs a value"},
		{[]string{"--api-key"}, "flag --api-key needs at least one value"},
		{[]string{"--served-model-name", "--port", "1"}, "flag --served-model-name needs at least one value"},
		{[]string{"--no-enable-prefix-caching=true"}, "flag --no-enable-prefix-caching takes no value"},
		{[]string{"--port", "x"}, `--port: "x" is not an integer`},
		{[]string{"--gpu-memory-utilization", "most"}, `--gpu-memory-utilization: "most" is not a number`},
		{[]string{"--fault-event-delay", "5"}, `--fault-event-delay: "5" is not a duration`},
		{[]string{"--enable-prefix-caching=maybe"}, `--enable-prefix-caching: "maybe" is not a boolean`},
		// A bad number counts as zero for the range checks, so both are reported.
		{[]string{"--engines", "x"}, "--engines: \"x\" is not an integer\n--engines must be at least 1"},
		{[]string{"--engines", "0"}, "--engines must be at least 1"},
		{[]string{"--time-scale", "-1"}, "--time-scale must be positive"},
		{[]string{"--fault-fail-fraction", "2"}, "--fault-fail-fraction must be within [0, 1]"},
		{[]string{"--fault-tokenize-fail-fraction", "-0.5"}, "--fault-tokenize-fail-fraction must be within [0, 1]"},
		// Range checks stop at the first failure.
		{[]string{"--engines", "0", "--time-scale", "0"}, "--engines must be at least 1"},
		{[]string{"--prefix-caching-hash-algo", "md5"}, `unknown prefix caching hash algorithm "md5" (want sha256_cbor, xxhash_cbor, sha256 or xxhash)`},
		{[]string{"--kv-events-encoding", "cbor"}, `unknown KV event encoding "cbor" (want map or array)`},
		{[]string{"--kv-events-config", `{"publisher":"kafka"}`}, `--kv-events-config: publisher "kafka" is not supported (zmq or null)`},
		{[]string{"--lora-modules", "nameonly"}, `--lora-modules: "nameonly" is neither name=path nor JSON`},
		{[]string{"--lora-modules", "a=/x"}, "--lora-modules needs --enable-lora (vLLM refuses adapters when LoRA is not enabled)"},
		{[]string{"--enable-lora", "--max-loras", "0"}, "--max-loras must be at least 1, got 0"},
		{[]string{"--enable-lora", "--max-loras", "4", "--max-cpu-loras", "2"}, "--max-cpu-loras (2) must be at least --max-loras (4)"},
		{[]string{"--enable-lora", "--max-lora-rank", "7"}, "--max-lora-rank must be one of [1 8 16 32 64 128 256 320 512], got 7"},
		{[]string{"--lora-load-time", "-1"}, "--lora-load-time must not be negative, got -1"},
		{[]string{"--step-noise", "-0.1"}, "--step-noise must not be negative, got -0.1"},
		{[]string{"--log-level", "loud"}, `--log-level: slog: level string "loud": unknown name`},
		{[]string{"--sim-profile", "h100-llama-3.1-8b-tp1", "-tp", "2"}, "--sim-profile h100-llama-3.1-8b-tp1 is for TP 1, but --tensor-parallel-size is 2"},
		{[]string{"m1", "m2", "m3"}, "unexpected arguments: m2 m3"},
		{[]string{"--kv-transfer-config", `{"kv_connector":"P2pNcclConnector","kv_role":"kv_both"}`},
			`--kv-transfer-config: kv_connector "P2pNcclConnector" is not simulated (vllm-sim plays NixlConnector)`},
		{[]string{"--kv-transfer-config", `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`},
			`--kv-transfer-config: kv_connector "LMCacheConnectorV1" is not simulated: LMCache's disaggregated prefill pushes the KV to a decode engine named in the prefill request, which vllm-sim does not play (it plays NixlConnector's pull)`},
		{[]string{"--kv-transfer-config", `{"kv_connector":"NixlConnector"}`},
			"--kv-transfer-config: kv_role is required with kv_connector (kv_both, kv_producer or kv_consumer)"},
		{[]string{"--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"both"}`},
			`--kv-transfer-config: kv_role "both" is not one of kv_both, kv_producer, kv_consumer`},
		{[]string{"--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_load_failure_policy":"retry"}`},
			`--kv-transfer-config: kv_load_failure_policy "retry" is not recompute or fail`},
		{[]string{"--kv-transfer-config", `{"kv_connector":`}, "--kv-transfer-config: unexpected end of JSON input"},
		{[]string{"--kv-transport", "smoke"}, `--kv-transport: unknown KV transport "smoke" (known: nvlink, rdma, roce, tcp)`},
		{[]string{"--kv-transfer-timeout", "-1s"}, "--kv-transfer-timeout must be positive"},
		{[]string{"--fault-kv-transfer-fail-fraction", "1.5"}, "--fault-kv-transfer-fail-fraction must be within [0, 1]"},
		{[]string{"--fault-kv-transfer-delay", "-1s"}, "--fault-kv-transfer-delay must not be negative"},
		{[]string{"--model", "m", "serve"}, "unexpected arguments: serve"},
	} {
		_, err := ParseFlags(c.args, env())
		if err == nil || err.Error() != c.want {
			t.Errorf("%q: error %v, want %q", c.args, err, c.want)
		}
	}
}

func TestScanForms(t *testing.T) {
	// A one-valued flag takes the next argument whatever it looks like; lists stop at a flag but
	// keep negative numbers; "-" is positional; "serve" is skipped only in first place.
	s := mustParse(t, "serve", "--host", "--x", "--served-model-name", "-1", ".5", "--port", "1", "--block_size=8", "--block-size", "4")
	if s.Host != "--x" || !slices.Equal(s.ServedModelNames, []string{"-1", ".5"}) || s.Port != 1 || s.Engine.BlockSize != 4 {
		t.Errorf("%+v", s)
	}
	if s := mustParse(t, "-"); s.Model != "-" {
		t.Errorf("model %q, want -", s.Model)
	}
	// An ignored flag swallows a value but not a following flag, nor a value given with "=".
	s = mustParse(t, "--swap-space", "4", "--enforce-eager", "--port", "1", "--seed=3", "model")
	if !slices.Equal(s.IgnoredFlags, []string{"--swap-space", "--enforce-eager", "--seed"}) || s.Port != 1 || s.Model != "model" {
		t.Errorf("%+v", s)
	}
	for _, args := range [][]string{{"--help"}, {"-help"}, {"--port", "x", "--help"}, {"--no-help"}} {
		if _, err := ParseFlags(args, env()); !errors.Is(err, ErrHelp) {
			t.Errorf("%q: %v, want ErrHelp", args, err)
		}
	}
	// A malformed command line is reported before --help is noticed.
	if _, err := ParseFlags([]string{"--help", "--port"}, env()); err == nil || errors.Is(err, ErrHelp) {
		t.Errorf("--help --port: %v", err)
	}
}

func TestEnvironment(t *testing.T) {
	s, err := ParseFlags(nil, env("PYTHONHASHSEED", "42", "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "0", "VLLM_SERVER_DEV_MODE", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Engine.HashSeed == nil || *s.Engine.HashSeed != "42" || s.IntHashes || !s.DevMode || s.SimAPI {
		t.Errorf("seed %v, int hashes %v, dev mode %v, sim api %v", s.Engine.HashSeed, s.IntHashes, s.DevMode, s.SimAPI)
	}
}

func TestKVTransferEnvironment(t *testing.T) {
	cfg := []string{"--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"kv_both"}`}
	s, err := ParseFlags(cfg, env("VLLM_NIXL_SIDE_CHANNEL_HOST", "10.1.2.3", "VLLM_NIXL_SIDE_CHANNEL_PORT", "7000", "VLLM_NIXL_ABORT_REQUEST_TIMEOUT", "60"))
	if err != nil {
		t.Fatal(err)
	}
	if s.SideChannelHost != "10.1.2.3" || s.SideChannelPort != 7000 || s.KVTransferTimeout != time.Minute {
		t.Errorf("side channel %s:%d, timeout %v", s.SideChannelHost, s.SideChannelPort, s.KVTransferTimeout)
	}
	// The flag wins over the environment.
	s, err = ParseFlags(append(cfg, "--kv-transfer-timeout", "5s"), env("VLLM_NIXL_ABORT_REQUEST_TIMEOUT", "60"))
	if err != nil || s.KVTransferTimeout != 5*time.Second {
		t.Errorf("timeout %v, err %v", s.KVTransferTimeout, err)
	}
	for _, e := range [][]string{{"VLLM_NIXL_SIDE_CHANNEL_PORT", "70000"}, {"VLLM_NIXL_SIDE_CHANNEL_PORT", "x"}, {"VLLM_NIXL_ABORT_REQUEST_TIMEOUT", "soon"}} {
		if _, err := ParseFlags(cfg, env(e...)); err == nil || !strings.Contains(err.Error(), e[0]) {
			t.Errorf("%s=%s: error %v", e[0], e[1], err)
		}
	}
}

func TestUsage(t *testing.T) {
	golden, err := os.ReadFile("testdata/usage.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(string(golden), "{{profiles}}", strings.Join(timing.Names(), ", "), 1)
	got := Usage()
	if got != want {
		t.Errorf("usage:\n%s\nwant:\n%s", got, want)
	}
	for _, f := range flagTable {
		if f.name != "help" && !strings.Contains(got, "--"+f.name) && !strings.Contains(got, "]"+f.name) {
			t.Errorf("--%s is not in the help", f.name)
		}
	}
}
