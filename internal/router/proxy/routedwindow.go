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
	"context"
	"sync"
	"time"
)

// The router's predicted hit rate over the same one-minute window as the engines' measured one,
// so the two can be compared now rather than averaged over the router's whole life.
const (
	routedWindow      = time.Minute
	routedSampleEvery = 5 * time.Second
	routedSamplesKept = int(routedWindow/routedSampleEvery) + 2
)

type routedSample struct {
	at             time.Time
	prompt, cached uint64
}

// routedWindowSamples holds periodic snapshots of the prompt and cached-token counters.
type routedWindowSamples struct {
	mu      sync.Mutex
	samples []routedSample
}

func (w *routedWindowSamples) add(s routedSample) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples = append(w.samples, s)
	if n := len(w.samples); n > routedSamplesKept {
		w.samples = append(w.samples[:0], w.samples[n-routedSamplesKept:]...)
	}
}

// since returns the counters' increase from the oldest snapshot within the window to cur, and
// the span it covers; ok is false before the first snapshot.
func (w *routedWindowSamples) since(cur routedSample) (prompt, cached uint64, span time.Duration, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.samples {
		if cur.at.Sub(s.at) <= routedWindow && s.prompt <= cur.prompt && s.cached <= cur.cached {
			return cur.prompt - s.prompt, cur.cached - s.cached, cur.at.Sub(s.at), true
		}
	}
	return 0, 0, 0, false
}

func (s *Server) routedNow() routedSample {
	return routedSample{at: s.now(), prompt: s.counters.promptTokens.Load(), cached: s.counters.cachedTokens.Load()}
}

// sampleRouted snapshots the routing counters every routedSampleEvery until ctx is done.
func (s *Server) sampleRouted(ctx context.Context) {
	s.routed.add(s.routedNow())
	t := time.NewTicker(routedSampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.routed.add(s.routedNow())
		}
	}
}
