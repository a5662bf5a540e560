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
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// FieldManager is the one server-side apply field manager the operator writes children with.
const FieldManager = "kvrouter-operator"

// handoverFieldManager keeps spec.replicas alive while the operator stops applying it (see
// handOverReplicas).
const handoverFieldManager = "kvrouter-operator-handover"

// toApplyObject turns a rendered object into the unstructured form that server-side apply takes.
//
// Typed Go structs cannot say "unset" for fields that are neither pointers nor omitempty, so
// the JSON of a typed object carries zero values (creationTimestamp: null, an empty status, or
// an enum field such as LeaderWorkerSet's startupPolicy: "") that the renderer never meant to
// own. Applying them would claim ownership of, or fail validation on, fields the API server
// should default. They are pruned here; objects that arrive unstructured are sent as they are,
// because their author wrote every field on purpose.
func toApplyObject(obj client.Object, scheme *runtime.Scheme) (*unstructured.Unstructured, error) {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return nil, fmt.Errorf("kind of rendered %T %q: %w", obj, obj.GetName(), err)
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		out := u.DeepCopy()
		out.SetGroupVersionKind(gvk)
		unstructured.RemoveNestedField(out.Object, "status")
		return out, nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting rendered %s %q: %w", gvk.Kind, obj.GetName(), err)
	}
	delete(m, "status")
	pruneZeroValues(m)
	out := &unstructured.Unstructured{Object: m}
	out.SetGroupVersionKind(gvk)
	return out, nil
}

// pruneZeroValues deletes null and empty-string values from maps, and maps that become empty
// because of that. Maps that were empty to begin with stay (emptyDir: {} and podSelector: {}
// mean something), and list elements are never removed (a Role's apiGroups: [""] names the core
// group).
func pruneZeroValues(m map[string]any) {
	for k, v := range m {
		switch val := v.(type) {
		case nil:
			delete(m, k)
		case string:
			if val == "" {
				delete(m, k)
			}
		case map[string]any:
			if len(val) == 0 {
				continue
			}
			pruneZeroValues(val)
			if len(val) == 0 {
				delete(m, k)
			}
		case []any:
			for _, item := range val {
				if im, ok := item.(map[string]any); ok {
					pruneZeroValues(im)
				}
			}
		}
	}
}

// apply server-side applies obj with the operator's field manager, forcing ownership: the
// operator is the source of truth for every field it renders. On success obj holds the live
// object the API server returned.
func apply(ctx context.Context, c client.Client, obj *unstructured.Unstructured) error {
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldManager), client.ForceOwnership)
}

// handOverReplicas protects the replica count of a workload that is about to be applied without
// spec.replicas, because an autoscaler now owns it.
//
// Server-side apply removes a field that its only owner stops applying; the workload would fall
// back to the default of 1 replica (a fleet-wide model reload) until KEDA scales it up again. If
// the operator's manager owns spec.replicas on the live object, the current value is first
// applied by a second manager, which keeps owning it after the operator lets go; the
// autoscaler's own writes then take it over.
func handOverReplicas(ctx context.Context, c client.Client, scheme *runtime.Scheme, desired *unstructured.Unstructured) error {
	if _, found, _ := unstructured.NestedFieldNoCopy(desired.Object, "spec", "replicas"); found {
		return nil
	}
	live, err := readLive(ctx, c, scheme, desired)
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	if !ownsField(live.GetManagedFields(), FieldManager, "spec", "replicas") {
		return nil
	}
	m := live.Object
	replicas, found, err := unstructured.NestedInt64(m, "spec", "replicas")
	if err != nil || !found {
		return err
	}
	keep := &unstructured.Unstructured{}
	keep.SetGroupVersionKind(desired.GroupVersionKind())
	keep.SetNamespace(desired.GetNamespace())
	keep.SetName(desired.GetName())
	if err := unstructured.SetNestedField(keep.Object, replicas, "spec", "replicas"); err != nil {
		return err
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(keep), client.FieldOwner(handoverFieldManager)); err != nil {
		return fmt.Errorf("handing spec.replicas of %s %s over to the autoscaler: %w", desired.GetKind(), desired.GetName(), err)
	}
	return nil
}

// readLive reads the live copy of obj. A kind the scheme knows is read typed, from the informer
// that the controller's watch keeps (the operator holds no get permission on its children); only
// a kind outside the scheme falls back to unstructured.
func readLive(ctx context.Context, c client.Client, scheme *runtime.Scheme, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	gvk := obj.GroupVersionKind()
	typed, err := scheme.New(gvk)
	if err != nil {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		typed = u
	}
	liveObj, ok := typed.(client.Object)
	if !ok {
		return nil, fmt.Errorf("%s is not a client.Object", gvk)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), liveObj); err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(liveObj)
	if err != nil {
		return nil, err
	}
	live := &unstructured.Unstructured{Object: m}
	live.SetGroupVersionKind(gvk) // objects from the cache carry no TypeMeta
	return live, nil
}

// ownsField reports whether manager holds path through an Apply entry of managedFields.
func ownsField(entries []metav1.ManagedFieldsEntry, manager string, path ...string) bool {
	for _, e := range entries {
		if e.Manager != manager || e.Operation != metav1.ManagedFieldsOperationApply || e.FieldsV1 == nil {
			continue
		}
		var set map[string]any
		if err := json.Unmarshal(e.FieldsV1.GetRawBytes(), &set); err != nil {
			continue
		}
		node := set
		found := true
		for _, p := range path {
			next, ok := node["f:"+p].(map[string]any)
			if !ok {
				found = false
				break
			}
			node = next
		}
		if found {
			return true
		}
	}
	return false
}

// isControlledBy reports whether obj's controller reference points at the owner with uid.
func isControlledBy(obj metav1.Object, uid string) bool {
	ref := metav1.GetControllerOfNoCopy(obj)
	return ref != nil && string(ref.UID) == uid
}

// listKind returns an empty list for gvk: typed when the scheme knows the kind (so the cache
// serves it from the informer the controller already runs), unstructured otherwise.
func listKind(scheme *runtime.Scheme, gvk schema.GroupVersionKind) client.ObjectList {
	listGVK := gvk.GroupVersion().WithKind(gvk.Kind + "List")
	if obj, err := scheme.New(listGVK); err == nil {
		if l, ok := obj.(client.ObjectList); ok {
			return l
		}
	}
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(listGVK)
	return l
}
