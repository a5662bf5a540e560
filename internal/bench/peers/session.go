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
	"fmt"
	"hash/fnv"
	"sort"
)

// session follows production-stack's session router (docs/peer-policies.md §4): a consistent hash
// ring over the endpoints keyed by the session id; requests without one go to _qps_routing (the
// endpoint with the fewest requests in the last 60 s window, the first never-used one first).
// The ring uses 160 points per endpoint (ketama-style); the exact point count only changes which
// sessions land where, not the policy's behaviour.
type session struct {
	nop
	now    func() float64
	ring   []ringPoint
	ringOf string // endpoint set the ring was built for
	recent map[string][]float64
}

type ringPoint struct {
	h  uint64
	ep string
}

const qpsWindow = 60.0

func newSession(e Env) Policy { return &session{now: e.Now, recent: map[string][]float64{}} }

func hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return mix(h.Sum64())
}

func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (p *session) build(eps []Endpoint) {
	key := ""
	for _, e := range eps {
		key += e.Name + "\x00"
	}
	if key == p.ringOf {
		return
	}
	p.ringOf = key
	p.ring = p.ring[:0]
	for _, e := range eps {
		for v := range 160 {
			p.ring = append(p.ring, ringPoint{hash64(fmt.Sprintf("%s-%d", e.Name, v)), e.Name})
		}
	}
	sort.Slice(p.ring, func(a, b int) bool { return p.ring[a].h < p.ring[b].h })
}

func (p *session) Pick(r *Request, eps []Endpoint) int {
	if r.Session == "" {
		return p.qps(eps)
	}
	p.build(eps)
	h := hash64(r.Session)
	i := sort.Search(len(p.ring), func(i int) bool { return p.ring[i].h >= h }) % len(p.ring)
	for j, e := range eps {
		if e.Name == p.ring[i].ep {
			return j
		}
	}
	return 0
}

func (p *session) qps(eps []Endpoint) int {
	now := p.now()
	best, bestN := 0, -1
	for i, e := range eps {
		ts, seen := p.recent[e.Name]
		if !seen {
			return i // no request stats yet: production-stack returns it first
		}
		k := 0
		for k < len(ts) && ts[k] < now-qpsWindow {
			k++
		}
		p.recent[e.Name] = ts[k:]
		if n := len(ts) - k; bestN < 0 || n < bestN {
			best, bestN = i, n
		}
	}
	return best
}

func (p *session) Dispatched(_ *Request, ep string) {
	p.recent[ep] = append(p.recent[ep], p.now())
}
