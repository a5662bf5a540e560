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

package fleettest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/internal/router/kvstream"
	"github.com/kvrouter/kvrouter/internal/sim/server"
)

// getJSON decodes url's JSON answer into v.
func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s %s", url, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Cache reads the engine's GET /sim/cache: the block hashes it holds.
func (e *Engine) Cache(t *testing.T) server.CacheState {
	t.Helper()
	var c server.CacheState
	if err := getJSON(e.URL+"/sim/cache", &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// Faults posts a fault change to the engine's POST /sim/faults (a JSON object, e.g.
// `{"dropNextBatches":50}`).
func (e *Engine) Faults(t *testing.T, body string) {
	t.Helper()
	resp, err := http.Post(e.URL+"/sim/faults", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s /sim/faults %s: %d %s", e.Name, body, resp.StatusCode, b)
	}
}

// IndexDump is the router's GET /debug/kvindex (cmd/router/debug.go).
type IndexDump struct {
	Streams []struct {
		kvstream.SourceStatus
		GPUHashes []uint64 `json:"gpuHashes"`
	} `json:"streams"`
	Sources []struct {
		Endpoint  string `json:"endpoint"`
		Rank      int    `json:"rank"`
		GPUBlocks int    `json:"gpuBlocks"`
	} `json:"sources"`
}

// IndexDump reads the router's index dump from its debug listener.
func (r *Router) IndexDump(t *testing.T) IndexDump {
	t.Helper()
	var d IndexDump
	if err := getJSON(r.DebugURL+"/debug/kvindex", &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// Consistency compares the router's index with one engine's cache.
type Consistency struct {
	Engine string
	// IndexBlocks and EngineBlocks count the GPU blocks each side holds; Extra are blocks the
	// index attributes to the engine that the engine does not hold (stale: wrong routing),
	// Missing blocks the engine holds that the index does not know (missed hits).
	IndexBlocks, EngineBlocks, Extra, Missing int
	// Partial: the router dropped the engine's entries after a gap it could not repair, so it
	// only promises Extra == 0 until the engine's cache turns over.
	Partial bool
	// Settled: the engine was idle with every event published, and the router had applied the
	// last of them.
	Settled bool
}

func (c Consistency) ok() bool { return c.Settled && c.Extra == 0 && (c.Partial || c.Missing == 0) }

func (c Consistency) String() string {
	return fmt.Sprintf("%s: index %d blocks, engine %d, stale in index %d, missing from index %d (partial %v, settled %v)",
		c.Engine, c.IndexBlocks, c.EngineBlocks, c.Extra, c.Missing, c.Partial, c.Settled)
}

func compare(e *Engine, cache server.CacheState, d IndexDump) Consistency {
	c := Consistency{Engine: e.Name, EngineBlocks: len(cache.Hashes)}
	held := make(map[uint64]bool, len(cache.Hashes))
	for _, h := range cache.Hashes {
		held[h] = true
	}
	for _, s := range d.Streams {
		if s.Source.Endpoint != e.Name || s.Source.Rank != 0 {
			continue
		}
		c.IndexBlocks, c.Partial = len(s.GPUHashes), s.Partial
		inIndex := make(map[uint64]bool, len(s.GPUHashes))
		for _, h := range s.GPUHashes {
			inIndex[h] = true
			if !held[h] {
				c.Extra++
			}
		}
		for h := range held {
			if !inIndex[h] {
				c.Missing++
			}
		}
		applied := cache.NextSequence == 0 || (s.Batches > 0 && s.LastSeq == cache.NextSequence-1)
		c.Settled = cache.Settled && applied
		return c
	}
	c.Missing = len(cache.Hashes)
	c.Settled = cache.Settled && cache.NextSequence == 0
	return c
}

// CheckConsistent waits (up to 20 s) for the engines to go idle and the router to apply their
// last event batches, then requires the router's index to agree with every engine's cache:
// every block the index attributes to an engine is held by it, and every block an engine
// holds is in the index, except for an engine whose source is partial (an unrepairable gap
// dropped its entries), where only the first holds. It returns the last comparison.
func CheckConsistent(t *testing.T, r *Router, engines []*Engine) []Consistency {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		d := r.IndexDump(t)
		var out []Consistency
		good := true
		for _, e := range engines {
			c := compare(e, e.Cache(t), d)
			out = append(out, c)
			good = good && c.ok()
		}
		if good {
			return out
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, c := range out {
				b.WriteString("\n  " + c.String())
			}
			t.Fatalf("index not consistent with the engines after %s:%s", waitTimeout, b.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// debugText reads a page of the router's debug listener.
func (r *Router) debugText(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get(r.DebugURL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// GoroutineProfile is the router's goroutines grouped by stack (pprof's debug=1 text).
func (r *Router) GoroutineProfile(t *testing.T) string {
	t.Helper()
	return r.debugText(t, "/debug/pprof/goroutine?debug=1")
}

// Goroutines counts the router's goroutines, and among them those that serve pooled
// connections to the engines (net/http's persistConn read and write loops: two per connection,
// bounded by the pool's idle limit and timeout), which come and go with the load's concurrency
// and are not a leak.
func (r *Router) Goroutines(t *testing.T) (total, pooled int) {
	t.Helper()
	prof := r.GoroutineProfile(t)
	head, rest, _ := strings.Cut(prof, "\n")
	total, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "goroutine profile: total")))
	if err != nil {
		t.Fatalf("goroutine profile header %q: %v", head, err)
	}
	// Groups are "N @ pcs" followed by their stack, separated by blank lines.
	for _, group := range strings.Split(rest, "\n\n") {
		n, _, ok := strings.Cut(strings.TrimSpace(group), " @ ")
		if !ok || !strings.Contains(group, "net/http.(*persistConn)") {
			continue
		}
		c, _ := strconv.Atoi(n)
		pooled += c
	}
	return total, pooled
}

// LiveHeap is the router's heap in use right after a forced garbage collection (the heap
// profile's runtime.MemStats with gc=1): the memory its live objects hold, without the garbage
// a load leaves between collections, which would hide a slow leak in noise.
func (r *Router) LiveHeap(t *testing.T) int64 {
	t.Helper()
	for _, line := range strings.Split(r.debugText(t, "/debug/pprof/heap?gc=1&debug=1"), "\n") {
		if v, ok := strings.CutPrefix(line, "# HeapAlloc = "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("heap profile without HeapAlloc")
	return 0
}

// EngineCounters reads an engine's own /metrics: each named counter summed over its series (a
// missing one fails the test). Hit rates and token counts are judged from these, the engines'
// word, not from what the router believes it placed.
func EngineCounters(t *testing.T, url string, names ...string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s/metrics: %v", url, err)
	}
	out := map[string]float64{}
	for _, n := range names {
		f, ok := families[n]
		if !ok {
			t.Fatalf("%s/metrics has no %s", url, n)
		}
		for _, m := range f.GetMetric() {
			out[n] += m.GetCounter().GetValue()
		}
	}
	return out
}
