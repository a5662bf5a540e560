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

package argocd

import (
	"bytes"
	"encoding/json"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/controller"
)

var update = flag.Bool("update", false, "rewrite config/argocd/argocd-cm-patch.yaml from health.lua")

const (
	dir        = "../../config/argocd"
	scriptFile = dir + "/health.lua"
	testsFile  = dir + "/health_test.yaml"
	patchFile  = dir + "/argocd-cm-patch.yaml"
	// configMapKey is where argocd-cm holds a health check for group serving.kvrouter.dev, kind KVRouter.
	configMapKey = "resource.customizations.health.serving.kvrouter.dev_KVRouter"
)

// The packages whose exported Condition* and Reason* constants are every condition type and
// reason a KVRouter can carry: the reconciler's and the router status poller's.
var vocabularyPackages = []string{"../../internal/operator/controller", "../../internal/operator/routerstatus"}

// healthTests is Argo CD's health_test.yaml format (resource_customizations/<group>/<kind>/).
type healthTests struct {
	Tests []struct {
		HealthStatus HealthStatus `json:"healthStatus"`
		InputPath    string       `json:"inputPath"`
	} `json:"tests"`
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func script(t *testing.T) string { return string(readFile(t, scriptFile)) }

// object decodes a YAML manifest the way Argo CD sees a live object: JSON types.
func object(t *testing.T, path string) map[string]any {
	t.Helper()
	j, err := yaml.YAMLToJSON(readFile(t, path))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var obj map[string]any
	if err := json.Unmarshal(j, &obj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return obj
}

func samples(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "testdata", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no samples in %s/testdata (%v)", dir, err)
	}
	return paths
}

// TestHealthChecks runs every case of health_test.yaml, as Argo CD's own test of a built-in check
// does, and requires every sample to be a case and every outcome to be covered.
func TestHealthChecks(t *testing.T) {
	var tests healthTests
	if err := yaml.UnmarshalStrict(readFile(t, testsFile), &tests); err != nil {
		t.Fatalf("%s: %v", testsFile, err)
	}
	src := script(t)
	used := map[string]bool{}
	outcomes := map[string]bool{}
	for _, tc := range tests.Tests {
		t.Run(strings.TrimSuffix(filepath.Base(tc.InputPath), ".yaml"), func(t *testing.T) {
			path := filepath.Join(dir, tc.InputPath)
			used[filepath.Clean(path)] = true
			outcomes[tc.HealthStatus.Status] = true
			got, err := RunHealth(src, object(t, path))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.HealthStatus {
				t.Errorf("health of %s:\n got  %+v\n want %+v", tc.InputPath, got, tc.HealthStatus)
			}
		})
	}
	for _, p := range samples(t) {
		if !used[filepath.Clean(p)] {
			t.Errorf("%s is not a case in %s", p, testsFile)
		}
	}
	for s := range argoHealthStatuses {
		if !outcomes[s] {
			t.Errorf("no case in %s expects %s", testsFile, s)
		}
	}
}

// TestSamplesAreKVRouters decodes every sample strictly into the API type, so a sample cannot
// carry a field the KVRouter does not have.
func TestSamplesAreKVRouters(t *testing.T) {
	for _, p := range samples(t) {
		var kvr v1alpha1.KVRouter
		if err := yaml.UnmarshalStrict(readFile(t, p), &kvr); err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if kvr.APIVersion != v1alpha1.GroupVersion.String() || kvr.Kind != "KVRouter" || kvr.Generation == 0 {
			t.Errorf("%s: apiVersion %q kind %q generation %d, want a live %s KVRouter", p, kvr.APIVersion, kvr.Kind, kvr.Generation, v1alpha1.GroupVersion)
		}
	}
}

// vocabulary reads the string values of the exported Condition* and Reason* constants of the
// operator's packages from their source: a type or reason added there shows up here without
// anyone listing it.
func vocabulary(t *testing.T) (types, reasons map[string]string) {
	t.Helper()
	types, reasons = map[string]string{}, map[string]string{}
	fset := token.NewFileSet()
	for _, pkg := range vocabularyPackages {
		files, err := filepath.Glob(filepath.Join(pkg, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s (%v)", pkg, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range file.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if i >= len(vs.Values) {
							continue
						}
						lit, ok := vs.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						val, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						where := filepath.Base(pkg) + "." + name.Name
						switch {
						case strings.HasPrefix(name.Name, "Condition"):
							types[val] = where
						case strings.HasPrefix(name.Name, "Reason"):
							reasons[val] = where
						}
					}
				}
			}
		}
	}
	if len(types) == 0 || len(reasons) == 0 {
		t.Fatalf("found %d condition types and %d reasons in %v", len(types), len(reasons), vocabularyPackages)
	}
	return types, reasons
}

// TestSamplesUseOperatorVocabulary keeps the samples, and the names the script compares against,
// to what the operator sets: every condition type and reason in a sample is one the operator
// defines, every one it defines appears in some sample, and every name the script looks for is
// one of them.
func TestSamplesUseOperatorVocabulary(t *testing.T) {
	types, reasons := vocabulary(t)
	seenTypes, seenReasons := map[string]bool{}, map[string]bool{}
	for _, p := range samples(t) {
		var kvr v1alpha1.KVRouter
		if err := yaml.Unmarshal(readFile(t, p), &kvr); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, c := range kvr.Status.Conditions {
			if _, ok := types[c.Type]; !ok {
				t.Errorf("%s: condition type %q is not one the operator sets", p, c.Type)
			}
			if _, ok := reasons[c.Reason]; !ok {
				t.Errorf("%s: condition %s has reason %q, which the operator does not set", p, c.Type, c.Reason)
			}
			seenTypes[c.Type], seenReasons[c.Reason] = true, true
		}
	}
	for v, where := range types {
		if !seenTypes[v] {
			t.Errorf("condition type %q (%s) appears in no sample: add one, and decide what health it means", v, where)
		}
	}
	for v, where := range reasons {
		if !seenReasons[v] {
			t.Errorf("reason %q (%s) appears in no sample: add one, and decide what health it means", v, where)
		}
	}

	src := script(t)
	var named []string
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`find\(conditions, "(\w+)"\)`),
		regexp.MustCompile(`type = "(\w+)"`),
	} {
		for _, m := range re.FindAllStringSubmatch(src, -1) {
			if _, ok := types[m[1]]; !ok {
				t.Errorf("health.lua looks for condition type %q, which the operator does not set", m[1])
			}
			named = append(named, m[1])
		}
	}
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`reason == "(\w+)"`),
		regexp.MustCompile(`(\w+) = true`),
	} {
		for _, m := range re.FindAllStringSubmatch(src, -1) {
			if _, ok := reasons[m[1]]; !ok {
				t.Errorf("health.lua compares with reason %q, which the operator does not set", m[1])
			}
			named = append(named, m[1])
		}
	}
	if len(named) < 5 {
		t.Fatalf("found only %v in health.lua: the patterns above no longer match how it names conditions", named)
	}
}

// TestReadyReasonsMapToHealth takes the healthy sample, gives its Ready condition each reason the
// reconciler sets (by the reconciler's constants, so a renamed reason fails here) and leaves the
// other conditions clear, so the Ready condition alone decides.
func TestReadyReasonsMapToHealth(t *testing.T) {
	src := script(t)
	for reason, want := range map[string]string{
		controller.ReasonServing:         "Healthy",
		controller.ReasonEnginesNotReady: "Progressing",
		controller.ReasonRouterNotReady:  "Progressing",
		controller.ReasonApplyFailed:     "Degraded",
		controller.ReasonInvalidSpec:     "Degraded",
		controller.ReasonCRDNotInstalled: "Degraded",
		controller.ReasonStopped:         "Suspended",
	} {
		obj := object(t, filepath.Join(dir, "testdata", "healthy.yaml"))
		found := false
		for _, c := range obj["status"].(map[string]any)["conditions"].([]any) {
			c := c.(map[string]any)
			if c["type"] == controller.ConditionReady {
				c["reason"], c["message"] = reason, "details"
				if reason != controller.ReasonServing {
					c["status"] = "False"
				}
				found = true
			}
		}
		if !found {
			t.Fatal("healthy.yaml has no Ready condition")
		}
		got, err := RunHealth(src, obj)
		if err != nil {
			t.Fatalf("%s: %v", reason, err)
		}
		if got.Status != want || got.Message != reason+": details" {
			t.Errorf("Ready reason %s: got %+v, want %s with message %q", reason, got, want, reason+": details")
		}
	}
}

// TestHarnessMatchesArgoEnvironment checks the harness itself: the libraries Argo CD leaves closed
// are closed, so a script that uses them fails here rather than in Argo CD.
func TestHarnessMatchesArgoEnvironment(t *testing.T) {
	got, err := RunHealth(`return {status = "Healthy", message = type(string) .. " " .. type(math) .. " " ..
		type(io) .. " " .. type(os) .. " " .. type(table) .. " " .. type(ipairs) .. " " .. obj.metadata.name .. " " .. obj.n}`,
		map[string]any{"metadata": map[string]any{"name": "x"}, "n": float64(3)})
	if err != nil {
		t.Fatal(err)
	}
	if want := "nil nil nil nil table function x 3"; got.Message != want {
		t.Errorf("environment: %q, want %q", got.Message, want)
	}
	if _, err := RunHealth(`return {status = "Healthy", message = string.format("%d", 1)}`, nil); err == nil {
		t.Error("a script calling string.format ran; Argo CD would fail it")
	}
	if _, err := RunHealth(`return {status = "Fine"}`, nil); err == nil {
		t.Error("a status Argo CD does not know was accepted")
	}
	if _, err := RunHealth(`while true do end`, nil); err == nil {
		t.Error("a script that never returns was not stopped")
	}
}

// configMapPatch is argocd-cm-patch.yaml for a given script: a strategic-merge patch (kubectl
// patch, or kustomize patches) that adds the check to argocd-cm.
func configMapPatch(script string) []byte {
	var b bytes.Buffer
	b.WriteString(`# Adds the KVRouter health check to Argo CD. Generated from health.lua by
#   go test ./test/argocd -run TestArgoCMPatch -update
# Apply: kubectl -n argocd patch configmap argocd-cm --patch-file config/argocd/argocd-cm-patch.yaml
# or list it under patches: in the kustomization that installs Argo CD (docs/gitops.md).
apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cm
  namespace: argocd
data:
  ` + configMapKey + `: |
`)
	for _, line := range strings.SplitAfter(script, "\n") {
		if line == "" {
			continue
		}
		if line != "\n" {
			b.WriteString("    ")
		}
		b.WriteString(line)
	}
	return b.Bytes()
}

// TestArgoCMPatch requires the shipped argocd-cm patch to hold exactly health.lua.
func TestArgoCMPatch(t *testing.T) {
	src := script(t)
	want := configMapPatch(src)
	if *update {
		if err := os.WriteFile(patchFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := readFile(t, patchFile)
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run go test ./test/argocd -run TestArgoCMPatch -update", patchFile)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(got, &cm); err != nil {
		t.Fatalf("%s: %v", patchFile, err)
	}
	keys := make([]string, 0, len(cm.Data))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	if cm.Kind != "ConfigMap" || cm.Name != "argocd-cm" || !slices.Equal(keys, []string{configMapKey}) {
		t.Fatalf("%s: %s %s with keys %v, want ConfigMap argocd-cm with only %s", patchFile, cm.Kind, cm.Name, keys, configMapKey)
	}
	if cm.Data[configMapKey] != src {
		t.Errorf("%s does not hold health.lua as it is", patchFile)
	}
}
