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
	"text/tabwriter"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
)

// hasPD reports whether the headline runs were on a disaggregated fleet (the simulator then
// adds the P/D figures to every run, aggregated policies included).
func hasPD(r *Report) bool {
	for _, p := range r.Policies {
		if _, ok := p.Extra["pd_split_share"]; ok {
			return true
		}
	}
	return false
}

// pdCells renders one run's P/D figures: split share, mean and p90 KV transfer, mean prefill
// leg, ITL p90 and p99, prefill legs that fell back to whole requests.
func pdCells(p metrics.Result) []string {
	ms := func(k string) string {
		v, ok := p.Extra[k]
		if !ok {
			return "-"
		}
		return fmt.Sprintf("%.1fms", v)
	}
	return []string{p.Policy, fmt.Sprintf("%.0f%%", 100*p.Extra["pd_split_share"]), ms("pd_transfer_ms_mean"), ms("pd_transfer_ms_p90"),
		ms("pd_prefill_leg_ms_mean"), ms("itl_p90_ms"), ms("itl_p99_ms"), fmt.Sprintf("%.0f", p.Extra["pd_prefill_fallbacks"])}
}

var pdHeader = []string{"policy", "split", "transfer mean", "transfer p90", "prefill leg mean", "ITL p90", "ITL p99", "fallbacks"}

// writePDTable writes the P/D figures of the headline runs as text columns.
func writePDTable(w io.Writer, r *Report) error {
	if !hasPD(r) {
		return nil
	}
	fmt.Fprintln(w, "disaggregated prefill/decode:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, h := range pdHeader {
		fmt.Fprintf(tw, "%s\t", h)
	}
	fmt.Fprintln(tw)
	for _, p := range r.Policies {
		for _, c := range pdCells(p) {
			fmt.Fprintf(tw, "%s\t", c)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// writePDMarkdown writes the same figures as a Markdown table.
func writePDMarkdown(w io.Writer, r *Report) {
	if !hasPD(r) {
		return
	}
	fmt.Fprint(w, "\nDisaggregated prefill/decode:\n\n|")
	for _, h := range pdHeader {
		fmt.Fprintf(w, " %s |", h)
	}
	fmt.Fprint(w, "\n|---|")
	for range pdHeader[1:] {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, p := range r.Policies {
		fmt.Fprint(w, "|")
		for _, c := range pdCells(p) {
			fmt.Fprintf(w, " %s |", c)
		}
		fmt.Fprintln(w)
	}
}
