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
	"encoding/json"
	"os"
	"testing"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/wrappers"
)

const crdPath = "../../../config/crd/bases/serving.kvrouter.dev_kvrouters.yaml"

// TestDefaultMatchesCRD applies the generated CRD's schema defaults with the API server's own
// algorithm and checks that Default gives the same KVRouter, so a default changed in a kubebuilder
// marker cannot silently differ between the cluster and `manager render`.
func TestDefaultMatchesCRD(t *testing.T) {
	schema := loadStructuralSchema(t)
	cases := map[string]*v1alpha1.KVRouter{
		"only the model": wrappers.MakeKVRouter("m", "ns").Obj(),
		"autoscaling":    wrappers.MakeKVRouter("m", "ns").Autoscaling(0, 3).Obj(),
		"prometheus":     wrappers.MakeKVRouter("m", "ns").Autoscaling(2, 3).Prometheus("http://p:9090").Obj(),
		"api keys":       wrappers.MakeKVRouter("m", "ns").RouterAPIKeySecret("r", "").EngineAPIKeySecret("e", "mine").Obj(),
		"partly set": wrappers.MakeKVRouter("m", "ns").TensorParallel(2).GPU("NVIDIA-A100-SXM4-80GB", 0).
			Replicas(0).Policy(v1alpha1.PolicyRoundRobin).Gateway("gw", "", "h").Simulate().Obj(),
		"every field set": wrappers.MakeKVRouter("m", "ns").EngineImage("vllm/vllm-openai:v0.30.0").Replicas(5).
			TensorParallel(4).NodesPerReplica(1).GPU("X", 4).BlockSize(64).RouterReplicas(4).
			Policy(v1alpha1.PolicyLeastLoaded).Obj(),
	}
	disaggregated := wrappers.MakeKVRouter("m", "ns").Obj()
	disaggregated.Spec.Disaggregation = &v1alpha1.DisaggregationSpec{}
	cases["disaggregation"] = disaggregated
	pools := wrappers.MakeKVRouter("m", "ns").Obj()
	pools.Spec.Disaggregation = &v1alpha1.DisaggregationSpec{
		Prefill: v1alpha1.PrefillPoolSpec{Autoscaling: &v1alpha1.PoolAutoscalingSpec{MaxReplicas: 3}},
		Network: v1alpha1.KVNetworkSpec{RDMAResource: &v1alpha1.ExtendedResource{Name: "rdma/ib"}},
	}
	cases["disaggregation with prefill autoscaling and an RDMA device"] = pools
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			// What the API server stores: the schema's defaults applied to the JSON the
			// client sent, read back into the Go type.
			obj := requestBody(t, in)
			structuraldefaulting.Default(obj, schema)
			var fromServer v1alpha1.KVRouter
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &fromServer); err != nil {
				t.Fatal(err)
			}

			fromGo := in.DeepCopy()
			render.Default(fromGo)
			if !equality.Semantic.DeepEqual(fromServer.Spec, fromGo.Spec) {
				a, _ := yaml.Marshal(fromServer.Spec)
				g, _ := yaml.Marshal(fromGo.Spec)
				t.Errorf("Default differs from the CRD's defaults\nCRD:\n%s\nDefault:\n%s", a, g)
			}
		})
	}
}

// requestBody is kvr as the API server decodes a request carrying it: JSON, with integers as
// int64 (which CEL rules compare with the schema's integers).
func requestBody(t testing.TB, kvr *v1alpha1.KVRouter) map[string]any {
	t.Helper()
	b, err := json.Marshal(kvr)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func loadStructuralSchema(t testing.TB) *structuralschema.Structural {
	t.Helper()
	_, s := loadCRDSchema(t)
	return s
}

// loadCRDSchema returns the generated CRD's schema of the served version, in the API server's
// internal form (for its OpenAPI validator) and as a structural schema (for defaulting and CEL).
func loadCRDSchema(t testing.TB) (*apiextensionsinternal.JSONSchemaProps, *structuralschema.Structural) {
	t.Helper()
	b, err := os.ReadFile(crdPath)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		t.Fatalf("decoding %s: %v", crdPath, err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != v1alpha1.GroupVersion.Version {
			continue
		}
		var internal apiextensionsinternal.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
			t.Fatal(err)
		}
		s, err := structuralschema.NewStructural(&internal)
		if err != nil {
			t.Fatal(err)
		}
		return &internal, s
	}
	t.Fatalf("%s has no version %s", crdPath, v1alpha1.GroupVersion.Version)
	return nil, nil
}
