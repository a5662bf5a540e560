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
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// ConditionInferencePoolReady summarises what the Gateways say of the InferencePool
// (spec.gateway.mode: InferencePool only): True when every Gateway that reports on it has
// accepted it and resolved its endpoint picker. It mirrors the pool's status.parents, which the
// Gateways' controllers write, the way a user would otherwise have to read them off the pool.
// Like a missing route, it never changes Ready: the engines and the router serve either way,
// and Ready describes them.
const ConditionInferencePoolReady = "InferencePoolReady"

// Reasons of ConditionInferencePoolReady.
const (
	// ReasonAccepted: every reporting Gateway accepted the pool and resolved its references.
	ReasonAccepted = "Accepted"
	// ReasonPending: no Gateway has reported on the pool's current generation yet.
	ReasonPending = "Pending"
	// ReasonNotAccepted: a Gateway refused the pool (Accepted False).
	ReasonNotAccepted = "NotAccepted"
	// ReasonRefsNotResolved: a Gateway accepted the pool but cannot resolve its endpoint picker
	// (ResolvedRefs False): the router Service or its port.
	ReasonRefsNotResolved = "RefsNotResolved"
)

// withoutInferencePool is kvr as the operator serves it while the InferencePool CRD is missing,
// or while no pool can be applied (keepPoolMode): HTTPRoute mode, the router a proxy behind the
// route. An endpoint picker without a pool would serve no one: in that mode the router does not
// serve HTTP, and the route would point at an object that is not there.
func withoutInferencePool(kvr *v1alpha1.KVRouter) *v1alpha1.KVRouter {
	out := kvr.DeepCopy()
	out.Spec.Gateway.Mode = v1alpha1.GatewayModeHTTPRoute
	out.Spec.Gateway.FailureMode = ""
	return out
}

// keepPoolMode says whether the children of InferencePool mode may be applied after the pool's
// apply returned applyErr, live being what is there of the pool (nil: nothing). They may once the
// pool is applied, and after a failed apply while a pool of this KVRouter's, not being deleted,
// is still there: the Gateways keep using it as last applied (its selector and picker follow
// from the KVRouter's name alone), and switching the router to a proxy for a refused update
// would roll it, twice, for nothing. Otherwise HTTPRoute mode must be applied: the router as the
// picker of no pool would serve nothing, and a route to a missing pool has no backend.
func keepPoolMode(applyErr error, live *unstructured.Unstructured, owner types.UID) bool {
	if applyErr == nil {
		return true
	}
	return live != nil && live.GetDeletionTimestamp() == nil && isControlledBy(live, string(owner))
}

// poolState is what the reconcile saw of the InferencePool.
type poolState struct {
	// present: applied, or after a failed apply read back, with the status below.
	present    bool
	generation int64
	name       string
	parents    []infv1.ParentStatus
}

// observePool records the InferencePool's status from the object the API server returned.
func (o *observation) observePool(live *unstructured.Unstructured) error {
	var p infv1.InferencePool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, &p); err != nil {
		return fmt.Errorf("reading InferencePool %s: %w", live.GetName(), err)
	}
	o.pool = poolState{present: true, generation: p.Generation, name: p.Name, parents: p.Status.Parents}
	return nil
}

// setInferencePoolCondition writes ConditionInferencePoolReady, or removes it when the spec asks
// for no pool.
func setInferencePoolCondition(kvr *v1alpha1.KVRouter, o *observation, set func(t string, s metav1.ConditionStatus, reason, msg string)) {
	if !render.UsesInferencePool(kvr) {
		meta.RemoveStatusCondition(&kvr.Status.Conditions, ConditionInferencePoolReady)
		return
	}
	switch {
	case o.renderErr != nil:
		set(ConditionInferencePoolReady, metav1.ConditionFalse, ReasonInvalidSpec, "nothing is applied until the spec is fixed")
	case o.poolFallback && o.poolErr != nil:
		set(ConditionInferencePoolReady, metav1.ConditionFalse, ReasonApplyFailed, fmt.Sprintf(
			"InferencePool %s could not be applied (retrying); until it is, the router serves as a proxy behind the HTTPRoute: %v",
			render.InferencePoolName(kvr), o.poolErr))
	case o.poolFallback:
		k, _ := optionalKindFor(inferencePoolGVK)
		set(ConditionInferencePoolReady, metav1.ConditionFalse, ReasonCRDNotInstalled, missingMessage([]OptionalKind{k}))
	case o.poolErr != nil && o.pool.present:
		_, reason, verdict := poolVerdict(kvr.Namespace, o.pool)
		set(ConditionInferencePoolReady, metav1.ConditionUnknown, ReasonApplyFailed, fmt.Sprintf(
			"InferencePool %s could not be updated (retrying): %v; it stays in use as last applied, and the Gateways' verdict on it is %s: %s",
			o.pool.name, o.poolErr, reason, verdict))
	case !o.pool.present:
		set(ConditionInferencePoolReady, metav1.ConditionUnknown, ReasonApplyFailed, "the InferencePool could not be applied (see the Degraded condition)")
	default:
		status, reason, msg := poolVerdict(kvr.Namespace, o.pool)
		set(ConditionInferencePoolReady, status, reason, msg)
	}
}

// poolVerdict reads the Gateways' Accepted and ResolvedRefs conditions off the pool's parents.
// A refusal anywhere wins over a pending report, which wins over acceptance: one Gateway that
// cannot use the pool is a failure for the clients it serves. A condition written for an older
// generation of the pool says nothing about the current spec and counts as pending.
func poolVerdict(namespace string, p poolState) (metav1.ConditionStatus, string, string) {
	if len(p.parents) == 0 {
		return metav1.ConditionUnknown, ReasonPending, fmt.Sprintf(
			"no Gateway reports on InferencePool %s yet: is the Gateway's implementation InferencePool-aware, with its inference extension enabled, and does the HTTPRoute attach to it (see the HTTPRoute's status)?", p.name)
	}
	var refused, unresolved, pending, accepted []string
	for _, parent := range p.parents {
		who := parentName(namespace, parent)
		current := func(t infv1.InferencePoolConditionType) *metav1.Condition {
			c := meta.FindStatusCondition(parent.Conditions, string(t))
			if c == nil || (c.ObservedGeneration != 0 && c.ObservedGeneration < p.generation) {
				return nil
			}
			return c
		}
		acc, refs := current(infv1.InferencePoolConditionAccepted), current(infv1.InferencePoolConditionResolvedRefs)
		switch {
		case acc != nil && acc.Status == metav1.ConditionFalse:
			refused = append(refused, fmt.Sprintf("%s: %s: %s", who, acc.Reason, acc.Message))
		case refs != nil && refs.Status == metav1.ConditionFalse:
			unresolved = append(unresolved, fmt.Sprintf("%s: %s: %s", who, refs.Reason, refs.Message))
		case acc == nil || acc.Status != metav1.ConditionTrue || refs == nil || refs.Status != metav1.ConditionTrue:
			pending = append(pending, who)
		default:
			accepted = append(accepted, who)
		}
	}
	switch {
	case len(refused) > 0:
		return metav1.ConditionFalse, ReasonNotAccepted, "InferencePool " + p.name + " not accepted by " + joinSorted(refused)
	case len(unresolved) > 0:
		return metav1.ConditionFalse, ReasonRefsNotResolved, "InferencePool " + p.name + " accepted, but its endpoint picker (the router Service) is not resolved by " + joinSorted(unresolved)
	case len(pending) > 0:
		return metav1.ConditionUnknown, ReasonPending, "InferencePool " + p.name + ": waiting for the current Accepted and ResolvedRefs of " + joinSorted(pending)
	}
	return metav1.ConditionTrue, ReasonAccepted, "InferencePool " + p.name + " accepted, endpoint picker resolved, by " + joinSorted(accepted)
}

// parentName names a pool's parent for messages: "Gateway ns/name (controller)".
func parentName(namespace string, parent infv1.ParentStatus) string {
	ref := parent.ParentRef
	kind := string(ref.Kind)
	if kind == "" {
		kind = "Gateway"
	}
	ns := string(ref.Namespace)
	if ns == "" {
		ns = namespace
	}
	s := fmt.Sprintf("%s %s/%s", kind, ns, ref.Name)
	if parent.ControllerName != "" {
		s += " (" + string(parent.ControllerName) + ")"
	}
	return s
}

func joinSorted(parts []string) string {
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
