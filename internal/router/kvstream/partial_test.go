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

package kvstream

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/kvindex/kvindextest"
)

// oneSource is a toy engine with a replay buffer of replayLen batches, a subscriber to it and
// the index it feeds, with the engine's prompt generator.
func oneSource(seed uint64, replayLen int) (*kvindex.Index, *kvindextest.Engine, *subscriber, func() kvindextest.Request) {
	rnd := rand.New(rand.NewPCG(seed, seed+1))
	const bs = 4
	ix := kvindex.New(kvindex.Config{BlockSize: bs})
	e := kvindextest.NewEngine(rnd, bs, 64, true)
	e.ReplayLen = replayLen
	tr := &engineReplay{engines: map[string]*kvindextest.Engine{"tcp://e": e}}
	cfg := Config{ReplayTimeout: time.Second}
	fillDefaults(&cfg)
	s := newSubscriber(kvindex.SourceID{Endpoint: "e"}, "tcp://e", "tcp://e", "", ix, tr, &cfg, nil)
	return ix, e, s, kvindextest.Prompts(rnd, bs)
}

// A source made partial by a gap replay cannot cover is exact again once the engine clears its
// cache (AllBlocksCleared, vLLM's reset_prefix_cache): the index then holds exactly what
// follows, so the source stops reporting itself degraded.
func TestPartialEndsWithAllBlocksCleared(t *testing.T) {
	ix, e, s, next := oneSource(11, 1)
	src, ctx := s.src, context.Background()
	send := func(ts float64, deliver bool) {
		seq, p, ok := e.Flush(ts)
		if ok && deliver {
			s.handle(ctx, Message{Seq: seq, Payload: p})
		}
	}
	for i := 0; i < 5; i++ {
		e.Serve(next(), false)
		send(float64(i), true)
	}
	// Three batches lost, and the one-batch replay buffer no longer has the first of them.
	for i := 5; i < 8; i++ {
		e.Serve(next(), false)
		send(float64(i), false)
	}
	e.Serve(next(), false)
	send(8, true)
	if st := s.status(time.Now()); !st.Partial || st.ReplayFailures != 1 {
		t.Fatalf("after an unrepairable gap: %+v", st)
	}
	checkSubset(t, ix, src, e)
	e.Clear()
	e.Serve(next(), false)
	send(9, true)
	if st := s.status(time.Now()); st.Partial || st.PartialReason != "" {
		t.Fatalf("after AllBlocksCleared the source is still partial: %+v", st)
	}
	checkEqual(t, ix, src, e)
}

// An engine that restarts while the subscriber is away and publishes a few batches before the
// subscriber is back (nobody was subscribed: they exist only in its replay buffer): the
// reconnect's catch-up sees the restart and must fetch the new process's batches from 0, not
// wait for a live batch that may never come.
func TestCatchUpAfterRestartReplaysTheNewProcess(t *testing.T) {
	ix, e, s, next := oneSource(21, 64)
	src, ctx := s.src, context.Background()
	s.catchUp(ctx)
	for i := 0; i < 30; i++ {
		e.Serve(next(), false)
		if seq, p, ok := e.Flush(float64(i)); ok {
			s.handle(ctx, Message{Seq: seq, Payload: p})
		}
	}
	e.Restart()
	for i := 0; i < 3; i++ {
		e.Serve(next(), false)
		e.Flush(float64(100 + i))
	}
	s.catchUp(ctx)
	if st := s.status(time.Now()); st.Restarts != 1 || st.Partial {
		t.Fatalf("after the reconnect: %+v", st)
	}
	checkEqual(t, ix, src, e)
}
