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
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/test/fleettest"
)

// TestSizingPoint measures the router process alone against llm-d's published EPP sizing point
// (100 engines, 100K-token prompts, ~100 requests/s). It is heavy, so it runs only when
// KVROUTER_SIZING is set:
//
//	KVROUTER_SIZING=1 KVROUTER_SIZING_RATE=4 KVROUTER_SIZING_SECONDS=40 go test -run TestSizingPoint -v -timeout 20m ./cmd/router/
//
// 100 vllm-sim engines run in one process (KV events on), the router uses file discovery, and
// an open-loop Poisson client streams text prompts of ~100K tokens (20 shared 90K-token prefixes
// + a distinct 10K-token question) with max_tokens 100. The router's CPU time and peak RSS come
// from /proc for its process only. On a machine where the engines and the client share the
// router's cores, run at a lower rate and scale the CPU per request (it is per-request work).
func TestSizingPoint(t *testing.T) {
	if os.Getenv("KVROUTER_SIZING") == "" {
		t.Skip("set KVROUTER_SIZING=1 to run the sizing point (heavy)")
	}
	fleettest.NeedBinaries(t)
	rate := envFloat("KVROUTER_SIZING_RATE", 4)
	seconds := envFloat("KVROUTER_SIZING_SECONDS", 40)
	// KVROUTER_SIZING_ENGINES lowers the engine count (default 100) where the engines' CPU would
	// otherwise cap the rate; the router's per-request work does not depend on it.
	nEngines := int(envFloat("KVROUTER_SIZING_ENGINES", 100))

	// Engines on base..base+99, events on eb+2i, replay eb+2i+1: ranges below the ephemeral
	// port range, checked free now.
	base, eb := freeRange(t, 3*nEngines), 0
	eb = base + nEngines
	kv := fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://[::1]:%d","replay_endpoint":"tcp://127.0.0.1:%d","topic":"kv@e{engine}@m"}`, eb, eb+1)
	// KVROUTER_SIZING_PROMPTS=ids sends the prompts as token ids (no tokenizer anywhere);
	// KVROUTER_SIZING_TOKENIZER=dir gives the engines that tokenizer.json and has the router
	// tokenize in process with it (otherwise it asks the engines' /tokenize).
	ids := os.Getenv("KVROUTER_SIZING_PROMPTS") == "ids"
	tokDir := os.Getenv("KVROUTER_SIZING_TOKENIZER")
	simArgs := []string{"--model", "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "m",
		"--host", "127.0.0.1", "--port", fmt.Sprint(base), "--engines", fmt.Sprint(nEngines),
		"--block-size", "16", "--kv-events-config", kv, "--log-level", "warn"}
	routerArgs := []string{"--model", "m", "--scrape-interval", "1s", "--log-level", "warn"}
	if tokDir != "" {
		simArgs = append(simArgs, "--tokenizer", tokDir)
		routerArgs = append(routerArgs, "--tokenizer", "local", "--tokenizer-dir", tokDir)
	} else {
		routerArgs = append(routerArgs, "--tokenizer", "engine")
	}
	fleettest.Start(t, "vllm-sim", simArgs...)
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for i := 0; i < nEngines; i++ {
		fmt.Fprintf(&b, "  - name: e%d\n    url: http://127.0.0.1:%d\n    kvEvents: tcp://[::1]:%d\n    kvReplay: tcp://127.0.0.1:%d\n",
			i, base+i, eb+2*i, eb+2*i+1)
	}
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < nEngines; i++ {
		fleettest.WaitOK(t, fmt.Sprintf("http://127.0.0.1:%d/health", base+i))
	}
	pprofPort := fleettest.FreePort(t)
	r := fleettest.StartRouter(t, file, append(routerArgs, "--pprof-addr", fmt.Sprintf("127.0.0.1:%d", pprofPort))...)
	r.WaitConnected(t, nEngines)
	pid := r.Proc.Pid()

	// Prompts: 20 shared prefixes of ~90K words, each request adds ~10K distinct words.
	rnd := rand.New(rand.NewPCG(1, 2))
	prefixes := make([]string, 20)
	// A real tokenizer makes two tokens of each word ("doc" "7", "q" "12"): half as many words
	// keep the prompts at ~100K tokens, within the model's context.
	words := 1
	if tokDir != "" {
		words = 2
	}
	for i := range prefixes {
		prefixes[i] = strings.Repeat(fmt.Sprintf("doc%d ", i), 90000/words)
	}
	if tokDir != "" {
		// Loading the tokenizer (a second or so of CPU, once) must not count as idle cost.
		deadline := time.Now().Add(time.Minute)
		for st := r.Status(t); st.Tokenizer == nil || st.Tokenizer.Source != "local"; st = r.Status(t) {
			if time.Now().After(deadline) {
				t.Fatalf("the router does not tokenize in process: %+v", st.Tokenizer)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// Idle cost first: scrapes of 100 engines and 100 idle event streams.
	idle0, it0 := procCPU(t, pid), time.Now()
	time.Sleep(10 * time.Second)
	idle := (procCPU(t, pid) - idle0) / time.Since(it0).Seconds()
	t.Logf("router idle: %.3f cores", idle)
	// With KVROUTER_SIZING_PROFILE=path, a CPU profile of the loaded router is written there.
	if path := os.Getenv("KVROUTER_SIZING_PROFILE"); path != "" {
		go func() {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", pprofPort, int(seconds)-2))
			if err != nil {
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(path)
			if err != nil {
				return
			}
			defer f.Close()
			_, _ = io.Copy(f, resp.Body)
		}()
	}
	cpu0, t0 := procCPU(t, pid), time.Now()
	var sent, ok, failed atomic.Int64
	var wg sync.WaitGroup
	deadline := t0.Add(time.Duration(seconds * float64(time.Second)))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	for next := t0; next.Before(deadline); next = next.Add(time.Duration(rnd.ExpFloat64() / rate * float64(time.Second))) {
		time.Sleep(time.Until(next))
		id := sent.Add(1)
		p := rnd.IntN(len(prefixes))
		var body string
		if ids {
			body = idsCompletion(p, id)
		} else {
			body = fleettest.Completion(prefixes[p]+strings.Repeat(fmt.Sprintf("q%d ", id), 10000/words), 100, true)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post(r.URL+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				failed.Add(1)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				ok.Add(1)
			} else {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	wall := time.Since(t0).Seconds()
	cpu := procCPU(t, pid) - cpu0
	hwm, rss := procMem(t, pid)
	st := r.Status(t)
	t.Logf("sizing: %d engines, %d requests sent at %.1f/s over %.0fs: %d ok, %d failed", nEngines, sent.Load(), rate, wall, ok.Load(), failed.Load())
	t.Logf("router: %.2f CPU-s over %.1fs = %.2f cores; %.1f ms CPU per request; peak RSS %.0f MiB (now %.0f MiB)",
		cpu, wall, cpu/wall, 1000*cpu/float64(sent.Load()), hwm/1024, rss/1024)
	t.Logf("router: routed hit rate %.3f, decisions %v, tokenize failures %d, index keys %d",
		st.Router.RoutedHitRate, st.Router.Decisions, st.Router.TokenizeFailures, st.Index.Keys)
	// The idle cost (scrapes, event streams) does not grow with the rate: only the rest is
	// per-request work, which is what scales to 100 requests/s.
	marginal := (cpu - idle*wall) / float64(sent.Load())
	t.Logf("router: %.1f ms CPU per request beyond the idle %.3f cores; extrapolated to 100 req/s: %.2f cores",
		1000*marginal, idle, idle+100*marginal)
	if failed.Load() > 0 {
		t.Errorf("%d requests failed", failed.Load())
	}
}

// idsCompletion is the token-id form of the sizing prompt: 90,000 ids shared by every request on
// prefix p, then 10,000 ids of its own.
func idsCompletion(p int, id int64) string {
	var b strings.Builder
	b.WriteString(`{"model":"m","max_tokens":100,"stream":true,"prompt":[`)
	for i := range 100000 {
		if i > 0 {
			b.WriteByte(',')
		}
		v := 1000 + (p*7919+i*31)%100000
		if i >= 90000 {
			v = 1000 + int((id*104729+int64(i)*13)%100000)
		}
		b.WriteString(strconv.Itoa(v))
	}
	b.WriteString("]}")
	return b.String()
}

// freeRange finds n consecutive ports in 20000–30000 that are free on 127.0.0.1 and ::1.
func freeRange(t *testing.T, n int) int {
	t.Helper()
	for try := 0; try < 50; try++ {
		base := 20000 + rand.IntN(10000-n)
		free := true
		for p := base; p < base+n && free; p++ {
			for _, host := range []string{"127.0.0.1", "[::1]"} {
				l, err := net.Listen("tcp", fmt.Sprintf("%s:%d", host, p))
				if err != nil {
					free = false
					break
				}
				l.Close()
			}
		}
		if free {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

func envFloat(name string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil && v > 0 {
		return v
	}
	return def
}

// procCPU is the process's user+system CPU time in seconds.
func procCPU(t *testing.T, pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the parenthesised command name; utime and stime are fields 14 and 15.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// procMem returns peak and current resident set size in KiB.
func procMem(t *testing.T, pid int) (hwm, rss float64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(fs[1], 64)
		switch fs[0] {
		case "VmHWM:":
			hwm = v
		case "VmRSS:":
			rss = v
		}
	}
	return hwm, rss
}
