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

// Package grafana holds the Grafana dashboard of a KVRouter; its test checks that every query
// reads metrics that exist.
package grafana

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/exported"
)

const dashboardFile = "kvrouter-dashboard.json"

type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	UID string `json:"uid"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// queries returns every PromQL expression of the dashboard, keyed by where it is.
func (d dashboard) queries() map[string]string {
	out := map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out[p.Title+" "+tg.RefID] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok && v.Type == "query" {
			out["variable "+v.Name], _ = q["query"].(string)
		}
	}
	return out
}

var (
	// A selector: a metric name followed by its label matchers.
	selectorRe = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}`)
	stringRe   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	identRe    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// label_values(metric{...}, label), by (a, b), on (a): label names, not metrics.
	labelListRe = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)|,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)`)
	rangeRe     = regexp.MustCompile(`\[[^\]]*\]`)
)

// promQLKeywords are the words of PromQL that are neither metrics nor label names.
var promQLKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or", "unless"}

// metricNames returns the metric names expr selects. It insists on the dashboard's style, in
// which every metric is a selector with label matchers (the namespace and kvrouter variables),
// so that a bare metric name, which the extraction could not tell from a label, is an error.
func metricNames(expr string) ([]string, []string) {
	var names, problems []string
	for _, m := range selectorRe.FindAllStringSubmatch(expr, -1) {
		names = append(names, m[1])
	}
	rest := selectorRe.ReplaceAllString(expr, " ")
	rest = stringRe.ReplaceAllString(rest, " ")
	rest = rangeRe.ReplaceAllString(rest, " ")
	rest = labelListRe.ReplaceAllString(rest, " ")
	for _, loc := range identRe.FindAllStringIndex(rest, -1) {
		word := rest[loc[0]:loc[1]]
		after := strings.TrimLeft(rest[loc[1]:], " ")
		if strings.HasPrefix(after, "(") || slices.Contains(promQLKeywords, word) {
			continue // a function or a keyword
		}
		problems = append(problems, "bare identifier "+word+" (write metrics as selectors with the namespace and kvrouter matchers)")
	}
	return names, problems
}

// engineMetrics are the names of the metric families vllm-sim serves.
func engineMetrics(t *testing.T) map[string]bool {
	names := map[string]bool{}
	for name := range exported.EngineMetrics(t) {
		names[name] = true
	}
	return names
}

// TestDashboardQueriesUseExistingMetrics extracts every metric name from the dashboard's PromQL
// and requires the router or the (simulated) engines to export it, so that a renamed metric
// cannot leave an empty panel behind.
func TestDashboardQueriesUseExistingMetrics(t *testing.T) {
	known := exported.RouterMetrics(t)
	for name := range engineMetrics(t) {
		known[name] = true
	}
	d := readDashboard(t)
	queries := d.queries()
	if len(queries) < 20 {
		t.Fatalf("found %d queries in %s", len(queries), dashboardFile)
	}
	used := map[string]bool{}
	for where, expr := range queries {
		names, problems := metricNames(expr)
		for _, p := range problems {
			t.Errorf("%s: %s in %s", where, p, expr)
		}
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		for _, n := range names {
			used[n] = true
			if !known[n] && !known[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")] {
				t.Errorf("%s: metric %s is exported by neither the router nor vllm-sim", where, n)
			}
		}
		if !strings.HasPrefix(where, "variable ") {
			for _, m := range selectorRe.FindAllStringSubmatch(expr, -1) {
				if !strings.Contains(m[2], `namespace="$namespace"`) || !strings.Contains(m[2], render.MetricsLabelKVRouter+`="$kvrouter"`) {
					t.Errorf("%s: %s does not select the dashboard's namespace and KVRouter", where, m[0])
				}
			}
		}
	}
	// The panels the dashboard exists for.
	for _, want := range []string{
		"vllm:prefix_cache_hits_total", "kvrouter_routed_cached_prompt_tokens_total", "vllm:time_to_first_token_seconds_bucket",
		"vllm:num_preemptions_total", "kvrouter_routing_decisions_total", "kvrouter_kvstream_event_lag_seconds", "kvrouter_kvstream_gaps_total",
	} {
		if !used[want] {
			t.Errorf("no panel reads %s", want)
		}
	}
}

func TestDashboardIsWellFormed(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" {
		t.Error("no uid: imports would create a new dashboard each time")
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, want := range []string{"datasource", "namespace", "kvrouter"} {
		if !vars[want] {
			t.Errorf("no %s variable", want)
		}
	}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d twice", p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" && (p.Datasource == nil || p.Datasource.UID != "${datasource}") {
				t.Errorf("panel %q does not use the datasource variable", p.Title)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("panel %q: refId %q empty or repeated", p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
}

func TestMetricNames(t *testing.T) {
	names, problems := metricNames(`histogram_quantile(0.9, sum by (le, pod) (rate(a:b_bucket{x="1"}[5m]))) / on (pod) group_left c_total{y=~"a|b"} * 60`)
	if !slices.Equal(names, []string{"a:b_bucket", "c_total"}) || len(problems) > 0 {
		t.Errorf("names %v problems %v", names, problems)
	}
	if _, problems := metricNames(`sum(rate(bare_total[5m]))`); len(problems) != 1 {
		t.Errorf("a bare metric is not reported: %v", problems)
	}
	names, problems = metricNames(`label_values(kvrouter_requests_total{namespace="$namespace"}, kvrouter)`)
	if !slices.Equal(names, []string{"kvrouter_requests_total"}) || len(problems) > 0 {
		t.Errorf("label_values: names %v problems %v", names, problems)
	}
}
