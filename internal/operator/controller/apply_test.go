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

package controller

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"
)

func TestPruneZeroValues(t *testing.T) {
	in := map[string]any{
		"metadata": map[string]any{"name": "x", "creationTimestamp": nil},
		"spec": map[string]any{
			"startupPolicy":   "",
			"rolloutStrategy": map[string]any{"type": ""},
			"emptyDir":        map[string]any{},
			"rules":           []any{map[string]any{"apiGroups": []any{""}, "note": ""}},
			"replicas":        int64(0),
			"enabled":         false,
		},
	}
	want := map[string]any{
		"metadata": map[string]any{"name": "x"},
		"spec": map[string]any{
			"emptyDir": map[string]any{},
			"rules":    []any{map[string]any{"apiGroups": []any{""}}},
			"replicas": int64(0),
			"enabled":  false,
		},
	}
	pruneZeroValues(in)
	if !reflect.DeepEqual(in, want) {
		t.Fatalf("pruned:\n%#v\nwant:\n%#v", in, want)
	}
}

func TestToApplyObjectDropsZeroEnumsOfTypedObjects(t *testing.T) {
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	lws := &lwsv1.LeaderWorkerSet{
		ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "ns"},
		Spec:       lwsv1.LeaderWorkerSetSpec{Replicas: ptr.To[int32](2)},
	}
	u, err := toApplyObject(lws, scheme)
	if err != nil {
		t.Fatal(err)
	}
	if got := u.GetAPIVersion() + "/" + u.GetKind(); got != "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet" {
		t.Errorf("kind = %s", got)
	}
	for _, path := range [][]string{{"spec", "startupPolicy"}, {"spec", "rolloutStrategy"}, {"status"}, {"metadata", "creationTimestamp"}} {
		if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, path...); found {
			t.Errorf("%v is still in the apply object: it would be owned (or fail validation) though render never set it", path)
		}
	}
	if r, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); r != 2 {
		t.Errorf("spec.replicas = %d, want 2", r)
	}
}

func TestToApplyObjectKeepsUnstructuredAsWritten(t *testing.T) {
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	so := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": "so", "namespace": "ns"},
		"spec":     map[string]any{"fallback": map[string]any{"behavior": ""}},
		"status":   map[string]any{"x": "y"},
	}}
	u, err := toApplyObject(so, scheme)
	if err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedString(u.Object, "spec", "fallback", "behavior"); !found {
		t.Error("a field written on purpose in an unstructured object was dropped")
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "status"); found {
		t.Error("status is sent with the apply")
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(so.Object, "status"); !found {
		t.Error("the rendered object was modified")
	}
}

func TestOwnsField(t *testing.T) {
	entries := []metav1.ManagedFieldsEntry{
		{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
			FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:replicas":{}}}`)},
		{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply,
			FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:template":{}}}`)},
	}
	if ownsField(entries, FieldManager, "spec", "replicas") {
		t.Error("replicas owned by another manager counted as the operator's")
	}
	if !ownsField(entries, FieldManager, "spec", "template") {
		t.Error("template applied by the operator not found")
	}
	entries[1].FieldsV1.SetRawString(`{"f:spec":{"f:replicas":{},"f:template":{}}}`)
	if !ownsField(entries, FieldManager, "spec", "replicas") {
		t.Error("replicas applied by the operator not found")
	}
}
