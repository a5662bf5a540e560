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

// Package layout holds the repository's shape: which program each package belongs to, and which
// programs may import which. The folders tell a reader where a behaviour lives only while nobody
// reaches across them, so the rules are checked on the import graph that `go list` reports.
package layout

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/kvrouter/kvrouter"

// group names the program a package belongs to, from its path: the four programs, the packages
// they share, the API types, the test harnesses, and the generators under hack/ (which may use
// anything, as bench/ may: they build or measure the programs rather than ship in them).
func group(pkg string) string {
	rel, ok := strings.CutPrefix(pkg, module+"/")
	if !ok {
		return "external"
	}
	switch {
	case under(rel, "internal/router"), rel == "cmd/router":
		return "router"
	case under(rel, "internal/operator"), rel == "cmd/manager":
		return "operator"
	case under(rel, "internal/sim"), rel == "cmd/vllm-sim":
		return "sim"
	case under(rel, "internal/bench"), rel == "cmd/kvbench":
		return "bench"
	case rel == "internal/apikey", rel == "internal/routerapi", under(rel, "internal/tokenizer"):
		return "shared"
	case under(rel, "api"):
		return "api"
	case under(rel, "test"):
		return "test"
	}
	return "tools"
}

func under(rel, dir string) bool { return rel == dir || strings.HasPrefix(rel, dir+"/") }

// graph maps each package of the build to its direct imports (test files excluded: a router
// package's interop test may start vllm-sim, what ships in the router binary may not).
type graph map[string][]string

// deps is every package reachable from pkg, pkg excluded.
func (g graph) deps(pkg string) map[string]bool {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(p string) {
		for _, d := range g[p] {
			if !seen[d] {
				seen[d] = true
				walk(d)
			}
		}
	}
	walk(pkg)
	return seen
}

// pureCores are the packages that must stay plain Go: they decode, index and decide, and are
// reused by kvbench and by any future caller without a Kubernetes client in tow.
var pureCores = []string{
	"internal/router/admission",
	"internal/router/jsonscan",
	"internal/router/kvevents",
	"internal/router/kvindex",
	"internal/router/policy",
	"internal/router/policyinput",
	"internal/router/queue",
}

// violations lists every broken rule in g, one line each, sorted.
func violations(g graph) []string {
	var out []string
	add := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	for pkg := range g {
		from := group(pkg)
		if from == "external" {
			continue
		}
		for dep := range g.deps(pkg) {
			to := group(dep)
			switch {
			case from == "operator" && to == "router":
				add("%s (operator) imports %s: the operator may read the router only through internal/routerapi", pkg, dep)
			case from == "router" && (to == "sim" || to == "bench" || to == "operator"):
				add("%s (router) imports %s (%s): the router must not ship the simulator, the benchmark or the operator", pkg, dep, to)
			case from == "sim" && (to == "router" || to == "operator"):
				add("%s (simulator) imports %s (%s): the simulator stands in for vLLM and must not know the router", pkg, dep, to)
			case from == "operator" && (to == "sim" || to == "bench"):
				add("%s (operator) imports %s (%s)", pkg, dep, to)
			case (from == "shared" || from == "api") && to != "external" && to != from:
				add("%s (%s) imports %s (%s): the API types and the shared packages must depend on no program", pkg, from, dep, to)
			case from != "test" && from != "tools" && to == "test":
				add("%s (%s) imports %s: test harnesses must not ship in a program", pkg, from, dep)
			}
		}
	}
	for _, core := range pureCores {
		pkg := module + "/" + core
		if _, ok := g[pkg]; !ok {
			add("%s is not in the build: update pureCores", pkg)
			continue
		}
		for dep := range g.deps(pkg) {
			if strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "sigs.k8s.io/") {
				add("%s imports %s: event decoding, the index and the policy stay free of Kubernetes", pkg, dep)
			}
		}
	}
	if cyc := groupCycle(g); cyc != "" {
		add("programs import each other in a cycle: %s", cyc)
	}
	sort.Strings(out)
	return out
}

// groupCycle finds a cycle between program groups (Go already refuses package cycles; this is
// the coarser one that would make two programs inseparable). Empty when there is none.
func groupCycle(g graph) string {
	edges := map[string]map[string]bool{}
	for pkg, imports := range g {
		from := group(pkg)
		for _, dep := range imports {
			to := group(dep)
			if from == to || to == "external" || from == "external" {
				continue
			}
			if edges[from] == nil {
				edges[from] = map[string]bool{}
			}
			edges[from][to] = true
		}
	}
	names := make([]string, 0, len(edges))
	for n := range edges {
		names = append(names, n)
	}
	sort.Strings(names)
	const (
		unvisited = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(string) string
	visit = func(n string) string {
		state[n] = onPath
		path = append(path, n)
		next := make([]string, 0, len(edges[n]))
		for m := range edges[n] {
			next = append(next, m)
		}
		sort.Strings(next)
		for _, m := range next {
			switch state[m] {
			case onPath:
				i := 0
				for path[i] != m {
					i++
				}
				return strings.Join(append(append([]string{}, path[i:]...), m), " -> ")
			case unvisited:
				if c := visit(m); c != "" {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return ""
	}
	for _, n := range names {
		if state[n] == unvisited {
			if c := visit(n); c != "" {
				return c
			}
		}
	}
	return ""
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// loadGraph asks the go command for the import graph of every package in the module and of
// everything they import.
func loadGraph(t *testing.T, root string) graph {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	g := graph{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 {
			g[fields[0]] = fields[1:]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestModuleFollowsTheLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the whole module")
	}
	root := repoRoot(t)
	g := loadGraph(t, root)
	groups := map[string]int{}
	for pkg := range g {
		groups[group(pkg)]++
	}
	for _, want := range []string{"router", "operator", "sim", "bench", "shared"} {
		if groups[want] == 0 {
			t.Errorf("no package found for the %s program: group() no longer matches the tree", want)
		}
	}
	for _, v := range violations(g) {
		t.Error(v)
	}
}

// internal/ is grouped by program; a new top-level entry there is a package that has not said
// which program it belongs to.
func TestInternalHasOneFolderPerProgram(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join(repoRoot(t), "internal"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"router": true, "operator": true, "sim": true, "bench": true, "apikey": true, "routerapi": true, "tokenizer": true}
	for _, e := range entries {
		if !want[e.Name()] {
			t.Errorf("internal/%s: put it under the program that uses it (router, operator, sim, bench), or add it to the shared packages here and to docs/architecture.md", e.Name())
		}
	}
}

// Every Go file carries the licence header of hack/boilerplate.go.txt (after a build constraint,
// where there is one), as controller-gen writes it into generated code.
func TestGoFilesCarryTheLicenceHeader(t *testing.T) {
	root := repoRoot(t)
	header, err := os.ReadFile(filepath.Join(root, "hack", "boilerplate.go.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(string(header))
	checked := 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "out", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		text := string(src)
		for strings.HasPrefix(text, "//go:build") || strings.HasPrefix(text, "// +build") {
			_, text, _ = strings.Cut(text, "\n")
			text = strings.TrimLeft(text, "\n")
		}
		if !strings.HasPrefix(text, want) {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s does not start with the licence header of hack/boilerplate.go.txt", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d Go files found under %s", checked, root)
	}
}

// The rules must be able to fail: each case adds one forbidden edge to a clean graph.
func TestViolationsCatchForbiddenImports(t *testing.T) {
	p := func(rel string) string { return module + "/" + rel }
	clean := graph{
		p("cmd/router"):                     {p("internal/router/proxy")},
		p("internal/router/proxy"):          {p("internal/router/policy"), p("internal/router/admission"), p("internal/routerapi"), p("internal/apikey"), "net/http"},
		p("internal/router/policy"):         {"math"},
		p("internal/router/admission"):      {"time"},
		p("internal/router/policyinput"):    {p("internal/router/kvindex")},
		p("internal/router/kvindex"):        {p("internal/router/kvevents")},
		p("internal/router/kvevents"):       {"encoding/binary"},
		p("internal/router/jsonscan"):       {"fmt"},
		p("internal/router/queue"):          {},
		"fmt":                               {},
		p("cmd/manager"):                    {p("internal/operator/controller")},
		p("internal/operator/controller"):   {p("internal/routerapi"), "sigs.k8s.io/controller-runtime"},
		p("internal/sim/server"):            {p("internal/apikey"), p("internal/sim/engine")},
		p("internal/sim/engine"):            {},
		p("internal/bench/peers"):           {p("internal/router/policy"), p("internal/sim/engine")},
		p("internal/routerapi"):             {"time"},
		p("internal/apikey"):                {"crypto/sha256"},
		p("test/fleettest"):                 {p("internal/routerapi")},
		"sigs.k8s.io/controller-runtime":    {"k8s.io/client-go"},
		"k8s.io/client-go":                  {},
		"net/http":                          {},
		"math":                              {},
		"encoding/binary":                   {},
		"time":                              {},
		"crypto/sha256":                     {},
		p("internal/operator/routerstatus"): {p("internal/routerapi")},
	}
	if v := violations(clean); len(v) != 0 {
		t.Fatalf("the clean graph has violations: %v", v)
	}
	cases := []struct {
		name     string
		from, to string
		want     string
	}{
		{"operator reaches into the router", "internal/operator/routerstatus", "internal/router/proxy", "the operator may read the router only through internal/routerapi"},
		{"router ships the simulator", "internal/router/proxy", "internal/sim/engine", "the router must not ship the simulator"},
		{"router ships the operator", "internal/router/proxy", "internal/operator/controller", "the router must not ship the simulator, the benchmark or the operator"},
		{"router ships kvbench", "internal/router/policy", "internal/bench/peers", "the router must not ship the simulator, the benchmark"},
		{"simulator knows the router", "internal/sim/server", "internal/router/kvevents", "the simulator stands in for vLLM"},
		{"index imports Kubernetes", "internal/router/kvindex", "sigs.k8s.io/controller-runtime", "stay free of Kubernetes"},
		{"policy imports Kubernetes through a dependency", "internal/router/policy", "internal/operator/controller", "stay free of Kubernetes"},
		{"admission control imports Kubernetes", "internal/router/admission", "k8s.io/client-go", "stay free of Kubernetes"},
		{"shared package depends on a program", "internal/routerapi", "internal/router/policy", "must depend on no program"},
		{"API types depend on the operator", "api/v1alpha1", "internal/operator/controller", "must depend on no program"},
		{"a program ships a test harness", "internal/router/proxy", "test/fleettest", "test harnesses must not ship"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := graph{}
			for k, v := range clean {
				g[k] = append([]string(nil), v...)
			}
			from := p(tc.from)
			to := tc.to
			if !strings.Contains(to, ".") {
				to = p(to)
			}
			g[from] = append(g[from], to)
			got := strings.Join(violations(g), "\n")
			if !strings.Contains(got, tc.want) {
				t.Errorf("adding %s -> %s: want a violation saying %q, got:\n%s", tc.from, tc.to, tc.want, got)
			}
		})
	}
}

func TestGroupCycleIsReported(t *testing.T) {
	p := func(rel string) string { return module + "/" + rel }
	g := graph{
		p("internal/bench/peers"):  {p("internal/sim/engine")},
		p("internal/sim/engine"):   {p("internal/bench/report")},
		p("internal/bench/report"): {},
	}
	if c := groupCycle(g); c != "bench -> sim -> bench" {
		t.Fatalf("want the bench/sim cycle, got %q", c)
	}
}
