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

// Package pd_test runs a disaggregated vllm-sim fleet (two prefill, two decode engines) behind
// the router and checks the prefill/decode split end to end: the same tokens as whole
// requests, the transferred blocks in the decode engine's cache and KV events, and nothing lost
// when transfers fail or a prefill engine goes away.
package pd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/test/fleettest"
)

// kvbench is built for its gateway, the Inference Gateway in front of the picker.
func TestMain(m *testing.M) { fleettest.Main(m, "kvbench") }

// connector is the engines' --kv-transfer-config, as the operator renders it: with
// kv_load_failure_policy recompute (vLLM's default, and the simulator's, is fail), a decode
// engine whose KV pull fails recomputes the prompt, which the fault tests count on.
const connector = `{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_load_failure_policy":"recompute"}`

type fleet struct {
	prefill, decode []*fleettest.Engine
	file            string
	// sidecars are the decode engines' sidecars (EPP mode), by engine name.
	sidecars map[string]string
}

// all is every engine, prefill first.
func (f *fleet) all() []*fleettest.Engine {
	return append(append([]*fleettest.Engine(nil), f.prefill...), f.decode...)
}

func (f *fleet) byName(n string) *fleettest.Engine {
	for _, e := range f.all() {
		if e.Name == n {
			return e
		}
	}
	return nil
}

// startFleet starts 2 prefill and 2 decode engines, each with its own KV side-channel port, and
// writes the endpoints file that gives each its role. With sidecars, each decode engine gets a
// `router --mode sidecar` in front of it, and the endpoints file names the sidecar's address
// for it, as the InferencePool's target port does in a cluster.
func startFleet(t *testing.T, sidecars bool) *fleet {
	t.Helper()
	fleettest.NeedBinaries(t)
	f := &fleet{sidecars: map[string]string{}}
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for i, role := range []string{"prefill", "prefill", "decode", "decode"} {
		t.Setenv("VLLM_NIXL_SIDE_CHANNEL_PORT", fmt.Sprint(fleettest.FreePort(t)))
		name := fmt.Sprintf("%s%d", role[:1], i)
		e := fleettest.StartEngine(t, name, "20", "--kv-transfer-config", connector)
		url := e.URL
		if role == "prefill" {
			f.prefill = append(f.prefill, e)
		} else {
			f.decode = append(f.decode, e)
			if sidecars {
				port := fleettest.FreePort(t)
				fleettest.Start(t, "router", "--mode", "sidecar", "--engine-url", e.URL, "--host", "127.0.0.1",
					"--port", fmt.Sprint(port), "--admin-addr", "")
				url = fmt.Sprintf("http://127.0.0.1:%d", port)
				fleettest.WaitOK(t, url+"/health") // the engine's, through the sidecar
				f.sidecars[e.Name] = url
			}
		}
		fmt.Fprintf(&b, "  - name: %s\n    url: %s\n    kvEvents: %s\n    kvReplay: %s\n    role: %s\n", e.Name, url, e.Events, e.Replay, role)
	}
	f.file = filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(f.file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// answer is a streamed completion as the client saw it.
type answer struct {
	text, endpoint, prefill string
	done                    bool
}

// stream sends a streamed completion and reads its text.
func stream(t *testing.T, url, body string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	a := answer{endpoint: resp.Header.Get("X-Kvrouter-Endpoint"), prefill: resp.Header.Get("X-Kvrouter-Prefill-Endpoint")}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			a.done = true
			continue
		}
		var ev struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Error any `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Error != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		for _, c := range ev.Choices {
			a.text += c.Text
		}
	}
	return a
}

// prompt is a long prompt (many blocks), distinct per i.
func prompt(i int) string {
	return fmt.Sprintf("document %d: ", i) + strings.Repeat(fmt.Sprintf("the quick brown fox %d jumps over the lazy dog. ", i), 40)
}

func TestDisaggregatedFleet(t *testing.T) {
	f := startFleet(t, false)
	always := fleettest.StartRouter(t, f.file, "--pd-mode", "Always")
	never := fleettest.StartRouter(t, f.file, "--pd-mode", "Never")
	always.WaitConnected(t, 4)
	never.WaitConnected(t, 4)

	t.Run("same tokens as whole", func(t *testing.T) {
		for i := range 4 {
			body := fleettest.Completion(prompt(i), 24, true)
			whole := stream(t, never.URL, body)
			split := stream(t, always.URL, body)
			if !whole.done || !split.done || whole.text == "" || split.text != whole.text {
				t.Fatalf("request %d: split %+v, whole %+v", i, split, whole)
			}
			if whole.prefill != "" || split.prefill == "" || f.byName(split.prefill) == nil || split.prefill[0] != 'p' || split.endpoint[0] != 'd' {
				t.Fatalf("request %d: split on %s then %s, whole named prefill %q", i, split.prefill, split.endpoint, whole.prefill)
			}
		}
	})

	t.Run("transferred blocks in the decode cache and events", func(t *testing.T) {
		before := map[string]int{}
		for _, e := range f.decode {
			before[e.Name] = len(e.Cache(t).Hashes)
		}
		pulls := map[string]uint64{}
		for _, e := range f.decode {
			pulls[e.Name] = transfers(t, e.URL)
		}
		a := stream(t, always.URL, fleettest.Completion(prompt(100), 8, true))
		d := f.byName(a.endpoint)
		if d == nil || a.prefill == "" {
			t.Fatalf("not split: %+v", a)
		}
		// The blocks came by one transfer, not a recompute.
		if n := transfers(t, d.URL) - pulls[d.Name]; n != 1 {
			t.Fatalf("decode engine %s made %d KV transfers for the request", d.Name, n)
		}
		// The prompt is ~450 tokens: well over 20 blocks of 16 arrived on the decode engine.
		if got := len(d.Cache(t).Hashes) - before[d.Name]; got < 20 {
			t.Fatalf("decode engine %s gained %d blocks", d.Name, got)
		}
		// Its KV events told the router: the index matches its cache.
		for _, c := range fleettest.CheckConsistent(t, always, f.all()) {
			if c.Engine == d.Name && c.Missing != 0 {
				t.Fatalf("the router's index misses blocks of %s: %v", d.Name, c)
			}
		}
	})

	t.Run("failed transfers lose nothing", func(t *testing.T) {
		for _, e := range f.decode {
			e.Faults(t, `{"kvTransferFailFraction":1}`)
		}
		defer func() {
			for _, e := range f.decode {
				e.Faults(t, `{"kvTransferFailFraction":0}`)
			}
		}()
		for i := 200; i < 203; i++ {
			body := fleettest.Completion(prompt(i), 16, true)
			split := stream(t, always.URL, body)
			whole := stream(t, never.URL, body)
			if !split.done || split.text != whole.text || split.prefill == "" {
				t.Fatalf("request %d with failing transfers: %+v, want %q", i, split, whole.text)
			}
		}
	})

	t.Run("50 concurrent requests", func(t *testing.T) {
		var wg sync.WaitGroup
		tally := &fleettest.Tally{}
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := fleettest.Request{Path: "/v1/completions", Stream: true, WantTokens: 12,
					Body: []byte(fleettest.Completion(prompt(300+i%10), 12, true))}
				res := fleettest.Do(context.Background(), http.DefaultClient, always.URL, req, 60*time.Second)
				tally.Add(res)
			}()
		}
		wg.Wait()
		if tally.Count(fleettest.Completed) != 50 {
			t.Fatalf("50 concurrent split requests: %s", tally)
		}
		st := always.Status(t)
		if st.Disaggregation == nil || st.Disaggregation.SplitRequests < 50 {
			t.Fatalf("status %+v", st.Disaggregation)
		}
	})

	t.Run("prefill engines stopped", func(t *testing.T) {
		f.prefill[0].Proc.Kill()
		for i := 400; i < 404; i++ {
			body := fleettest.Completion(prompt(i), 8, true)
			if a := stream(t, always.URL, body); !a.done || a.text == "" {
				t.Fatalf("one prefill engine down: %+v", a)
			}
		}
		f.prefill[1].Proc.Kill()
		for i := 410; i < 414; i++ {
			a := stream(t, always.URL, fleettest.Completion(prompt(i), 8, true))
			if !a.done || a.text == "" || a.endpoint[0] != 'd' {
				t.Fatalf("both prefill engines down: %+v", a)
			}
		}
	})
}

// transfers is the number of KV transfers an engine made (vLLM's vllm:nixl_xfer_time_seconds
// histogram), from its /metrics.
func transfers(t *testing.T, url string) uint64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	if f, ok := families["vllm:nixl_xfer_time_seconds"]; ok {
		for _, m := range f.GetMetric() {
			n += m.GetHistogram().GetSampleCount()
		}
	}
	return n
}

// In EPP mode the picker sends a split request to the decode engine's sidecar with the prefill
// engine in x-prefiller-host-port; the sidecar runs both legs, and the client gets the tokens a
// whole request gets.
func TestEPPSidecarFleet(t *testing.T) {
	f := startFleet(t, true)
	picker := fleettest.StartEPPRouter(t, f.file, "--pd-mode", "Always", "--pd-whole-on", "decode")
	whole := fleettest.StartRouter(t, f.file, "--pd-mode", "Never")
	picker.WaitConnected(t, 4)
	whole.WaitConnected(t, 4)
	gw := fleettest.StartGateway(t, picker.EPPAddr)
	for i := range 4 {
		pulls := map[string]uint64{}
		for _, e := range f.decode {
			pulls[e.Name] = transfers(t, e.URL)
		}
		body := fleettest.Completion(prompt(500+i), 16, true)
		split := stream(t, gw.URL, body)
		want := stream(t, whole.URL, body)
		if !split.done || split.text == "" || split.text != want.text {
			t.Fatalf("request %d through the gateway: %+v, want %q", i, split, want.text)
		}
		d := f.byName(split.endpoint)
		if d == nil || f.sidecars[d.Name] == "" || split.prefill == "" {
			t.Fatalf("request %d not split onto a decode engine: %+v", i, split)
		}
		if n := transfers(t, d.URL) - pulls[d.Name]; n != 1 {
			t.Fatalf("request %d: decode engine %s made %d KV transfers", i, d.Name, n)
		}
	}
}
