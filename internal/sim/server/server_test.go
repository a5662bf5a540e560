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
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/engine"
	"github.com/kvrouter/kvrouter/internal/sim/timing"
)

type fixture struct {
	url string
	srv *Server
}

func start(t *testing.T, mutate func(*engine.Config, *Options)) fixture {
	t.Helper()
	seed := "0"
	cfg := engine.Config{Profile: timing.ForModel("llama-8b", 1), HashAlgo: blockhash.SHA256CBOR, HashSeed: &seed, MaxModelLen: 4096}
	// SimAPI: the tests drive faults and read the cache through /sim/*.
	opt := Options{ServedModelNames: []string{"sim-model"}, ModelPath: "org/sim-model", TimeScale: 1000, PrefixCaching: true,
		HashAlgo: blockhash.SHA256CBOR, LoRAModules: map[string]string{"adapter": "/lora/adapter"}, SimAPI: true}
	if mutate != nil {
		mutate(&cfg, &opt)
	}
	eng, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := New(eng, opt)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); cancel(); <-done })
	return fixture{url: hs.URL, srv: srv}
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("non-JSON body %q", raw)
		}
	}
	return resp.StatusCode, m
}

func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch {
			case m.Counter != nil:
				out[name] += m.Counter.GetValue()
			case m.Gauge != nil:
				out[name] += m.Gauge.GetValue()
			case m.Histogram != nil:
				out[name+"_count"] += float64(m.Histogram.GetSampleCount())
				out[name+"_sum"] += m.Histogram.GetSampleSum()
			}
		}
	}
	return out
}

func TestErrorResponses(t *testing.T) {
	f := start(t, nil)
	long := strings.Repeat("word ", 5000)
	cases := []struct {
		path, body string
		status     int
		typ        string
	}{
		{"/v1/completions", `{"model":`, 400, "BadRequestError"},
		{"/v1/chat/completions", `not json`, 400, "BadRequestError"},
		{"/v1/completions", `{"model":"other","prompt":"hi"}`, 404, "NotFoundError"},
		{"/v1/chat/completions", `{"model":"other","messages":[{"role":"user","content":"hi"}]}`, 404, "NotFoundError"},
		{"/v1/completions", `{"model":"sim-model","prompt":"` + long + `"}`, 400, "BadRequestError"},
		{"/v1/completions", `{"model":"sim-model","prompt":"hi","max_tokens":5000}`, 400, "BadRequestError"},
		{"/v1/completions", `{"model":"sim-model","prompt":"hi","max_tokens":0}`, 400, "BadRequestError"},
		{"/v1/chat/completions", `{"model":"sim-model","messages":[]}`, 400, "BadRequestError"},
		{"/v1/completions", `{"prompt":["a","b"]}`, 400, "BadRequestError"},
		{"/tokenize", `{"model":"nope","prompt":"x"}`, 404, "NotFoundError"},
		{"/tokenize", `{"messages":[{"role":"user","content":"x"}],"add_generation_prompt":true,"continue_final_message":true}`, 400, "BadRequestError"},
		{"/v1/completions", `{"prompt":"hi","vllm_xargs":{"kv_cache_report_mode":"sometimes"}}`, 400, "BadRequestError"},
	}
	for _, c := range cases {
		status, body := post(t, f.url+c.path, c.body)
		e, _ := body["error"].(map[string]any)
		if status != c.status || e == nil || e["type"] != c.typ || e["code"] != float64(c.status) || e["message"] == "" {
			t.Errorf("%s %s: status %d body %v", c.path, c.body[:min(len(c.body), 40)], status, body)
		}
	}
}

func TestCompletionShapesAndLoRA(t *testing.T) {
	f := start(t, nil)
	status, body := post(t, f.url+"/v1/completions", `{"model":"sim-model","prompt":"Tell me a story","max_tokens":7}`)
	if status != 200 || body["object"] != "text_completion" {
		t.Fatalf("%d %v", status, body)
	}
	ch := body["choices"].([]any)[0].(map[string]any)
	u := body["usage"].(map[string]any)
	if ch["finish_reason"] != "length" || u["completion_tokens"] != float64(7) || u["prompt_tokens"] != float64(5) || ch["text"] == "" {
		t.Fatalf("choice %v usage %v", ch, u)
	}
	status, body = post(t, f.url+"/v1/chat/completions", `{"model":"adapter","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_completion_tokens":3}`)
	if status != 200 || body["object"] != "chat.completion" || body["model"] != "adapter" {
		t.Fatalf("%d %v", status, body)
	}
	msg := body["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if msg["role"] != "assistant" || msg["content"] == "" {
		t.Fatalf("message %v", msg)
	}
	// Without max_tokens a chat answer stops on its own.
	_, body = post(t, f.url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"seed":3}`)
	if body["choices"].([]any)[0].(map[string]any)["finish_reason"] != "stop" {
		t.Fatalf("unbounded chat %v", body)
	}
	resp, err := http.Get(f.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct{ Data []struct{ ID, Root string } }
	json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if len(models.Data) != 2 || models.Data[0].ID != "sim-model" || models.Data[0].Root != "org/sim-model" {
		t.Fatalf("models %+v", models)
	}
}

func TestStreamingChunksUsageAndDone(t *testing.T) {
	f := start(t, nil)
	resp, err := http.Post(f.url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var datas []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") {
			datas = append(datas, strings.TrimPrefix(line, "data: "))
		}
	}
	// role chunk, 4 token chunks, usage chunk, [DONE]
	if len(datas) != 7 || datas[6] != "[DONE]" {
		t.Fatalf("%d events: %v", len(datas), datas)
	}
	var last, usage map[string]any
	json.Unmarshal([]byte(datas[4]), &last)
	json.Unmarshal([]byte(datas[5]), &usage)
	if last["choices"].([]any)[0].(map[string]any)["finish_reason"] != "length" {
		t.Fatalf("last token chunk %v", last)
	}
	if len(usage["choices"].([]any)) != 0 || usage["usage"].(map[string]any)["completion_tokens"] != float64(4) {
		t.Fatalf("usage chunk %v", usage)
	}
}

func TestRepeatedPrefixRaisesHitsAndLowersTTFT(t *testing.T) {
	f := start(t, nil)
	system := strings.Repeat("You are a careful assistant who answers questions about routing. ", 60)
	ask := func(q string) {
		body := `{"messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"` + q + `"}],"max_tokens":2}`
		if status, b := post(t, f.url+"/v1/chat/completions", body); status != 200 {
			t.Fatalf("%d %v", status, b)
		}
	}
	ask("first question")
	m1 := scrape(t, f.url)
	ask("second question")
	ask("third question")
	m2 := scrape(t, f.url)
	if m1["vllm:prefix_cache_hits_total"] != 0 || m2["vllm:prefix_cache_hits_total"] < 1000 {
		t.Fatalf("prefix hits %v then %v", m1["vllm:prefix_cache_hits_total"], m2["vllm:prefix_cache_hits_total"])
	}
	cold := m1["vllm:time_to_first_token_seconds_sum"]
	warm := (m2["vllm:time_to_first_token_seconds_sum"] - cold) / 2
	if m2["vllm:time_to_first_token_seconds_count"] != 3 || warm >= cold/2 {
		t.Fatalf("TTFT cold %.4fs, warm %.4fs", cold, warm)
	}
	if m2["vllm:prefix_cache_queries_total"] <= m2["vllm:prefix_cache_hits_total"] || m2["vllm:request_success_total"] != 3 {
		t.Fatalf("metrics %v", m2)
	}
	if m2["vllm:cache_config_info"] != 1 || m2["vllm:generation_tokens_total"] != 6 {
		t.Fatalf("metrics %v", m2)
	}
}

func TestTokenizeMatchesEngineTokens(t *testing.T) {
	f := start(t, nil)
	msgs := `[{"role":"user","content":"What is the capital of France?"}]`
	_, tok := post(t, f.url+"/tokenize", `{"messages":`+msgs+`}`)
	_, chat := post(t, f.url+"/v1/chat/completions", `{"messages":`+msgs+`,"max_tokens":1}`)
	if tok["count"] != chat["usage"].(map[string]any)["prompt_tokens"] || tok["max_model_len"] != float64(4096) {
		t.Fatalf("tokenize %v vs usage %v", tok, chat["usage"])
	}
	toks := tok["tokens"].([]any)
	if toks[0] != float64(128000) || toks[len(toks)-1] == float64(128009) {
		t.Fatalf("chat tokens should start with BOS and end in the generation prompt: %v", toks)
	}
	_, plain := post(t, f.url+"/tokenize", `{"prompt":"Hello world","return_token_strs":true}`)
	strs := plain["token_strs"].([]any)
	if plain["count"] != float64(3) || strs[1] != "Hello" || strs[2] != " world" {
		t.Fatalf("prompt tokenize %v", plain)
	}
	ids, _ := json.Marshal(plain["tokens"].([]any)[1:])
	_, de := post(t, f.url+"/detokenize", `{"tokens":`+string(ids)+`}`)
	if de["prompt"] != "Hello world" {
		t.Fatalf("detokenize %v", de)
	}
}

func TestFaultsAndReset(t *testing.T) {
	f := start(t, nil)
	if status, _ := post(t, f.url+"/sim/faults", `{"failFraction":1}`); status != 200 {
		t.Fatal(status)
	}
	if status, body := post(t, f.url+"/v1/completions", `{"prompt":"x"}`); status != 500 || body["error"].(map[string]any)["type"] != "InternalServerError" {
		t.Fatalf("%d %v", status, body)
	}
	post(t, f.url+"/sim/faults", `{"failFraction":0}`)
	if status, _ := post(t, f.url+"/v1/completions", `{"prompt":"x"}`); status != 200 {
		t.Fatal(status)
	}
	if status, _ := post(t, f.url+"/sim/faults", `{"dropNextBatches":2}`); status != 400 {
		t.Fatal("dropping batches without a publisher must be refused")
	}
	if status, _ := post(t, f.url+"/reset_prefix_cache", ``); status != 200 {
		t.Fatal(status)
	}
	if status, _ := post(t, f.url+"/sim/faults", `{"restart":true}`); status != 200 {
		t.Fatal(status)
	}
}

func TestNoPrefixCaching(t *testing.T) {
	f := start(t, func(_ *engine.Config, o *Options) { o.PrefixCaching = false })
	p := strings.Repeat("same prompt ", 100)
	post(t, f.url+"/v1/completions", `{"prompt":"`+p+`","max_tokens":1}`)
	post(t, f.url+"/v1/completions", `{"prompt":"`+p+`","max_tokens":1}`)
	if m := scrape(t, f.url); m["vllm:prefix_cache_hits_total"] != 0 {
		t.Fatalf("hits with prefix caching off: %v", m["vllm:prefix_cache_hits_total"])
	}
}
