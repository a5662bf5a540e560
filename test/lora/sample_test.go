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

package lora

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/fleettest"
)

// The shipped sample with two adapters, rendered by the operator's own code, and its engine
// flags handed to real vllm-sim engines: what the operator writes into the pod is what serves
// both adapters. Only the LoRA flags are taken from the pod; ports, event endpoints and the model
// are the fleet harness's, since the pod's assume a cluster.
func TestSampleKVRouterServesBothAdapters(t *testing.T) {
	fleettest.NeedBinaries(t)
	_, file, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "config", "samples", "kvrouter_lora.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kvr v1alpha1.KVRouter
	if err := yaml.UnmarshalStrict(data, &kvr); err != nil {
		t.Fatal(err)
	}
	objs, err := render.Objects(&kvr, render.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok && d.Name == render.EngineWorkloadName(&kvr) {
			c := d.Spec.Template.Spec.Containers[0]
			args = append(slices.Clone(c.Command), c.Args...)
		}
	}
	if args == nil {
		t.Fatal("no engine Deployment rendered")
	}
	lora := loraFlags(args)
	t.Logf("LoRA flags rendered for the engines: %q", lora)
	if !slices.Contains(lora, "--enable-lora") || !slices.Contains(lora, "--lora-modules") {
		t.Fatalf("rendered engine args carry no LoRA flags: %q", args)
	}
	var es []*fleettest.Engine
	for i := range 2 {
		es = append(es, fleettest.StartEngine(t, fmt.Sprintf("s%d", i), "10", lora...))
	}
	r := fleettest.StartRouter(t, fleettest.WriteEndpoints(t, es))
	r.WaitConnected(t, len(es))
	for _, l := range kvr.Spec.Model.LoRAs {
		for i := range 3 {
			if _, err := complete(r.URL, l.Name, fmt.Sprintf("%s question %d: %s", l.Name, i, strings.Repeat("context ", 30))); err != nil {
				t.Errorf("adapter %s: %v", l.Name, err)
			}
		}
	}
	if _, err := complete(r.URL, "not-an-adapter", "hello"); err == nil {
		t.Error("a model no engine serves was answered")
	}
}

// loraFlags keeps the LoRA flags of a vLLM command line with their values (--lora-modules takes
// several).
func loraFlags(args []string) []string {
	var out []string
	keep := false
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			name, _, _ := strings.Cut(a, "=")
			keep = slices.Contains([]string{"--enable-lora", "--lora-modules", "--max-loras", "--max-lora-rank"}, name)
		}
		if keep {
			out = append(out, a)
		}
	}
	return out
}
