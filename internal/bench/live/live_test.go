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

package live

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
	"github.com/kvrouter/kvrouter/internal/bench/workload"
	"github.com/kvrouter/kvrouter/internal/sim/engine"
	"github.com/kvrouter/kvrouter/internal/sim/server"
	"github.com/kvrouter/kvrouter/internal/sim/timing"
)

// startSim serves one real simulated engine (the vllm-sim HTTP server) on a loopback port.
func startSim(t *testing.T, scale float64) string {
	t.Helper()
	eng, err := engine.New(engine.Config{Profile: timing.ForModel("llama-8b", 1), BlockSize: 16, NumBlocks: 400})
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(eng, server.Options{ServedModelNames: []string{"sim"}, TimeScale: scale, PrefixCaching: true,
		Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); cancel(); <-done })
	return ts.URL
}

func multiTurn(t *testing.T, n int) []workload.Request {
	t.Helper()
	spec := &workload.Spec{
		Name: "live-test", Kind: workload.KindMultiTurn, Seed: 3, Fleet: workload.Fleet{Engines: 1},
		Load: workload.Load{Rates: []float64{40}, Requests: n}, SLO: workload.SLO{TTFTSeconds: 5, ITLSeconds: 1},
		MultiTurn: &workload.Sessions{SystemPrompts: 1, SystemTokens: 200, Turns: 3, FirstTokens: 20, NewTokens: 10, OutputTokens: 6, ThinkSeconds: 0.01},
	}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	reqs, err := workload.Generate(spec, 40, workload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

func TestLiveAgainstSimulatedEngine(t *testing.T) {
	url := startSim(t, 1)
	for _, ep := range []Endpoint{Completions, Chat} {
		t.Run(string(ep), func(t *testing.T) {
			out, err := RunDetailed(context.Background(), Config{Target: url, Endpoint: ep, Requests: multiTurn(t, 24),
				MaxDuration: time.Minute, SLO: metrics.SLO{TTFT: 5, ITL: 1}, Goodput: metrics.GoodputSLO{TTFT: 5}})
			if err != nil {
				t.Fatal(err)
			}
			res := out.Result
			if res.Completed != 24 {
				t.Fatalf("%d of 24 completed: %+v", res.Completed, out.Errors)
			}
			if res.TTFTP50 <= 0 || res.ITLP50 <= 0 || res.E2EP99 < res.TTFTP99 {
				t.Fatalf("latencies look wrong: %+v", res)
			}
			if res.OutputThroughput <= 0 || res.Goodput <= 0 || out.Serving.RequestGoodput <= 0 {
				t.Fatalf("no throughput: %+v", res)
			}
			// The simulator sends usage, and every request asks for 6 tokens it honours.
			if out.TokenSources[SourceUsage] != 24 || out.Serving.OutputTokens != 24*6 || out.FinishReasons["length"] != 24 {
				t.Fatalf("token sources %v, %d output tokens", out.TokenSources, out.Serving.OutputTokens)
			}
			// One shared system prompt and conversations that resend their history: the engine's
			// own usage report must show cached prompt tokens.
			if res.HitRate < 0.3 {
				t.Fatalf("hit rate %.2f: follow-up turns did not reuse the cache", res.HitRate)
			}
		})
	}
}

// promSum reads NAME_sum and NAME_count from a Prometheus text exposition.
func promSum(t *testing.T, text, name string) (sum, count float64) {
	t.Helper()
	found := 0
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		for suffix, dst := range map[string]*float64{"_sum": &sum, "_count": &count} {
			if strings.HasPrefix(line, name+suffix+"{") || strings.HasPrefix(line, name+suffix+" ") {
				f := strings.Fields(line)
				v, err := strconv.ParseFloat(f[len(f)-1], 64)
				if err != nil {
					t.Fatal(err)
				}
				*dst += v
				found++
			}
		}
	}
	if found < 2 {
		t.Fatalf("%s_sum/_count not in /metrics", name)
	}
	return sum, count
}

// TestLiveMatchesEngineHistograms checks the client's figures against the engine's own: vllm-sim
// observes TTFT (arrival to first token) and every inter-token gap in simulated seconds, and
// kvbench stretches its wall-clock measurements by the time scale, so the means agree up to what
// lies between them: HTTP and JSON on loopback and goroutine scheduling on a shared machine,
// which the client sees and the engine does not: 10% of the engine's mean plus 8 ms of wall time.
// (The engine stamps arrival from the wall clock, not from its step clock, which already reads
// the end of the step in progress; before that, the client's TTFT was up to a step longer.)
func TestLiveMatchesEngineHistograms(t *testing.T) {
	const scale = 0.5 // twice slower than real time: the client's own overhead weighs half as much
	url := startSim(t, scale)
	spec := &workload.Spec{
		Name: "histograms", Kind: workload.KindUnique, Seed: 11, Fleet: workload.Fleet{Engines: 1},
		Load: workload.Load{Rates: []float64{8}, Requests: 40}, SLO: workload.SLO{TTFTSeconds: 5, ITLSeconds: 1},
		Unique: &workload.Unique{PromptTokens: 300, OutputTokens: 24},
	}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	reqs, err := workload.Generate(spec, 8, workload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := RunDetailed(context.Background(), Config{Target: url, Requests: reqs, TimeScale: scale, MaxDuration: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if out.Serving.Completed != len(reqs) {
		t.Fatalf("%d of %d completed: %+v", out.Serving.Completed, len(reqs), out.Errors)
	}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	ttftSum, ttftN := promSum(t, string(body), "vllm:time_to_first_token_seconds")
	itlSum, itlN := promSum(t, string(body), "vllm:inter_token_latency_seconds")
	if int(ttftN) != out.Serving.TTFT.N || int(itlN) != out.Serving.ITL.N {
		t.Fatalf("engine saw %v first tokens and %v gaps, client %d and %d: one token per chunk expected",
			ttftN, itlN, out.Serving.TTFT.N, out.Serving.ITL.N)
	}
	slack := 0.008 * scale
	engTTFT, engITL := ttftSum/ttftN, itlSum/itlN
	cl := out.Serving
	t.Logf("TTFT mean: client %.2f ms, engine %.2f ms; ITL mean: client %.2f ms, engine %.2f ms (simulated)",
		1000*cl.TTFT.Mean, 1000*engTTFT, 1000*cl.ITL.Mean, 1000*engITL)
	if d := cl.ITL.Mean - engITL; math.Abs(d) > 0.1*engITL+slack {
		t.Errorf("ITL mean: client %.4fs vs engine %.4fs, over the tolerance", cl.ITL.Mean, engITL)
	}
	if d := cl.TTFT.Mean - engTTFT; math.Abs(d) > 0.1*engTTFT+slack {
		t.Errorf("TTFT mean: client %.4fs vs engine %.4fs, over the tolerance", cl.TTFT.Mean, engTTFT)
	}
}

func TestCheckTarget(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:8080", "https://vllm.example.com", "http://10.0.0.1:8000/", "https://h:443/prefix"} {
		if err := CheckTarget(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"ftp://127.0.0.1", "::", "127.0.0.1:8000", "http://", "https://h/?key=secret", "file:///etc/passwd", "user:secret@h:80"} {
		err := CheckTarget(bad)
		if err == nil {
			t.Errorf("%s must be refused", bad)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error repeats the query: %v", bad, err)
		}
	}
	if got := Redact("https://user:pw@h:8443/v?key=k#f"); got != "https://h:8443/v" {
		t.Fatalf("Redact: %s", got)
	}
}

// fakeServer answers every request with a fixed stream and remembers what it was sent.
type fakeServer struct {
	mu      sync.Mutex
	bodies  []map[string]any
	headers []http.Header
	paths   []string
	answer  func(w http.ResponseWriter, r *http.Request, body map[string]any)
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		f.mu.Lock()
		f.headers = append(f.headers, r.Header.Clone())
		f.paths = append(f.paths, r.URL.Path)
		f.mu.Unlock()
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m1","object":"model"}]}`)
		return
	}
	var b map[string]any
	_ = json.NewDecoder(r.Body).Decode(&b)
	f.mu.Lock()
	f.bodies = append(f.bodies, b)
	f.headers = append(f.headers, r.Header.Clone())
	f.paths = append(f.paths, r.URL.Path)
	f.mu.Unlock()
	f.answer(w, r, b)
}

func streamTokens(n int, chat bool) func(w http.ResponseWriter, r *http.Request, body map[string]any) {
	return func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range n {
			fin := "null"
			if i == n-1 {
				fin = `"length"`
			}
			if chat {
				fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" t%d\"},\"finish_reason\":%s}]}\n\n", i, fin)
			} else {
				fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\" t%d\",\"finish_reason\":%s}]}\n\n", i, fin)
			}
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", n)
	}
}

func oneRequest(maxTokens int) []workload.Request {
	return []workload.Request{{Segments: []workload.Segment{{Seed: 1, Len: 3}}, MaxTokens: maxTokens, Parent: -1}}
}

func TestRequestShape(t *testing.T) {
	cases := []struct {
		name  string
		cfg   Config
		check func(t *testing.T, path string, b map[string]any, h http.Header)
	}{
		{"completions defaults", Config{}, func(t *testing.T, path string, b map[string]any, h http.Header) {
			if path != "/v1/completions" || b["prompt"] == nil || b["max_tokens"] != 4.0 || b["model"] != "m1" {
				t.Fatalf("%s %v", path, b)
			}
			if _, ok := b["ignore_eos"]; ok {
				t.Fatal("ignore_eos sent without --ignore-eos")
			}
			if _, ok := b["return_token_ids"]; ok {
				t.Fatal("return_token_ids sent unasked")
			}
			so, _ := b["stream_options"].(map[string]any)
			if so["include_usage"] != true || so["continuous_usage_stats"] != nil {
				t.Fatalf("stream_options %v", so)
			}
			if h.Get("Authorization") != "" {
				t.Fatal("Authorization sent without a key")
			}
		}},
		{"chat with every option", Config{Endpoint: Chat, APIKey: "sk-test", IgnoreEOS: true, ReturnTokenIDs: true, Usage: UsageContinuous, Model: "x"},
			func(t *testing.T, path string, b map[string]any, h http.Header) {
				msgs, _ := b["messages"].([]any)
				if path != "/v1/chat/completions" || len(msgs) != 1 || b["max_completion_tokens"] != 4.0 || b["prompt"] != nil || b["model"] != "x" {
					t.Fatalf("%s %v", path, b)
				}
				so, _ := b["stream_options"].(map[string]any)
				if b["ignore_eos"] != true || b["return_token_ids"] != true || so["continuous_usage_stats"] != true {
					t.Fatalf("options missing: %v", b)
				}
				if h.Get("Authorization") != "Bearer sk-test" {
					t.Fatalf("Authorization %q", h.Get("Authorization"))
				}
			}},
		{"no usage asked", Config{Usage: UsageNone}, func(t *testing.T, _ string, b map[string]any, _ http.Header) {
			if _, ok := b["stream_options"]; ok {
				t.Fatalf("stream_options sent: %v", b)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeServer{answer: streamTokens(4, c.cfg.Endpoint == Chat)}
			ts := httptest.NewServer(f)
			defer ts.Close()
			cfg := c.cfg
			cfg.Target, cfg.Requests = ts.URL, oneRequest(4)
			out, err := RunDetailed(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if out.Serving.Completed != 1 || out.Serving.OutputTokens != 4 {
				t.Fatalf("%+v", out.Serving)
			}
			last := len(f.bodies) - 1
			c.check(t, f.paths[len(f.paths)-1], f.bodies[last], f.headers[len(f.headers)-1])
			if cfg.APIKey != "" && cfg.Model == "" && f.headers[0].Get("Authorization") != "Bearer "+cfg.APIKey {
				t.Fatal("/v1/models asked without the key")
			}
		})
	}
}

// A chat follow-up turn resends the conversation with the model's answer as an assistant message.
func TestChatFollowUpCarriesTheAnswer(t *testing.T) {
	f := &fakeServer{answer: streamTokens(2, true)}
	ts := httptest.NewServer(f)
	defer ts.Close()
	reqs := []workload.Request{
		{Segments: []workload.Segment{{Seed: 1, Len: 2}}, MaxTokens: 2, Parent: -1, Session: "s"},
		{Segments: []workload.Segment{{Seed: 2, Len: 1}}, MaxTokens: 2, Parent: 0, At: 0.001, Session: "s"},
	}
	out, err := RunDetailed(context.Background(), Config{Target: ts.URL, Endpoint: Chat, Model: "m", Requests: reqs})
	if err != nil || out.Serving.Completed != 2 {
		t.Fatalf("%v %+v", err, out)
	}
	msgs, _ := f.bodies[1]["messages"].([]any)
	if len(msgs) != 3 {
		t.Fatalf("follow-up sent %d messages, want user, assistant, user", len(msgs))
	}
	a, _ := msgs[1].(map[string]any)
	if a["role"] != "assistant" || a["content"] != " t0 t1" {
		t.Fatalf("assistant message %v", a)
	}
	if f.headers[0].Get("X-Session-ID") != "s" {
		t.Fatal("session header missing")
	}
}

func TestHTTPErrorsAreReported(t *testing.T) {
	var n int
	var mu sync.Mutex
	f := &fakeServer{answer: func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		switch k % 3 {
		case 0:
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
		case 1:
			// A validation error that quotes the request back.
			w.WriteHeader(http.StatusBadRequest)
			prompt, _ := body["prompt"].(string)
			msg, _ := json.Marshal("Input validation failed: {'input': '" + prompt + "'}")
			fmt.Fprintf(w, `{"object":"error","message":%s,"type":"BadRequestError","code":400}`, msg)
		default:
			streamTokens(3, false)(w, r, body)
		}
	}}
	ts := httptest.NewServer(f)
	defer ts.Close()
	reqs := make([]workload.Request, 6)
	for i := range reqs {
		reqs[i] = workload.Request{Segments: []workload.Segment{{Seed: uint64(i), Len: 40}}, MaxTokens: 3, Parent: -1, At: float64(i) * 0.01}
	}
	out, err := RunDetailed(context.Background(), Config{Target: ts.URL, Model: "m", Requests: reqs, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	if out.Serving.Failed != 4 || out.Serving.Completed != 2 {
		t.Fatalf("failed %d completed %d", out.Serving.Failed, out.Serving.Completed)
	}
	msgs := map[string]int{}
	for _, e := range out.Errors {
		msgs[e.Message] = e.Count
	}
	if msgs["HTTP 429: requests: Rate limit reached"] != 2 {
		t.Fatalf("errors %+v", out.Errors)
	}
	for m := range msgs {
		if strings.Contains(m, reqs[0].Text()[:12]) || strings.Contains(m, "'input'") {
			t.Fatalf("a prompt-quoting message reached the report: %q", m)
		}
	}
}

// The prompt-quoting check must see the prompt the request sent; workload prompts are text, so
// check it directly too.
func TestSanitize(t *testing.T) {
	prompt := strings.Repeat(" xyz", 40)
	if got := sanitize(fmt.Errorf("HTTP 400: bad input%s", prompt[:60]), prompt, ""); strings.Contains(got.Error(), "xyz") {
		t.Fatalf("not withheld: %v", got)
	}
	if got := sanitize(fmt.Errorf("HTTP 429: Rate limit reached"), prompt, ""); got.Error() != "HTTP 429: Rate limit reached" {
		t.Fatalf("withheld an innocent message: %v", got)
	}
	// A short fragment of a prompt without repetitions, at every alignment in the message and
	// in the prompt: 18 bytes is above the 16-byte bound wherever it sits.
	wr := workload.Request{Segments: []workload.Segment{{Seed: 9, Len: 120}}}
	text := wr.Text()
	for at := 31; at < 39; at++ {
		frag := text[at : at+18]
		for pad := range 8 {
			msg := fmt.Errorf("HTTP 400: %sinvalid input '%s'", strings.Repeat("!", pad), frag)
			if got := sanitize(msg, text, ""); strings.Contains(got.Error(), frag) {
				t.Fatalf("18-byte echo at prompt offset %d, message pad %d not withheld: %v", at, pad, got)
			}
		}
	}
	// Below the bound the message stays: 12 bytes of text occur in innocent messages.
	if got := sanitize(fmt.Errorf("HTTP 400: bad %s", text[40:52]), text, ""); !strings.Contains(got.Error(), text[40:52]) {
		t.Fatalf("a 12-byte overlap was withheld: %v", got)
	}
}

func TestSanitizeRedactsTheKey(t *testing.T) {
	const key = "sk-live-0123456789abcdef"
	for _, c := range []struct{ msg, want string }{
		{"HTTP 401: invalid header Bearer " + key + " for " + key, "HTTP 401: invalid header Bearer REDACTED for REDACTED"},
		// clip cut the message inside the key: its start goes too.
		{"HTTP 401: bad key " + key[:15] + "…", "HTTP 401: bad key REDACTED…"},
		{"HTTP 503: overloaded", "HTTP 503: overloaded"},
	} {
		if got := sanitize(errors.New(c.msg), "", key).Error(); got != c.want {
			t.Errorf("sanitize(%q) = %q, want %q", c.msg, got, c.want)
		}
	}
}

// A server that echoes the Authorization header in its 401 body (as some gateways do) must not
// put the key into the errors of the outcome, in the run's requests or in the model listing.
func TestKeyEchoedByTheServerIsRedacted(t *testing.T) {
	const key = "sk-live-0123456789abcdef"
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		if r.URL.Path == "/v1/chat/completions" {
			// Long enough that the 200-character clip cuts inside the second copy of the key.
			fmt.Fprintf(w, "%s rejected: %s%s", r.Header.Get("Authorization"), strings.Repeat(".", 141), r.Header.Get("Authorization"))
			return
		}
		msg, _ := json.Marshal("key " + r.Header.Get("Authorization") + " is not valid")
		fmt.Fprintf(w, `{"error":{"message":%s,"type":"invalid_request_error"}}`, msg)
	}))
	defer ts.Close()
	for _, ep := range []Endpoint{Completions, Chat} {
		out, err := RunDetailed(context.Background(), Config{Target: ts.URL, APIKey: key, Model: "m", Endpoint: ep, Requests: oneRequest(2)})
		if err == nil || out == nil || len(out.Errors) != 1 {
			t.Fatalf("%s: want the request failed, got %v %+v", ep, err, out)
		}
		if m := out.Errors[0].Message; strings.Contains(m, key[:10]) || strings.Contains(err.Error(), key[:10]) ||
			!strings.Contains(m, "HTTP 401") || !strings.Contains(m, "Bearer REDACTED") {
			t.Fatalf("%s: error %q (run error %v)", ep, m, err)
		}
	}
	_, err := RunDetailed(context.Background(), Config{Target: ts.URL, APIKey: key, Requests: oneRequest(2)})
	if err == nil || strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "key Bearer REDACTED is not valid") {
		t.Fatalf("model listing error %v", err)
	}
}

// Go's client forwards Authorization to the same host name on another port; with a key, kvbench
// follows no redirect off the target's scheme, host and port, and says why.
func TestRedirectsDoNotCarryTheKeyElsewhere(t *testing.T) {
	const key = "sk-live-0123456789abcdef"
	var mu sync.Mutex
	var seen []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		streamTokens(2, false)(w, r, nil)
	}))
	defer other.Close()
	f := &fakeServer{answer: func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		if r.URL.Path == "/v1/completions" && r.URL.Query().Get("here") == "" {
			http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
			return
		}
		streamTokens(2, false)(w, r, body)
	}}
	ts := httptest.NewServer(f)
	defer ts.Close()
	if !strings.HasPrefix(other.URL, "http://127.0.0.1:") || !strings.HasPrefix(ts.URL, "http://127.0.0.1:") {
		t.Fatalf("want two ports of one host: %s %s", ts.URL, other.URL)
	}
	for _, fromList := range []bool{false, true} {
		cfg := Config{Target: ts.URL, APIKey: key, Model: "m", Requests: oneRequest(2)}
		if fromList {
			// The model listing redirects too.
			cfg.Model = ""
			f2 := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, other.URL+r.URL.Path, http.StatusFound)
			})
			ts2 := httptest.NewServer(f2)
			defer ts2.Close()
			cfg.Target = ts2.URL
		}
		out, err := RunDetailed(context.Background(), cfg)
		msg := fmt.Sprint(err)
		if out != nil && len(out.Errors) > 0 {
			msg = out.Errors[0].Message
		}
		mu.Lock()
		for _, h := range seen {
			if h != "" {
				t.Fatalf("model from list %v: the other port got Authorization %q", fromList, h)
			}
		}
		mu.Unlock()
		if err == nil || !strings.Contains(msg, "does not follow a redirect") || !strings.Contains(msg, "HTTP 30") {
			t.Fatalf("model from list %v: err %v, message %q", fromList, err, msg)
		}
	}
	// A redirect within the target is followed, the key with it; without a key Go's policy applies.
	f.answer = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		if r.URL.Query().Get("here") == "" {
			http.Redirect(w, r, r.URL.Path+"?here=1", http.StatusTemporaryRedirect)
			return
		}
		streamTokens(2, false)(w, r, body)
	}
	out, err := RunDetailed(context.Background(), Config{Target: ts.URL, APIKey: key, Model: "m", Requests: oneRequest(2)})
	if err != nil || out.Serving.Completed != 1 || f.headers[len(f.headers)-1].Get("Authorization") != "Bearer "+key {
		t.Fatalf("same-origin redirect: %v %+v", err, out)
	}
}

func TestSlowServerTimesOut(t *testing.T) {
	release := make(chan struct{})
	f := &fakeServer{answer: func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
		w.(http.Flusher).Flush()
		select { // stall mid-stream
		case <-r.Context().Done():
		case <-release:
		}
	}}
	ts := httptest.NewServer(f)
	defer func() { close(release); ts.Close() }()
	start := time.Now()
	out, err := RunDetailed(context.Background(), Config{Target: ts.URL, Model: "m", Requests: oneRequest(4),
		RequestTimeout: 200 * time.Millisecond})
	if err == nil || out.Serving.Failed != 1 {
		t.Fatalf("want every request failed, got %v %+v", err, out)
	}
	if !strings.Contains(out.Errors[0].Message, "timed out after 200ms") {
		t.Fatalf("error %q", out.Errors[0].Message)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("took %s", el)
	}
	// The run's own bound cuts a stalled request too, and says so.
	out, _ = RunDetailed(context.Background(), Config{Target: ts.URL, Model: "m", Requests: oneRequest(4),
		MaxDuration: 200 * time.Millisecond})
	if out == nil || !strings.Contains(out.Errors[0].Message, "run ended") {
		t.Fatalf("%+v", out)
	}
}

func TestNotAnEventStream(t *testing.T) {
	f := &fakeServer{answer: func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"text":"all at once"}]}`)
	}}
	ts := httptest.NewServer(f)
	defer ts.Close()
	out, err := RunDetailed(context.Background(), Config{Target: ts.URL, Model: "m", Requests: oneRequest(4)})
	if err == nil || !strings.Contains(out.Errors[0].Message, "not an event stream") {
		t.Fatalf("%v %+v", err, out)
	}
}

func TestModelListingNeedsTheKey(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer right" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"data":[{"id":"m1"}]}`)
	}))
	defer ts.Close()
	_, err := RunDetailed(context.Background(), Config{Target: ts.URL, APIKey: "wrong", Requests: oneRequest(1)})
	if err == nil || !strings.Contains(err.Error(), "HTTP 401") || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("err %v", err)
	}
}

func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) })
	p := NewProgress(w, ProgressLines, true, 20*time.Millisecond)
	f := &fakeServer{answer: streamTokens(2, false)}
	ts := httptest.NewServer(f)
	defer ts.Close()
	reqs := make([]workload.Request, 5)
	for i := range reqs {
		reqs[i] = workload.Request{Segments: []workload.Segment{{Seed: 1, Len: 1}}, MaxTokens: 2, Parent: -1, At: float64(i) * 0.03}
	}
	if _, err := RunDetailed(context.Background(), Config{Target: ts.URL, Model: "m", Requests: reqs, Progress: p}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	text := buf.String()
	mu.Unlock()
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) < 3 || strings.Contains(text, "\r") {
		t.Fatalf("lines mode wrote %q", text)
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "5/5 done, 0 in flight, 0 failed") {
		t.Fatalf("final line %q", last)
	}
	// A bar redraws in place and ends with a newline.
	buf.Reset()
	bar := NewProgress(w, ProgressAuto, true, 0)
	bar.begin(2)
	bar.sentOne()
	bar.finished(true)
	bar.end()
	if s := buf.String(); !strings.HasPrefix(s, "\r[") || !strings.HasSuffix(s, "\n") || !strings.Contains(s, "1/2 done, 0 in flight, 1 failed") {
		t.Fatalf("bar wrote %q", s)
	}
	if NewProgress(w, ProgressNone, true, 0) != nil {
		t.Fatal("none must report nothing")
	}
	if _, err := ParseProgressMode("fancy"); err == nil {
		t.Fatal("unknown mode accepted")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Requests due after the run's wall bound are never sent; they count as failed at their due time.
func TestWallBoundLeavesLateRequestsUnsent(t *testing.T) {
	f := &fakeServer{answer: streamTokens(2, false)}
	ts := httptest.NewServer(f)
	defer ts.Close()
	reqs := []workload.Request{
		{Segments: []workload.Segment{{Seed: 1, Len: 2}}, MaxTokens: 2, Parent: -1},
		{Segments: []workload.Segment{{Seed: 2, Len: 2}}, MaxTokens: 2, Parent: -1, At: 30},
	}
	start := time.Now()
	out, err := RunDetailed(context.Background(), Config{Target: ts.URL, Model: "m", Requests: reqs, MaxDuration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 10*time.Second || out.Serving.Completed != 1 || out.Serving.Failed != 1 || len(f.bodies) != 1 || out.Sent != 1 {
		t.Fatalf("completed %d failed %d sent %d (outcome says %d)", out.Serving.Completed, out.Serving.Failed, len(f.bodies), out.Sent)
	}
	if out.Errors[0].Message != "not sent: the run ended first" || out.Records[1].Arrival != 30 || !out.Records[1].Failed {
		t.Fatalf("%+v %+v", out.Errors, out.Records[1])
	}
}
