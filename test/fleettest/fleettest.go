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

// Package fleettest starts vllm-sim engines and the router as loopback processes for end-to-end
// tests. Main builds both binaries once per test binary; each process is killed when the test that
// started it ends, and its output is logged if that test failed.
package fleettest

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/routerapi"
)

// waitTimeout bounds every wait for a process or a status condition.
const waitTimeout = 20 * time.Second

// binDir holds the built binaries; empty in -short mode, where NeedBinaries skips.
var binDir string

// Main is the TestMain of an end-to-end test package: it builds vllm-sim and the router into a
// temporary directory, runs the tests, removes the directory and exits. extra names more
// commands under cmd/ to build with them (kvbench, for StartGateway): only the packages that
// start them pay for their link. In -short mode it builds nothing.
func Main(m *testing.M, extra ...string) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "kvrouter-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Import paths, so that the build works from any test package's directory.
	cmds := append([]string{"vllm-sim", "router"}, extra...)
	args := []string{"build", "-o", dir + "/"}
	for _, c := range cmds {
		args = append(args, "github.com/kvrouter/kvrouter/cmd/"+c)
	}
	build := exec.Command("go", args...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building %s: %v\n", strings.Join(cmds, ", "), err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// BinDir is the directory Main built the binaries into (empty in -short mode), for a harness
// that starts them itself.
func BinDir() string { return binDir }

// NeedBinaries skips the test when Main built no binaries (-short mode).
func NeedBinaries(t *testing.T) {
	t.Helper()
	if binDir == "" {
		t.Skip("end-to-end test skipped in -short mode")
	}
}

// handedOut remembers every port FreePort returned in this process: the kernel may give a port
// just released back to the next listen, so two calls in a row (--port then --admin-addr) could
// otherwise name the same port.
var (
	handedOutMu sync.Mutex
	handedOut   = map[int]bool{}
)

// FreePort returns a port that was free on 127.0.0.1 a moment ago and that no earlier call in
// this process returned.
func FreePort(t *testing.T) int {
	t.Helper()
	handedOutMu.Lock()
	defer handedOutMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut[port] {
			handedOut[port] = true
			return port
		}
	}
	t.Fatal("no loopback port that was not handed out already")
	return 0
}

// EventsEndpoint returns a free tcp://[::1]:port for an engine's KV-events PUB socket. vLLM binds
// that socket only when the endpoint contains "*" or "::" (otherwise it connects), so IPv6
// loopback is the only loopback-only way to make it bind; without IPv6 the test is skipped rather
// than bind every interface.
func EventsEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("IPv6 loopback unavailable (%v): the engines' KV-events socket binds only on \"*\" or \"::\" addresses, and these tests bind loopback only", err)
	}
	defer l.Close()
	return fmt.Sprintf("tcp://[::1]:%d", l.Addr().(*net.TCPAddr).Port)
}

// Proc is a running binary started by Start.
type Proc struct {
	cmd  *exec.Cmd
	out  *SyncBuffer
	done chan struct{}
	// Name and Args are what Start ran, so a test can start the same process again.
	Name string
	Args []string
}

// Start runs a binary built by Main (name is "vllm-sim", "router" or one of Main's extra); the
// process is killed when the test ends, and its output is logged if the test failed.
func Start(t *testing.T, name string, args ...string) *Proc {
	t.Helper()
	out := &SyncBuffer{}
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{cmd: cmd, out: out, done: make(chan struct{}), Name: name, Args: args}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("--- %s %v output:\n%s", name, args, out.String())
		}
	})
	return p
}

// Kill kills the process, if it still runs, and waits for it to exit.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop sends SIGTERM and waits for the process to exit (a graceful shutdown); after grace it
// kills it. It reports whether the process exited on its own.
func (p *Proc) Stop(grace time.Duration) bool {
	select {
	case <-p.done:
		return true
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(grace):
		p.Kill()
		return false
	}
}

// Wait waits up to timeout for the process to exit by itself (a command that runs to its end,
// such as `kvbench live`) and returns its exit code; past the timeout it kills the process and
// fails the test.
func (p *Proc) Wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		p.Kill()
		t.Fatalf("%s %v still running after %s; killed", p.Name, p.Args, timeout)
		return -1
	}
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Output is what the process wrote to stdout and stderr so far.
func (p *Proc) Output() string { return p.out.String() }

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// SyncBuffer is a bytes.Buffer that a process's output copiers (or a logger) and the test can
// share: writes and reads take a lock.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Engine is a running vllm-sim serving the model "m" on loopback.
type Engine struct {
	Name, URL string
	// Events and Replay are the KV-events PUB and replay ROUTER endpoints, as the router dials them.
	Events, Replay string
	Proc           *Proc
}

// StartEngine runs one simulated engine (Llama-3.1-8B's tokenizer, block size 16, sha256_cbor)
// with KV events and replay on free loopback ports and its /sim/* routes on, and waits until it
// is healthy. timeScale is
// simulated seconds per wall second (< 1 slows it down); extra adds vllm-sim flags.
func StartEngine(t *testing.T, name, timeScale string, extra ...string) *Engine {
	t.Helper()
	return StartEngineKV(t, name, timeScale, "", extra...)
}

// StartEngineKV is StartEngine with more members of --kv-events-config (e.g. `"buffer_steps":8`
// for a short replay buffer).
func StartEngineKV(t *testing.T, name, timeScale, kvExtra string, extra ...string) *Engine {
	t.Helper()
	hp, rp := FreePort(t), FreePort(t)
	events := EventsEndpoint(t)
	if kvExtra != "" {
		kvExtra = "," + kvExtra
	}
	kv := fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"%s","replay_endpoint":"tcp://127.0.0.1:%d","topic":"kv@%s@m"%s}`, events, rp, name, kvExtra)
	args := append([]string{"--model", "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "m",
		"--host", "127.0.0.1", "--port", fmt.Sprint(hp), "--block-size", "16",
		"--prefix-caching-hash-algo", "sha256_cbor", "--kv-events-config", kv, "--time-scale", timeScale,
		// The tests read each engine's cache (GET /sim/cache), inject faults and reset caches.
		"--enable-sim-api"}, extra...)
	e := &Engine{Name: name, URL: fmt.Sprintf("http://127.0.0.1:%d", hp),
		Events: events, Replay: fmt.Sprintf("tcp://127.0.0.1:%d", rp), Proc: Start(t, "vllm-sim", args...)}
	WaitOK(t, e.URL+"/health")
	return e
}

// Restart kills the engine's process and starts a new one with the same command line (same
// ports): what a crashed and restarted vLLM pod looks like to the router, with an empty cache
// and the event sequence back at 0.
func (e *Engine) Restart(t *testing.T) {
	t.Helper()
	e.Proc.Kill()
	e.Proc = Start(t, "vllm-sim", e.Proc.Args...)
	WaitOK(t, e.URL+"/health")
}

// EndpointsYAML is the router's endpoints file for engines; notReady names engines listed with
// ready: false (what the Kubernetes discovery makes of a terminating pod).
func EndpointsYAML(engines []*Engine, notReady ...string) []byte {
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for _, e := range engines {
		fmt.Fprintf(&b, "  - name: %s\n    url: %s\n    kvEvents: %s\n    kvReplay: %s\n", e.Name, e.URL, e.Events, e.Replay)
		for _, n := range notReady {
			if n == e.Name {
				b.WriteString("    ready: false\n")
			}
		}
	}
	return []byte(b.String())
}

// ReplaceFile replaces path with data by writing a temporary file and renaming it, so that a
// file watcher (the router's endpoints file) never reads a half-written file, as with a
// ConfigMap volume's symlink swap.
func ReplaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// WriteEndpoints writes EndpointsYAML to a new file in the test's temporary directory and
// returns its path.
func WriteEndpoints(t *testing.T, engines []*Engine, notReady ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(path, EndpointsYAML(engines, notReady...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Router is a running router with file discovery on loopback.
type Router struct {
	// URL is the public listener (--port): inference, /v1/models and the probes. Empty for a
	// router in --mode epp, which has none.
	URL string
	// EPPAddr is the ext_proc listener (--grpc-port, host:port) of a router in --mode epp.
	EPPAddr string
	// AdminURL is the admin listener (--admin-addr): /metrics, /v1/status and /v1/autoscale.
	AdminURL string
	// DebugURL is the router's debug listener (--pprof-addr): /debug/pprof and /debug/kvindex.
	DebugURL string
	Proc     *Proc
}

// StartRouter runs the router on endpointsFile (scraping every 200ms unless args say otherwise)
// with its admin and debug listeners on other loopback ports, and waits until it is healthy;
// args add router flags.
func StartRouter(t *testing.T, endpointsFile string, args ...string) *Router {
	t.Helper()
	port, admin, debug := FreePort(t), FreePort(t), FreePort(t)
	all := append([]string{"--host", "127.0.0.1", "--port", fmt.Sprint(port), "--endpoints-file", endpointsFile,
		"--scrape-interval", "200ms", "--admin-addr", fmt.Sprintf("127.0.0.1:%d", admin),
		"--pprof-addr", fmt.Sprintf("127.0.0.1:%d", debug)}, args...)
	r := &Router{URL: fmt.Sprintf("http://127.0.0.1:%d", port), AdminURL: fmt.Sprintf("http://127.0.0.1:%d", admin),
		DebugURL: fmt.Sprintf("http://127.0.0.1:%d", debug), Proc: Start(t, "router", all...)}
	WaitOK(t, r.URL+"/health")
	WaitOK(t, r.AdminURL+"/health")
	return r
}

// StartEPPRouter runs the router in --mode epp on endpointsFile: ext_proc and gRPC health on
// free loopback ports, no HTTP inference listener, admin and debug listeners as StartRouter's. It
// waits until the admin listener answers; args add router flags.
func StartEPPRouter(t *testing.T, endpointsFile string, args ...string) *Router {
	t.Helper()
	grpc, health, admin, debug := FreePort(t), FreePort(t), FreePort(t), FreePort(t)
	all := append([]string{"--mode", "epp", "--host", "127.0.0.1", "--grpc-port", fmt.Sprint(grpc),
		"--grpc-health-port", fmt.Sprint(health), "--endpoints-file", endpointsFile,
		"--scrape-interval", "200ms", "--admin-addr", fmt.Sprintf("127.0.0.1:%d", admin),
		"--pprof-addr", fmt.Sprintf("127.0.0.1:%d", debug)}, args...)
	r := &Router{EPPAddr: fmt.Sprintf("127.0.0.1:%d", grpc), AdminURL: fmt.Sprintf("http://127.0.0.1:%d", admin),
		DebugURL: fmt.Sprintf("http://127.0.0.1:%d", debug), Proc: Start(t, "router", all...)}
	WaitOK(t, r.AdminURL+"/health")
	return r
}

// Gateway is a running `kvbench gateway`: an HTTP front end on loopback that asks a router in
// --mode epp where each request goes, as an Inference Gateway does.
type Gateway struct {
	URL  string
	Proc *Proc
}

// StartGateway runs `kvbench gateway` (Main must have built kvbench) in front of the picker at
// eppAddr, and waits until it listens; args add gateway flags.
func StartGateway(t *testing.T, eppAddr string, args ...string) *Gateway {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	g := &Gateway{URL: "http://" + addr,
		Proc: Start(t, "kvbench", append([]string{"gateway", "--epp", eppAddr, "--listen", addr}, args...)...)}
	deadline := time.Now().Add(waitTimeout)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return g
		}
		if g.Proc.Exited() || time.Now().After(deadline) {
			t.Fatalf("kvbench gateway not listening on %s (exited %v): %v", addr, g.Proc.Exited(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restart stops the router gracefully (SIGTERM: in-flight requests finish, within grace) and
// starts it again with the same command line and ports. It returns when the new process is
// healthy, with the time from the signal until then.
func (r *Router) Restart(t *testing.T, grace time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	r.Proc.Stop(grace)
	r.Proc = Start(t, "router", r.Proc.Args...)
	if r.URL != "" {
		WaitOK(t, r.URL+"/health")
	}
	WaitOK(t, r.AdminURL+"/health")
	return time.Since(start)
}

// WaitOK polls url until it answers 200, failing the test after 20s.
func WaitOK(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not OK after %s (last error %v)", url, waitTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Status reads the router's /v1/status (on its admin listener).
func (r *Router) Status(t *testing.T) routerapi.Status {
	t.Helper()
	resp, err := http.Get(r.AdminURL + "/v1/status")
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

// WaitStatus polls the router's status until ok holds and returns that status; after 20s it fails
// the test, naming what it waited for.
func (r *Router) WaitStatus(t *testing.T, what string, ok func(routerapi.Status) bool) routerapi.Status {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		st := r.Status(t)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; status %+v", what, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitConnected waits until n ready endpoints have their event stream connected, so that no
// event of the traffic that follows is missed.
func (r *Router) WaitConnected(t *testing.T, n int) {
	t.Helper()
	r.WaitStatus(t, "event streams connected", func(st routerapi.Status) bool {
		c := 0
		for _, e := range st.Endpoints {
			if e.Ready && e.Events != nil && e.Events.Connected {
				c++
			}
		}
		return c == n
	})
}

// Completion is a /v1/completions request body for the model "m".
func Completion(prompt string, maxTokens int, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "max_tokens": maxTokens, "stream": stream})
	return string(b)
}
