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

package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/kvstream"
)

// quietTransport connects every SUB and never delivers; its replays answer at once with
// nothing, or hang until the replay's context ends.
type quietTransport struct{ hang bool }

type quietSub struct{ ctx context.Context }

func (q quietSub) Recv() ([][]byte, error) { <-q.ctx.Done(); return nil, q.ctx.Err() }
func (q quietSub) Close() error            { return nil }

func (q quietTransport) Subscribe(ctx context.Context, _, _ string, _ int) (kvstream.SubSocket, error) {
	return quietSub{ctx}, nil
}

func (q quietTransport) Replay(ctx context.Context, _ string, _ uint64, _ time.Duration) ([]kvstream.Message, error) {
	if q.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, nil
}

// The gate holds /ready until the start-up replay has ended, and at most for its timeout, after
// which it opens for good and says so in kvrouter_ready_replay_timed_out.
func TestReplayGate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hang     bool
		timedOut float64
	}{{"replayed", false, 0}, {"timed out", true, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			m := kvstream.NewManagerWithTransport(kvindex.New(kvindex.Config{BlockSize: 16}),
				kvstream.Config{ReplayTimeout: time.Minute}, quietTransport{hang: tc.hang})
			g := newReplayGate(m, 300*time.Millisecond, logr.Discard(), prometheus.NewRegistry())
			if ok, why := g.ready(); ok || !strings.Contains(why, "waiting for the endpoints") {
				t.Fatalf("before any endpoint: %v %q", ok, why)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stopped := make(chan struct{})
			go func() { _ = m.Start(ctx); close(stopped) }()
			defer func() { cancel(); <-stopped }()
			m.SetEndpoints([]kvstream.Endpoint{{Name: "e0", EventsURL: "tcp://e0:5557", ReplayURL: "tcp://e0:5558"}})
			if tc.hang {
				time.Sleep(50 * time.Millisecond)
				if ok, why := g.ready(); ok || !strings.Contains(why, "1 source(s) not finished (e0/0)") {
					t.Fatalf("while replaying: %v %q", ok, why)
				}
			}
			g.run(ctx)
			if ok, _ := g.ready(); !ok {
				t.Fatal("the gate is still closed after run")
			}
			var mv dto.Metric
			if err := g.timedOut.Write(&mv); err != nil || mv.GetGauge().GetValue() != tc.timedOut {
				v := mv.GetGauge().GetValue()
				t.Fatalf("kvrouter_ready_replay_timed_out %v (%v), want %v", v, err, tc.timedOut)
			}
			// Endpoints added later do not close it again.
			m.SetEndpoints([]kvstream.Endpoint{{Name: "e1", EventsURL: "tcp://e1:5557", ReplayURL: "tcp://e1:5558"}})
			if ok, _ := g.ready(); !ok {
				t.Fatal("a new endpoint closed the gate")
			}
		})
	}
}

func TestKVEventsFlags(t *testing.T) {
	o, err := parseFlags([]string{"--endpoints-file", "x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.kvMaxFrameBytes != kvstream.DefaultMaxFrameBytes || o.readyReplayTimeout != 20*time.Second {
		t.Fatalf("defaults: %d %v", o.kvMaxFrameBytes, o.readyReplayTimeout)
	}
	for _, v := range []string{"0", "-1", "2000000000000"} {
		if _, err := parseFlags([]string{"--endpoints-file", "x", "--kv-events-max-frame-bytes", v}, io.Discard); err == nil {
			t.Errorf("--kv-events-max-frame-bytes %s accepted", v)
		}
	}
}
