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

package scheduler

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/kvcache"
)

func newSched(t *testing.T, blocks int, cfg Config) (*Scheduler, *kvcache.Cache) {
	t.Helper()
	h, _ := blockhash.New(blockhash.SHA256CBOR, new(string))
	c := kvcache.New(blocks, 4, true)
	s, err := New(cfg, c, h)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func prompt(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func tok(*Request) uint32 { return 7 }

func TestMaxModelLenEndsRequest(t *testing.T) {
	s, c := newSched(t, 16, Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 64, MaxModelLen: 10})
	r := &Request{ID: "r", Prompt: prompt(1, 8), MaxTokens: 100}
	if err := s.Add(r); err != nil {
		t.Fatal(err)
	}
	var done []*Request
	for i := 0; i < 10 && len(done) == 0; i++ {
		done = s.Complete(s.Schedule(), tok)
	}
	if len(done) != 1 || len(r.Output) != 2 || r.Status != Finished || c.NumFree() != 16 {
		t.Fatalf("output %d status %v free %d", len(r.Output), r.Status, c.NumFree())
	}
}

func TestAbortFreesBlocksAndSkipsResults(t *testing.T) {
	s, c := newSched(t, 16, Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 64, MaxModelLen: 100})
	a := &Request{ID: "a", Prompt: prompt(1, 9), MaxTokens: 5}
	b := &Request{ID: "b", Prompt: prompt(100, 9), MaxTokens: 5}
	s.Add(a)
	s.Add(b)
	out := s.Schedule()
	if len(out.Scheduled) != 2 || c.NumFree() != 16-6 {
		t.Fatalf("scheduled %d, free %d", len(out.Scheduled), c.NumFree())
	}
	if !s.Abort("a") || s.Abort("a") || c.NumFree() != 16-3 {
		t.Fatalf("abort: free %d", c.NumFree())
	}
	s.Complete(out, tok)
	if len(a.Output) != 0 || len(b.Output) != 1 {
		t.Fatal("an aborted request must not receive tokens")
	}
	if s.NumRunning() != 1 || s.NumWaiting() != 0 || !s.HasWork() {
		t.Fatal("queues")
	}
}

func TestWaitingRequestsQueueBehindMaxNumSeqs(t *testing.T) {
	s, _ := newSched(t, 64, Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 1000, MaxModelLen: 100})
	for i := range 3 {
		s.Add(&Request{ID: string(rune('a' + i)), Prompt: prompt(i*100, 8), MaxTokens: 3})
	}
	out := s.Schedule()
	if len(out.Scheduled) != 2 || s.NumWaiting() != 1 || out.PrefixQueries != 16 {
		t.Fatalf("scheduled %d waiting %d queries %d", len(out.Scheduled), s.NumWaiting(), out.PrefixQueries)
	}
}

func TestNewRejectsBadLimits(t *testing.T) {
	h, _ := blockhash.New(blockhash.SHA256CBOR, new(string))
	if _, err := New(Config{}, kvcache.New(1, 1, false), h); err == nil {
		t.Fatal("zero limits accepted")
	}
}
