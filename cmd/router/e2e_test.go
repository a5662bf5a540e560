package main

// End-to-end tests: real vllm-sim processes and a real router process, file discovery, loopback
// only. The binaries are built once in TestMain into a temporary directory.

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

	"github.com/kvrouter/kvrouter/internal/routerapi"
)

var binDir string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "kvrouter-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", dir+"/", "../vllm-sim", ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building binaries:", err)
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

// eventsEndpoint returns a free tcp://[::1]:port; without IPv6 it falls back to binding every
// interface (tcp://*:port), and the router connects to it on 127.0.0.1.
func eventsEndpoint(t *testing.T) string {
	t.Helper()
	if l, err := net.Listen("tcp", "[::1]:0"); err == nil {
		defer l.Close()
		return fmt.Sprintf("tcp://[::1]:%d", l.Addr().(*net.TCPAddr).Port)
	}
	return fmt.Sprintf("tcp://*:%d", freePort(t))
}

type proc struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	mu   *sync.Mutex
	done chan struct{}
}

// start runs a binary from binDir; the process is killed when the test ends.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	var mu sync.Mutex
	buf := &bytes.Buffer{}
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	w := &lockedWriter{mu: &mu, w: buf}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, out: buf, mu: &mu, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- %s %v output:\n%s", name, args, p.output())
		}
	})
	return p
}

func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

type engine struct {
	name, url, events, replay string
	p                         *proc
}

// startEngine runs one simulated engine with KV events and replay on free ports. timeScale < 1
// slows it down (simulated seconds per wall second).
func startEngine(t *testing.T, name string, timeScale string) *engine {
	t.Helper()
	hp, rp := freePort(t), freePort(t)
	// vLLM binds the PUB socket only when the endpoint contains "*" or "::" (else it
	// connects), so the loopback-only way to bind it is IPv6 loopback.
	events := eventsEndpoint(t)
	kv := fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"%s","replay_endpoint":"tcp://127.0.0.1:%d","topic":"kv@%s@m"}`, events, rp, name)
	p := start(t, "vllm-sim", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "m",
		"--host", "127.0.0.1", "--port", fmt.Sprint(hp), "--block-size", "16",
		"--prefix-caching-hash-algo", "sha256_cbor", "--kv-events-config", kv, "--time-scale", timeScale)
	e := &engine{name: name, url: fmt.Sprintf("http://127.0.0.1:%d", hp),
		events: events, replay: fmt.Sprintf("tcp://127.0.0.1:%d", rp), p: p}
	waitOK(t, e.url+"/health")
	return e
}

func writeEndpoints(t *testing.T, engines []*engine, extra string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for _, e := range engines {
		fmt.Fprintf(&b, "  - name: %s\n    url: %s\n    kvEvents: %s\n    kvReplay: %s\n", e.name, e.url,
			strings.Replace(e.events, "*", "127.0.0.1", 1), e.replay)
	}
	b.WriteString(extra)
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

type router struct {
	url string
	p   *proc
}

func startRouter(t *testing.T, endpointsFile string, args ...string) *router {
	t.Helper()
	port := freePort(t)
	all := append([]string{"--host", "127.0.0.1", "--port", fmt.Sprint(port), "--endpoints-file", endpointsFile,
		"--scrape-interval", "200ms"}, args...)
	r := &router{url: fmt.Sprintf("http://127.0.0.1:%d", port), p: start(t, "router", all...)}
	waitOK(t, r.url+"/health")
	return r
}

func waitOK(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not OK after 15s (last error %v)", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *router) status(t *testing.T) routerapi.Status {
	t.Helper()
	resp, err := http.Get(r.url + "/v1/status")
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

func (r *router) waitStatus(t *testing.T, what string, ok func(routerapi.Status) bool) routerapi.Status {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st := r.status(t)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; status %+v", what, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// prompt is a long shared prefix plus a distinct question.
func prompt(prefix string, words int, q int) string {
	return strings.Repeat(prefix+" ", words) + fmt.Sprintf("question number %d please", q)
}

func completion(p string, maxTokens int, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": "m", "prompt": p, "max_tokens": maxTokens, "stream": stream})
	return string(b)
}

func fleetOf(t *testing.T, n int, timeScale string) []*engine {
	var es []*engine
	for i := 0; i < n; i++ {
		es = append(es, startEngine(t, fmt.Sprintf("e%d", i), timeScale))
	}
	return es
}

// waitConnected waits until every endpoint's event stream is connected, so no event is missed.
func (r *router) waitConnected(t *testing.T, n int) {
	r.waitStatus(t, "event streams connected", func(st routerapi.Status) bool {
		c := 0
		for _, e := range st.Endpoints {
			if e.Ready && e.Events != nil && e.Events.Connected {
				c++
			}
		}
		return c == n
	})
}

func TestE2ESamePrefixSticks(t *testing.T) {
	needBinaries(t)
	es := fleetOf(t, 4, "1")
	r := startRouter(t, writeEndpoints(t, es, ""))
	r.waitConnected(t, 4)
	holders := map[string]int{}
	for i := 0; i < 8; i++ {
		resp, body := post(t, r.url+"/v1/completions", completion(prompt("alpha", 400, i), 4, false))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		holders[resp.Header.Get("X-Kvrouter-Endpoint")]++
		if i == 0 {
			// Let the first request's blocks arrive as events (predictions cover the gap
			// meanwhile; this makes the test about the exact index).
			time.Sleep(300 * time.Millisecond)
		}
	}
	if len(holders) != 1 {
		t.Fatalf("same-prefix requests spread over %v", holders)
	}
	st := r.status(t)
	if st.Router.Decisions["prefix"] != 7 || st.Router.RoutedHitRate < 0.8 {
		t.Fatalf("router stats %+v", st.Router)
	}
	// Other prefixes go elsewhere (by load) rather than piling onto the holder.
	others := map[string]bool{}
	for i := 0; i < 6; i++ {
		resp, _ := post(t, r.url+"/v1/completions", completion(prompt(fmt.Sprintf("topic%d", i), 300, 0), 4, false))
		others[resp.Header.Get("X-Kvrouter-Endpoint")] = true
	}
	if len(others) < 2 {
		t.Fatalf("cold prefixes all went to %v", others)
	}
	// The engines confirm what the router predicted: the fleet hit rate shows up in status.
	r.waitStatus(t, "engine hit rate", func(st routerapi.Status) bool { return st.Fleet.HitRateValid && st.Fleet.HitRate > 0.3 })
}

func TestE2ESaturatedHolderReleased(t *testing.T) {
	needBinaries(t)
	// Slowed down 5×, so a burst queues up on the holder.
	es := fleetOf(t, 3, "0.2")
	r := startRouter(t, writeEndpoints(t, es, ""))
	r.waitConnected(t, 3)
	resp, _ := post(t, r.url+"/v1/completions", completion(prompt("beta", 800, 0), 2, false))
	holder := resp.Header.Get("X-Kvrouter-Endpoint")
	time.Sleep(300 * time.Millisecond)
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for i := 1; i <= 30; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each request also brings its own 400 words to prefill, so the burst builds a real
			// prefill queue on the holder (a burst of cheap suffixes batches there for free and
			// is rightly kept: see internal/policy's saturated).
			p := prompt("beta", 800, i) + strings.Repeat(fmt.Sprintf(" detail%d", i), 400)
			resp, err := http.Post(r.url+"/v1/completions", "application/json", strings.NewReader(completion(p, 2, false)))
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			got[resp.Header.Get("X-Kvrouter-Endpoint")]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if got[holder] < 5 || len(got) < 2 {
		t.Fatalf("holder %s; burst went %v: want most on the holder and the overflow released", holder, got)
	}
	if st := r.status(t); st.Router.Decisions["saturated"] == 0 {
		t.Fatalf("no saturated decision: %+v", st.Router.Decisions)
	}
}

func TestE2EChatCompletionsAndStreaming(t *testing.T) {
	needBinaries(t)
	es := fleetOf(t, 2, "1")
	r := startRouter(t, writeEndpoints(t, es, ""), "--model", "m", "--session-header", "X-Session")
	chat := `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hi"}],"max_tokens":8}`
	resp, body := post(t, r.url+"/v1/chat/completions", chat)
	if resp.StatusCode != 200 || !strings.Contains(body, `"choices"`) || resp.Header.Get("X-Kvrouter-Endpoint") == "" {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", strings.Replace(chat, `"max_tokens":8`, `"max_tokens":8,"stream":true`, 1)},
		{"/v1/completions", completion("once upon a time", 8, true)},
	} {
		resp, err := http.Post(r.url+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("%s: content type %q", c.path, resp.Header.Get("Content-Type"))
		}
		sc := bufio.NewScanner(resp.Body)
		events, done := 0, false
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "data: ") {
				events++
				done = done || line == "data: [DONE]"
			}
		}
		resp.Body.Close()
		if events < 3 || !done {
			t.Fatalf("%s: %d events, done %v", c.path, events, done)
		}
	}
	st := r.status(t)
	if st.Router.TokenizeFailures != 0 || st.Router.PromptTokens == 0 {
		t.Fatalf("router %+v", st.Router)
	}
	if m, _ := http.Get(r.url + "/metrics"); m != nil {
		b, _ := io.ReadAll(m.Body)
		m.Body.Close()
		if !strings.Contains(string(b), "kvrouter_routing_decisions_total") {
			t.Fatal("metrics lack kvrouter_routing_decisions_total")
		}
	}
}

func TestE2EFailoverOnKilledEngine(t *testing.T) {
	needBinaries(t)
	es := fleetOf(t, 3, "1")
	r := startRouter(t, writeEndpoints(t, es, ""))
	r.waitConnected(t, 3)
	resp, _ := post(t, r.url+"/v1/completions", completion(prompt("gamma", 300, 0), 2, false))
	holder := resp.Header.Get("X-Kvrouter-Endpoint")
	time.Sleep(300 * time.Millisecond)
	for _, e := range es {
		if e.name == holder {
			e.p.kill()
		}
	}
	// The next same-prefix request picks the dead holder, fails to connect, and is retried.
	for i := 1; i <= 5; i++ {
		resp, body := post(t, r.url+"/v1/completions", completion(prompt("gamma", 300, i), 2, false))
		if resp.StatusCode != 200 || resp.Header.Get("X-Kvrouter-Endpoint") == holder {
			t.Fatalf("request %d after killing %s: %d from %q: %s", i, holder, resp.StatusCode,
				resp.Header.Get("X-Kvrouter-Endpoint"), body)
		}
	}
	st := r.waitStatus(t, "dead engine unready", func(st routerapi.Status) bool {
		for _, e := range st.Endpoints {
			if e.Name == holder {
				return !e.Ready
			}
		}
		return false
	})
	if st.Router.Retries < 1 || st.ReadyEndpoints != 2 {
		t.Fatalf("retries %d ready %d", st.Router.Retries, st.ReadyEndpoints)
	}
}

func TestE2EBadInput(t *testing.T) {
	needBinaries(t)
	es := fleetOf(t, 1, "1")
	r := startRouter(t, writeEndpoints(t, es, ""), "--model", "m", "--max-body-bytes", "4096")
	for _, c := range []struct {
		name, path, body string
		code             int
	}{
		{"malformed JSON", "/v1/completions", `{"model": "m", "prompt": `, 400},
		{"missing model", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, 400},
		{"unknown model", "/v1/completions", `{"model":"gpt-9","prompt":"x"}`, 404},
		{"body too large", "/v1/completions", completion(strings.Repeat("x", 5000), 1, false), 413},
	} {
		resp, body := post(t, r.url+c.path, c.body)
		var e struct {
			Error struct {
				Message, Type string
				Code          int
			}
		}
		if resp.StatusCode != c.code || json.Unmarshal([]byte(body), &e) != nil || e.Error.Message == "" || e.Error.Code != c.code {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, body)
		}
	}
	// No ready endpoint: 503 with Retry-After.
	unready := filepath.Join(t.TempDir(), "unready.yaml")
	_ = os.WriteFile(unready, []byte("endpoints:\n  - name: e0\n    url: "+es[0].url+"\n    ready: false\n"), 0o644)
	r2 := startRouter(t, unready, "--model", "m", "--no-kv-events")
	resp, body := post(t, r2.url+"/v1/completions", completion("x", 1, false))
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, `"error"`) {
		t.Fatalf("no ready endpoint: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if rr, _ := http.Get(r2.url + "/ready"); rr == nil || rr.StatusCode != 503 {
		t.Fatal("/ready not 503 without ready endpoints")
	}
}

func TestE2ERouterRestartRebuildsIndexFromReplay(t *testing.T) {
	needBinaries(t)
	es := fleetOf(t, 3, "1")
	file := writeEndpoints(t, es, "")
	r := startRouter(t, file)
	r.waitConnected(t, 3)
	resp, _ := post(t, r.url+"/v1/completions", completion(prompt("delta", 500, 0), 2, false))
	holder := resp.Header.Get("X-Kvrouter-Endpoint")
	r.waitStatus(t, "events indexed", func(st routerapi.Status) bool { return st.Index != nil && st.Index.Entries > 0 })
	r.p.kill()

	// A new router has no predictions and saw no live event: only replay can tell it.
	r2 := startRouter(t, file, "--predict-ttl", "1ms")
	r2.waitStatus(t, "index rebuilt from replay", func(st routerapi.Status) bool { return st.Index != nil && st.Index.Entries > 20 })
	resp, body := post(t, r2.url+"/v1/completions", completion(prompt("delta", 500, 1), 2, false))
	if resp.StatusCode != 200 || resp.Header.Get("X-Kvrouter-Endpoint") != holder {
		t.Fatalf("after restart went to %q (holder %s): %s", resp.Header.Get("X-Kvrouter-Endpoint"), holder, body)
	}
	if st := r2.status(t); st.Router.Decisions["prefix"] != 1 {
		t.Fatalf("decisions %+v", st.Router.Decisions)
	}
}

func TestE2EEndpointsFileChangeWithoutRestart(t *testing.T) {
	needBinaries(t)
	es := fleetOf(t, 2, "1")
	file := writeEndpoints(t, es[:1], "")
	r := startRouter(t, file)
	r.waitStatus(t, "one endpoint", func(st routerapi.Status) bool { return st.ReadyEndpoints == 1 })
	tmp := writeEndpoints(t, es, "")
	data, _ := os.ReadFile(tmp)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r.waitStatus(t, "two endpoints", func(st routerapi.Status) bool { return st.ReadyEndpoints == 2 })
}

// A replica added under load gets traffic as soon as it is ready, although it holds no prefix.
func TestE2EFreshEndpointGetsTraffic(t *testing.T) {
	needBinaries(t)
	es := fleetOf(t, 3, "0.2")
	file := writeEndpoints(t, es[:2], "")
	r := startRouter(t, file)
	r.waitConnected(t, 2)
	var mu sync.Mutex
	counts := map[string]int{}
	phase := 0 // 0: two engines, 1: the third is listed
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Two shared-prefix groups with long distinct questions (like the shared-prefix workload):
	// the holders' queues of uncached prefill grow with the load.
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := prompt(fmt.Sprintf("group%d", w%2), 600, 0) + strings.Repeat(fmt.Sprintf(" q%d-%d", w, i), 200)
				resp, err := http.Post(r.url+"/v1/completions", "application/json", strings.NewReader(completion(p, 2, false)))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				if phase == 1 {
					counts[resp.Header.Get("X-Kvrouter-Endpoint")]++
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	data, _ := os.ReadFile(writeEndpoints(t, es, ""))
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r.waitStatus(t, "third endpoint ready", func(st routerapi.Status) bool { return st.ReadyEndpoints == 3 })
	mu.Lock()
	phase = 1
	mu.Unlock()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	total := 0
	for _, n := range counts {
		total += n
	}
	if total < 10 || counts["e2"]*6 < total {
		t.Fatalf("after scale-up the new engine got %d of %d requests (%v)", counts["e2"], total, counts)
	}
	t.Logf("after scale-up: %v", counts)
}
