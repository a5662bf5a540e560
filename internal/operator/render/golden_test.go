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
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml from the current output")

// TestGolden renders every testdata/<case>.yaml and compares the YAML with
// testdata/<case>.golden.yaml. After an intended change: go test ./internal/operator/render -update, then
// review the diff of the golden files.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases int
	for _, in := range inputs {
		if strings.HasSuffix(in, ".golden.yaml") {
			continue
		}
		cases++
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			kvr := readKVRouter(t, in)
			objs, err := render.Objects(kvr, render.Options{})
			if err != nil {
				t.Fatalf("Objects: %v", err)
			}
			var got bytes.Buffer
			if err := render.WriteYAML(&got, objs); err != nil {
				t.Fatalf("WriteYAML: %v", err)
			}
			golden := strings.TrimSuffix(in, ".yaml") + ".golden.yaml"
			if *update {
				if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("reading golden file (run with -update to create it): %v", err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("output differs from %s (run with -update and review the diff):\n%s", golden, lineDiff(string(want), got.String()))
			}
		})
	}
	if cases < 5 {
		t.Fatalf("found %d golden cases in testdata, want at least 5", cases)
	}
}

func readKVRouter(t *testing.T, path string) *v1alpha1.KVRouter {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kvr v1alpha1.KVRouter
	if err := yaml.UnmarshalStrict(b, &kvr); err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	return &kvr
}

// lineDiff shows the first lines where want and got differ, enough to see what changed.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 20; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			out.WriteString("line " + strconv.Itoa(i+1) + ":\n  want: " + wl + "\n  got:  " + gl + "\n")
			shown++
		}
	}
	return out.String()
}
