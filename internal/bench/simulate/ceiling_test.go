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

package simulate

import (
	"math"
	"testing"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
	"github.com/kvrouter/kvrouter/internal/bench/workload"
)

func seq(from, to uint32) []uint32 {
	var out []uint32
	for t := from; t <= to; t++ {
		out = append(out, t)
	}
	return out
}

func TestCacheCeilingFollowsTheEnginesBlockRules(t *testing.T) {
	c := newCacheCeiling(4, 8)
	a := seq(1, 10) // two full blocks and a partial one
	steps := []struct {
		name    string
		prompt  []uint32
		adapter string
		want    int
	}{
		{"first sight computes everything", a, "", 0},
		{"the same prompt again: both full blocks", a, "", 8},
		{"a prompt of exactly two blocks: not the block holding its last token", seq(1, 8), "", 4},
		{"a prompt that diverges in its second block", append(seq(1, 4), 99, 98, 97, 96, 95), "", 4},
		{"the same tokens under an adapter are another cache", a, "x", 0},
	}
	for i, s := range steps {
		c.arrive(i, s.prompt, s.adapter)
		if c.hits[i] != s.want {
			t.Errorf("%s: %d tokens held, want %d", s.name, c.hits[i], s.want)
		}
	}
	// A follow-up resends the answer: its blocks are held once the turn has finished, all but
	// the one holding the answer's last token (sampled, never computed).
	out := seq(11, 16)
	next := append(append(append([]uint32(nil), a...), out...), 20, 21) // 18 tokens, 4 full blocks
	for _, finished := range []bool{false, true} {
		f := newCacheCeiling(4, 2)
		f.arrive(0, a, "")
		if finished {
			f.finish(a, out, "")
		}
		f.arrive(1, next, "")
		if want := map[bool]int{false: 8, true: 12}[finished]; f.hits[1] != want {
			t.Errorf("follow-up, answer cached %v: %d tokens held, want %d", finished, f.hits[1], want)
		}
	}
	prompt := func(i int) int { return []int{10, 10, 8, 9, 10, 0, 0, 0}[i] }
	done := func(i int) bool { return i == 1 || i == 2 || i == 7 }
	if got, want := c.rate(prompt, done), 12.0/18; got != want {
		t.Fatalf("rate over the completed requests %v, want %v", got, want)
	}
}

// The ceiling is a property of the requests, not of the routing: every policy sees the same one,
// and none serves more of its prompts from cache than it allows.
func TestCacheCeilingBoundsEveryPolicy(t *testing.T) {
	s := tinySpec()
	var ceiling float64
	for i, name := range []string{"round-robin", "kvrouter", "oracle"} {
		res := run(t, s, name)
		got := res.Extra["hit_rate_ceiling"]
		if i == 0 {
			ceiling = got
		}
		if got != ceiling || got <= 0 {
			t.Fatalf("%s: ceiling %v, want %v (the same for every policy) and above 0", name, got, ceiling)
		}
		if res.HitRate > ceiling+1e-9 {
			t.Fatalf("%s: hit rate %v above the ceiling %v", name, res.HitRate, ceiling)
		}
		t.Logf("%s: hit rate %.3f of a ceiling %.3f, preemptions %d", name, res.HitRate, ceiling, res.Preemptions)
	}
}

// One engine whose cache never evicts is the ceiling's own model: it must hit exactly the
// ceiling, conversations included (whose later turns resend the answers the engine cached).
func TestCacheCeilingIsWhatOneUnlimitedEngineHits(t *testing.T) {
	s := tinySpec()
	s.Fleet.Engines, s.Fleet.NumBlocks = 1, 100000
	shared := run(t, s, "round-robin")
	s.Kind, s.SharedPrefix = workload.KindMultiTurn, nil
	s.MultiTurn = &workload.Sessions{SystemPrompts: 2, SystemTokens: 256, Turns: 4, FirstTokens: 64, NewTokens: 32, OutputTokens: 16, ThinkSeconds: 0.2}
	chat := run(t, s, "round-robin")
	for name, res := range map[string]metrics.Result{"shared-prefix": shared, "multi-turn": chat} {
		if c := res.Extra["hit_rate_ceiling"]; math.Abs(res.HitRate-c) > 1e-9 || res.Preemptions > 0 {
			t.Errorf("%s on one unlimited engine: hit rate %v, ceiling %v, preemptions %d; want the hit rate at the ceiling",
				name, res.HitRate, c, res.Preemptions)
		}
	}
}
