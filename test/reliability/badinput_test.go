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

package reliability

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/test/fleettest"
)

// Bad requests against the router binary: each gets its OpenAI-style error and none reaches
// the engine; connections that trickle their headers or body (slowloris) are cut or answered
// 408 once the router's read timeouts pass, while other clients are served meanwhile.
func TestBadInputEndToEnd(t *testing.T) {
	fleettest.NeedBinaries(t)
	es, r := fleetBehindRouter(t, 1, "10", "--model", "m", "--max-body-bytes", "65536",
		"--read-header-timeout", "1s", "--body-read-timeout", "1s")
	ids := strings.TrimSuffix(strings.Repeat("17,", 25000), ",")
	for _, c := range []struct {
		name, path, ctype, body string
		code                    int
	}{
		{"malformed JSON", "/v1/completions", "application/json", `{"model":"m","prompt":`, 400},
		{"truncated mid-string", "/v1/chat/completions", "application/json", `{"model":"m","messages":[{"role":"user","content":"hel`, 400},
		{"wrong type", "/v1/completions", "application/json", `{"model":"m","prompt":"x","max_tokens":"8"}`, 400},
		{"missing model", "/v1/completions", "application/json", `{"prompt":"x"}`, 400},
		{"unknown model", "/v1/chat/completions", "application/json", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404},
		{"not JSON, form content type", "/v1/completions", "application/x-www-form-urlencoded", `model=m&prompt=x`, 400},
		{"oversized", "/v1/completions", "application/json", `{"model":"m","prompt":"` + strings.Repeat("a", 70000) + `"}`, 413},
		{"oversized token ids", "/v1/completions", "application/json", `{"model":"m","prompt":[` + ids + `]}`, 413},
	} {
		resp, err := http.Post(r.URL+c.path, c.ctype, strings.NewReader(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct {
				Message string
				Code    int
			}
		}
		if resp.StatusCode != c.code || json.Unmarshal(b, &e) != nil || e.Error.Message == "" || e.Error.Code != c.code {
			t.Errorf("%s: %d %.200s", c.name, resp.StatusCode, b)
		}
	}
	if n := engineCounter(t, es, "vllm:request_success_total", ""); n != 0 {
		t.Errorf("refused requests reached the engine: %.0f finished there", n)
	}

	// 50 connections trickling their headers and 50 trickling a body.
	addr := strings.TrimPrefix(r.URL, "http://")
	type cut struct {
		after  time.Duration
		status string
	}
	results := make(chan cut, 100)
	for i := range 100 {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				results <- cut{status: err.Error()}
				return
			}
			defer c.Close()
			start := time.Now()
			io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
			if i%2 == 1 {
				io.WriteString(c, "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":")
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			switch {
			case err == io.EOF || (err != nil && strings.Contains(err.Error(), "reset")):
				results <- cut{after: time.Since(start), status: "closed"}
			case err != nil:
				results <- cut{after: time.Since(start), status: "still open: " + err.Error()}
			default:
				results <- cut{after: time.Since(start), status: strings.TrimSpace(line)}
			}
		}()
	}
	// Served meanwhile.
	tally := &fleettest.Tally{}
	work := fleettest.SharedPrefix(2, 50, 4, 4)
	for i := range 20 {
		tally.Add(fleettest.Do(t.Context(), http.DefaultClient, r.URL, work(i), 10*time.Second))
	}
	tally.AssertNoneLost(t)
	statuses := map[string]int{}
	var slowest time.Duration
	for range 100 {
		c := <-results
		statuses[c.status]++
		slowest = max(slowest, c.after)
	}
	if statuses["closed"] != 50 || statuses["HTTP/1.1 408 Request Timeout"] != 50 || slowest > 5*time.Second {
		t.Errorf("slow connections ended as %v, the last after %v", statuses, slowest)
	}
	t.Logf("%s: slow connections ended as %v, the last after %v; meanwhile %s", t.Name(), statuses, slowest.Round(10*time.Millisecond), tally)
}
