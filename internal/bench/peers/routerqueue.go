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

package peers

import (
	"math"

	"github.com/kvrouter/kvrouter/internal/router/queue"
)

// gatedQueue is a peer's router-side FIFO in front of its scheduling policy: Dynamo's router
// queue (docs/peer-policies.md §2.5) and llm-d's flow control (§1.0). While the peer's gate says
// the fleet is full, arriving requests wait in the router; when it opens, the oldest is routed by
// the wrapped policy as if it had just arrived, on the state of that moment. Both peers keep
// arrival order across the gate: once something waits, a new arrival queues behind it even if the
// gate is open (Dynamo's "backlog anti-bypass"; llm-d's dispatch cycle serves the queue head
// first), so the harness's next Release call routes it.
type gatedQueue struct {
	Policy
	// full reports that no request may be dispatched now.
	full func(eps []Endpoint) bool
	now  func() float64
	q    *queue.Queue[*Request]
	// cycle > 0 paces releases to one per cycle seconds (llm-d's flow controller runs one
	// dispatch per 1 ms tick on gauges that only change at the next scrape, so a queue drains
	// at that rate rather than in one instant); 0 releases as long as the gate stays open.
	cycle, credit, last float64
	open                bool
	// figures for the run's extras
	prefix          string
	held, shed, max float64
}

// newGatedQueue wraps inner. maxWait > 0 sheds a request that waited longer (a fast 429).
func newGatedQueue(inner Policy, now func() float64, full func([]Endpoint) bool, maxWait, cycle float64, prefix string) *gatedQueue {
	return &gatedQueue{Policy: inner, full: full, now: now, cycle: cycle, prefix: prefix,
		q: queue.New[*Request](queue.Config{Capacity: math.MaxInt, MaxWait: maxWait})}
}

func (g *gatedQueue) Pick(r *Request, eps []Endpoint) int {
	if g.q.Len() == 0 && !g.full(eps) {
		return g.Policy.Pick(r, eps)
	}
	if g.q.Len() == 0 {
		g.open = false
	}
	g.q.Push(r, g.now())
	g.held++
	g.max = max(g.max, float64(g.q.Len()))
	return Hold
}

// Release implements Queuer: first the requests that waited past the bound (shed), then, while
// the gate is open (and the pacing allows), the oldest request, routed now.
func (g *gatedQueue) Release(eps []Endpoint) (*Request, int, bool) {
	now := g.now()
	if r, at, ok := g.q.Head(); ok && g.q.Config().MaxWait > 0 && now-at > g.q.Config().MaxWait {
		g.q.Pop()
		g.shed++
		return r, -1, true
	}
	if g.q.Len() == 0 || g.full(eps) {
		g.open = false
		return nil, 0, false
	}
	if g.cycle > 0 {
		// The first cycle that finds the gate open dispatches at once; later ones follow the tick.
		if g.open {
			g.credit = min(g.credit+(now-g.last)/g.cycle, float64(g.q.Len()))
		} else {
			g.open, g.credit = true, 1
		}
		g.last = now
		if g.credit < 1 {
			return nil, 0, false
		}
		g.credit--
	}
	r, _ := g.q.Pop()
	return r, g.Policy.Pick(r, eps), true
}

func (g *gatedQueue) Queued() int { return g.q.Len() }

// Stats reports how many requests waited in the router queue, the deepest it got, and how many
// it shed (the harness also counts the shed ones as failed).
func (g *gatedQueue) Stats() map[string]float64 {
	return map[string]float64{g.prefix + "_held": g.held, g.prefix + "_max": g.max, g.prefix + "_shed": g.shed}
}

var (
	_ Queuer        = (*gatedQueue)(nil)
	_ StatsReporter = (*gatedQueue)(nil)
)
