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

package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/kvrouter/kvrouter/internal/bench/peers"
	"github.com/kvrouter/kvrouter/internal/bench/report"
)

// runVerdict judges a matrix run: kvrouter against the best variant of each peer family on
// every workload and rate (docs/kvbench.md "The verdict table").
func runVerdict(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("verdict", flag.ContinueOnError)
	var before []string
	fs.Func("before", "an earlier run (directory or report.json; repeatable or comma-separated) shown beside each row", func(s string) error {
		before = append(before, splitList(s)...)
		return nil
	})
	var over []string
	fs.Func("over", "a later run of some policies (directory or report.json; repeatable or comma-separated) whose figures replace those policies' figures in the judged run, workload by workload", func(s string) error {
		over = append(over, splitList(s)...)
		return nil
	})
	asJSON := fs.Bool("json", false, "write the verdict as JSON instead of Markdown")
	o := report.VerdictOptions{Criteria: report.DefaultCriteria()}
	fs.StringVar(&o.KVRouter, "kvrouter", "kvrouter", "the policy judged")
	fs.StringVar(&o.Baseline, "baseline", "round-robin", "the policy of the shared-prefix ratio and the × round-robin column")
	fs.Float64Var(&o.Criteria.GoodputSlack, "goodput-slack", o.Criteria.GoodputSlack, "goodput must be >= (1 - this) × the best peer variant's")
	fs.Float64Var(&o.Criteria.ITLFactor, "itl-factor", o.Criteria.ITLFactor, "ITL p90 must be <= this × the lowest peer variant's")
	fs.Float64Var(&o.Criteria.SharedPrefixTarget, "shared-prefix-target", o.Criteria.SharedPrefixTarget, "shared-prefix output throughput must be >= this × round-robin's")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: kvbench verdict [flags] DIR|report.json...   (DIR: a simulate --out directory, or one workload's)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("verdict: name the run to judge (a simulate --out directory or report.json files)")
	}
	// Reports written before simulate recorded families still resolve through the peers
	// package as it is now.
	o.Family = familyOfPolicy
	reps, err := report.LoadReports(fs.Args())
	if err != nil {
		return err
	}
	if len(over) > 0 {
		later, err := report.LoadReports(over)
		if err != nil {
			return err
		}
		reps = report.Overlay(reps, later)
	}
	var prior []*report.Report
	if len(before) > 0 {
		if prior, err = report.LoadReports(before); err != nil {
			return err
		}
	}
	v, err := report.ComputeVerdict(reps, prior, o)
	if err != nil {
		return err
	}
	return writeJSONOr(w, *asJSON, v, func() error { return report.WriteVerdictMarkdown(w, v) })
}

// writeJSONOr writes v as indented JSON when asJSON is set, and calls markdown otherwise.
func writeJSONOr(w io.Writer, asJSON bool, v any, markdown func() error) error {
	if !asJSON {
		return markdown()
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// runPaired compares one policy's runs in two matrix runs seed by seed (report.ComparePaired).
func runPaired(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("paired", flag.ContinueOnError)
	policy := fs.String("policy", "kvrouter", "the policy compared")
	asJSON := fs.Bool("json", false, "write the comparison as JSON instead of Markdown")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: kvbench paired [flags] BEFORE AFTER   (each a simulate --out directory, one workload's, or a report.json)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return errors.New("paired: name two runs, before and after (simulate --out directories or report.json files)")
	}
	before, err := report.LoadReports(fs.Args()[:1])
	if err != nil {
		return err
	}
	after, err := report.LoadReports(fs.Args()[1:])
	if err != nil {
		return err
	}
	p, err := report.ComparePaired(before, after, *policy)
	if err != nil {
		return err
	}
	return writeJSONOr(w, *asJSON, p, func() error { return report.WritePairedMarkdown(w, p) })
}

// familyOfPolicy is the peer family the peers package gives a policy name ("" when unknown).
func familyOfPolicy(name string) string {
	for _, f := range append(peers.All(), peers.PDAll(peers.Options{})...) {
		if f.Name == name {
			return f.FamilyName()
		}
	}
	return ""
}

// runPolicies lists the policies: with no flag, every one and its source; -families adds each
// one's peer family; -set prints a comma-separated list for a script (hack/bench-matrix.sh).
func runPolicies(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("policies", flag.ContinueOnError)
	fams := fs.Bool("families", false, "list every policy (aggregated and P/D) with its peer family")
	set := fs.String("set", "", "print one comma-separated set: matrix (kvrouter, round-robin and every peer variant, aggregated), "+
		"pd-matrix (kvrouter, round-robin and every P/D policy) or peers (every aggregated peer variant)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	agg, pd := peers.All(), peers.PDAll(peers.Options{})
	isPeer := func(f peers.Factory) bool {
		return report.IsPeer(report.FamilyOf(&report.Report{}, f.Name, func(string) string { return f.FamilyName() }))
	}
	switch {
	case *set != "":
		var names []string
		switch *set {
		case "matrix", "pd-matrix":
			names = []string{"kvrouter", "round-robin"}
		case "peers":
		default:
			return fmt.Errorf("policies: unknown set %q (matrix, pd-matrix, peers)", *set)
		}
		if *set == "pd-matrix" {
			for _, f := range pd {
				names = append(names, f.Name)
			}
		} else {
			for _, f := range agg {
				if isPeer(f) {
					names = append(names, f.Name)
				}
			}
		}
		_, err := fmt.Fprintln(w, strings.Join(names, ","))
		return err
	case *fams:
		for _, f := range append(agg, pd...) {
			role := "peer"
			if !isPeer(f) {
				role = "-"
			}
			fmt.Fprintf(w, "%-24s %-18s %-5s %s\n", f.Name, f.FamilyName(), role, f.Source)
		}
		return nil
	}
	return listPolicies()
}
