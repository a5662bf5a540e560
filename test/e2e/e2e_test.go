// Package e2e runs the status and scaling loop end to end on loopback: real vllm-sim engines, a
// real router with file discovery, and the operator's status code (internal/routerstatus)
// reading the router. The binaries are built once in TestMain; -short skips these tests.
package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/internal/routerapi"
)

var binDir string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "kvrouter-status-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", dir+"/", "../../cmd/vllm-sim", "../../cmd/router")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building vllm-sim and router:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func needBinaries(t *testing.T) {
	t.Helper()
	if binDir == "" {
		t.Skip("end-to-end test skipped in -short mode")
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// syncBuffer collects a process's output for the failure log.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs a binary from binDir until the test ends.
func start(t *testing.T, name string, args ...string) {
	t.Helper()
	out := &syncBuffer{}
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("--- %s output:\n%s", name, out.String())
		}
	})
}

type engine struct{ name, url, events, replay string }

// startEngine runs a vllm-sim with KV events on loopback. extra adds engine flags.
func startEngine(t *testing.T, name, timeScale string, extra ...string) *engine {
	t.Helper()
	hp, rp := freePort(t), freePort(t)
	// The PUB socket binds only for an endpoint with "*" or "::"; IPv6 loopback keeps it local.
	events := fmt.Sprintf("tcp://*:%d", freePort(t))
	if l, err := net.Listen("tcp", "[::1]:0"); err == nil {
		events = fmt.Sprintf("tcp://[::1]:%d", l.Addr().(*net.TCPAddr).Port)
		l.Close()
	}
	kv := fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"%s","replay_endpoint":"tcp://127.0.0.1:%d","topic":"kv@%s@m"}`, events, rp, name)
	args := append([]string{"--model", "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "m",
		"--host", "127.0.0.1", "--port", fmt.Sprint(hp), "--block-size", "16",
		"--prefix-caching-hash-algo", "sha256_cbor", "--kv-events-config", kv, "--time-scale", timeScale}, extra...)
	start(t, "vllm-sim", args...)
	e := &engine{name: name, url: fmt.Sprintf("http://127.0.0.1:%d", hp),
		events: strings.Replace(events, "*", "127.0.0.1", 1), replay: fmt.Sprintf("tcp://127.0.0.1:%d", rp)}
	waitOK(t, e.url+"/health")
	return e
}

// endpointsYAML is the router's endpoints file for engines; notReady lists engines marked
// ready: false (what the Kubernetes discovery makes of a terminating pod).
func endpointsYAML(engines []*engine, notReady ...string) []byte {
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for _, e := range engines {
		fmt.Fprintf(&b, "  - name: %s\n    url: %s\n    kvEvents: %s\n    kvReplay: %s\n", e.name, e.url, e.events, e.replay)
		for _, n := range notReady {
			if n == e.name {
				b.WriteString("    ready: false\n")
			}
		}
	}
	return []byte(b.String())
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	// Write then rename, so the router's file watch never reads a half-written file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// startRouter runs the router on the endpoints file and returns its base URL.
func startRouter(t *testing.T, endpointsFile string) string {
	t.Helper()
	port := freePort(t)
	start(t, "router", "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--endpoints-file", endpointsFile,
		"--scrape-interval", "200ms")
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitOK(t, url+"/health")
	return url
}

func waitOK(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not OK after 20s (last error %v)", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func getStatus(t *testing.T, routerURL string) routerapi.Status {
	t.Helper()
	resp, err := http.Get(routerURL + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st routerapi.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func waitStatus(t *testing.T, routerURL, what string, ok func(routerapi.Status) bool) routerapi.Status {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := getStatus(t, routerURL)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; status %+v", what, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitConnected(t *testing.T, routerURL string, n int) {
	t.Helper()
	waitStatus(t, routerURL, "event streams connected", func(st routerapi.Status) bool {
		c := 0
		for _, e := range st.Endpoints {
			if e.Ready && e.Events != nil && e.Events.Connected {
				c++
			}
		}
		return c == n
	})
}

// counters reads an engine's own /metrics: each counter summed over its series.
func counters(t *testing.T, url string, names ...string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s/metrics: %v", url, err)
	}
	out := map[string]float64{}
	for _, n := range names {
		f, ok := families[n]
		if !ok {
			t.Fatalf("%s/metrics has no %s", url, n)
		}
		for _, m := range f.GetMetric() {
			out[n] += m.GetCounter().GetValue()
		}
	}
	return out
}

func completion(prompt string, maxTokens int, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "max_tokens": maxTokens, "stream": stream})
	return string(b)
}

// post sends a completion and returns the endpoint that served it, failing on an error status.
func post(t *testing.T, routerURL, body string) string {
	resp, err := http.Post(routerURL+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	return resp.Header.Get("X-Kvrouter-Endpoint")
}

// readStream reads an SSE completion stream to its end and counts the data chunks before
// [DONE]; done says whether [DONE] arrived.
func readStream(body io.Reader) (chunks int, done bool) {
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "data: [DONE]":
			return chunks, true
		case strings.HasPrefix(line, "data: "):
			chunks++
		}
	}
	return chunks, false
}
