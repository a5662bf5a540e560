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
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
)

type recordingSink struct {
	mu      sync.Mutex
	cleared []kvindex.SourceID
}

func (r *recordingSink) Apply(kvindex.SourceID, *kvevents.Batch) kvindex.ApplyStats {
	return kvindex.ApplyStats{}
}

func (r *recordingSink) ClearSource(src kvindex.SourceID) {
	r.mu.Lock()
	r.cleared = append(r.cleared, src)
	r.mu.Unlock()
}

// blockingTransport connects every SUB and never delivers; it records the URLs dialled.
type blockingTransport struct {
	mu   sync.Mutex
	urls []string
}

type blockingSub struct{ ctx context.Context }

func (b blockingSub) Recv() ([][]byte, error) { <-b.ctx.Done(); return nil, b.ctx.Err() }
func (b blockingSub) Close() error            { return nil }

func (t *blockingTransport) Subscribe(ctx context.Context, url, _ string, _ int) (SubSocket, error) {
	t.mu.Lock()
	t.urls = append(t.urls, url)
	t.mu.Unlock()
	return blockingSub{ctx}, nil
}

func (t *blockingTransport) Replay(context.Context, string, uint64, time.Duration) ([]Message, error) {
	return nil, errors.New("no replay here")
}

func TestManagerReconcilesEndpoints(t *testing.T) {
	sink := &recordingSink{}
	tr := &blockingTransport{}
	m := NewManagerWithTransport(sink, Config{}, tr)
	m.SetEndpoints([]Endpoint{
		{Name: "a", EventsURL: "tcp://10.0.0.1:5557", ReplayURL: "tcp://10.0.0.1:5558", DPRanks: 2},
		{Name: "b", EventsURL: "tcp://10.0.0.2:5557"},
		{Name: "", EventsURL: "tcp://ignored:1"},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = m.Start(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := m.Status()
		if len(st) == 3 && st[0].Connected && st[1].Connected && st[2].Connected &&
			st[0].ReplayFailures == 1 && st[1].ReplayFailures == 1 {
			if st[0].Source != (kvindex.SourceID{Endpoint: "a"}) || st[1].Source != (kvindex.SourceID{Endpoint: "a", Rank: 1}) ||
				st[1].EventsURL != "tcp://10.0.0.1:5558" || st[2].Source.Endpoint != "b" {
				t.Fatalf("status %+v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscribers did not connect: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Metrics are exported per source.
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) == 0 {
		t.Fatalf("gather: %v (%d families)", err, len(mfs))
	}
	// The failing catch-up replays cleared sources (and marked them partial); count from here.
	sink.mu.Lock()
	before := len(sink.cleared)
	sink.mu.Unlock()
	if st := m.Status(); !st[0].Partial || st[0].ReplayFailures != 1 || st[2].Partial {
		t.Fatalf("a failed start-up replay must mark a partial, b has no replay endpoint: %+v", st)
	}
	m.SetEndpoints([]Endpoint{{Name: "b", EventsURL: "tcp://10.0.0.2:5557"}})
	if st := m.Status(); len(st) != 1 || st[0].Source.Endpoint != "b" {
		t.Fatalf("after removing a: %+v", st)
	}
	sink.mu.Lock()
	cleared := append([]kvindex.SourceID(nil), sink.cleared[before:]...)
	sink.mu.Unlock()
	if len(cleared) != 2 || cleared[0].Endpoint != "a" || cleared[1].Endpoint != "a" {
		t.Fatalf("cleared %+v, want both ranks of a", cleared)
	}
	cancel()
	<-done
}

func TestRankURLAndFrames(t *testing.T) {
	if u, err := RankURL("tcp://10.0.0.1:5557", 3); err != nil || u != "tcp://10.0.0.1:5560" {
		t.Fatalf("%q %v", u, err)
	}
	if _, err := RankURL("tcp://host-without-port", 1); err == nil {
		t.Fatal("want an error for a URL without port")
	}
	if _, err := ParseFrames([][]byte{{}, {0, 0, 0, 0, 0, 0, 0, 1}}); err == nil {
		t.Fatal("two frames accepted")
	}
	if _, err := ParseFrames([][]byte{{}, {1}, {}}); err == nil {
		t.Fatal("short sequence accepted")
	}
	seq := []byte{0, 0, 0, 0, 0, 0, 0, 5}
	end := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	for _, tc := range []struct {
		frames [][]byte
		seq    uint64
		end    bool
	}{
		{[][]byte{{}, []byte("topic"), seq, []byte("p")}, 5, false}, // current vLLM
		{[][]byte{{}, seq, []byte("p")}, 5, false},                  // older vLLM, SGLang
		{[][]byte{{}, {}, end, {}}, endSeq, true},
		{[][]byte{{}, end, {}}, endSeq, true},
	} {
		m, isEnd, err := parseReplay(tc.frames)
		if err != nil || m.Seq != tc.seq || isEnd != tc.end {
			t.Fatalf("%q: %+v %v %v", tc.frames, m, isEnd, err)
		}
	}
	if _, _, err := parseReplay([][]byte{{}, {1, 2}}); err == nil {
		t.Fatal("bad replay frame accepted")
	}
}
