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

// Package e2e runs the status and scaling loop end to end on loopback: real vllm-sim engines, a
// real router with file discovery (both started by test/fleettest), and the operator's status
// code (internal/operator/routerstatus) reading the router. The binaries are built once in TestMain;
// -short skips these tests.
package e2e

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/test/fleettest"
)

func TestMain(m *testing.M) { fleettest.Main(m) }

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
