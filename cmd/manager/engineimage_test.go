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
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// engineImages are the images of the vLLM containers of the engine workloads in docs.
func engineImages(t *testing.T, docs []*unstructured.Unstructured) []string {
	t.Helper()
	var images []string
	for _, d := range docs {
		if d.GetKind() != "Deployment" || !strings.HasSuffix(d.GetName(), "-engine") {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			if m := c.(map[string]any); m["name"] == render.EngineContainerName {
				images = append(images, m["image"].(string))
			}
		}
	}
	if len(images) == 0 {
		t.Fatal("no engine container rendered")
	}
	return images
}

// A KVRouter without spec.engine.image runs the operator's engine image: --engine-image, else
// $RELATED_IMAGE_ENGINE, else the release's; one that names an image keeps it.
func TestEngineImageComesFromTheOperator(t *testing.T) {
	dir := t.TempDir()
	write := func(name, image string) string {
		p := filepath.Join(dir, name)
		spec := "apiVersion: serving.kvrouter.dev/v1alpha1\nkind: KVRouter\nmetadata: {name: m, namespace: ns}\nspec:\n  model: {name: org/model}\n"
		if image != "" {
			spec += "  engine: {image: " + image + "}\n"
		}
		if err := os.WriteFile(p, []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unset, pinned := write("unset.yaml", ""), write("pinned.yaml", "example.com/own-vllm:1")
	const digest = "mirror.example.com/vllm/vllm-openai@sha256:0000000000000000000000000000000000000000000000000000000000000000"
	for _, tc := range []struct {
		name, env, file string
		args            []string
		want            string
	}{
		{name: "release default", file: unset, want: render.DefaultEngineImage},
		{name: "from the environment", env: digest, file: unset, want: digest},
		{name: "flag beats the environment", env: "env.example.com/vllm:1", file: unset, args: []string{"--engine-image", digest}, want: digest},
		{name: "the spec beats both", env: digest, file: pinned, args: []string{"--engine-image", digest}, want: "example.com/own-vllm:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearImageEnv(t)
			t.Setenv("RELATED_IMAGE_ENGINE", tc.env)
			got := engineImages(t, renderDocs(t, append([]string{"-f", tc.file}, tc.args...)...))
			for _, img := range got {
				if img != tc.want {
					t.Errorf("engine image %q, want %q", img, tc.want)
				}
			}
		})
	}
}
