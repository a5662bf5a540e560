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
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/kvindex/kvindextest"
)

// engineReplay serves replays from toy engines' buffers, like vLLM's replay ROUTER.
type engineReplay struct {
	engines map[string]*kvindextest.Engine
	calls   int
}

func (f *engineReplay) Subscribe(context.Context, string, string, int) (SubSocket, error) {
	return nil, fmt.Errorf("not used")
}

func (f *engineReplay) Replay(_ context.Context, url string, from uint64, _ time.Duration) ([]Message, error) {
	f.calls++
	e := f.engines[url]
	var out []Message
	for seq := from; ; seq++ {
		p, ok := e.Buffer[seq]
		if !ok {
			if len(out) == 0 && seq < from+uint64(2*e.ReplayLen) && len(e.Buffer) > 0 {
				continue // the buffer may start later than from: send what it has
			}
			break
		}
		out = append(out, Message{Seq: seq, Payload: p})
	}
	return out, nil
}

// TestExactnessThroughSubscriber drives toy engines' event streams through the subscriber's
// sequence logic into the index, dropping messages, restarting engines (with a reconnect, as a
// restart breaks the TCP connection) and using replay buffers of different lengths. Whenever the
// source is not partial the index must equal the engine's cache; when it is partial (a gap
// replay could not cover), the index must hold a subset of it.
func TestExactnessThroughSubscriber(t *testing.T) {
	for _, tc := range []struct {
		name      string
		replayLen int
		drop      float64
		noReplay  bool
	}{
		{"replay covers every gap", 64, 0.05, false},
		{"short replay buffer", 2, 0.2, false},
		{"no replay endpoint", 64, 0.05, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(3, uint64(tc.replayLen)))
			const bs = 4
			ix := kvindex.New(kvindex.Config{BlockSize: bs})
			tr := &engineReplay{engines: map[string]*kvindextest.Engine{}}
			cfg := Config{ReplayTimeout: time.Second, Now: time.Now}
			var subs []*subscriber
			var engines []*kvindextest.Engine
			for i := 0; i < 3; i++ {
				e := kvindextest.NewEngine(rnd, bs, 50, i%2 == 1)
				e.ReplayLen = tc.replayLen
				e.Rank = i % 2
				url := fmt.Sprint("tcp://e", i)
				tr.engines[url] = e
				replayURL := url
				if tc.noReplay {
					replayURL = ""
				}
				s := newSubscriber(kvindex.SourceID{Endpoint: fmt.Sprint("e", i), Rank: e.Rank}, url, replayURL, "", ix, tr, &cfg, nil)
				fillDefaults(&cfg)
				s.log = cfg.Logger
				subs, engines = append(subs, s), append(engines, e)
			}
			ctx := context.Background()
			next := kvindextest.Prompts(rnd, bs)
			exactChecks, subsetChecks := 0, 0
			check := func(i int) {
				if subs[i].status(time.Now()).Partial {
					subsetChecks++
					checkSubset(t, ix, subs[i].src, engines[i])
				} else {
					exactChecks++
					checkEqual(t, ix, subs[i].src, engines[i])
				}
			}
			for step := 0; step < 2500; step++ {
				i := rnd.IntN(len(engines))
				e, s := engines[i], subs[i]
				switch x := rnd.IntN(100); {
				case x < 2:
					e.Restart()
					s.catchUp(ctx) // the restart broke the connection: the subscriber reconnects
					check(i)
					continue
				case x < 3:
					e.Clear()
				case x < 10:
					e.Offload(3)
				default:
					e.Serve(next(), rnd.IntN(10) == 0)
				}
				seq, p, ok := e.Flush(float64(step))
				if !ok || rnd.Float64() < tc.drop {
					continue // never published, or lost on the way
				}
				s.handle(ctx, Message{Seq: seq, Payload: p})
				// Only the source that just received a message can be checked: another may have
				// lost its latest message, which nobody can notice before the next one.
				check(i)
			}
			var gaps, replays, failures, restarts uint64
			for _, s := range subs {
				st := s.status(time.Now())
				gaps, replays, failures, restarts = gaps+st.Gaps, replays+st.Replays, failures+st.ReplayFailures, restarts+st.Restarts
			}
			t.Logf("exact checks %d, subset checks %d, gaps %d, replays %d, replay failures %d, restarts %d",
				exactChecks, subsetChecks, gaps, replays, failures, restarts)
			if gaps == 0 || (!tc.noReplay && restarts == 0) {
				t.Fatal("the scenario produced no gaps or no detected restarts")
			}
			if tc.name == "replay covers every gap" && (failures != 0 || subsetChecks != 0 || replays < gaps) {
				t.Fatalf("a covered gap was not repaired: gaps %d replays %d failures %d", gaps, replays, failures)
			}
			if tc.name != "replay covers every gap" && failures == 0 {
				t.Fatal("no replay failure in a scenario built to have them")
			}
		})
	}
}

func fillDefaults(cfg *Config) {
	m := NewManagerWithTransport(nil, *cfg, GoZMQ{})
	*cfg = m.cfg
}

func checkEqual(t *testing.T, ix *kvindex.Index, src kvindex.SourceID, e *kvindextest.Engine) {
	t.Helper()
	want, got := e.Content(), ix.SourceBlocks(src)
	if len(got) != len(want) {
		t.Fatalf("%v: index holds %d keys, engine %d", src, len(got), len(want))
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("%v: key %x: index %v, engine %v", src, k, got[k], w)
		}
	}
}

func checkSubset(t *testing.T, ix *kvindex.Index, src kvindex.SourceID, e *kvindextest.Engine) {
	t.Helper()
	want := e.Content()
	for k, g := range ix.SourceBlocks(src) {
		w := want[k]
		for m := range g {
			if g[m] && !w[m] {
				t.Fatalf("%v: index claims key %x on medium %d, engine does not hold it", src, k, m)
			}
		}
	}
}
