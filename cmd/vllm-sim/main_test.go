package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

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
	s, err := parseSettings(operatorArgs)
	if err != nil {
		t.Fatal(err)
	}
	c := s.engineCfg
	if s.model != "Qwen/Qwen2.5-32B-Instruct" || fmt.Sprint(s.served) != "[qwen]" || s.port != 8000 || c.BlockSize != 32 ||
		c.MaxModelLen != 16384 || c.Profile.TP != 2 || c.GPUMemoryUtilization != 0.85 || c.MaxNumSeqs != 128 || s.prefixCaching {
		t.Fatalf("settings %+v engine %+v", s, c)
	}
	if !strings.Contains(c.Profile.Name, "32b") {
		t.Fatalf("profile %s for a 32B model", c.Profile.Name)
	}
	if !s.kv.enabled() || s.kv.Endpoint != "tcp://*:5557" || s.kv.ReplayEndpoint != "tcp://*:5558" || s.kv.Topic != "kv@pod-1@qwen" {
		t.Fatalf("kv %+v", s.kv)
	}
	if got := strings.Join(s.unknown, "|"); got != "--enable-chunked-prefill|--trust-remote-code|--swap-space 4" {
		t.Fatalf("unknown flags %q", got)
	}
}

func TestArgForms(t *testing.T) {
	s, err := parseSettings([]string{"serve", "my/model", "--served-model-name", "a", "b", "-tp", "4", "--lora-modules", "x=/p", `{"name":"y","path":"/q"}`})
	if err != nil {
		t.Fatal(err)
	}
	if s.model != "my/model" || fmt.Sprint(s.served) != "[a b]" || s.engineCfg.Profile.TP != 4 || s.lora["x"] != "/p" || s.lora["y"] != "/q" {
		t.Fatalf("%+v", s)
	}
	for _, bad := range [][]string{{"--port"}, {"--port", "x"}, {"--engines", "0"}, {"--time-scale", "0"},
		{"--kv-events-encoding", "cbor"}, {"--prefix-caching-hash-algo", "md5"}, {"--kv-events-config", "{"},
		{"--sim-profile", "nope"}, {"m1", "m2"}} {
		if _, err := parseSettings(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestOffsetEndpoint(t *testing.T) {
	for _, c := range []struct {
		in    string
		delta int
		want  string
	}{{"tcp://*:5557", 0, "tcp://*:5557"}, {"tcp://*:5557", 4, "tcp://*:5561"}, {"tcp://*:0", 3, "tcp://*:0"},
		{"ipc:///tmp/kv", 1, "ipc:///tmp/kv_dp1"}, {"", 2, ""}} {
		if got, err := offsetEndpoint(c.in, c.delta); err != nil || got != c.want {
			t.Errorf("offsetEndpoint(%q, %d) = %q, %v", c.in, c.delta, got, err)
		}
	}
	if _, err := offsetEndpoint("tcp://host:abc", 1); err == nil {
		t.Error("non-numeric port accepted")
	}
}

func TestServesSeveralEngines(t *testing.T) {
	// Two consecutive free ports.
	var port int
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+1))
		l.Close()
		if err == nil {
			l2.Close()
			break
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan []string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--host", "127.0.0.1", "--port", fmt.Sprint(port), "--engines", "2", "--time-scale", "1000",
			"--log-level", "error"}, func(a []string) { ready <- a })
	}()
	var addrs []string
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	if len(addrs) != 2 || addrs[1] != fmt.Sprintf("127.0.0.1:%d", port+1) {
		t.Fatalf("addresses %v", addrs)
	}
	for _, a := range addrs {
		resp, err := http.Post("http://"+a+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hello","max_tokens":2}`))
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 200 || body["model"] != "meta-llama/Llama-3.1-8B-Instruct" {
			t.Fatalf("%s: %d %v", a, resp.StatusCode, body)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
