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
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

// copyConfig copies the repository's config/ into a temporary directory for a test to edit.
func copyConfig(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "config")
	if err := os.CopyFS(dst, os.DirFS(repoRoot+"/config")); err != nil {
		t.Fatal(err)
	}
	return dst
}

// edit replaces the one occurrence of old in the file at path.
func edit(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), old); n != 1 {
		t.Fatalf("%s holds %q %d times, want once", path, old, n)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func csvOf(t *testing.T, fs files) *operatorsv1alpha1.ClusterServiceVersion {
	t.Helper()
	var csv operatorsv1alpha1.ClusterServiceVersion
	if err := yaml.UnmarshalStrict(fs[filepath.Join(bundleDir, "manifests", "kvrouter-operator.clusterserviceversion.yaml")], &csv); err != nil {
		t.Fatal(err)
	}
	return &csv
}

const csvBase = "manifests/bases/kvrouter-operator.clusterserviceversion.yaml"

// The images reach the CSV from config/manager: the manager's own as containerImage, the
// RELATED_IMAGE_* variables (vLLM's among them) as relatedImages, after kustomize's `images`
// (including the digest form a release uses).
func TestImagesFollowConfigManager(t *testing.T) {
	cfg := copyConfig(t)
	edit(t, filepath.Join(cfg, "manager", "kustomization.yaml"), "- name: router\n  newName: ghcr.io/kvrouter/router\n  newTag: v0.1.0\n",
		"- name: router\n  newName: registry.example.com/router\n  digest: sha256:0123456789012345678901234567890123456789012345678901234567890123\n")
	edit(t, filepath.Join(cfg, "manager", "kustomization.yaml"), "- name: vllm\n  newName: vllm/vllm-openai\n  newTag: v0.26.0\n",
		"- name: vllm\n  newName: mirror.example.com/vllm/vllm-openai\n  digest: sha256:4567456745674567456745674567456745674567456745674567456745674567\n")
	fs, err := generate(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	csv := csvOf(t, fs)
	want := []operatorsv1alpha1.RelatedImage{
		{Name: "engine", Image: "mirror.example.com/vllm/vllm-openai@sha256:4567456745674567456745674567456745674567456745674567456745674567"},
		{Name: "manager", Image: "ghcr.io/kvrouter/manager:v0.1.0"},
		{Name: "router", Image: "registry.example.com/router@sha256:0123456789012345678901234567890123456789012345678901234567890123"},
		{Name: "simulator", Image: "ghcr.io/kvrouter/vllm-sim:v0.1.0"},
	}
	if !slices.Equal(csv.Spec.RelatedImages, want) {
		t.Errorf("relatedImages = %v, want %v", csv.Spec.RelatedImages, want)
	}
	if got := csv.Annotations["containerImage"]; got != "ghcr.io/kvrouter/manager:v0.1.0" {
		t.Errorf("containerImage = %q", got)
	}
}

// disconnected: "true" needs every related image pinned by digest; the generator refuses the
// claim otherwise instead of writing it.
func TestDisconnectedNeedsDigests(t *testing.T) {
	cfg := copyConfig(t)
	edit(t, filepath.Join(cfg, csvBase), `features.operators.openshift.io/disconnected: "false"`, `features.operators.openshift.io/disconnected: "true"`)
	_, err := generate(cfg, "")
	if err == nil || !strings.Contains(err.Error(), "not a digest") {
		t.Fatalf("err = %v, want the tag-pinned image named", err)
	}
}

// withRelease adds a release entry to the top of config/manifests/releases.yaml in cfg.
func withRelease(t *testing.T, cfg, entry string) {
	t.Helper()
	edit(t, filepath.Join(cfg, "manifests", releasesFile), "releases:\n", "releases:\n"+entry)
}

func TestVersionFlag(t *testing.T) {
	cfg := copyConfig(t)
	withRelease(t, cfg, "- {version: 0.2.0, createdAt: \"2027-03-04T05:06:07Z\"}\n")
	fs, err := generate(cfg, "v0.2.0")
	if err != nil {
		t.Fatal(err)
	}
	csv := csvOf(t, fs)
	if csv.Name != "kvrouter-operator.v0.2.0" || csv.Spec.Version.String() != "0.2.0" {
		t.Errorf("name %s version %s", csv.Name, csv.Spec.Version.String())
	}
	if _, err := generate(cfg, "two"); err == nil {
		t.Error("a version that is not semver was accepted")
	}
	// A release the file does not list has no creation date nor upgrade edge: refused.
	if _, err := generate(cfg, "0.3.0"); err == nil || !strings.Contains(err.Error(), "lists no release 0.3.0") {
		t.Errorf("err = %v, want the missing release named", err)
	}
}

// createdAt and the upgrade edge come from releases.yaml: the release's date, the previous
// release as spec.replaces (none for the first), its skipRange as olm.skipRange; the bundle
// image's OCI labels carry the same version and date.
func TestReleaseMetadata(t *testing.T) {
	first := csvOf(t, mustGenerate(t, repoRoot+"/config", ""))
	if first.Annotations["createdAt"] == "" || first.Spec.Replaces != "" || first.Annotations["olm.skipRange"] != "" {
		t.Errorf("first release: createdAt %q replaces %q skipRange %q, want a date and no edge",
			first.Annotations["createdAt"], first.Spec.Replaces, first.Annotations["olm.skipRange"])
	}

	cfg := copyConfig(t)
	withRelease(t, cfg, "- {version: 0.3.0, createdAt: \"2027-06-01T00:00:00Z\", skipRange: \">=0.1.0 <0.3.0\"}\n"+
		"- {version: 0.2.0, createdAt: \"2027-03-04T05:06:07Z\"}\n")
	for _, tc := range []struct{ version, createdAt, replaces, skipRange string }{
		{"0.3.0", "2027-06-01T00:00:00Z", "kvrouter-operator.v0.2.0", ">=0.1.0 <0.3.0"},
		{"0.2.0", "2027-03-04T05:06:07Z", "kvrouter-operator.v0.1.0", ""},
	} {
		fs := mustGenerate(t, cfg, tc.version)
		csv := csvOf(t, fs)
		if csv.Annotations["createdAt"] != tc.createdAt || csv.Spec.Replaces != tc.replaces || csv.Annotations["olm.skipRange"] != tc.skipRange {
			t.Errorf("%s: createdAt %q replaces %q skipRange %q, want %q %q %q", tc.version, csv.Annotations["createdAt"],
				csv.Spec.Replaces, csv.Annotations["olm.skipRange"], tc.createdAt, tc.replaces, tc.skipRange)
		}
		docker := string(fs[bundleDocker])
		for _, label := range []string{
			`org.opencontainers.image.version="` + tc.version + `"`,
			`org.opencontainers.image.created="` + tc.createdAt + `"`,
			`org.opencontainers.image.licenses="Apache-2.0"`,
			`org.opencontainers.image.source="https://github.com/kvrouter/kvrouter"`,
			"org.opencontainers.image.revision=$REVISION",
		} {
			if !strings.Contains(docker, "LABEL "+label+"\n") {
				t.Errorf("%s: bundle.Dockerfile lacks LABEL %s:\n%s", tc.version, label, docker)
			}
		}
	}
}

func mustGenerate(t *testing.T, cfg, version string) files {
	t.Helper()
	fs, err := generate(cfg, version)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// Inputs the generator cannot turn into a correct bundle are refused with what to fix.
func TestGenerateRefusesBadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		file, old, new, want string
	}{
		"unknown field in the base":              {csvBase, "  maturity: alpha\n", "  maturity: alpha\n  matruity: beta\n", "matruity"},
		"descriptor for a field the CRD lacks":   {csvBase, "      - path: model.servedName\n", "      - path: model.servedNam\n", `"model.servedNam"`},
		"descriptor inside a whole-object field": {csvBase, "      - path: router.policy\n", "      - path: router.resources.limits\n        displayName: Limits\n      - path: router.policy\n", "router.resources.limits"},
		"default channel outside the channels":   {"manifests/package.yaml", "defaultChannel: candidate", "defaultChannel: stable", "defaultChannel"},
		"release listed twice":                   {"manifests/" + releasesFile, "releases:\n", "releases:\n- {version: 0.1.0, createdAt: \"2026-12-01T00:00:00Z\"}\n", "newest first"},
		"releases oldest first":                  {"manifests/" + releasesFile, "releases:\n", "releases:\n- {version: 0.0.9, createdAt: \"2026-11-01T00:00:00Z\"}\n", "newest first"},
		"createdAt not in UTC":                   {"manifests/" + releasesFile, `"2026-12-01T00:00:00Z"`, `"2026-12-01T01:00:00+01:00"`, "createdAt"},
		"createdAt not a time":                   {"manifests/" + releasesFile, `"2026-12-01T00:00:00Z"`, `"last Tuesday"`, "createdAt"},
		"skipRange not a range":                  {"manifests/" + releasesFile, `createdAt: "2026-12-01T00:00:00Z"`, `createdAt: "2026-12-01T00:00:00Z"` + "\n  skipRange: soon", "skipRange"},
		"release without a version":              {"manifests/" + releasesFile, "- version: 0.1.0\n", "- version: \"\"\n", "version"},
		"owned CRD without display name":         {csvBase, "      displayName: KV Router\n", "", "displayName"},
		"sample with an unknown field":           {"samples/kvrouter_minimal.yaml", "    name: Qwen/Qwen3-8B", "    name: Qwen/Qwen3-8B\n    nmae: x", "nmae"},
		"binding of the operator and someone else": {"rbac/role_binding.yaml", "  namespace: kvrouter-system\n",
			"  namespace: kvrouter-system\n- kind: User\n  name: alice\n  apiGroup: rbac.authorization.k8s.io\n", "other subjects"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := copyConfig(t)
			edit(t, filepath.Join(cfg, tc.file), tc.old, tc.new)
			_, err := generate(cfg, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func schema(t *testing.T, y string) *apiextensionsv1.JSONSchemaProps {
	t.Helper()
	var s apiextensionsv1.JSONSchemaProps
	if err := yaml.Unmarshal([]byte(y), &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// A field nobody described still gets a descriptor, with an x-descriptor for its type; the base
// orders the fields it names first and its x-descriptors replace the derived ones; arrays, maps
// and whole objects are not walked into.
func TestDeriveDescriptors(t *testing.T) {
	s := schema(t, `
type: object
properties:
  zeta: {type: boolean, description: "Zeta toggles.\n\nMore detail."}
  alpha:
    type: object
    description: Alpha groups.
    properties:
      policy: {type: string, enum: [A, B]}
      count: {type: integer}
      gpuURL: {type: string}
  items: {type: array, items: {type: object, properties: {x: {type: string}}}}
  labels: {type: object, additionalProperties: {type: string}}
  res:
    type: object
    properties:
      limits: {type: object, additionalProperties: {type: string}}
  size: {x-kubernetes-int-or-string: true, anyOf: [{type: integer}, {type: string}]}
`)
	base := []descriptor{
		{Path: "zeta", DisplayName: "Zeta Switch"},
		{Path: "res", XDescriptors: []string{"urn:alm:descriptor:com.tectonic.ui:resourceRequirements"}},
		{Path: "alpha.count", XDescriptors: []string{"urn:alm:descriptor:com.tectonic.ui:podCount"}},
	}
	got, err := deriveDescriptors(s, base, true)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(got, "", " ")
	var paths []string
	for _, d := range got {
		paths = append(paths, d.Path)
	}
	wantPaths := []string{"zeta", "res", "alpha", "alpha.count", "alpha.gpuURL", "alpha.policy", "items", "labels", "size"}
	if !slices.Equal(paths, wantPaths) {
		t.Fatalf("paths %v, want %v", paths, wantPaths)
	}
	byPath := map[string]descriptor{}
	for _, d := range got {
		byPath[d.Path] = d
	}
	for path, want := range map[string]descriptor{
		"zeta":         {DisplayName: "Zeta Switch", Description: "Zeta toggles.", XDescriptors: []string{xBooleanSwitch}},
		"alpha.count":  {DisplayName: "Count", XDescriptors: []string{"urn:alm:descriptor:com.tectonic.ui:podCount"}},
		"alpha.gpuURL": {DisplayName: "GPU URL", XDescriptors: []string{xText}},
		"alpha.policy": {DisplayName: "Policy", XDescriptors: []string{xSelectPrefix + "A", xSelectPrefix + "B"}},
		"alpha":        {DisplayName: "Alpha", Description: "Alpha groups."},
		"size":         {DisplayName: "Size", XDescriptors: []string{xText}},
	} {
		d := byPath[path]
		if d.DisplayName != want.DisplayName || d.Description != want.Description || !slices.Equal(d.XDescriptors, want.XDescriptors) {
			t.Errorf("%s = %+v, want %+v\n%s", path, d, want, b)
		}
	}
	status, err := deriveDescriptors(s, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range status {
		if len(d.XDescriptors) != 0 {
			t.Errorf("status descriptor %s got type x-descriptors %v; the spec form widgets do not apply", d.Path, d.XDescriptors)
		}
	}
	if _, err := deriveDescriptors(s, []descriptor{{Path: "zeta"}, {Path: "zeta"}}, true); err == nil {
		t.Error("a path listed twice in the base was accepted")
	}
}

func TestDisplayName(t *testing.T) {
	for in, want := range map[string]string{
		"tensorParallelSize": "Tensor Parallel Size", "cachePVC": "Cache PVC", "hfTokenSecret": "HF Token Secret",
		"url": "URL", "gpu": "GPU", "perNode": "Per Node", "eventsHealthy": "Events Healthy", "kvUsage": "KV Usage",
	} {
		if got := displayName(in); got != want {
			t.Errorf("displayName(%q) = %q, want %q", in, got, want)
		}
	}
}

// A ClusterRole granted cluster-wide is split by scope: namespaced rules become permissions, the
// rest stay cluster-wide; a rule over two groups of different scope is split per group; a
// resource of unknown scope is an error rather than a guess.
func TestSplitRulesByScope(t *testing.T) {
	crds := map[string]bool{"serving.kvrouter.dev/kvrouters": true, "a.example.dev/things": true, "b.example.dev/things": false}
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get"}},
		{APIGroups: []string{"serving.kvrouter.dev"}, Resources: []string{"kvrouters/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"a.example.dev", "b.example.dev"}, Resources: []string{"things"}, Verbs: []string{"list"}},
		{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
	}
	ns, cl, err := splitRulesByScope(rules, crds)
	if err != nil {
		t.Fatal(err)
	}
	resources := func(rs []rbacv1.PolicyRule) []string {
		var out []string
		for _, r := range rs {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					out = append(out, g+"/"+res+":"+strings.Join(r.Verbs, ","))
				}
			}
			for _, u := range r.NonResourceURLs {
				out = append(out, u+":"+strings.Join(r.Verbs, ","))
			}
		}
		return out
	}
	if got, want := resources(ns), []string{"/pods:get", "serving.kvrouter.dev/kvrouters/status:patch", "a.example.dev/things:list"}; !slices.Equal(got, want) {
		t.Errorf("namespaced %v, want %v", got, want)
	}
	if got, want := resources(cl), []string{"/nodes:get", "b.example.dev/things:list", "/metrics:get"}; !slices.Equal(got, want) {
		t.Errorf("cluster %v, want %v", got, want)
	}
	unknown := []rbacv1.PolicyRule{{APIGroups: []string{"example.dev"}, Resources: []string{"widgets"}, Verbs: []string{"get"}}}
	if _, _, err := splitRulesByScope(unknown, crds); err == nil || !strings.Contains(err.Error(), "widgets") {
		t.Errorf("a resource of unknown scope: err = %v", err)
	}
}

// What the CSV installs from config/: the manager Deployment; its RBAC as permissions (OLM scopes
// them to the OperatorGroup's namespaces), except the TokenReview and SubjectAccessReview creates
// of the metrics endpoint, which are cluster-scoped; the leader-election Role with it. The
// aggregated editor and viewer ClusterRoles, the metrics-reader ClusterRole for scrapers and the
// metrics Service are bundle files without a namespace; the Namespace, the ServiceAccount and the
// bindings are OLM's to create.
func TestInstallStrategyFromConfig(t *testing.T) {
	fs, err := generate(repoRoot+"/config", "")
	if err != nil {
		t.Fatal(err)
	}
	csv := csvOf(t, fs)
	st := csv.Spec.InstallStrategy.StrategySpec
	if len(st.DeploymentSpecs) != 1 || st.DeploymentSpecs[0].Name != "kvrouter-manager" {
		t.Fatalf("deployments %v", st.DeploymentSpecs)
	}
	wantCluster := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	if len(st.ClusterPermissions) != 1 || st.ClusterPermissions[0].ServiceAccountName != "kvrouter-manager" ||
		!equality.Semantic.DeepEqual(st.ClusterPermissions[0].Rules, wantCluster) {
		t.Errorf("clusterPermissions %v, want the metrics endpoint's reviews only: %v", st.ClusterPermissions, wantCluster)
	}
	if len(st.Permissions) != 1 || st.Permissions[0].ServiceAccountName != "kvrouter-manager" {
		t.Fatalf("permissions %v", st.Permissions)
	}
	var granted []string
	for _, r := range st.Permissions[0].Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				granted = append(granted, g+"/"+res)
			}
		}
	}
	for _, want := range []string{"coordination.k8s.io/leases", "serving.kvrouter.dev/kvrouters", "serving.kvrouter.dev/kvrouters/status", "apps/deployments"} {
		if !slices.Contains(granted, want) {
			t.Errorf("permissions lack %s: %v", want, granted)
		}
	}
	var manifests []string
	for name, b := range fs {
		if dir, file := filepath.Split(name); dir == filepath.Join(bundleDir, "manifests")+"/" {
			manifests = append(manifests, file)
			if strings.Contains(string(b), "\n  namespace: ") {
				t.Errorf("%s carries a namespace; OLM installs into the OperatorGroup's", file)
			}
		}
	}
	slices.Sort(manifests)
	want := []string{
		"kvrouter-editor_rbac.authorization.k8s.io_v1_clusterrole.yaml",
		"kvrouter-manager-metrics_v1_service.yaml",
		"kvrouter-metrics-reader_rbac.authorization.k8s.io_v1_clusterrole.yaml",
		"kvrouter-operator.clusterserviceversion.yaml",
		"kvrouter-viewer_rbac.authorization.k8s.io_v1_clusterrole.yaml",
		"serving.kvrouter.dev_kvrouters.yaml",
	}
	if !slices.Equal(manifests, want) {
		t.Errorf("manifests %v, want %v", manifests, want)
	}
}
