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
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/disagg"
	"github.com/kvrouter/kvrouter/internal/router/proxy"
)

func TestPDFlags(t *testing.T) {
	o, err := parseFlags([]string{"--endpoints-file", "x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c := pdConfig(o); c.Mode != disagg.Auto || c.WholeOn != proxy.WholeOnAny || c.ThresholdTokens != 0 {
		t.Fatalf("defaults %+v", c)
	}
	o, err = parseFlags(strings.Fields("--endpoints-file x --pd-mode threshold --pd-threshold-tokens 512 --pd-whole-on decode"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c := pdConfig(o); c.Mode != disagg.Threshold || c.ThresholdTokens != 512 || c.WholeOn != proxy.WholeOnDecode {
		t.Fatalf("%+v", c)
	}
	for _, bad := range []string{
		"--endpoints-file x --pd-mode Sometimes",
		"--endpoints-file x --pd-mode Threshold",
		"--endpoints-file x --pd-threshold-tokens -1",
		"--endpoints-file x --pd-whole-on prefill",
		"--mode sidecar",
		"--mode sidecar --engine-url 127.0.0.1:8000",
		"--mode sidecar --engine-url http://127.0.0.1:8000 --endpoints-file x",
		"--endpoints-file x --epp-destination-port 8200",
		"--endpoints-file x --mode epp --epp-destination-port -1",
		"--endpoints-file x --mode epp --epp-destination-port 65536",
		"--mode sidecar --engine-url http://127.0.0.1:8000 --epp-destination-port 8200",
	} {
		if _, err := parseFlags(strings.Fields(bad), io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, mode := range []string{"epp", "both"} {
		o, err = parseFlags(strings.Fields("--endpoints-file x --mode "+mode+" --epp-destination-port 8200"), io.Discard)
		if err != nil || o.eppDestinationPort != 8200 {
			t.Fatalf("--mode %s --epp-destination-port 8200: %+v %v", mode, o, err)
		}
	}
	o, err = parseFlags(strings.Fields("--mode sidecar --engine-url http://127.0.0.1:8000 --port 8100"), io.Discard)
	if err != nil || o.engineURL != "http://127.0.0.1:8000" || o.port != 8100 || o.serveEPP() {
		t.Fatalf("sidecar: %+v %v", o, err)
	}
}

// connectorEngine answers a prefill leg with kv_transfer_params and anything else with a
// stream; it records what it was sent.
type connectorEngine struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []map[string]any
}

func newConnectorEngine(t *testing.T, id string) *connectorEngine {
	e := &connectorEngine{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		e.mu.Lock()
		e.bodies = append(e.bodies, body)
		e.mu.Unlock()
		if kv, _ := body["kv_transfer_params"].(map[string]any); kv["do_remote_decode"] == true {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"choices":[{"text":"x"}],"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":%q,"remote_block_ids":[4],"remote_host":"127.0.0.1","remote_port":1}}`, id)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"text\":\"ok\"}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *connectorEngine) seen() []map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]map[string]any(nil), e.bodies...)
}

// The sidecar runs the prefill leg where the header says, then the decode leg on its engine.
func TestSidecarModeRun(t *testing.T) {
	pre, dec := newConnectorEngine(t, "pre"), newConnectorEngine(t, "dec")
	ports := freePorts(t, 1)
	o, err := parseFlags([]string{"--mode", "sidecar", "--engine-url", dec.URL, "--host", "127.0.0.1",
		"--port", strconv.Itoa(ports[0]), "--admin-addr", "", "--log-level", "error"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, o) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	url := "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/v1/completions"
	var resp *http.Response
	for deadline := time.Now().Add(5 * time.Second); ; {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"model":"m","prompt":"hello","stream":true}`))
		req.Header.Set(proxy.PrefillerHeader, strings.TrimPrefix(pre.URL, "http://"))
		if resp, err = http.DefaultClient.Do(req); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"ok"`) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	ps, ds := pre.seen(), dec.seen()
	if len(ps) != 1 || ps[0]["max_tokens"] != 1.0 || len(ds) != 1 {
		t.Fatalf("legs: prefill %v, decode %v", ps, ds)
	}
	if kv, _ := ds[0]["kv_transfer_params"].(map[string]any); kv["remote_engine_id"] != "pre" {
		t.Fatalf("decode leg params %v", ds[0])
	}
}
