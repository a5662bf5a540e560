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
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/wrappers"
)

func deployments(t *testing.T, kvr *v1alpha1.KVRouter) (engine, router *appsv1.Deployment) {
	t.Helper()
	objs, err := render.Objects(kvr, render.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			switch d.Name {
			case render.EngineWorkloadName(kvr):
				engine = d
			case render.RouterName(kvr):
				router = d
			}
		}
	}
	if engine == nil || router == nil {
		t.Fatal("no engine or router Deployment rendered")
	}
	return engine, router
}

func TestAPIKeysByReference(t *testing.T) {
	kvr := wrappers.MakeKVRouter("m", "ns").Simulate().RouterAPIKeySecret("router-keys", "k.txt").EngineAPIKeySecret("engine-key", "").Obj()
	engine, router := deployments(t, kvr)

	rc := router.Spec.Template.Spec.Containers[0]
	if got := strings.Join(rc.Args, " "); !strings.Contains(got, "--api-key-file /etc/kvrouter/api-keys/keys") ||
		!strings.Contains(got, "--engine-api-key-file /etc/kvrouter/engine-api-key/key") {
		t.Errorf("router args %q", got)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range router.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	for name, want := range map[string][2]string{"api-keys": {"router-keys", "k.txt"}, "engine-api-key": {"engine-key", render.DefaultAPIKeySecretKey}} {
		s := vols[name].Secret
		if s == nil || s.SecretName != want[0] || len(s.Items) != 1 || s.Items[0].Key != want[1] {
			t.Errorf("volume %s: %+v, want Secret %s key %s", name, vols[name], want[0], want[1])
		}
	}
	for _, m := range rc.VolumeMounts {
		if (m.Name == "api-keys" || m.Name == "engine-api-key") && (!m.ReadOnly || m.SubPath != "") {
			// A subPath mount would not follow the Secret's updates.
			t.Errorf("mount %+v: want read-only, no subPath", m)
		}
	}

	var key *corev1.EnvVar
	for i, e := range engine.Spec.Template.Spec.Containers[0].Env {
		if e.Name == render.EngineAPIKeyEnv {
			key = &engine.Spec.Template.Spec.Containers[0].Env[i]
		}
	}
	if key == nil || key.Value != "" || key.ValueFrom == nil || key.ValueFrom.SecretKeyRef == nil ||
		key.ValueFrom.SecretKeyRef.Name != "engine-key" || key.ValueFrom.SecretKeyRef.Key != render.DefaultAPIKeySecretKey {
		t.Errorf("engine %s: %+v", render.EngineAPIKeyEnv, key)
	}
	for _, v := range engine.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			t.Errorf("the engines mount Secret %s: they need only the env var", v.Secret.SecretName)
		}
	}

	// Without keys: nothing of the above.
	engine, router = deployments(t, wrappers.MakeKVRouter("m", "ns").Simulate().Obj())
	if got := strings.Join(router.Spec.Template.Spec.Containers[0].Args, " "); strings.Contains(got, "api-key") {
		t.Errorf("router args without keys: %q", got)
	}
	if len(router.Spec.Template.Spec.Volumes) != 0 {
		t.Errorf("router volumes without keys: %+v", router.Spec.Template.Spec.Volumes)
	}
	for _, e := range engine.Spec.Template.Spec.Containers[0].Env {
		if e.Name == render.EngineAPIKeyEnv {
			t.Errorf("engine env without a key: %+v", e)
		}
	}
}

// TestAPIKeyRulesAgreeWithValidate: the CRD's rule and Validate refuse the same specs
// (TestDefaultMatchesCRD covers the default of the Secret key).
func TestAPIKeyRulesAgreeWithValidate(t *testing.T) {
	schema := loadStructuralSchema(t)
	validator := cel.NewValidator(schema, true, celconfig.PerCallLimit)
	toMap := func(kvr *v1alpha1.KVRouter) map[string]any {
		b, err := json.Marshal(kvr)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := json.Unmarshal(b, &obj); err != nil {
			t.Fatal(err)
		}
		return obj
	}
	for _, c := range []struct {
		name string
		kvr  *v1alpha1.KVRouter
	}{
		{"key and VLLM_API_KEY", wrappers.MakeKVRouter("m", "ns").Env("VLLM_API_KEY", "x").EngineAPIKeySecret("engine-key", "").Obj()},
		{"key and --api-key", wrappers.MakeKVRouter("m", "ns").ExtraArgs("--api-key", "x").EngineAPIKeySecret("engine-key", "").Obj()},
		{"key and --api_key=", wrappers.MakeKVRouter("m", "ns").ExtraArgs("--api_key=sk-secret").EngineAPIKeySecret("engine-key", "").Obj()},
		{"key and --api-key-file-ish flag", wrappers.MakeKVRouter("m", "ns").ExtraArgs("--api-keys", "x").EngineAPIKeySecret("engine-key", "").Obj()},
		{"VLLM_API_KEY without a key", wrappers.MakeKVRouter("m", "ns").Env("VLLM_API_KEY", "x").Obj()},
		{"--api-key without a key", wrappers.MakeKVRouter("m", "ns").ExtraArgs("--api-key", "x").Obj()},
		{"key alone", wrappers.MakeKVRouter("m", "ns").RouterAPIKeySecret("r", "").EngineAPIKeySecret("engine-key", "").Obj()},
	} {
		kvr := c.kvr
		render.Default(kvr)
		goErr := render.Validate(kvr)
		errs, _ := validator.Validate(context.Background(), nil, nil, toMap(kvr), nil, celconfig.RuntimeCELCostBudget)
		celRefuses := strings.Contains(errs.ToAggregate().Error(), "with spec.engine.apiKeySecret")
		if (goErr != nil) != celRefuses {
			t.Errorf("%s: Validate %v, CRD rule refuses=%v", c.name, goErr, celRefuses)
		}
		if goErr != nil && strings.Contains(goErr.Error(), "sk-secret") {
			t.Errorf("%s: the error quotes the key: %v", c.name, goErr)
		}
	}
}
