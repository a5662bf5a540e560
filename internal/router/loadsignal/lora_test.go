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
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/policy"
)

// loraPage is a vLLM /metrics page with the given vllm:lora_requests_info series, each a label
// string and a value (the time it was set).
func loraPage(series ...string) string {
	var b strings.Builder
	b.WriteString("# HELP vllm:num_requests_running Number of requests in model execution batches.\n")
	b.WriteString("# TYPE vllm:num_requests_running gauge\n")
	b.WriteString("vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 2\n")
	b.WriteString("# HELP vllm:lora_requests_info Running stats on lora requests.\n# TYPE vllm:lora_requests_info gauge\n")
	for _, s := range series {
		b.WriteString("vllm:lora_requests_info" + s + "\n")
	}
	return b.String()
}

func TestParseLoRAInfoTakesTheNewestSeries(t *testing.T) {
	page := loraPage(
		`{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1.7000000e+09`,
		`{max_lora="2",running_lora_adapters="sql,chat",waiting_lora_adapters="code"} 1.7000002e+09`,
		`{max_lora="2",running_lora_adapters="sql",waiting_lora_adapters=""} 1.7000001e+09`,
	)
	m, err := ParseMetrics(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	want := LoRAInfo{Reported: true, Running: []string{"sql", "chat"}, Waiting: []string{"code"}, MaxLoRAs: 2}
	if !reflect.DeepEqual(m.LoRA, want) || m.Running != 2 {
		t.Fatalf("got %+v (running %v), want %+v", m.LoRA, m.Running, want)
	}
}

func TestParseLoRAInfoLabelValues(t *testing.T) {
	for _, c := range []struct {
		series string
		want   LoRAInfo
	}{
		// Empty entries and spaces are dropped; an adapter both running and waiting is listed once.
		{`{max_lora="4",running_lora_adapters=",a,, b ,a",waiting_lora_adapters="b,c"} 5`,
			LoRAInfo{Reported: true, MaxLoRAs: 4, Running: []string{"a", "b"}, Waiting: []string{"c"}}},
		{`{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""} 5`, LoRAInfo{Reported: true, MaxLoRAs: 1}},
		{`{max_lora="two",running_lora_adapters="a",waiting_lora_adapters=""} 5`,
			LoRAInfo{Err: `vllm:lora_requests_info: max_lora "two" is not a positive integer`}},
		{`{max_lora="0",running_lora_adapters="a",waiting_lora_adapters=""} 5`,
			LoRAInfo{Err: `vllm:lora_requests_info: max_lora "0" is not a positive integer`}},
		{`{running_lora_adapters="a",waiting_lora_adapters=""} 5`, LoRAInfo{Err: "vllm:lora_requests_info has no max_lora label"}},
	} {
		m, err := ParseMetrics(strings.NewReader(loraPage(c.series)))
		if err != nil {
			t.Fatalf("%s: %v", c.series, err)
		}
		if !reflect.DeepEqual(m.LoRA, c.want) {
			t.Errorf("%s: got %+v, want %+v", c.series, m.LoRA, c.want)
		}
	}
	// An engine without LoRA reports nothing.
	if m, err := ParseMetrics(strings.NewReader(vllmMetrics(1, 0, 0.1, 0, 0, 0))); err != nil || m.LoRA.Reported || m.LoRA.Err != "" {
		t.Fatalf("no LoRA: %+v %v", m.LoRA, err)
	}
}

func TestFillLoRACombinesScrapeAndLocalDispatches(t *testing.T) {
	tr := NewTracker()
	now := time.Unix(1000, 0)
	tr.RecordScrape("a", EngineMetrics{LoRA: LoRAInfo{Reported: true, MaxLoRAs: 2, Running: []string{"sql"}}}, now)
	tr.RecordScrape("b", EngineMetrics{LoRA: LoRAInfo{Reported: true, MaxLoRAs: 2}}, now)
	tr.RecordScrape("c", EngineMetrics{}, now) // LoRA off
	names := []string{"a", "b", "c", "unknown"}
	fill := func(adapter string) []policy.LoRAState {
		out := make([]policy.LoRAState, len(names))
		tr.FillLoRA(names, adapter, out)
		return out
	}
	want := []policy.LoRAState{{Slots: 2, Active: 1, Resident: true}, {Slots: 2}, {}, {}}
	if got := fill("sql"); !reflect.DeepEqual(got, want) {
		t.Fatalf("sql: %+v, want %+v", got, want)
	}
	// A dispatch shows at once: "chat" is active on b before any scrape says so, and a second
	// request of "sql" on a counts once.
	k1 := tr.DispatchAdapter("b", "chat", 10, 20)
	k2 := tr.DispatchAdapter("a", "sql", 10, 20)
	want = []policy.LoRAState{{Slots: 2, Active: 1}, {Slots: 2, Active: 1, Resident: true}, {}, {}}
	if got := fill("chat"); !reflect.DeepEqual(got, want) {
		t.Fatalf("chat after dispatch: %+v, want %+v", got, want)
	}
	k1.Done()
	k1.Done() // idempotent
	k2.Done()
	// Done, "chat" is no longer active on b but still in its adapter slots (vLLM keeps the last
	// max_lora adapters loaded)...
	want = []policy.LoRAState{{Slots: 2, Active: 1}, {Slots: 2, Resident: true}, {}, {}}
	if got := fill("chat"); !reflect.DeepEqual(got, want) {
		t.Fatalf("chat after done: %+v, want %+v", got, want)
	}
	// ...until two other adapters have been used there since.
	tr.DispatchAdapter("b", "x", 1, 1).Done()
	tr.DispatchAdapter("b", "y", 1, 1).Done()
	want = []policy.LoRAState{{Slots: 2, Active: 1}, {Slots: 2}, {}, {}}
	if got := fill("chat"); !reflect.DeepEqual(got, want) {
		t.Fatalf("chat after two other adapters: %+v, want %+v", got, want)
	}
	// A failed scrape keeps the adapters: the engine still takes requests, and they are likelier
	// where they were than unknown...
	tr.RecordScrapeError("a", errTest)
	tr.RecordScrapeError("a", errTest)
	if got, want := fill("sql")[0], (policy.LoRAState{Slots: 2, Active: 1, Resident: true}); got != want {
		t.Fatalf("after two failed scrapes: %+v, want %+v", got, want)
	}
	// ...until the failures make it unready: then they are unknown.
	tr.RecordScrapeError("a", errTest)
	if got := fill("sql")[0]; got != (policy.LoRAState{}) {
		t.Fatalf("after %d failed scrapes: %+v", DefaultLoRAForgetAfter, got)
	}
	// Unknown adapters with this router's request of the adapter in flight: that one is active.
	k := tr.DispatchAdapter("c", "sql", 10, 20)
	if got := fill("sql")[2]; got != (policy.LoRAState{Resident: true}) {
		t.Fatalf("unreported endpoint with sql in flight: %+v", got)
	}
	k.Done()
	// Done, it is still the last adapter used there: in vLLM's one slot at least.
	if got := fill("sql")[2]; got != (policy.LoRAState{Resident: true}) {
		t.Fatalf("unreported endpoint after sql is done: %+v", got)
	}
}

func TestLoRAForgetAfterFollowsReadiness(t *testing.T) {
	tr := NewTracker()
	tr.SetLoRAForgetAfter(5)
	now := time.Unix(1000, 0)
	tr.RecordScrape("a", EngineMetrics{LoRA: LoRAInfo{Reported: true, MaxLoRAs: 2, Running: []string{"sql"}}}, now)
	out := make([]policy.LoRAState, 1)
	for i := 1; i <= 5; i++ {
		tr.RecordScrapeError("a", errTest)
		tr.FillLoRA([]string{"a"}, "sql", out)
		if kept := out[0].Slots == 2; kept != (i < 5) {
			t.Fatalf("after %d failed scrapes of 5: %+v", i, out[0])
		}
	}
	// An engine that restarted (its counters went back) comes back with empty slots: the
	// adapters it used before are no longer loaded.
	tr.RecordScrape("b", EngineMetrics{PrefixQueries: 100, LoRA: LoRAInfo{Reported: true, MaxLoRAs: 2, Running: []string{"sql"}}}, now)
	tr.RecordScrape("b", EngineMetrics{PrefixQueries: 100, LoRA: LoRAInfo{Reported: true, MaxLoRAs: 2}}, now.Add(time.Second))
	tr.FillLoRA([]string{"b"}, "sql", out)
	if !out[0].Resident {
		t.Fatalf("sql left the batch but is still in a slot: %+v", out[0])
	}
	tr.RecordScrape("b", EngineMetrics{PrefixQueries: 5, LoRA: LoRAInfo{Reported: true, MaxLoRAs: 2}}, now.Add(2*time.Second))
	tr.FillLoRA([]string{"b"}, "sql", out)
	if out[0].Resident {
		t.Fatalf("restarted engine still holds sql: %+v", out[0])
	}
}

var errTest = testError("scrape failed")

type testError string

func (e testError) Error() string { return string(e) }

// Before any scrape has reported an engine's adapter slots, the adapter this router last used
// there is still loaded (vLLM has at least one slot), and only that one.
func TestFillLoRAUnreportedKeepsTheLastAdapter(t *testing.T) {
	tr := NewTracker()
	names := []string{"a", "b"}
	fill := func(adapter string) []policy.LoRAState {
		out := make([]policy.LoRAState, len(names))
		tr.FillLoRA(names, adapter, out)
		return out
	}
	tr.DispatchAdapter("a", "sql", 10, 20).Done()
	if got := fill("sql"); !got[0].Resident || got[1].Resident || got[0].Slots != 0 {
		t.Fatalf("sql after one request on a: %+v", got)
	}
	tr.DispatchAdapter("a", "chat", 10, 20).Done()
	if got := fill("sql"); got[0].Resident {
		t.Fatalf("sql after chat took a's one known slot: %+v", got)
	}
	if got := fill("chat"); !got[0].Resident {
		t.Fatalf("chat after its request on a: %+v", got)
	}
}

// Stats shows the adapters believed loaded, most recent first, as many as the engine's slots
// (one while they are unknown).
func TestStatsLoadedAdapters(t *testing.T) {
	tr := NewTracker()
	for _, a := range []string{"a", "b", "c"} {
		tr.DispatchAdapter("e", a, 10, 20).Done()
	}
	if got := tr.Stats("e").LoadedAdapters; !reflect.DeepEqual(got, []string{"c"}) {
		t.Fatalf("slots unknown: %v, want [c]", got)
	}
	tr.RecordScrape("e", EngineMetrics{LoRA: LoRAInfo{Reported: true, MaxLoRAs: 2, Running: []string{"b"}}}, time.Unix(1, 0))
	st := tr.Stats("e")
	if !reflect.DeepEqual(st.LoadedAdapters, []string{"b", "c"}) || st.LoRA.MaxLoRAs != 2 {
		t.Fatalf("two slots, b scraped running: %+v", st)
	}
}
