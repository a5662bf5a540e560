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

package report

import "github.com/kvrouter/kvrouter/internal/bench/metrics"

// Overlay returns base with over laid on top: for each workload over has, that report's
// policies replace the same policies' figures (headline, sweep and seed runs) in base's reports
// of the workload, and over's reports are added. It is how a matrix is judged after a change to
// kvrouter alone: the peers' runs of a full matrix stay (the simulator is deterministic, and the
// peers do not change), and only kvrouter is run again. base's reports are copied, not changed.
func Overlay(base, over []*Report) []*Report {
	replaced := map[string]map[string]bool{} // workload -> policies over has
	for _, r := range over {
		m := replaced[r.Workload]
		if m == nil {
			m = map[string]bool{}
			replaced[r.Workload] = m
		}
		for _, list := range [][]metrics.Result{r.Policies, r.Sweep} {
			for _, p := range list {
				m[p.Policy] = true
			}
		}
		for _, s := range r.Runs {
			m[s.Policy] = true
		}
	}
	out := make([]*Report, 0, len(base)+len(over))
	for _, r := range base {
		drop := replaced[r.Workload]
		if drop == nil {
			out = append(out, r)
			continue
		}
		c := *r
		keep := func(list []metrics.Result) []metrics.Result {
			var k []metrics.Result
			for _, p := range list {
				if !drop[p.Policy] {
					k = append(k, p)
				}
			}
			return k
		}
		c.Policies, c.Sweep = keep(r.Policies), keep(r.Sweep)
		c.Runs = nil
		for _, s := range r.Runs {
			if !drop[s.Policy] {
				c.Runs = append(c.Runs, s)
			}
		}
		out = append(out, &c)
	}
	return append(out, over...)
}
