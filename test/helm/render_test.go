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

package helm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"
)

const releaseName = "kvr"

// object is one rendered or built manifest.
type object = map[string]any

// repoRoot is the root of the kvrouter repository, two levels above this module.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "config", "default", "kustomization.yaml")); err != nil {
		t.Fatalf("not the repository root: %v", err)
	}
	return root
}

func chartDir(t *testing.T) string { return filepath.Join(repoRoot(t), "charts", "kvrouter") }

// rendered is what `helm install --dry-run` of the chart gives: the objects (the CRDs of crds/
// first) and NOTES.txt.
type rendered struct {
	objs  []object
	notes string
}

// render renders dir as `helm template --include-crds -n namespace` would, with vals merged
// over values.yaml and the values schema checked.
func render(t *testing.T, dir, namespace string, vals map[string]any) (*rendered, error) {
	t.Helper()
	chrt, err := loader.Load(dir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	cfg := &action.Configuration{Log: func(format string, v ...any) { t.Logf(format, v...) }}
	inst := action.NewInstall(cfg)
	inst.DryRun, inst.ClientOnly, inst.Replace, inst.IncludeCRDs = true, true, true, true
	inst.ReleaseName, inst.Namespace = releaseName, namespace
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.36.0", Major: "1", Minor: "36"}
	rel, err := inst.Run(chrt, vals)
	if err != nil {
		return nil, err
	}
	objs, err := decodeAll([]byte(rel.Manifest))
	if err != nil {
		t.Fatalf("decoding the rendered manifest: %v\n%s", err, rel.Manifest)
	}
	return &rendered{objs: objs, notes: rel.Info.Notes}, nil
}

func mustRender(t *testing.T, namespace string, vals map[string]any) *rendered {
	t.Helper()
	r, err := render(t, chartDir(t), namespace, vals)
	if err != nil {
		t.Fatalf("rendering the chart with %v: %v", vals, err)
	}
	return r
}

// decodeAll splits a multi-document YAML stream into its objects, skipping empty documents.
func decodeAll(b []byte) ([]object, error) {
	var out []object
	for doc := range strings.SplitSeq(string(b), "\n---") {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			return nil, err
		}
		if o != nil {
			out = append(out, o)
		}
	}
	return out, nil
}

// kustomizeBuild runs the kustomize that the repository pins (hack/tools), the one `make deploy`
// applies with.
func kustomizeBuild(t *testing.T, dir string) []object {
	t.Helper()
	root := repoRoot(t)
	cmd := exec.Command("go", "tool", "-modfile=hack/tools/go.mod", "kustomize", "build", dir)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
	}
	objs, err := decodeAll(out)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return objs
}

func key(o object) string {
	return fmt.Sprintf("%s/%s", o["kind"], str(o, "metadata", "name"))
}

func byKey(objs []object) map[string]object {
	m := map[string]object{}
	for _, o := range objs {
		m[key(o)] = o
	}
	return m
}

// find returns the object of kind and name, failing the test when there is none.
func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o["kind"] == kind && str(o, "metadata", "name") == name {
			return o
		}
	}
	t.Fatalf("no %s %s among %d objects", kind, name, len(objs))
	return nil
}

func has(objs []object, kind string) bool {
	for _, o := range objs {
		if o["kind"] == kind {
			return true
		}
	}
	return false
}

// get is the value at path; a number in path indexes a list.
func get(v any, path ...any) any {
	for _, p := range path {
		switch p := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[p]
		case int:
			l, ok := v.([]any)
			if !ok || p >= len(l) {
				return nil
			}
			v = l[p]
		}
	}
	return v
}

func str(v any, path ...any) string {
	s, _ := get(v, path...).(string)
	return s
}

func toYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
