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
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/sim/engine"
	"github.com/kvrouter/kvrouter/internal/sim/kvpublish"
	"github.com/kvrouter/kvrouter/internal/sim/timing"
)

// pdFixture is a simulated engine with a KV connector and its side channel.
type pdFixture struct {
	fixture
	side *httptest.Server
}

func startPD(t *testing.T, mutate func(*engine.Config, *Options)) pdFixture {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rdma, _ := timing.LookupTransport("rdma")
	f := start(t, func(c *engine.Config, o *Options) {
		o.KVTransfer = &KVTransferOptions{Connector: "NixlConnector", Role: roleBoth, Host: "127.0.0.1",
			Port: ln.Addr().(*net.TCPAddr).Port, Transport: rdma, Timeout: 480 * time.Second, LoadFailurePolicy: "recompute"}
		if mutate != nil {
			mutate(c, o)
		}
	})
	side := httptest.NewUnstartedServer(f.srv.SideChannelHandler())
	side.Listener.Close()
	side.Listener = ln
	side.Start()
	t.Cleanup(side.Close)
	return pdFixture{fixture: f, side: side}
}

// subscribe collects the BlockStored events an engine publishes.
func subscribe(t *testing.T, o *Options) <-chan kvevents.Event {
	t.Helper()
	pub, err := kvpublish.New(kvpublish.Config{Endpoint: "tcp://127.0.0.1:0", ForceBind: true, Topic: "kv",
		Encoder: kvpublish.Encoder{Encoding: kvpublish.Map, IntHashes: true}})
	if err != nil {
		t.Fatal(err)
	}
	o.Publisher = pub
	ctx, cancel := context.WithCancel(context.Background())
	sub := zmq4.NewSub(ctx)
	t.Cleanup(func() { cancel(); sub.Close(); pub.Close() })
	if err := sub.Dial("tcp://" + pub.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	out := make(chan kvevents.Event, 1000)
	go func() {
		var d kvevents.Decoder
		var b kvevents.Batch
		for {
			msg, err := sub.Recv()
			if err != nil {
				return
			}
			if len(msg.Frames) < 3 || d.Decode(msg.Frames[2], &b) != nil {
				continue
			}
			for _, ev := range b.Events {
				if ev.Kind == kvevents.KindBlockStored {
					ev.BlockHashes = slices.Clone(ev.BlockHashes)
					ev.TokenIDs = slices.Clone(ev.TokenIDs)
					out <- ev
				}
			}
		}
	}()
	return out
}

// awaitSubscription sends requests with a prompt of their own until the subscriber sees their
// events (a ZMQ subscription takes effect some time after the dial), then drains the rest.
func awaitSubscription(t *testing.T, url string, events <-chan kvevents.Event) {
	t.Helper()
	for i := 0; ; i++ {
		if i == 50 {
			t.Fatal("the subscriber never received an event")
		}
		prompt := make([]string, 32)
		for j := range prompt {
			prompt[j] = strconv.Itoa(5000 + 100*i + j)
		}
		if status, body := post(t, url+"/v1/completions", `{"prompt":[`+strings.Join(prompt, ",")+`],"max_tokens":1}`); status != 200 {
			t.Fatalf("%d %v", status, body)
		}
		select {
		case <-events:
		case <-time.After(100 * time.Millisecond):
			continue
		}
		for {
			select {
			case <-events:
			case <-time.After(200 * time.Millisecond):
				return
			}
		}
	}
}

// metric reads one series of an engine's /metrics; labels select it (others are summed over).
func metric(t *testing.T, url, name string, labels ...string) float64 {
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
	sum := 0.0
	f := fams[name]
	if f == nil {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

// prefillLeg sends the router's prefill leg of body and returns the kv_transfer_params answered.
func prefillLeg(t *testing.T, url, body string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	m["stream"], m["max_tokens"] = false, 1
	delete(m, "stream_options")
	m["kv_transfer_params"] = map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
		"remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
	b, _ := json.Marshal(m)
	status, resp := post(t, url+"/v1/completions", string(b))
	if status != 200 {
		t.Fatalf("prefill leg: %d %v", status, resp)
	}
	kv, _ := resp["kv_transfer_params"].(map[string]any)
	if kv == nil {
		t.Fatalf("prefill response without kv_transfer_params: %v", resp)
	}
	return kv
}

// withParams adds kv_transfer_params to a JSON body.
func withParams(t *testing.T, body string, kv map[string]any) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	m["kv_transfer_params"] = kv
	b, _ := json.Marshal(m)
	return string(b)
}

// streamText posts a streamed completion and returns its text chunks and its usage chunk.
func streamText(t *testing.T, url, body string) ([]string, map[string]any) {
	t.Helper()
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var texts []string
	var usage map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage map[string]any `json:"usage"`
			Error any            `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil || c.Error != nil {
			t.Fatalf("chunk %q: %v", line, err)
		}
		for _, ch := range c.Choices {
			texts = append(texts, ch.Text)
		}
		if c.Usage != nil {
			usage = c.Usage
		}
	}
	return texts, usage
}

func completionText(t *testing.T, url, body string) (string, map[string]any) {
	t.Helper()
	status, resp := post(t, url+"/v1/completions", body)
	if status != 200 {
		t.Fatalf("%d %v", status, resp)
	}
	if _, ok := resp["kv_transfer_params"]; ok {
		t.Fatalf("a response other than a prefill leg's carries kv_transfer_params: %v", resp)
	}
	return resp["choices"].([]any)[0].(map[string]any)["text"].(string), resp["usage"].(map[string]any)
}

const pdPrompt = 300 // 18 full blocks of 16 and a partial one

func pdBody(stream bool) string {
	b := `{"model":"sim-model","prompt":[` + ids(pdPrompt) + `],"max_tokens":20`
	if stream {
		b += `,"stream":true,"stream_options":{"include_usage":true}`
	}
	return b + "}"
}

// A prefill leg and a decode leg on two engines stream what one aggregated request streams; the
// decode engine's KV events carry the pulled blocks, and a second decode leg of the same prompt
// pulls nothing (the decode engine already holds every block).
func TestDisaggregatedLegsStreamTheAggregatedTokens(t *testing.T) {
	p := startPD(t, nil)
	var events <-chan kvevents.Event
	d := startPD(t, func(c *engine.Config, o *Options) { c.EmitEvents = true; events = subscribe(t, o) })
	whole := start(t, nil)
	awaitSubscription(t, d.url, events)

	kv := prefillLeg(t, p.url, pdBody(true))
	wantPort := p.side.Listener.Addr().(*net.TCPAddr).Port
	blocks, _ := kv["remote_block_ids"].([]any)
	if kv["do_remote_prefill"] != true || kv["do_remote_decode"] != false || kv["remote_engine_id"] != p.srv.EngineID() ||
		kv["remote_host"] != "127.0.0.1" || kv["remote_port"] != float64(wantPort) || kv["tp_size"] != float64(1) ||
		kv["remote_request_id"] == "" || len(blocks) != (pdPrompt+15)/16 {
		t.Fatalf("prefill kv_transfer_params %v", kv)
	}
	if got := metric(t, p.url, "kvrouter_sim_kv_held_blocks"); got != float64(len(blocks)) {
		t.Fatalf("prefill engine holds %v blocks, want %d", got, len(blocks))
	}

	split, usage := streamText(t, d.url, withParams(t, pdBody(true), kv))
	want, _ := streamText(t, whole.url, pdBody(true))
	if len(want) != 20 || !slices.Equal(split, want) {
		t.Fatalf("decode leg streamed %q, the aggregated request %q", split, want)
	}
	full := (pdPrompt - 1) / 16 * 16
	if details, _ := usage["prompt_tokens_details"].(map[string]any); details["cached_tokens"] != float64(full) {
		t.Errorf("decode leg usage %v, want %d cached (transferred) tokens", usage, full)
	}
	if got := metric(t, p.url, "kvrouter_sim_kv_held_blocks"); got != 0 {
		t.Errorf("the prefill engine still holds %v blocks after the pull", got)
	}
	for name, want := range map[string]float64{"kvrouter_sim_kv_transfer_blocks_total": float64(full / 16),
		"kvrouter_sim_kv_transfer_seconds": 1, "vllm:nixl_xfer_time_seconds": 1, "vllm:nixl_bytes_transferred": 1,
		"vllm:prefix_cache_hits_total": 0, "vllm:nixl_num_failed_transfers_total": 0} {
		if got := metric(t, d.url, name); got != want {
			t.Errorf("decode engine %s = %v, want %v", name, got, want)
		}
	}
	if got := metric(t, d.url, "kvrouter_sim_kv_transfers_total", "result", "ok"); got != 1 {
		t.Errorf("ok transfers %v", got)
	}

	select {
	case ev := <-events:
		if len(ev.BlockHashes) != full/16 || ev.HasParent || len(ev.TokenIDs) != full {
			t.Fatalf("first stored event: %d blocks, parent %v, %d tokens; want the %d pulled blocks", len(ev.BlockHashes), ev.HasParent, len(ev.TokenIDs), full/16)
		}
		var prompt []uint32
		if err := json.Unmarshal([]byte("["+ids(pdPrompt)+"]"), &prompt); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ev.TokenIDs, prompt[:full]) {
			t.Fatal("the stored event carries other tokens than the prompt's")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the decode engine published no BlockStored event")
	}

	// Same prompt again: the decode engine's cache has every full block, so it pulls none.
	kv = prefillLeg(t, p.url, pdBody(false))
	if text, _ := completionText(t, d.url, withParams(t, pdBody(false), kv)); text != strings.Join(want, "") {
		t.Errorf("second decode leg %q", text)
	}
	if got := metric(t, d.url, "kvrouter_sim_kv_transfer_blocks_total"); got != float64(full/16) {
		t.Errorf("a decode engine that holds the prompt pulled blocks: %v in all", got)
	}
	if got := metric(t, p.url, "kvrouter_sim_kv_held_blocks"); got != 0 {
		t.Errorf("the prefill engine still holds %v blocks after an empty pull", got)
	}
}

// A failed pull (injected) loses nothing: the decode engine recomputes the prompt and answers the
// same tokens, counted as recomputed.
func TestTransferFailureRecomputes(t *testing.T) {
	p := startPD(t, nil)
	d := startPD(t, nil)
	whole := start(t, nil)
	if status, body := post(t, d.url+"/sim/faults", `{"kvTransferFailFraction":1}`); status != 200 || body["kvTransferFailFraction"] != 1.0 {
		t.Fatalf("%d %v", status, body)
	}
	kv := prefillLeg(t, p.url, pdBody(false))
	text, usage := completionText(t, d.url, withParams(t, pdBody(false), kv))
	want, _ := completionText(t, whole.url, pdBody(false))
	if text != want || usage["prompt_tokens_details"].(map[string]any)["cached_tokens"] != 0.0 {
		t.Fatalf("after a failed pull: %q (usage %v), want %q computed locally", text, usage, want)
	}
	if got := metric(t, d.url, "kvrouter_sim_kv_transfers_total", "result", "recomputed"); got != 1 {
		t.Errorf("recomputed %v", got)
	}
	if got := metric(t, d.url, "kvrouter_sim_kv_transfer_failures_total", "reason", "injected"); got != 1 {
		t.Errorf("injected failures %v", got)
	}
	if got := metric(t, d.url, "vllm:nixl_num_failed_transfers_total"); got != 1 {
		t.Errorf("vllm:nixl_num_failed_transfers_total %v", got)
	}
	// The read failed before the completion notice: the prefill engine keeps the blocks until
	// its timeout, as vLLM's does.
	if got := metric(t, p.url, "kvrouter_sim_kv_held_blocks"); got == 0 {
		t.Error("the prefill engine released blocks nobody finished pulling")
	}
}

// The prefill engine goes away, or restarts, while the decode engine reads: the decode leg
// still answers, with the prompt recomputed.
func TestPrefillEngineGoneMidTransfer(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		gone         func(p pdFixture)
	}{
		{"stopped", "unreachable", func(p pdFixture) { p.side.Close() }},
		{"restarted", "engine_mismatch", func(p pdFixture) {
			if err := p.srv.Restart(); err != nil {
				panic(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startPD(t, nil)
			d := startPD(t, nil)
			whole := start(t, nil)
			if status, _ := post(t, d.url+"/sim/faults", `{"kvTransferDelayMs":400}`); status != 200 {
				t.Fatal(status)
			}
			kv := prefillLeg(t, p.url, pdBody(false))
			type answer struct {
				text string
				took time.Duration
			}
			done := make(chan answer, 1)
			go func() {
				began := time.Now()
				status, resp := post(t, d.url+"/v1/completions", withParams(t, pdBody(false), kv))
				if status != 200 {
					t.Errorf("decode leg: %d %v", status, resp)
					done <- answer{}
					return
				}
				done <- answer{resp["choices"].([]any)[0].(map[string]any)["text"].(string), time.Since(began)}
			}()
			time.Sleep(100 * time.Millisecond)
			tc.gone(p)
			got := <-done
			want, _ := completionText(t, whole.url, pdBody(false))
			if got.text != want || got.took < 400*time.Millisecond {
				t.Fatalf("decode leg %q after %v, want %q after the transfer delay", got.text, got.took, want)
			}
			if n := metric(t, d.url, "kvrouter_sim_kv_transfer_failures_total", "reason", tc.reason); n != 1 {
				t.Errorf("failures for %s: %v", tc.reason, n)
			}
			if n := metric(t, d.url, "kvrouter_sim_kv_transfers_total", "result", "recomputed"); n != 1 {
				t.Errorf("recomputed %v", n)
			}
		})
	}
}

// Blocks nobody pulls are freed after the timeout (simulated seconds); a late decode leg then
// finds nothing to pull and recomputes.
func TestHeldBlocksExpire(t *testing.T) {
	p := startPD(t, func(_ *engine.Config, o *Options) { o.KVTransfer.Timeout = 1000 * time.Second }) // 1 s at scale 1000
	d := startPD(t, nil)
	kv := prefillLeg(t, p.url, pdBody(false))
	if got := metric(t, p.url, "kvrouter_sim_kv_held_requests"); got != 1 {
		t.Fatalf("held requests %v right after the prefill", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for metric(t, p.url, "kvrouter_sim_kv_held_blocks") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("held blocks never expired")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := metric(t, p.url, "vllm:nixl_num_kv_expired_reqs_total"); got != 1 {
		t.Errorf("expired requests %v", got)
	}
	if _, usage := completionText(t, d.url, withParams(t, pdBody(false), kv)); usage["prompt_tokens_details"].(map[string]any)["cached_tokens"] != 0.0 {
		t.Errorf("a decode leg got KV from an expired hold: %v", usage)
	}
	if got := metric(t, d.url, "kvrouter_sim_kv_transfer_failures_total", "reason", "not_found"); got != 1 {
		t.Errorf("not_found failures %v", got)
	}
}

func TestKVTransferParamsErrors(t *testing.T) {
	f := startPD(t, nil)
	prompt := `"prompt":"hello there","max_tokens":4`
	remote := `"do_remote_prefill":true,"remote_engine_id":"e","remote_block_ids":[1,2],"remote_host":"127.0.0.1","remote_port":1,"remote_request_id":"r"`
	for _, c := range []struct{ params, field string }{
		{`"yes"`, "kv_transfer_params"},
		{`[]`, "kv_transfer_params"},
		{`{"do_remote_decode":"yes"}`, "kv_transfer_params.do_remote_decode"},
		{`{"do_remote_decode":true,"do_remote_prefill":true}`, "kv_transfer_params"},
		{`{"do_remote_prefill":true}`, "kv_transfer_params.remote_engine_id"},
		{`{` + strings.Replace(remote, `"remote_port":1`, `"remote_port":"80"`, 1) + `}`, "kv_transfer_params.remote_port"},
		{`{` + strings.Replace(remote, `"remote_port":1`, `"remote_port":70000`, 1) + `}`, "kv_transfer_params.remote_port"},
		{`{` + strings.Replace(remote, `[1,2]`, `[1,-2]`, 1) + `}`, "kv_transfer_params.remote_block_ids"},
		{`{` + strings.Replace(remote, `[1,2]`, `[1.5]`, 1) + `}`, "kv_transfer_params.remote_block_ids"},
		{`{` + strings.Replace(remote, `,"remote_request_id":"r"`, ``, 1) + `}`, "kv_transfer_params.remote_request_id"},
		{`{` + remote + `,"tp_size":0}`, "kv_transfer_params.tp_size"},
		{`{"remote_host":7}`, "kv_transfer_params.remote_host"},
	} {
		status, body := post(t, f.url+"/v1/completions", `{`+prompt+`,"kv_transfer_params":`+c.params+`}`)
		e, _ := body["error"].(map[string]any)
		if status != 400 || e["type"] != "BadRequestError" || e["param"] != c.field || !strings.Contains(e["message"].(string), c.field) {
			t.Errorf("%s: %d %v, want a 400 naming %s", c.params, status, body, c.field)
		}
	}
	status, body := post(t, f.url+"/v1/completions", `{`+prompt+`,"stream":true,"kv_transfer_params":{"do_remote_decode":true}}`)
	if e, _ := body["error"].(map[string]any); status != 400 || e["param"] != "stream" {
		t.Errorf("streamed prefill leg: %d %v", status, body)
	}
	// Null params, or neither flag set, are a plain request.
	for _, params := range []string{`null`, `{}`, `{"do_remote_decode":false,"remote_host":null}`} {
		if status, body := post(t, f.url+"/v1/completions", `{`+prompt+`,"kv_transfer_params":`+params+`}`); status != 200 || body["kv_transfer_params"] != nil {
			t.Errorf("%s: %d %v", params, status, body)
		}
	}
}

func TestKVRolesRefuseTheOtherLeg(t *testing.T) {
	consumer := startPD(t, func(_ *engine.Config, o *Options) { o.KVTransfer.Role = roleConsumer })
	producer := startPD(t, func(_ *engine.Config, o *Options) { o.KVTransfer.Role = roleProducer })
	status, body := post(t, consumer.url+"/v1/completions", `{"prompt":"x","max_tokens":1,"kv_transfer_params":{"do_remote_decode":true}}`)
	if e, _ := body["error"].(map[string]any); status != 400 || !strings.Contains(e["message"].(string), "kv_consumer") {
		t.Errorf("prefill leg on a consumer: %d %v", status, body)
	}
	kv := prefillLeg(t, producer.url, pdBody(false))
	status, body = post(t, producer.url+"/v1/completions", withParams(t, pdBody(false), kv))
	if e, _ := body["error"].(map[string]any); status != 400 || !strings.Contains(e["message"].(string), "kv_producer") {
		t.Errorf("decode leg on a producer: %d %v", status, body)
	}
	// A consumer serves the decode leg of a producer's prefill.
	if text, _ := completionText(t, consumer.url, withParams(t, pdBody(false), kv)); text == "" {
		t.Error("empty decode leg")
	}
	if got := metric(t, consumer.url, "kvrouter_sim_kv_transfers_total", "result", "ok"); got != 1 {
		t.Errorf("ok transfers %v", got)
	}
}

// Without --kv-transfer-config, kv_transfer_params are ignored, as vLLM ignores them without a
// connector: no hold, no pull, no parameters in the answer, and no NIXL metrics.
func TestKVTransferParamsIgnoredWithoutConnector(t *testing.T) {
	f := start(t, nil)
	status, body := post(t, f.url+"/v1/completions", `{"prompt":"hello","max_tokens":2,"kv_transfer_params":{"do_remote_decode":true}}`)
	if status != 200 || body["kv_transfer_params"] != nil {
		t.Fatalf("%d %v", status, body)
	}
	texts, _ := streamText(t, f.url, `{"prompt":"hello","max_tokens":2,"stream":true,"kv_transfer_params":{"do_remote_prefill":true,"remote_port":"x"}}`)
	if len(texts) != 2 {
		t.Fatalf("streamed %q", texts)
	}
	if s := scrape(t, f.url); s["kvrouter_sim_kv_held_blocks"] != 0 || s["kvrouter_sim_kv_transfers_total"] != 0 {
		t.Fatalf("KV transfer metrics without a connector: %v", s)
	}
	if status, _ := post(t, f.url+"/sim/faults", `{"kvTransferFailFraction":0.5}`); status != 400 {
		t.Error("a KV transfer fault without a connector must be refused")
	}
}

// Serve with --kv-transfer-config: each engine gets its own side channel (ephemeral ports here),
// and engine 1 decodes what engine 0 prefilled.
func TestServeRunsSideChannels(t *testing.T) {
	s, err := ParseFlags([]string{"--host", "127.0.0.1", "--port", "0", "--time-scale", "1000", "--engines", "2",
		"--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"kv_both"}`, "--kv-transport", "tcp"},
		env("PYTHONHASHSEED", "0", "VLLM_NIXL_SIDE_CHANNEL_PORT", "0"))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan []string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, s, slog.New(slog.NewTextHandler(&logs, nil)), func(a []string) { ready <- a })
	}()
	var addrs []string
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	p, d := "http://"+addrs[0], "http://"+addrs[1]
	body := `{"prompt":[` + ids(pdPrompt) + `],"max_tokens":5}`
	kv := prefillLeg(t, p, body)
	if kv["remote_host"] != "127.0.0.1" || kv["remote_port"] == float64(0) {
		t.Fatalf("advertised side channel %v:%v", kv["remote_host"], kv["remote_port"])
	}
	if _, usage := completionText(t, d, withParams(t, body, kv)); usage["prompt_tokens_details"].(map[string]any)["cached_tokens"] != float64((pdPrompt-1)/16*16) {
		t.Errorf("decode leg usage %v: the KV was not pulled", usage)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "KV transfer ready"); n != 2 {
		t.Errorf("%d side channels logged, want 2:\n%s", n, logs.String())
	}
}

// Blocks held for a decode engine keep a request that needs them waiting; the pull frees them and
// the request runs.
func TestHeldBlocksDelayAdmissionUntilPulled(t *testing.T) {
	p := startPD(t, func(c *engine.Config, _ *Options) { c.NumBlocks = 25 })
	d := startPD(t, nil)
	kv := prefillLeg(t, p.url, pdBody(false)) // 19 of the 25 blocks held
	done := make(chan int, 1)
	go func() {
		resp, err := http.Post(p.url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":[`+strings.Repeat("7,", 159)+`7],"max_tokens":5}`))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case code := <-done:
		t.Fatalf("a request needing 11 blocks ran beside 19 held ones of 25 (status %d)", code)
	case <-time.After(300 * time.Millisecond):
	}
	if got := metric(t, p.url, "vllm:num_requests_waiting"); got != 1 {
		t.Errorf("waiting %v", got)
	}
	completionText(t, d.url, withParams(t, pdBody(false), kv))
	select {
	case code := <-done:
		if code != 200 {
			t.Fatalf("status %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting request never ran after the held blocks were pulled")
	}
}
