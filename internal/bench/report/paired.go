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

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
)

// Paired compares one policy's runs in two runs of the matrix (a build before a change and one
// after it, say) seed by seed: the simulator is deterministic, so a seed's two runs differ only
// by what changed between the builds, and the ratio of each pair measures the change without
// the spread between seeds, which on several workloads is larger than the change (a TTFT p90
// that differs by up to 75 % between seeds; docs/benchmarks.md, issue 18).
//
// Why beside the verdict: the verdict judges medians over seeds against the lowest of 15 peer
// variants, each a median of its own noisy seeds, so a change neutral on average flips rows both
// ways. Paired ratios say whether the change itself is better or worse, and on how many seeds.
type Paired struct {
	Policy string      `json:"policy"`
	Rows   []PairedRow `json:"rows"`
}

// PairedRow is one workload at one rate: each figure's after/before ratios over the seeds both
// runs have.
type PairedRow struct {
	Workload string      `json:"workload"`
	Rate     float64     `json:"rate"`
	Seeds    int         `json:"seeds"`
	Goodput  PairedRatio `json:"goodput"`
	TTFTP90  PairedRatio `json:"ttft_p90"`
	ITLP90   PairedRatio `json:"itl_p90"`
}

// PairedRatio is the after/before ratios of one figure, seed by seed: their median and range,
// and on how many seeds the after run is better (higher goodput, lower latency) or worse.
// Seeds where the before figure is 0 are left out of the ratios.
type PairedRatio struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Better int     `json:"better"`
	Worse  int     `json:"worse"`
}

// ComparePaired pairs policy's seed runs in before and after by workload, rate and seed. A
// workload, rate or seed only one side has is left out; no pair at all is an error, since it
// means the two runs do not cover the same ground (other seeds, another policy name).
func ComparePaired(before, after []*Report, policy string) (*Paired, error) {
	type key struct {
		w    string
		rate float64
		seed uint64
	}
	index := func(reps []*Report) map[key]metrics.Result {
		out := map[key]metrics.Result{}
		for _, r := range reps {
			for _, s := range r.Runs {
				if s.Policy == policy {
					out[key{r.Workload, s.Rate, s.Seed}] = s.Result
				}
			}
		}
		return out
	}
	b, a := index(before), index(after)
	type rowKey struct {
		w    string
		rate float64
	}
	pairs := map[rowKey][][2]metrics.Result{}
	for k, br := range b {
		if ar, ok := a[k]; ok {
			rk := rowKey{k.w, k.rate}
			pairs[rk] = append(pairs[rk], [2]metrics.Result{br, ar})
		}
	}
	if len(pairs) == 0 {
		return nil, fmt.Errorf("paired: no seed run of %s is in both runs (per-seed runs need -seeds 2 or more)", policy)
	}
	keys := make([]rowKey, 0, len(pairs))
	for k := range pairs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].w != keys[j].w {
			return keys[i].w < keys[j].w
		}
		return keys[i].rate < keys[j].rate
	})
	out := &Paired{Policy: policy}
	for _, k := range keys {
		ps := pairs[k]
		out.Rows = append(out.Rows, PairedRow{Workload: k.w, Rate: k.rate, Seeds: len(ps),
			Goodput: pairedRatio(ps, func(r metrics.Result) float64 { return r.Goodput }, true),
			TTFTP90: pairedRatio(ps, func(r metrics.Result) float64 { return r.TTFTP90 }, false),
			ITLP90:  pairedRatio(ps, func(r metrics.Result) float64 { return r.ITLP90 }, false),
		})
	}
	return out, nil
}

func pairedRatio(ps [][2]metrics.Result, get func(metrics.Result) float64, higherBetter bool) PairedRatio {
	var rs []float64
	var pr PairedRatio
	for _, p := range ps {
		b, a := get(p[0]), get(p[1])
		if b == 0 {
			continue
		}
		r := a / b
		rs = append(rs, r)
		switch {
		case r == 1:
		case (r > 1) == higherBetter:
			pr.Better++
		default:
			pr.Worse++
		}
	}
	st := StatOf(rs)
	pr.Median, pr.Min, pr.Max = st.Median, st.Min, st.Max
	return pr
}

// WritePairedMarkdown writes the comparison as a Markdown table.
func WritePairedMarkdown(w io.Writer, p *Paired) error {
	fmt.Fprintf(w, "%s, after / before, seed by seed: median [min–max], seeds better / worse\n\n", p.Policy)
	fmt.Fprintln(w, "| workload | rate | seeds | goodput | TTFT p90 | ITL p90 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	cell := func(r PairedRatio) string {
		return fmt.Sprintf("%.3f [%.2f–%.2f] +%d/−%d", r.Median, r.Min, r.Max, r.Better, r.Worse)
	}
	for _, r := range p.Rows {
		if _, err := fmt.Fprintf(w, "| %s | %g | %d | %s | %s | %s |\n", r.Workload, r.Rate, r.Seeds,
			cell(r.Goodput), cell(r.TTFTP90), cell(r.ITLP90)); err != nil {
			return err
		}
	}
	return nil
}
