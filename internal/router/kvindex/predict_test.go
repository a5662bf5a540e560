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

package kvindex

import (
	"math/rand/v2"
	"testing"
)

// The flat prediction table behaves like a map of (key, source) → expiry under random adds (short
// and held lifetimes), settles, confirmations (removals), expiry sweeps and source drops. Keys
// are drawn from a small range with colliding low bits, so probe runs are long, hold several
// sources per key, and wrap around the table's end: the cases backward-shift deletion must get
// right.
func TestPredictionTableMatchesMap(t *testing.T) {
	type pk struct {
		k   Key
		sid uint16
	}
	rnd := rand.New(rand.NewPCG(7, 8))
	var p predictions
	model := map[pk]int64{}
	const ttl, limit = 100, 3000
	now := int64(1000)
	key := func() Key {
		// Low bits from a few values (collisions), high bits varied: many keys share a home.
		return Key(uint64(rnd.IntN(8))<<40 | uint64(rnd.IntN(4))*1024 + uint64(rnd.IntN(3)) + 1020)
	}
	for step := 0; step < 3000; step++ {
		switch op := rnd.IntN(10); {
		case op < 5:
			sid := uint16(rnd.IntN(5))
			keys := make([]Key, 1+rnd.IntN(20))
			for i := range keys {
				keys[i] = key()
			}
			if now >= p.nextSweep || p.n+len(keys) > limit {
				for x, exp := range model {
					if exp <= now {
						delete(model, x)
					}
				}
			}
			life := int64(ttl)
			if rnd.IntN(3) == 0 {
				life = 10 * ttl // held until settled
			}
			p.add(sid, keys, now, life, ttl, limit)
			for _, k := range keys {
				if exp, ok := model[pk{k, sid}]; ok {
					model[pk{k, sid}] = max(exp, now+life)
				} else if len(model) < limit {
					model[pk{k, sid}] = now + life
				}
			}
		case op < 6:
			sid := uint16(rnd.IntN(5))
			keys := make([]Key, 1+rnd.IntN(20))
			for i := range keys {
				keys[i] = key()
			}
			p.settle(sid, keys, now+ttl)
			for _, k := range keys {
				if exp, ok := model[pk{k, sid}]; ok {
					model[pk{k, sid}] = min(exp, now+ttl)
				}
			}
		case op < 8:
			k, sid := key(), uint16(rnd.IntN(5))
			p.remove(sid, k)
			delete(model, pk{k, sid})
		case op < 9:
			now += int64(rnd.IntN(40))
		default:
			if rnd.IntN(10) == 0 {
				sid := uint16(rnd.IntN(5))
				p.dropSource(sid)
				for x := range model {
					if x.sid == sid {
						delete(model, x)
					}
				}
			}
		}
		if p.n != len(model) {
			t.Fatalf("step %d: %d predictions, model %d", step, p.n, len(model))
		}
		for x, exp := range model {
			ws := []uint64{0}
			p.bits(x.k, now, ws)
			if got, want := ws[0]&(1<<x.sid) != 0, exp > now; got != want {
				t.Fatalf("step %d: key %x source %d: predicted %v, want %v", step, x.k, x.sid, got, want)
			}
		}
	}
}
