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

package kvstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/kvstream"
	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/kvevent"
	"github.com/kvrouter/kvrouter/internal/sim/kvpublish"
)

// TestInteropSimulatorPublisher subscribes to vllm-sim's publisher (real sha256_cbor hashes,
// LoRA and cache_salt extra keys, int or bytes hashes, both encodings and both replay reply
// forms): batches withheld from the live stream must be repaired by replay, a publisher reset
// (engine restart) must clear the source, and lookups by request tokens must match.
func TestInteropSimulatorPublisher(t *testing.T) {
	for _, tc := range []struct {
		enc       kvpublish.Encoding
		intHashes bool
		legacy    bool
	}{{kvpublish.Map, true, false}, {kvpublish.Array, false, true}} {
		t.Run(fmt.Sprintf("%v-int%v-legacy%v", tc.enc, tc.intHashes, tc.legacy), func(t *testing.T) {
			const bs = 16
			pub, err := kvpublish.New(kvpublish.Config{Endpoint: "tcp://127.0.0.1:0", ForceBind: true,
				ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv@sim-0@m", BufferSteps: 100, LegacyReplay: tc.legacy,
				Encoder: kvpublish.Encoder{Encoding: tc.enc, IntHashes: tc.intHashes}})
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			seed := "0"
			hasher, err := blockhash.New("sha256_cbor", &seed)
			if err != nil {
				t.Fatal(err)
			}
			store := func(tokens []uint32, lora, salt string) {
				ev := kvevent.Event{Kind: kvevent.BlockStored, BlockSize: bs, LoRAName: lora, Medium: kvevent.MediumGPU,
					Tokens: tokens}
				parent := hasher.NoneHash()
				for i := 0; i+bs <= len(tokens); i += bs {
					extra := blockhash.ExtraKeys(lora, salt, i/bs)
					parent = hasher.Block(parent, tokens[i:i+bs], extra)
					ev.Hashes = append(ev.Hashes, parent)
					ev.ExtraKeys = append(ev.ExtraKeys, extra)
				}
				pub.Publish(kvevent.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: []kvevent.Event{ev}})
			}
			ix := kvindex.New(kvindex.Config{BlockSize: bs})
			m := kvstream.NewManager(ix, kvstream.Config{Logger: testr.New(t)})
			ctx, cancel := context.WithCancel(context.Background())
			stopped := make(chan struct{})
			go func() { _ = m.Start(ctx); close(stopped) }()
			defer func() { cancel(); <-stopped }()
			m.SetEndpoints([]kvstream.Endpoint{{Name: "sim-0", Topic: "kv@",
				EventsURL: "tcp://" + pub.Addr().String(), ReplayURL: "tcp://" + pub.ReplayAddr().String()}})
			waitFor(t, func() bool { st := m.Status(); return len(st) == 1 && st[0].Connected }, "connection")
			time.Sleep(200 * time.Millisecond)

			prompt := make([]uint32, 10*bs)
			for i := range prompt {
				prompt[i] = uint32(1000 + i)
			}
			store(prompt[:4*bs], "", "")
			pub.DropNext(2)
			store(prompt[:6*bs], "ad", "")
			store(prompt[:3*bs], "", "tenant")
			store(prompt[:10*bs], "", "") // re-stores the first 4 blocks: a duplicate, as vLLM can
			look := func(p kvindex.KeyParams) int {
				ms := ix.Lookup(prompt, kvindex.LookupOptions{KeyParams: p})
				if len(ms) == 0 {
					return 0
				}
				return ms[0].AnyBlocks
			}
			waitFor(t, func() bool { return look(kvindex.KeyParams{}) == 10 }, "base prompt indexed")
			if n := look(kvindex.KeyParams{LoRAName: "ad"}); n != 6 {
				t.Fatalf("LoRA prefix: %d blocks, want 6 (replayed batch)", n)
			}
			if n := look(kvindex.KeyParams{CacheSalt: "tenant"}); n != 3 {
				t.Fatalf("salted prefix: %d blocks, want 3 (replayed batch)", n)
			}
			if st := m.Status()[0]; st.Gaps != 1 || st.Replays != 1 || st.ReplayFailures != 0 || st.Batches != 4 {
				t.Fatalf("status %+v", st)
			}
			// The engine restarts: sequence back to 0, empty cache.
			pub.Reset()
			store(prompt[:2*bs], "", "")
			waitFor(t, func() bool { return m.Status()[0].Restarts == 1 && look(kvindex.KeyParams{}) == 2 }, "restart handled")
			if n := look(kvindex.KeyParams{LoRAName: "ad"}); n != 0 {
				t.Fatalf("LoRA blocks survived the restart: %d", n)
			}
		})
	}
}
