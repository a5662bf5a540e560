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

package server

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/internal/sim/engine"
)

// loraInfo reads the newest vllm:lora_requests_info series: its running and waiting adapters
// and max_lora.
func loraInfo(t *testing.T, url string) (running, waiting, maxLoRA string, ok bool) {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	f := fams["vllm:lora_requests_info"]
	if f == nil {
		return "", "", "", false
	}
	newest := -1.0
	for _, m := range f.GetMetric() {
		if v := m.GetGauge().GetValue(); v > newest {
			newest = v
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "running_lora_adapters":
					running = l.GetValue()
				case "waiting_lora_adapters":
					waiting = l.GetValue()
				case "max_lora":
					maxLoRA = l.GetValue()
				}
			}
		}
	}
	if newest < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Fatalf("lora_requests_info value %v is not the time it was set", newest)
	}
	return running, waiting, maxLoRA, true
}

func TestLoRARequestsInfoShowsRunningAndWaitingAdapters(t *testing.T) {
	f := start(t, func(c *engine.Config, o *Options) {
		c.MaxLoRAs, c.LoRALoadTime = 1, 0.01
		o.TimeScale = 20
		o.LoRAModules = map[string]string{"sql": "/lora/sql", "chat": "/lora/chat"}
	})
	running, waiting, maxLoRA, ok := loraInfo(t, f.url)
	if !ok || running != "" || waiting != "" || maxLoRA != "1" {
		t.Fatalf("idle: running %q waiting %q max %q present %v", running, waiting, maxLoRA, ok)
	}
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for _, a := range []string{"sql", "chat"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Not post: t.Fatal must not be called from another goroutine.
			resp, err := http.Post(f.url+"/v1/completions", "application/json",
				strings.NewReader(`{"model":"`+a+`","prompt":"one two three","max_tokens":300}`))
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	// With one adapter slot, one adapter runs and the other waits until it finishes.
	seen := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !seen; time.Sleep(5 * time.Millisecond) {
		running, waiting, _, _ = loraInfo(t, f.url)
		seen = running != "" && waiting != "" && running != waiting && !strings.Contains(running, ",")
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Fatalf("request failed with %d", c)
		}
	}
	if !seen {
		t.Fatal("never saw one adapter running while the other waited")
	}
	if st := f.srv.eng.Stats(); st.LoRALoads != 2 {
		t.Fatalf("%d adapter loads, want 2", st.LoRALoads)
	}
	if code, body := post(t, f.url+"/v1/completions", `{"model":"nope","prompt":"x"}`); code != http.StatusNotFound ||
		body["error"].(map[string]any)["message"] != "The model `nope` does not exist." {
		t.Fatalf("unknown adapter: %d %v", code, body)
	}
}

func TestLoRAInfoAbsentWithoutLoRA(t *testing.T) {
	f := start(t, nil)
	if _, _, _, ok := loraInfo(t, f.url); ok {
		t.Fatal("vllm:lora_requests_info exported with LoRA off")
	}
}
