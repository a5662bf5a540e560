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
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
)

// The router's own answers to requests it does not forward, byte for byte: clients parse them
// as OpenAI errors, and some read the message, param and headers.
func TestRefusals(t *testing.T) {
	const bad = `"type":"invalid_request_error","param":`
	for _, c := range []struct {
		name   string
		cfg    Config
		path   string
		body   string // "" reads as a broken connection
		status int
		header string // "Name: value" expected besides Content-Type
		want   string
	}{
		{"unreadable body", Config{}, "/v1/completions", "", 400, "",
			`{"error":{"message":"cannot read request body: boom",` + bad + `null,"code":400}}`},
		{"too large", Config{MaxBodyBytes: 16}, "/v1/completions", `{"model":"m","prompt":"a long prompt"}`, 413, "",
			`{"error":{"message":"request body exceeds 16 bytes",` + bad + `null,"code":413}}`},
		{"not JSON", Config{}, "/v1/completions", `{"a":1,}`, 400, "",
			`{"error":{"message":"request body is not valid JSON: invalid JSON at offset 7: expected a string",` + bad + `null,"code":400}}`},
		{"wrong type", Config{}, "/v1/completions", `{"model":5,"prompt":"x"}`, 400, "",
			`{"error":{"message":"invalid model: json: cannot unmarshal number into Go value of type string",` + bad + `"model","code":400}}`},
		{"no model", Config{}, "/v1/completions", `{"prompt":"x"}`, 400, "",
			`{"error":{"message":"you must provide a model parameter",` + bad + `"model","code":400}}`},
		{"no prompt", Config{}, "/v1/completions", `{"model":"m"}`, 400, "",
			`{"error":{"message":"you must provide a prompt",` + bad + `"prompt","code":400}}`},
		{"messages not a list", Config{}, "/v1/chat/completions", `{"model":"m","messages":"hi"}`, 400, "",
			`{"error":{"message":"messages must be an array",` + bad + `"messages","code":400}}`},
		{"unknown model", Config{}, "/v1/completions", `{"model":"nope","prompt":"x"}`, 404, "",
			`{"error":{"message":"the model \"nope\" does not exist",` + bad + `"model","code":404}}`},
		{"bad vllm_xargs", Config{ReportModeFull: true}, "/v1/completions", `{"model":"m","prompt":"x","vllm_xargs":5}`, 400, "",
			`{"error":{"message":"vllm_xargs must be an object",` + bad + `"vllm_xargs","code":400}}`},
		{"no engine", Config{RetryAfter: 7}, "/v1/completions", `{"model":"m","prompt":"x"}`, 503, "Retry-After: 7",
			`{"error":{"message":"no engine is ready","type":"server_error","param":null,"code":503}}`},
	} {
		c.cfg.Model = "m"
		reg := prometheus.NewRegistry()
		s := New(c.cfg, logr.Discard(), nil, nil, loadsignal.NewTracker(), reg)
		req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
		if c.body == "" {
			req = httptest.NewRequest(http.MethodPost, c.path, iotest.ErrReader(errBoom))
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code != c.status || rec.Body.String() != c.want+"\n" || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %q\nwant %d %q", c.name, rec.Code, rec.Body.String(), c.status, c.want)
		}
		if name, value, ok := strings.Cut(c.header, ": "); ok && rec.Header().Get(name) != value {
			t.Errorf("%s: %s: %q, want %q", c.name, name, rec.Header().Get(name), value)
		}
		var m dto.Metric
		_ = s.metrics.requests.WithLabelValues("", strconv.Itoa(c.status)).Write(&m)
		if n := m.GetCounter().GetValue(); n != 1 {
			t.Errorf("%s: counted %v times", c.name, n)
		}
	}
}

var errBoom = errors.New("boom")
