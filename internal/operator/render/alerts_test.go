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

package render_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// TestScopedAlertsDifferOnlyInTheirMatchers: a KVRouter's PrometheusRule and the cluster-wide
// rules of config/prometheus are the same alerts; only which series they read differs, so the
// promtool tests of the cluster-wide file (test/alerts) hold for the rendered ones too.
func TestScopedAlertsDifferOnlyInTheirMatchers(t *testing.T) {
	cluster := render.AlertRules(render.AlertScope{})
	scoped := render.AlertRules(render.AlertScope{Namespace: "llm", KVRouter: "chat"})
	if len(cluster) != len(scoped) {
		t.Fatalf("%d cluster-wide rules, %d scoped", len(cluster), len(scoped))
	}
	for i, c := range cluster {
		s := scoped[i]
		if !strings.Contains(s.Expr, `namespace="llm",kvrouter="chat"`) || strings.Contains(s.Expr, `kvrouter!=""`) {
			t.Errorf("%s: scoped expression does not select the KVRouter:\n%s", s.Alert, s.Expr)
		}
		if got := strings.ReplaceAll(s.Expr, `namespace="llm",kvrouter="chat"`, `kvrouter!=""`); got != c.Expr {
			t.Errorf("%s: the scoped expression differs from the cluster-wide one beyond its matchers:\n%s\n%s", s.Alert, got, c.Expr)
		}
		s.Expr = c.Expr
		if s != c {
			t.Errorf("scoped %+v\ncluster %+v", s, c)
		}
	}
}

func TestAlertRulesAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	names := map[string]bool{}
	for _, r := range render.AlertRules(render.AlertScope{}) {
		id := r.Alert + "/" + r.Severity
		if seen[id] {
			t.Errorf("%s twice: rules of one alert must differ in severity", id)
		}
		seen[id] = true
		names[r.Alert] = true
		if !regexp.MustCompile(`^KVRouter[A-Z][A-Za-z]+$`).MatchString(r.Alert) {
			t.Errorf("alert name %q: want KVRouter followed by CamelCase", r.Alert)
		}
		if r.Severity != render.SeverityCritical && r.Severity != render.SeverityWarning {
			t.Errorf("%s: severity %q", r.Alert, r.Severity)
		}
		if d, err := model.ParseDuration(r.For); err != nil || d <= 0 {
			t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
		}
		if r.Summary == "" || r.Description == "" || strings.HasSuffix(r.Summary, ".") {
			t.Errorf("%s: summary %q (one line, no full stop), description %q", r.Alert, r.Summary, r.Description)
		}
		depth := 0
		for _, c := range r.Expr {
			switch c {
			case '(', '{', '[':
				depth++
			case ')', '}', ']':
				depth--
			}
			if depth < 0 {
				break
			}
		}
		if depth != 0 {
			t.Errorf("%s: unbalanced brackets in\n%s", r.Alert, r.Expr)
		}
	}
	if len(names) < 6 {
		t.Errorf("only %d alerts: %v", len(names), names)
	}
}

// TestRunbooksAreDocumented: every runbook_url leads to a heading of docs/troubleshooting.md
// (GitHub's anchor of a heading is its text in lower case, spaces as hyphens, punctuation
// dropped).
func TestRunbooksAreDocumented(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "..", "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	sc := bufio.NewScanner(f)
	fenced := false
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "```") {
			fenced = !fenced
		}
		if text, ok := strings.CutPrefix(sc.Text(), "#"); ok && !fenced {
			text = strings.TrimSpace(strings.TrimLeft(text, "#"))
			anchors[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(text), ""), " ", "-")] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, r := range render.AlertRules(render.AlertScope{}) {
		base, anchor, ok := strings.Cut(r.Runbook(), "#")
		if !ok || base != render.RunbookBaseURL || !anchors[anchor] {
			t.Errorf("%s: runbook %s has no heading in docs/troubleshooting.md", r.Alert, r.Runbook())
		}
	}
}
