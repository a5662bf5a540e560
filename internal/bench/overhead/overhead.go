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

// Package overhead measures what the router adds to a request against what a plain
// net/http/httputil.ReverseProxy adds in front of the same engines, on this machine: simulated
// engines, the router and the plain proxy run as separate processes (so each proxy's CPU is
// its own process's, read from /proc), an open-loop Poisson load goes to the engines directly,
// through the plain proxy and through the router in interleaved rounds, and every figure is
// reported as the difference to the direct calls of the same round and as a ratio to the plain
// proxy's. Interleaving is what makes the ratios hold on a busy machine: whatever else runs
// there loads the three phases of a round alike.
package overhead

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Router is one router binary under test; several can run side by side (an old build against a
// new one), each compared with the same plain proxy.
type Router struct {
	Name string
	Path string
}

// Config is one overhead run.
type Config struct {
	// BinDir holds vllm-sim (and router, when Routers is empty).
	BinDir string
	// Self is the executable that serves `plainproxy` (kvbench).
	Self    string
	Routers []Router
	// Engines is the number of simulated engines, hosted by one vllm-sim process.
	Engines int
	Rates   []float64 // requests per second, one series of rounds each
	// Conns is the number of client connections the load is spread over (request i goes out on
	// connection i mod Conns, as from that many keep-alive clients).
	Conns    int
	Rounds   int
	Duration time.Duration // measured time of one phase (one target in one round)
	Warmup   time.Duration // load sent before each phase's measurement, not counted
	// Prompt is "ids" (token-id completion prompts, which the router need not tokenize) or
	// "text" (text completion prompts).
	Prompt       string
	PromptTokens int
	Stream       bool
	MaxTokens    int
	TimeScale    float64 // vllm-sim --time-scale
	RouterArgs   []string
	EngineArgs   []string
	// ProfileDir, when set, receives a CPU profile of each router phase (router --pprof-addr).
	ProfileDir string
	Log        *slog.Logger
}

// Phase is one target's measurement in one round.
type Phase struct {
	Target    string
	Requests  int
	Errors    int
	P50       time.Duration
	P90       time.Duration
	P99       time.Duration
	CPU       time.Duration // the proxy process's user+system CPU over the measurement (0: direct)
	LoadAvg   float64       // 1-minute load average at the end of the phase
	FirstErr  string
	Duration  time.Duration
	Latencies []time.Duration `json:"-"`
}

// Round is one pass over every target at one rate.
type Round struct {
	Rate   float64
	Phases []Phase // direct, plain, then each router
}

// Result is every round of a run.
type Result struct {
	Config Config
	Rounds []Round
}

// Run starts the engines, the plain proxy and the routers, runs the rounds and stops them all.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	log := cfg.Log
	dir, err := os.MkdirTemp("", "kvbench-overhead-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var procs []*proc
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
		}
	}()

	engines, evBase, eproc, err := startEngines(ctx, cfg, dir)
	if eproc != nil {
		procs = append(procs, eproc)
	}
	if err != nil {
		return nil, err
	}
	plainPort, err := freePort()
	if err != nil {
		return nil, err
	}
	plain, err := start(filepath.Join(dir, "plainproxy.log"), cfg.Self, "plainproxy",
		"--listen", "127.0.0.1:"+strconv.Itoa(plainPort), "--upstreams", strings.Join(engines, ","),
		"--max-idle-conns-per-host", strconv.Itoa(max(256, cfg.Conns)))
	if err != nil {
		return nil, err
	}
	procs = append(procs, plain)
	plainURL := "http://127.0.0.1:" + strconv.Itoa(plainPort)
	if err := waitOK(ctx, plainURL+"/health", plain); err != nil {
		return nil, fmt.Errorf("plain proxy: %w", err)
	}

	endpoints := filepath.Join(dir, "endpoints.yaml")
	if err := writeEndpoints(endpoints, engines, evBase); err != nil {
		return nil, err
	}
	type target struct {
		name  string
		urls  []string
		p     *proc
		debug string
	}
	targets := []target{{name: "direct", urls: engines}, {name: "plain", urls: []string{plainURL}, p: plain}}
	for _, r := range cfg.Routers {
		ports, err := freePorts(3)
		if err != nil {
			return nil, err
		}
		port, admin, debug := ports[0], ports[1], ports[2]
		args := []string{"--host", "127.0.0.1", "--port", strconv.Itoa(port), "--admin-addr", "127.0.0.1:" + strconv.Itoa(admin),
			"--endpoints-file", endpoints, "--block-size", "16", "--log-level", "warn"}
		debugAddr := ""
		if cfg.ProfileDir != "" {
			debugAddr = "127.0.0.1:" + strconv.Itoa(debug)
			args = append(args, "--pprof-addr", debugAddr)
		}
		p, err := start(filepath.Join(dir, "router-"+r.Name+".log"), r.Path, append(args, cfg.RouterArgs...)...)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		u := "http://127.0.0.1:" + strconv.Itoa(port)
		if err := waitOK(ctx, u+"/ready", p); err != nil {
			return nil, fmt.Errorf("router %s: %w", r.Name, err)
		}
		targets = append(targets, target{name: r.Name, urls: []string{u}, p: p, debug: debugAddr})
	}

	ld := newLoad(cfg)
	defer ld.close()
	// One untimed pass warms every target's connections and the engines' code paths.
	for _, t := range targets {
		if _, err := ld.drive(ctx, t.urls, 50, time.Second); err != nil {
			return nil, err
		}
	}
	res := &Result{Config: cfg}
	for _, rate := range cfg.Rates {
		for r := 0; r < cfg.Rounds; r++ {
			round := Round{Rate: rate}
			for _, t := range targets {
				if cfg.Warmup > 0 {
					if _, err := ld.drive(ctx, t.urls, rate, cfg.Warmup); err != nil {
						return nil, err
					}
				}
				var cpu0 time.Duration
				if t.p != nil {
					if cpu0, err = t.p.cpu(); err != nil {
						return nil, err
					}
				}
				var prof chan error
				if t.debug != "" {
					prof = make(chan error, 1)
					path := filepath.Join(cfg.ProfileDir, fmt.Sprintf("%s-%g-r%d.pprof", t.name, rate, r+1))
					go func() { prof <- fetchProfile(ctx, t.debug, cfg.Duration, path) }()
				}
				ph, err := ld.drive(ctx, t.urls, rate, cfg.Duration)
				if err != nil {
					return nil, err
				}
				if t.p != nil {
					cpu1, err := t.p.cpu()
					if err != nil {
						return nil, err
					}
					ph.CPU = cpu1 - cpu0
				}
				if prof != nil {
					if err := <-prof; err != nil {
						log.Warn("profile", "error", err)
					}
				}
				ph.Target = t.name
				ph.LoadAvg = loadAvg()
				round.Phases = append(round.Phases, ph)
				log.Info("phase", "rate", rate, "round", r+1, "target", t.name, "requests", ph.Requests, "errors", ph.Errors,
					"p50", ph.P50, "p99", ph.P99, "cpu", ph.CPU, "load", ph.LoadAvg)
				if ph.Errors > 0 {
					tail := ""
					if t.p != nil {
						tail = t.p.tail()
					}
					log.Warn("errors", "target", t.name, "first", ph.FirstErr, "log", tail)
				}
			}
			res.Rounds = append(res.Rounds, round)
		}
	}
	return res, nil
}

func (cfg *Config) check() error {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Engines <= 0 || cfg.Conns <= 0 || cfg.Rounds <= 0 || cfg.Duration <= 0 || len(cfg.Rates) == 0 {
		return errors.New("overhead: engines, conns, rounds, duration and rates must be positive")
	}
	for _, r := range cfg.Rates {
		if r <= 0 {
			return fmt.Errorf("overhead: rate %g: want > 0", r)
		}
	}
	if cfg.Prompt != "ids" && cfg.Prompt != "text" {
		return fmt.Errorf("overhead: prompt %q: want ids or text", cfg.Prompt)
	}
	if cfg.PromptTokens <= 0 {
		cfg.PromptTokens = 128
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = 8
	}
	if cfg.TimeScale <= 0 {
		cfg.TimeScale = 1
	}
	if len(cfg.Routers) == 0 {
		cfg.Routers = []Router{{Name: "router", Path: filepath.Join(cfg.BinDir, "router")}}
	}
	seen := map[string]bool{"direct": true, "plain": true}
	for _, r := range cfg.Routers {
		if seen[r.Name] || r.Name == "" {
			return fmt.Errorf("overhead: router name %q: empty or taken", r.Name)
		}
		seen[r.Name] = true
	}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// startEngines runs one vllm-sim process hosting cfg.Engines engines with KV events on, and
// returns their URLs once each answers /health, and the first KV-events port.
func startEngines(ctx context.Context, cfg Config, dir string) ([]string, int, *proc, error) {
	base, evBase, err := portBlocks(cfg.Engines)
	if err != nil {
		return nil, 0, nil, err
	}
	kv := fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://[::1]:%d","replay_endpoint":"tcp://[::1]:%d","topic":"kv@engine-{engine}@m"}`, evBase, evBase+1)
	args := append([]string{"--model", "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "m",
		"--host", "127.0.0.1", "--port", strconv.Itoa(base), "--engines", strconv.Itoa(cfg.Engines),
		"--block-size", "16", "--prefix-caching-hash-algo", "sha256_cbor", "--kv-events-config", kv,
		"--time-scale", strconv.FormatFloat(cfg.TimeScale, 'g', -1, 64), "--log-level", "warn"}, cfg.EngineArgs...)
	p, err := start(filepath.Join(dir, "vllm-sim.log"), filepath.Join(cfg.BinDir, "vllm-sim"), args...)
	if err != nil {
		return nil, 0, nil, err
	}
	var urls []string
	for i := 0; i < cfg.Engines; i++ {
		u := "http://127.0.0.1:" + strconv.Itoa(base+i)
		if err := waitOK(ctx, u+"/health", p); err != nil {
			return nil, 0, p, fmt.Errorf("engine %d: %w", i, err)
		}
		urls = append(urls, u)
	}
	return urls, evBase, p, nil
}

// writeEndpoints is the router's endpoints file: engine i publishes on evBase+2i, replays on
// evBase+2i+1 (vllm-sim's default stride).
func writeEndpoints(path string, engines []string, evBase int) error {
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for i, u := range engines {
		fmt.Fprintf(&b, "  - name: engine-%d\n    url: %s\n    kvEvents: tcp://[::1]:%d\n    kvReplay: tcp://[::1]:%d\n",
			i, u, evBase+2*i, evBase+2*i+1)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// portBlocks finds n consecutive free loopback ports for the engines' HTTP listeners and 2n on
// IPv6 loopback for their event and replay sockets (vLLM binds an events endpoint only when it
// holds "*" or "::", so [::1] is the loopback-only choice).
func portBlocks(n int) (http, events int, err error) {
	free := func(network, host string, p int) bool {
		l, err := net.Listen(network, net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			return false
		}
		l.Close()
		return true
	}
	block := func(network, host string, n int) (int, error) {
		for range 200 {
			b := 20000 + rand.IntN(40000)
			ok := true
			for p := b; p < b+n && ok; p++ {
				ok = free(network, host, p)
			}
			if ok {
				return b, nil
			}
		}
		return 0, fmt.Errorf("no %d free consecutive ports on %s", n, host)
	}
	if http, err = block("tcp4", "127.0.0.1", n); err != nil {
		return 0, 0, err
	}
	if events, err = block("tcp6", "::1", 2*n); err != nil {
		return 0, 0, fmt.Errorf("%w (the engines' KV events bind on IPv6 loopback)", err)
	}
	return http, events, nil
}

func freePort() (int, error) {
	ps, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}

// freePorts returns n distinct free loopback ports. They are held open until all n are picked:
// picked one at a time, the kernel may hand the same port out twice (a router was once given
// one port for both --port and --admin-addr).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// proc is a started process; its output goes to a log file that is shown when it fails.
type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func start(logPath, path string, args ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", path, err)
	}
	p := &proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// stop ends the process with SIGTERM, then SIGKILL if it lingers.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail is the end of the process's log, for an error message.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// cpu is the process's user+system CPU time so far (/proc/PID/stat, in clock ticks of 10 ms:
// USER_HZ is 100 on every Linux ABI Go supports).
func (p *proc) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; the fields after its closing parenthesis do not.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc stat format")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc stat format")
	}
	// Fields 14 and 15 of stat (utime, stime) are 12 and 13 after the name.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

func waitOK(ctx context.Context, url string, p *proc) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("exited (%v): %s", p.err, p.tail())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not OK within 60 s: %s", url, p.tail())
}

func fetchProfile(ctx context.Context, addr string, d time.Duration, path string) error {
	secs := max(1, int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// loadAvg is the 1-minute load average (0 where /proc/loadavg is unreadable).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// load is the client: Conns transports, each one keep-alive client.
type load struct {
	cfg     Config
	clients []*http.Client
	seq     uint64
}

func newLoad(cfg Config) *load {
	l := &load{cfg: cfg}
	for range cfg.Conns {
		l.clients = append(l.clients, &http.Client{Transport: &http.Transport{
			Proxy: nil, MaxIdleConnsPerHost: 8, IdleConnTimeout: 5 * time.Minute, DisableCompression: true,
		}, Timeout: time.Minute})
	}
	return l
}

func (l *load) close() {
	for _, c := range l.clients {
		c.CloseIdleConnections()
	}
}

// drive sends an open-loop Poisson load at rate to urls (round-robin) for d and times each
// request from its send to the end of its answer. Requests still out at the end are waited for.
func (l *load) drive(ctx context.Context, urls []string, rate float64, d time.Duration) (Phase, error) {
	var (
		mu    sync.Mutex
		lat   []time.Duration
		errs  int
		first string
		wg    sync.WaitGroup
	)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), l.seq))
	start := time.Now()
	next := start
	for i := 0; ; i++ {
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if next.Sub(start) >= d {
			break
		}
		if w := time.Until(next); w > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return Phase{}, ctx.Err()
			case <-time.After(w):
			}
		}
		l.seq++
		seq := l.seq
		client := l.clients[int(seq)%len(l.clients)]
		url := urls[int(seq)%len(urls)] + "/v1/completions"
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := l.body(seq)
			t0 := time.Now()
			err := send(ctx, client, url, body)
			el := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs++
				if first == "" {
					first = err.Error()
				}
				return
			}
			lat = append(lat, el)
		}()
	}
	wg.Wait()
	ph := Phase{Requests: len(lat) + errs, Errors: errs, FirstErr: first, Duration: time.Since(start), Latencies: lat}
	ph.P50, ph.P90, ph.P99 = percentile(lat, 0.50), percentile(lat, 0.90), percentile(lat, 0.99)
	return ph, nil
}

func send(ctx context.Context, c *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	if n == 0 {
		return errors.New("empty answer")
	}
	return nil
}

// words are the text prompts' vocabulary: common English words, about one token each.
var words = strings.Fields(`the of and to in is was for on are with as at be this have from or had by not
but what some we can out other were all there when up use your how said an each she which do their time
if will way about many then them write would like so these her long make thing see him two has look more
day could go come did number sound no most people my over know water than call first who may down side been
now find any new work part take get place made live where after back little only round man year came show
every good me give our under name very through just form sentence great think say help low line differ turn`)

// body is request seq's JSON: a prompt no other request shares (distinct token ids, or distinct
// words), so that neither the engines' prefix caches nor the router's tokenize cache answer it.
func (l *load) body(seq uint64) []byte {
	rng := rand.New(rand.NewPCG(seq, 0x6f76657268656164))
	var b bytes.Buffer
	b.WriteString(`{"model":"m","prompt":`)
	if l.cfg.Prompt == "ids" {
		b.WriteByte('[')
		for i := range l.cfg.PromptTokens {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(1000 + rng.IntN(100000)))
		}
		b.WriteByte(']')
	} else {
		b.WriteByte('"')
		b.WriteString("request " + strconv.FormatUint(seq, 10))
		for range l.cfg.PromptTokens - 2 {
			b.WriteByte(' ')
			b.WriteString(words[rng.IntN(len(words))])
		}
		b.WriteByte('"')
	}
	fmt.Fprintf(&b, `,"max_tokens":%d,"stream":%t}`, l.cfg.MaxTokens, l.cfg.Stream)
	return b.Bytes()
}

// percentile is the nearest-rank q-quantile of lat (0 for none).
func percentile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
