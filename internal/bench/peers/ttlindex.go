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

import "github.com/kvrouter/kvrouter/internal/router/kvindex"

// ttlIndex records routing decisions for a short time: the blocks of each request, for the
// endpoint it was sent to, until ttl seconds after the last request that carried them. It is
// Dynamo's predicted-TTL side index (docs/peer-policies.md §2.5) and llm-d's speculative
// indexing (§1.3): both cover the delay before the engine's KV events reach the router, so a
// burst of requests sharing a prefix finds where the first of them went. Keys are the chained
// full-block keys of kvindex.RequestKeys, so holding a key implies its whole prefix was sent.
type ttlIndex struct {
	ttl       float64
	expiry    map[string]map[kvindex.Key]float64
	nextSweep float64
}

func newTTLIndex(ttl float64) *ttlIndex {
	return &ttlIndex{ttl: ttl, expiry: map[string]map[kvindex.Key]float64{}}
}

// record notes at now that ep was sent keys (refreshing the expiry of those already there).
func (x *ttlIndex) record(ep string, keys []kvindex.Key, now float64) {
	x.sweep(now)
	m := x.expiry[ep]
	if m == nil {
		m = map[kvindex.Key]float64{}
		x.expiry[ep] = m
	}
	for _, k := range keys {
		m[k] = now + x.ttl
	}
}

// match returns how many leading keys, from block from on, ep holds unexpired at now, plus from:
// the prefix ep holds when its first from blocks are known resident by other means.
func (x *ttlIndex) match(ep string, keys []kvindex.Key, from int, now float64) int {
	m := x.expiry[ep]
	n := from
	for n < len(keys) && m[keys[n]] > now {
		n++
	}
	return n
}

// sweep drops expired entries once per ttl, so the index holds about two ttl of decisions.
func (x *ttlIndex) sweep(now float64) {
	if now < x.nextSweep {
		return
	}
	x.nextSweep = now + x.ttl
	for ep, m := range x.expiry {
		for k, t := range m {
			if t <= now {
				delete(m, k)
			}
		}
		if len(m) == 0 {
			delete(x.expiry, ep)
		}
	}
}
