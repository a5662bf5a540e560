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

package layout

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// nestedModules are the go.mod files besides the root's, and why each is a module of its own.
// The root's `go list ./...` (and with it the import rules above, go vet and staticcheck) does
// not enter a nested module, so a go.mod dropped anywhere else would quietly take its folder out
// of every check here.
var nestedModules = map[string]string{
	"hack/tools":             "pinned code generators (go tool -modfile)",
	"hack/lint":              "pinned staticcheck",
	"hack/promtool":          "pinned promtool, which checks and unit-tests the alerting rules (make test-alerts)",
	"hack/envtest-bins/etcd": "builds etcd for envtest",
	"hack/envtest-bins/k8s":  "builds kube-apiserver for envtest",
	// Keeps llm-d's dependency tree out of kvrouter's go.mod. Its import path is under
	// internal/bench, so it may import the router's packages and belongs to the bench program,
	// which may use anything; nothing in the root module can import it.
	"internal/bench/compare": "side-by-side benchmark against llm-d's kvblock index",
	// Keeps Helm's dependency tree out of kvrouter's go.mod.
	"test/helm": "renders and lints the Helm chart charts/kvrouter with the Helm SDK",
}

func TestNestedModulesAreKnown(t *testing.T) {
	root := repoRoot(t)
	var found []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
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
		if d.Name() != "go.mod" || filepath.Dir(path) == root {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		found = append(found, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(found)
	seen := map[string]bool{}
	for _, dir := range found {
		seen[dir] = true
		if _, ok := nestedModules[dir]; !ok {
			t.Errorf("%s/go.mod: a nested module leaves the layout checks; add it to nestedModules with its reason, or drop it", dir)
		}
	}
	for dir := range nestedModules {
		if !seen[dir] {
			t.Errorf("nestedModules lists %s, which has no go.mod: update the list", dir)
		}
	}
	// A nested module under internal/ must name itself by its folder: Go's internal rule, and
	// group() above, go by the import path, not by where the files lie.
	for dir := range nestedModules {
		if !strings.HasPrefix(dir, "internal/") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, dir, "go.mod"))
		if err != nil {
			continue
		}
		first, _, _ := strings.Cut(string(src), "\n")
		if want := "module " + module + "/" + dir; strings.TrimSpace(first) != want {
			t.Errorf("%s/go.mod starts %q, want %q", dir, first, want)
		}
	}
}
