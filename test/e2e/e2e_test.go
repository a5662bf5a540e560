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

	"github.com/kvrouter/kvrouter/test/fleettest"
)

func TestMain(m *testing.M) { fleettest.Main(m) }

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
