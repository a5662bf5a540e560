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
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// renderDocs runs `manager render` and decodes what it printed.
func renderDocs(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := runRender(args, &stdout, &stderr); code != 0 {
		t.Fatalf("runRender %v = %d, stderr: %s", args, code, stderr.String())
	}
	var docs []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			break
		}
		if m != nil {
			docs = append(docs, &unstructured.Unstructured{Object: m})
		}
	}
	return docs
}

func kinds(docs []*unstructured.Unstructured) []string {
	var k []string
	for _, d := range docs {
		k = append(k, d.GetKind())
	}
	return k
}

func TestRenderSamples(t *testing.T) {
	base := []string{"ServiceAccount", "Role", "RoleBinding", "NetworkPolicy", "Deployment", "Service", "PodDisruptionBudget"}
	cases := map[string]struct {
		want, absent []string
		namespace    string
	}{
		"serving_v1alpha1_kvrouter.yaml": {want: append(base, "HTTPRoute", "ScaledObject"), namespace: "inference"},
		"kvrouter_simulate.yaml":         {want: base, absent: []string{"HTTPRoute", "ScaledObject", "LeaderWorkerSet"}, namespace: "kvrouter-demo"},
		"kvrouter_multinode.yaml":        {want: append(base, "LeaderWorkerSet", "ScaledObject"), absent: []string{"HTTPRoute"}, namespace: "inference"},
		"kvrouter_minimal.yaml":          {want: base, absent: []string{"HTTPRoute", "ScaledObject", "LeaderWorkerSet"}, namespace: "default"},
		"kvrouter_inferencepool.yaml":    {want: append(base, "InferencePool", "HTTPRoute"), absent: []string{"ScaledObject", "LeaderWorkerSet"}, namespace: "kvrouter-demo"},
		"kvrouter_lora.yaml":             {want: base, absent: []string{"HTTPRoute", "ScaledObject", "LeaderWorkerSet"}, namespace: "kvrouter-demo"},
		"kvrouter_multimodel.yaml":       {want: append(base, "HTTPRoute"), absent: []string{"InferencePool", "ScaledObject", "LeaderWorkerSet"}, namespace: "kvrouter-demo"},
		"kvrouter_disaggregated.yaml":    {want: base, absent: []string{"HTTPRoute", "ScaledObject", "LeaderWorkerSet"}, namespace: "inference"},
	}
	samples, err := filepath.Glob("../../config/samples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range samples {
		name := filepath.Base(path)
		if name == "kustomization.yaml" {
			continue
		}
		tc, ok := cases[name]
		if !ok {
			t.Errorf("sample %s has no test case", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			docs := renderDocs(t, "-f", path)
			got := kinds(docs)
			for _, k := range tc.want {
				if !slices.Contains(got, k) {
					t.Errorf("no %s among %v", k, got)
				}
			}
			for _, k := range tc.absent {
				if slices.Contains(got, k) {
					t.Errorf("unexpected %s among %v", k, got)
				}
			}
			for _, d := range docs {
				if d.GetNamespace() != tc.namespace {
					t.Errorf("%s %s in namespace %q, want %q", d.GetKind(), d.GetName(), d.GetNamespace(), tc.namespace)
				}
				if _, ok := d.Object["status"]; ok {
					t.Errorf("%s %s carries status", d.GetKind(), d.GetName())
				}
				if len(d.GetOwnerReferences()) != 1 {
					t.Errorf("%s %s has ownerReferences %v", d.GetKind(), d.GetName(), d.GetOwnerReferences())
				}
			}
		})
	}
}

func TestRenderImageFlagAndStdin(t *testing.T) {
	f, err := os.Open("../../config/samples/kvrouter_simulate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	saved := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = saved }()

	docs := renderDocs(t, "-f", "-", "--image", "registry.example.com/kvrouter:dev")
	var images []string
	for _, d := range docs {
		if d.GetKind() != "Deployment" {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			images = append(images, c.(map[string]any)["image"].(string))
		}
	}
	// --image (an alias of --kvrouter-image) gives router and vllm-sim pods the same image.
	if len(images) != 2 || images[0] != "registry.example.com/kvrouter:dev" || images[1] != images[0] {
		t.Errorf("images %v", images)
	}
}

func TestRenderRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := map[string]struct {
		args []string
		code int
		want string
	}{
		"no file flag": {nil, 2, "Usage"},
		"missing file": {[]string{"-f", filepath.Join(dir, "nope.yaml")}, 1, "nope.yaml"},
		"wrong kind": {[]string{"-f", write("d.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n")}, 1,
			"document 1 is Deployment"},
		"wrong version": {[]string{"-f", write("v.yaml", "apiVersion: serving.kvrouter.dev/v2\nkind: KVRouter\nmetadata: {name: x}\n")}, 1,
			"want kind KVRouter of apiVersion serving.kvrouter.dev/v1alpha1"},
		"unknown field": {[]string{"-f", write("u.yaml", "apiVersion: serving.kvrouter.dev/v1alpha1\nkind: KVRouter\nmetadata: {name: x}\nspec: {model: {name: m}, engine: {tensorParalelSize: 2}}\n")}, 1,
			"tensorParalelSize"},
		"invalid spec": {[]string{"-f", write("i.yaml", "apiVersion: serving.kvrouter.dev/v1alpha1\nkind: KVRouter\nmetadata: {name: x}\nspec: {model: {name: m}, autoscaling: {minReplicas: 3, maxReplicas: 2}}\n")}, 1,
			"spec.autoscaling.maxReplicas"},
		"empty": {[]string{"-f", write("e.yaml", "# nothing\n---\n")}, 1, "no KVRouter found"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runRender(tc.args, &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("code %d stderr %q, want code %d and %q", code, stderr.String(), tc.code, tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("printed objects on error: %s", stdout.String())
			}
		})
	}
}

func TestRenderMultipleDocuments(t *testing.T) {
	a, _ := os.ReadFile("../../config/samples/kvrouter_minimal.yaml")
	b, _ := os.ReadFile("../../config/samples/kvrouter_simulate.yaml")
	p := filepath.Join(t.TempDir(), "both.yaml")
	if err := os.WriteFile(p, []byte(string(a)+"---\n"+string(b)), 0o644); err != nil {
		t.Fatal(err)
	}
	owners := map[string]bool{}
	for _, d := range renderDocs(t, "-f", p, "--namespace", "ns1") {
		owners[d.GetOwnerReferences()[0].Name+"/"+d.GetNamespace()] = true
	}
	if !owners["qwen3-8b/ns1"] || !owners["qwen3-sim/kvrouter-demo"] || len(owners) != 2 {
		t.Errorf("rendered owners %v", owners)
	}
	// The output is itself valid YAML that round-trips.
	var stdout, stderr bytes.Buffer
	if runRender([]string{"-f", p}, &stdout, &stderr) != 0 {
		t.Fatal(stderr.String())
	}
	for _, doc := range strings.Split(stdout.String(), "---\n")[1:] {
		var m map[string]any
		if err := sigsyaml.UnmarshalStrict([]byte(doc), &m); err != nil {
			t.Errorf("output document does not parse: %v", err)
		}
	}
}
