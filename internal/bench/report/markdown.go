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

import (
	"fmt"
	"io"
	"sort"
)

// WriteMarkdown writes the headline runs as a Markdown table (for docs/benchmarks.md), followed
// by the rate sweep of the named policies when the report has more than one rate.
func WriteMarkdown(w io.Writer, r *Report, sweepPolicies []string) error {
	fmt.Fprintf(w, "**%s** — %s  \n", r.Workload, r.Description)
	fmt.Fprintf(w, "%s, %s, headline rate %g, SLO TTFT ≤ %g s and ITL ≤ %g s.\n\n", r.Fleet, r.SeedNote(), r.Rate, r.SLO.TTFT, r.SLO.ITL)
	fmt.Fprintln(w, "| policy | out tok/s | goodput tok/s | TTFT p50 | TTFT p90 | TTFT p99 | ITL p50 | E2E p50 | E2E p99 | hit | preempt | CoV | new-replica share |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range r.Policies {
		share := "–"
		if p.ScaledUpShare != nil {
			share = fmt.Sprintf("%.2f (fair %.2f)", *p.ScaledUpShare, *p.ScaledUpFairShare)
		}
		name := p.Policy
		if len(name) >= 8 && name[:8] == "kvrouter" {
			name = "**" + name + "**"
		}
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %.1f%% | %d | %.2f | %s |\n",
			name, p.OutputThroughput, p.Goodput, secs(p.TTFTP50), secs(p.TTFTP90), secs(p.TTFTP99), secs(p.ITLP50),
			secs(p.E2EP50), secs(p.E2EP99), 100*p.HitRate, p.Preemptions, p.ImbalanceCoV, share)
	}
	writePDMarkdown(w, r)
	rates := map[float64]bool{}
	for _, s := range r.Sweep {
		rates[s.Rate] = true
	}
	if len(rates) < 2 || len(sweepPolicies) == 0 {
		fmt.Fprintln(w)
		return nil
	}
	var rs []float64
	for k := range rates {
		rs = append(rs, k)
	}
	sort.Float64s(rs)
	fmt.Fprintf(w, "\nRate sweep, output tok/s (TTFT p90):\n\n| policy |")
	for _, x := range rs {
		fmt.Fprintf(w, " %g |", x)
	}
	fmt.Fprint(w, "\n|---|")
	for range rs {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, name := range sweepPolicies {
		fmt.Fprintf(w, "| %s |", name)
		for _, x := range rs {
			cell := "–"
			for _, s := range r.Sweep {
				if s.Policy == name && s.Rate == x {
					cell = fmt.Sprintf("%.0f (%s)", s.OutputThroughput, secs(s.TTFTP90))
				}
			}
			fmt.Fprintf(w, " %s |", cell)
		}
		fmt.Fprintln(w)
	}
	_, err := fmt.Fprintln(w)
	return err
}
