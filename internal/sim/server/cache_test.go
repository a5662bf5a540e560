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
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/sim/engine"
	"github.com/kvrouter/kvrouter/internal/sim/kvpublish"
)

func getCache(t *testing.T, url string) CacheState {
	t.Helper()
	resp, err := http.Get(url + "/sim/cache")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c CacheState
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	return c
}

// GET /sim/cache lists the cached blocks' hashes (one per full prompt block here), settles once
// the engine is idle with its events published, and empties on a restart, with the event
// sequence back at 0.
func TestCacheStateFollowsTheCache(t *testing.T) {
	var pub *kvpublish.Publisher
	f := start(t, func(c *engine.Config, o *Options) {
		c.EmitEvents = true
		p, err := kvpublish.New(kvpublish.Config{Endpoint: "tcp://127.0.0.1:0", ForceBind: true, Topic: "t"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		o.Publisher, pub = p, p
	})
	if c := getCache(t, f.url); len(c.Hashes) != 0 || !c.Settled || c.NextSequence != 0 {
		t.Fatalf("fresh engine: %+v", c)
	}
	// 40 prompt ids: 2 full blocks of 16 (the partial third is never cached).
	if status, body := post(t, f.url+"/v1/completions", `{"prompt":[`+ids(40)+`],"max_tokens":2}`); status != 200 {
		t.Fatalf("%d %v", status, body)
	}
	var c CacheState
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c = getCache(t, f.url); c.Settled && c.NextSequence == pub.Stats().NextSequence && c.NextSequence > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cache never settled: %+v", c)
		}
	}
	if len(c.Hashes) < 2 || c.Running != 0 {
		t.Fatalf("after one request: %+v", c)
	}
	if status, _ := post(t, f.url+"/sim/faults", `{"restart":true}`); status != 200 {
		t.Fatal(status)
	}
	if c := getCache(t, f.url); len(c.Hashes) != 0 || c.NextSequence != 0 {
		t.Fatalf("after a restart: %+v", c)
	}
}

// The failing-tokenizer fault fails /tokenize with an OpenAI error, and only /tokenize.
func TestTokenizeFailFault(t *testing.T) {
	f := start(t, nil)
	if status, _ := post(t, f.url+"/sim/faults", `{"tokenizeFailFraction":1}`); status != 200 {
		t.Fatal(status)
	}
	if status, body := post(t, f.url+"/tokenize", `{"prompt":"x"}`); status != 500 || body["error"] == nil {
		t.Fatalf("%d %v", status, body)
	}
	if status, _ := post(t, f.url+"/v1/completions", `{"prompt":"x","max_tokens":1}`); status != 200 {
		t.Fatal(status)
	}
	if status, _ := post(t, f.url+"/sim/faults", `{"tokenizeFailFraction":2}`); status != 400 {
		t.Fatal("a fraction above 1 must be refused")
	}
	if status, _ := post(t, f.url+"/sim/faults", `{"replayDown":true}`); status != 400 {
		t.Fatal("replayDown without a publisher must be refused")
	}
}

func ids(n int) string {
	b := make([]byte, 0, 4*n)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, byte('1'+i%9))
	}
	return string(b)
}
