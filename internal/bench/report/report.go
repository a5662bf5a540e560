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

// Package report writes kvbench's results: a table on stdout, report.json (the field names the
// project documents), and a self-contained report.html with inline SVG charts (no scripts, no
// external stylesheets: it opens from a file, offline).
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
)

// Report is one workload's results.
type Report struct {
	Workload    string `json:"workload"`
	Description string `json:"description,omitempty"`
	Mode        string `json:"mode"`
	Seed        uint64 `json:"seed"`
	// Seeds lists the seeds each figure is the mean over (absent for one seed).
	Seeds   []uint64    `json:"seeds,omitempty"`
	Command string      `json:"command,omitempty"`
	Fleet   string      `json:"fleet,omitempty"`
	SLO     metrics.SLO `json:"slo"`
	// Rate is the rate of the headline runs in Policies.
	Rate     float64          `json:"rate"`
	Policies []metrics.Result `json:"policies"`
	// Sweep holds every run of the rate sweep (Policies is its slice at Rate).
	Sweep []metrics.Result `json:"sweep,omitempty"`
	// Runs holds each seed's own figures when Seeds has more than one (Sweep holds their
	// means): the verdict's medians and ranges over seeds come from here.
	Runs []SeedRun `json:"runs,omitempty"`
	// Families maps each policy to its peer family (peers.Factory.FamilyName), so that the
	// verdict compares kvrouter with the best variant of each peer without the peers package.
	Families map[string]string `json:"families,omitempty"`
	// Requests holds each run's per-request times (live runs), for the TTFT distribution and
	// the timeline of report.html.
	Requests []RunRequests `json:"requests,omitempty"`
}

// SeedRun is one seed's run of one policy at one rate.
type SeedRun struct {
	Seed uint64 `json:"seed"`
	metrics.Result
}

// SetFamily records policy's peer family.
func (r *Report) SetFamily(policy, family string) {
	if r.Families == nil {
		r.Families = map[string]string{}
	}
	r.Families[policy] = family
}

// SeedNote says which seed(s) the figures come from.
func (r *Report) SeedNote() string {
	if len(r.Seeds) > 1 {
		return fmt.Sprintf("mean over seeds %d–%d", r.Seeds[0], r.Seeds[len(r.Seeds)-1])
	}
	return fmt.Sprintf("seed %d", r.Seed)
}

// WriteTable prints the headline runs as an aligned table.
func WriteTable(w io.Writer, r *Report) error {
	fmt.Fprintf(w, "workload %s (%s, %s, rate %g, SLO TTFT<=%gs ITL<=%gs)\n", r.Workload, r.Mode, r.SeedNote(), r.Rate, r.SLO.TTFT, r.SLO.ITL)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tout tok/s\tgoodput\tTTFT p50\tp90\tp99\tITL p50\tE2E p50\tp99\thit\tpreempt\tCoV\tnew share\tdone\t")
	for _, p := range r.Policies {
		share := "-"
		if p.ScaledUpShare != nil {
			share = fmt.Sprintf("%.2f/%.2f", *p.ScaledUpShare, *p.ScaledUpFairShare)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f%%\t%d\t%.2f\t%s\t%d/%d\t\n",
			p.Policy, p.OutputThroughput, p.Goodput, secs(p.TTFTP50), secs(p.TTFTP90), secs(p.TTFTP99),
			secs(p.ITLP50), secs(p.E2EP50), secs(p.E2EP99), 100*p.HitRate, p.Preemptions, p.ImbalanceCoV, share,
			p.Completed, p.Requests)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writePDTable(w, r)
}

// secs renders seconds compactly: ms below one second.
func secs(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0fms", s*1000)
	}
	return fmt.Sprintf("%.2fs", s)
}

// WriteFiles writes report.json and report.html into dir.
func WriteFiles(dir string, r *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var h strings.Builder
	if err := WriteHTML(&h, r); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.html"), []byte(h.String()), 0o644)
}
