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

package loadsignal

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

// longRunningPage is the /metrics page of a vLLM engine that has served for a long time with
// LoRA on: vllm:lora_requests_info holds one series per adapter set it ever had (vLLM never
// removes one), series of them in time order except the newest, which sits at newestAt. The
// families after it must still be read.
func longRunningPage(series, newestAt int) string {
	var b strings.Builder
	b.WriteString("# HELP vllm:num_requests_running Number of requests in model execution batches.\n")
	b.WriteString("# TYPE vllm:num_requests_running gauge\n")
	b.WriteString("vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 5\n")
	b.WriteString("# HELP vllm:lora_requests_info Running stats on lora requests.\n# TYPE vllm:lora_requests_info gauge\n")
	for i := range series {
		at := 1.7e9 + float64(i)/10
		running, waiting := fmt.Sprintf("adapter-%d,adapter-%d", i%97, i%89), fmt.Sprintf("adapter-%d", i%83)
		if i == newestAt {
			at, running, waiting = 1.8e9, "sql,chat", "code"
		}
		fmt.Fprintf(&b, "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=%q,waiting_lora_adapters=%q} %.7e\n",
			running, waiting, at)
	}
	b.WriteString("# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n")
	b.WriteString("# TYPE vllm:num_requests_waiting gauge\n")
	b.WriteString("vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 3\n")
	return b.String()
}

func TestScrapeOfAPageWithManyLoRASeries(t *testing.T) {
	page := longRunningPage(200_000, 123_456)
	if len(page) <= DefaultMaxKeptBytes {
		t.Fatalf("page of %d bytes: the test needs one past the %d bytes kept", len(page), DefaultMaxKeptBytes)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, page)
	}))
	defer srv.Close()
	tr := NewTracker()
	s := &Scraper{Tracker: tr, Timeout: 20 * time.Second, Targets: func() []Target { return []Target{{"e", srv.URL}} }}
	s.Round(context.Background())
	st := tr.Stats("e")
	if st.ScrapeError != "" {
		t.Fatalf("scrape failed: %s", st.ScrapeError)
	}
	want := LoRAInfo{Reported: true, MaxLoRAs: 4, Running: []string{"sql", "chat"}, Waiting: []string{"code"}}
	if m := st.Metrics; !reflect.DeepEqual(m.LoRA, want) || m.Running != 5 || m.Waiting != 3 {
		t.Fatalf("got running %v waiting %v LoRA %+v, want 5, 3, %+v", m.Running, m.Waiting, m.LoRA, want)
	}
}

func TestParseMetricsBoundsAreErrorsNotZeros(t *testing.T) {
	page := longRunningPage(1000, 500)
	// A page past the read bound, even one whose kept lines are small, is an error: the families
	// after the cut would otherwise read as an idle engine.
	if _, err := ParseMetricsWithin(strings.NewReader(page), 1<<20, int64(len(page)-10)); err == nil ||
		!strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("page past the read bound: %v", err)
	}
	if _, err := ParseMetricsWithin(strings.NewReader(page), 1<<20, int64(len(page))); err != nil {
		t.Fatalf("page at the read bound: %v", err)
	}
	// Kept lines past their bound are an error too.
	if _, err := ParseMetricsWithin(strings.NewReader(vllmMetrics(1, 2, 0.5, 10, 5, 0)), 100, 1<<20); err == nil ||
		!strings.Contains(err.Error(), "exceed 100 bytes") {
		t.Fatalf("kept lines past their bound: %v", err)
	}
	// An endless body ends.
	done := make(chan error, 1)
	go func() {
		_, err := ParseMetricsWithin(endless{}, DefaultMaxKeptBytes, 8<<20)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("endless page parsed")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("endless page still being read")
	}
	// A malformed newest-candidate series is still rejected by the parser.
	bad := loraPage(`{max_lora="2",running_lora_adapters="a",waiting_lora_adapters=""} notanumber`)
	if _, err := ParseMetrics(strings.NewReader(bad)); err == nil {
		t.Fatal("malformed lora series parsed")
	}
}

// endless is a body that never ends: histogram buckets of a family the router skips.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	const line = "vllm:e2e_request_latency_seconds_bucket{le=\"1\",engine=\"0\"} 7\n"
	n := 0
	for n < len(p) {
		n += copy(p[n:], line)
	}
	return n, nil
}
