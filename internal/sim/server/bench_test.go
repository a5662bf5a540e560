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
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/engine"
	"github.com/kvrouter/kvrouter/internal/sim/kvpublish"
	"github.com/kvrouter/kvrouter/internal/sim/timing"
)

// BenchmarkHTTPWithEvents measures what one process sustains end to end: engines behind real HTTP
// servers, each publishing KV events over ZMQ to a subscriber, with simulated time running so fast
// (time scale 1e6) that the host CPU is the only limit. Requests have ~600-token prompts (a shared
// system prompt plus a unique question) and 32 output tokens; clients round-robin over the engines.
func BenchmarkHTTPWithEvents(b *testing.B) {
	for _, engines := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("engines=%d", engines), func(b *testing.B) { benchHTTP(b, engines) })
	}
}

func benchHTTP(b *testing.B, n int) {
	seed := "0"
	var urls []string
	var received atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < n; i++ {
		pub, err := kvpublish.New(kvpublish.Config{Endpoint: "tcp://127.0.0.1:0", ForceBind: true, Topic: "kv@bench",
			Encoder: kvpublish.Encoder{Encoding: kvpublish.Map, IntHashes: true}})
		if err != nil {
			b.Fatal(err)
		}
		defer pub.Close()
		sub := zmq4.NewSub(ctx)
		defer sub.Close()
		if err := sub.Dial("tcp://" + pub.Addr().String()); err != nil {
			b.Fatal(err)
		}
		sub.SetOption(zmq4.OptionSubscribe, "")
		go func() {
			for {
				if _, err := sub.Recv(); err != nil {
					return
				}
				received.Add(1)
			}
		}()
		eng, err := engine.New(engine.Config{Profile: timing.ForModel("llama-8b", 1), HashAlgo: blockhash.SHA256CBOR,
			HashSeed: &seed, EmitEvents: true, MaxModelLen: 8192, NumBlocks: 20000})
		if err != nil {
			b.Fatal(err)
		}
		srv := New(eng, Options{ServedModelNames: []string{"m"}, TimeScale: 1e6, PrefixCaching: true, HashAlgo: blockhash.SHA256CBOR, Publisher: pub})
		go srv.Run(ctx)
		hs := httptest.NewServer(srv.Handler())
		defer hs.Close()
		urls = append(urls, hs.URL)
	}
	time.Sleep(100 * time.Millisecond) // let subscriptions reach the publishers
	system := strings.Repeat("You are a helpful assistant for a bank. Answer briefly and politely. ", 40)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	var next atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			body := fmt.Sprintf(`{"messages":[{"role":"system","content":"%s"},{"role":"user","content":"question number %d"}],"max_tokens":32}`, system, i)
			resp, err := client.Post(urls[int(i)%len(urls)]+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	elapsed := time.Since(start).Seconds()
	time.Sleep(50 * time.Millisecond)
	b.ReportMetric(float64(b.N)/elapsed, "req/s")
	b.ReportMetric(float64(received.Load())/elapsed, "batches/s")
}
