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

package proxy

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
)

// TestAdapterColdTTFTNotLearned: a LoRA request sent where its adapter was not active may wait
// for an adapter slot and a load; that wait must not teach the TTFT model that the engine's
// prefill is slow (it routes base-model requests too).
func TestAdapterColdTTFTNotLearned(t *testing.T) {
	e0 := newFakeEngine(t, "e0")
	h := newHarness(t, Config{}, nil, e0)
	h.tracker.RecordLoRA("e0", loadsignal.LoRAInfo{Reported: true, MaxLoRAs: 2})
	observed := func() int {
		h.srv.policyMu.Lock()
		defer h.srv.policyMu.Unlock()
		if m := h.srv.policy.Model("e0"); m != nil {
			return m.Observations()
		}
		return 0
	}
	stream := func(model string) {
		t.Helper()
		if resp, body := h.post(t, "/v1/completions", `{"model":"`+model+`","prompt":"hi","stream":true}`, nil); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", model, resp.StatusCode, body)
		}
		waitFor(t, "load released", func() bool { return h.tracker.Stats("e0").InFlight == 0 })
	}
	stream("my-lora") // the adapter is not active on e0: it is loaded for this request
	if n := observed(); n != 0 {
		t.Fatalf("a cold adapter's TTFT was observed (%d observations)", n)
	}
	stream("my-lora") // now in one of e0's adapter slots
	if n := observed(); n != 1 {
		t.Fatalf("a warm adapter's TTFT: %d observations, want 1", n)
	}
	stream("m")
	if n := observed(); n != 2 {
		t.Fatalf("a base-model TTFT: %d observations, want 2", n)
	}
}
