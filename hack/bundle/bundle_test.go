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
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/api/pkg/validation"
	interfaces "github.com/operator-framework/api/pkg/validation/interfaces"

	"github.com/kvrouter/kvrouter/hack/internal/gen"
)

const (
	repoRoot        = "../.."
	committedBundle = repoRoot + "/bundle"
)

// The committed bundle is what `make bundle` makes of config/ now, file for file: a change to
// the API, RBAC, manager or samples without `make bundle` fails here (and in `make verify`).
// committed is the committed bundle, loaded once for the tests that only read it.
var committed = func() func(*testing.T) *manifests.Bundle {
	var once sync.Once
	var b *manifests.Bundle
	var err error
	return func(t *testing.T) *manifests.Bundle {
		t.Helper()
		once.Do(func() { b, err = manifests.GetBundleFromDir(committedBundle) })
		if err != nil {
			t.Fatalf("loading %s: %v", committedBundle, err)
		}
		return b
	}
}()

func TestBundleIsCurrent(t *testing.T) {
	want, err := generate(repoRoot+"/config", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range sortedKeys(want) {
		got, err := os.ReadFile(filepath.Join(repoRoot, name))
		if err != nil {
			t.Errorf("%s: %v (run make bundle)", name, err)
			continue
		}
		if !bytes.Equal(got, want[name]) {
			t.Errorf("%s is stale: run make bundle and review the diff", name)
		}
	}
	err = filepath.WalkDir(committedBundle, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if _, ok := want[rel]; !ok {
			t.Errorf("%s is not generated from config/ any more: run make bundle", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Two runs give the same bytes: nothing in the output depends on time or map order.
func TestGenerateIsDeterministic(t *testing.T) {
	a, err := generate(repoRoot+"/config", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := generate(repoRoot+"/config", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) {
		t.Fatalf("the second run wrote %d files, the first %d", len(b), len(a))
	}
	for name := range a {
		if !bytes.Equal(a[name], b[name]) {
			t.Errorf("%s differs between two runs", name)
		}
	}
}

// TestBundleValidates runs the operator-framework validators over the committed bundle: the
// default bundle validators (bundle format, CSV, CRD), OperatorHub v2 with the standard
// capabilities and categories, good practices, objects, OperatorGroups, deprecated APIs for the
// Kubernetes version the project builds against, and the (deprecated) community checks against
// bundle.Dockerfile: operator-sdk's `bundle validate --select-optional suite=operatorframework`
// and more, without the multi-arch validator, which pulls the images with docker. Errors and
// warnings fail alike: the bundle has none.
func TestBundleValidates(t *testing.T) {
	findings, err := validateBundle(committedBundle, repoRoot+"/"+bundleDocker)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		t.Error(f)
	}
}

// The validation above would see a broken bundle: one generated from a config whose manager has
// no resource requests, whose capability level is not one of OLM's and whose CSV lacks
// minKubeVersion.
func TestValidationCatchesBrokenBundles(t *testing.T) {
	cfg := copyConfig(t)
	edit(t, filepath.Join(cfg, "manager", "manager.yaml"), "        resources:\n          requests:\n            cpu: 10m\n            memory: 64Mi\n", "        resources:\n")
	base := filepath.Join(cfg, "manifests", "bases", "kvrouter-operator.clusterserviceversion.yaml")
	edit(t, base, "capabilities: Basic Install", "capabilities: Magic")
	edit(t, base, "  minKubeVersion: 1.30.0\n", "")
	fs, err := generate(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := gen.WriteTree(out, bundleDir, fs); err != nil {
		t.Fatal(err)
	}
	findings, err := validateBundle(filepath.Join(out, bundleDir), filepath.Join(out, bundleDocker))
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(findings, "\n")
	for _, want := range []string{"resource requests for the container: (manager)", "Magic", "minKubeVersion is not informed"} {
		if !strings.Contains(all, want) {
			t.Errorf("no finding mentions %q; findings:\n%s", want, all)
		}
	}
}

// validateBundle runs the validators of TestBundleValidates over the bundle in dir and returns
// every error and warning, each naming its subject.
func validateBundle(dir, dockerfile string) ([]string, error) {
	b, err := manifests.GetBundleFromDir(dir)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", dir, err)
	}
	objs := append(b.ObjectsToValidate(), map[string]string{"k8s-version": "1.36", "index-path": dockerfile})
	var validators interfaces.Validators
	for _, v := range validation.AllValidators {
		if !sameValidator(v, validation.MultipleArchitecturesValidator) {
			validators = append(validators, v)
		}
	}
	if len(validators) != len(validation.AllValidators)-1 {
		return nil, fmt.Errorf("kept %d of %d validators, want all but the multi-arch one", len(validators), len(validation.AllValidators))
	}
	var findings []string
	for _, r := range validators.Validate(objs...) {
		for _, e := range r.Errors {
			findings = append(findings, fmt.Sprintf("%s: error: %s", r.Name, e))
		}
		for _, w := range r.Warnings {
			findings = append(findings, fmt.Sprintf("%s: warning: %s", r.Name, w))
		}
	}
	return findings, nil
}

// sameValidator: validators are funcs, which Go does not compare; their code addresses identify
// them.
func sameValidator(a, b interfaces.Validator) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return va.Kind() == reflect.Func && vb.Kind() == reflect.Func && va.Pointer() == vb.Pointer()
}

// TestScorecardChecksOffline checks what the scorecard's basic and olm suites check on a
// cluster, so that `operator-sdk scorecard` passes: every alm-example has a non-empty spec whose
// fields the CRD schema has and every one of them has a spec descriptor (olm-spec-descriptors
// only looks at the top level; here every field path counts, down to arrays and maps), the CRD
// has status descriptors and lists the resources it creates, and the scorecard config is in the
// bundle.
func TestScorecardChecksOffline(t *testing.T) {
	b := committed(t)
	var examples []map[string]any
	if err := json.Unmarshal([]byte(b.CSV.Annotations["alm-examples"]), &examples); err != nil {
		t.Fatalf("alm-examples: %v", err)
	}
	if len(examples) == 0 {
		t.Fatal("no alm-examples")
	}
	owned := map[string]operatorsv1alpha1.CRDDescription{}
	for _, o := range b.CSV.Spec.CustomResourceDefinitions.Owned {
		owned[o.Kind] = o
		if len(o.Resources) == 0 {
			t.Errorf("owned CRD %s lists no resources (olm-crds-have-resources)", o.Name)
		}
		if len(o.StatusDescriptors) == 0 {
			t.Errorf("owned CRD %s has no status descriptors (olm-status-descriptors)", o.Name)
		}
	}
	for _, ex := range examples {
		kind, _ := ex["kind"].(string)
		crd, ok := owned[kind]
		if !ok {
			t.Errorf("alm-example of kind %q is not an owned CRD", kind)
			continue
		}
		spec, _ := ex["spec"].(map[string]any)
		if len(spec) == 0 {
			t.Errorf("alm-example %v has an empty spec (basic-check-spec)", ex["metadata"])
		}
		described := map[string]bool{}
		for _, d := range crd.SpecDescriptors {
			described[d.Path] = true
		}
		for _, path := range fieldPaths("", spec) {
			if !coveredBy(path, described) {
				t.Errorf("alm-example %v: spec.%s has no spec descriptor", ex["metadata"], path)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(committedBundle, "tests", "scorecard", "config.yaml")); err != nil {
		t.Error(err)
	}
}

// fieldPaths lists the dotted paths of every field of m, objects walked into.
func fieldPaths(prefix string, m map[string]any) []string {
	var out []string
	for k, v := range m {
		out = append(out, prefix+k)
		if child, ok := v.(map[string]any); ok {
			out = append(out, fieldPaths(prefix+k+".", child)...)
		}
	}
	slices.Sort(out)
	return out
}

// coveredBy: path has a descriptor, or lies inside a field that has one and gets no descriptors
// for its insides (an array item, a map entry, resource requirements).
func coveredBy(path string, described map[string]bool) bool {
	for p := path; ; {
		if described[p] {
			return true
		}
		i := strings.LastIndex(p, ".")
		if i < 0 {
			return false
		}
		p = p[:i]
		if described[p] && !hasDescribedChild(p, described) {
			return true
		}
	}
}

func hasDescribedChild(p string, described map[string]bool) bool {
	for d := range described {
		if strings.HasPrefix(d, p+".") {
			return true
		}
	}
	return false
}

// Every resource the manager may create (its RBAC's create verb) is among the owned CRD's
// resources, so the console's list of what a KVRouter owns is complete: a new child kind must
// appear in a sample or in the CSV base.
func TestOwnedResourcesCoverWhatTheManagerCreates(t *testing.T) {
	b := committed(t)
	listed := map[string]bool{}
	for _, o := range b.CSV.Spec.CustomResourceDefinitions.Owned {
		for _, r := range o.Resources {
			listed[pluralOf(r.Kind)] = true
		}
	}
	strategy := b.CSV.Spec.InstallStrategy.StrategySpec
	for _, perm := range slices.Concat(strategy.Permissions, strategy.ClusterPermissions) {
		for _, rule := range perm.Rules {
			if !slices.Contains(rule.Verbs, "create") {
				continue
			}
			for _, res := range rule.Resources {
				if res == "events" || res == "leases" {
					continue // the manager's own records, not a KVRouter's children
				}
				if res == "tokenreviews" || res == "subjectaccessreviews" {
					continue // how the metrics endpoint checks its callers, not a KVRouter's children
				}
				if !listed[res] {
					t.Errorf("the manager may create %s, which the owned CRD's resources do not list: add a sample that makes one or list it in the CSV base", res)
				}
			}
		}
	}
}

// OLM tells the manager its OperatorGroup's namespaces only through the olm.targetNamespaces
// annotation; an install mode narrower than AllNamespaces is honest only if the manager reads it.
func TestInstallModesMatchWhatTheManagerReads(t *testing.T) {
	b := committed(t)
	var all, narrow bool
	for _, m := range b.CSV.Spec.InstallModes {
		if m.Supported && m.Type == operatorsv1alpha1.InstallModeTypeAllNamespaces {
			all = true
		} else if m.Supported {
			narrow = true
		}
	}
	if !all {
		t.Error("AllNamespaces is not supported")
	}
	reads := false
	for _, d := range b.CSV.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if e.Name == "WATCH_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
					e.ValueFrom.FieldRef.FieldPath == "metadata.annotations['olm.targetNamespaces']" {
					reads = true
				}
			}
		}
	}
	if narrow && !reads {
		t.Error("the CSV supports OwnNamespace/SingleNamespace/MultiNamespace but the manager does not read WATCH_NAMESPACE from olm.targetNamespaces")
	}
}
