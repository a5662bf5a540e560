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
	"testing"
	"time"
)

func TestRoutedWindow(t *testing.T) {
	var w routedWindowSamples
	t0 := time.Unix(1000, 0)
	if _, _, _, ok := w.since(routedSample{at: t0}); ok {
		t.Fatal("a window before any snapshot")
	}
	// Snapshots every 5 s for 2 minutes; 10 prompt tokens per second, 8 of them cached.
	for i := 0; i <= 24; i++ {
		sec := uint64(i * 5)
		w.add(routedSample{at: t0.Add(time.Duration(sec) * time.Second), prompt: 10 * sec, cached: 8 * sec})
	}
	if len(w.samples) > routedSamplesKept {
		t.Fatalf("%d snapshots kept, want at most %d", len(w.samples), routedSamplesKept)
	}
	now := routedSample{at: t0.Add(122 * time.Second), prompt: 1220, cached: 976}
	prompt, cached, span, ok := w.since(now)
	if !ok || span != 57*time.Second || prompt != 570 || cached != 456 {
		t.Fatalf("since = %d, %d, %s, %v; want the last minute's 570 and 456 over 57s", prompt, cached, span, ok)
	}
	// Counters that went backwards (cannot happen in one process; guards a bad snapshot) are
	// skipped rather than wrapped around.
	if _, _, _, ok := w.since(routedSample{at: now.at, prompt: 1, cached: 1}); ok {
		t.Error("a window from counters larger than the current ones")
	}
}
