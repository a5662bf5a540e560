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

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// Condition types of a KVRouter.
const (
	// ConditionReady is the summary: the KVRouter answers requests (at least one engine replica
	// and one router replica are ready, and every child was applied). GitOps health checks key
	// on it.
	ConditionReady = "Ready"
	// ConditionProgressing is True while the engines or the router are not at full strength at
	// the current spec: a rollout, a scale-up, a model still loading.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when the operator cannot make the cluster match the spec: an
	// apply failed, the spec is refused, or a CRD the spec needs is missing.
	ConditionDegraded = "Degraded"
	// ConditionCRDsInstalled is False when the spec asks for a kind whose CRD the cluster lacks
	// (Gateway API, its Inference Extension, KEDA, LeaderWorkerSet, Prometheus Operator); its
	// message names the CRD.
	ConditionCRDsInstalled = "CRDsInstalled"
)

// Condition reasons.
const (
	ReasonServing         = "Serving"
	ReasonStopped         = "Stopped"
	ReasonEnginesNotReady = "EnginesNotReady"
	// ReasonPrefillPoolNotReady and ReasonDecodePoolNotReady: a disaggregated KVRouter has no
	// ready engine in that pool.
	ReasonPrefillPoolNotReady = "PrefillPoolNotReady"
	ReasonDecodePoolNotReady  = "DecodePoolNotReady"
	ReasonRouterNotReady      = "RouterNotReady"
	ReasonApplyFailed         = "ApplyFailed"
	ReasonInvalidSpec         = "InvalidSpec"
	ReasonCRDNotInstalled     = "CRDNotInstalled"
	ReasonInstalled           = "Installed"
	ReasonRollingOut          = "RollingOut"
	ReasonRolledOut           = "RolledOut"
	ReasonAsExpected          = "AsExpected"
)

// workloadState is what the operator saw of a Deployment or LeaderWorkerSet after applying it.
type workloadState struct {
	present bool
	desired int32
	ready   int32
	// settled: the workload's controller has acted on the current template and every replica
	// is updated and ready.
	settled bool
}

// observation collects what one reconcile did and saw; status is computed from it once, at the
// end, so that every exit path writes a consistent status.
type observation struct {
	renderErr  error
	applyErrs  []string
	missing    []OptionalKind
	engineGone bool // the engine workload could not be applied because its CRD is missing
	engine     workloadState
	prefill    workloadState
	router     workloadState
	// poolFallback: the spec asks for an InferencePool, but HTTPRoute mode was applied instead
	// (withoutInferencePool): the CRD is missing, or (poolErr) the pool could not be applied and
	// none is there.
	poolFallback bool
	// poolErr: the InferencePool's apply failed, with the API server's answer.
	poolErr error
	pool    poolState
}

// observeWorkload records the state of an applied engine or router workload from the object the
// API server returned.
func (o *observation) observeWorkload(live *unstructured.Unstructured, role workloadRole) error {
	if role == roleOther {
		return nil
	}
	var st workloadState
	switch live.GroupVersionKind() {
	case appsv1.SchemeGroupVersion.WithKind("Deployment"):
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, &d); err != nil {
			return fmt.Errorf("reading Deployment %s: %w", live.GetName(), err)
		}
		st = deploymentState(&d)
	case lwsv1.SchemeGroupVersion.WithKind("LeaderWorkerSet"):
		var l lwsv1.LeaderWorkerSet
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, &l); err != nil {
			return fmt.Errorf("reading LeaderWorkerSet %s: %w", live.GetName(), err)
		}
		st = leaderWorkerSetState(&l)
	default:
		return nil
	}
	switch role {
	case roleEngine:
		o.engine = st
	case rolePrefill:
		o.prefill = st
	default:
		o.router = st
	}
	return nil
}

func deploymentState(d *appsv1.Deployment) workloadState {
	desired := int32(1)
	if d.Spec.Replicas != nil {
		desired = *d.Spec.Replicas
	}
	s := d.Status
	return workloadState{
		present: true,
		desired: desired,
		ready:   s.ReadyReplicas,
		settled: s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == desired &&
			s.Replicas == desired && s.ReadyReplicas == desired,
	}
}

func leaderWorkerSetState(l *lwsv1.LeaderWorkerSet) workloadState {
	desired := int32(1)
	if l.Spec.Replicas != nil {
		desired = *l.Spec.Replicas
	}
	s := l.Status
	// LeaderWorkerSet reports no observedGeneration; its UpdateInProgress condition says whether
	// it is still rolling a new template out.
	updating := meta.IsStatusConditionTrue(s.Conditions, string(lwsv1.LeaderWorkerSetUpdateInProgress))
	return workloadState{
		present: true,
		desired: desired,
		ready:   s.ReadyReplicas,
		settled: !updating && s.UpdatedReplicas == desired && s.ReadyReplicas == desired,
	}
}

// desiredEngines is the engine replica count the spec asks for when the live workload cannot
// say (not applied yet, or its CRD is missing).
func desiredEngines(kvr *v1alpha1.KVRouter) int32 {
	if a := kvr.Spec.Autoscaling; a != nil {
		return a.MinReplicas
	}
	if r := kvr.Spec.Engine.Replicas; r != nil {
		return *r
	}
	return 1
}

// desiredPrefill is the prefill replica count the spec asks for when the live workload cannot say.
func desiredPrefill(kvr *v1alpha1.KVRouter) int32 {
	d := kvr.Spec.Disaggregation
	switch {
	case d == nil:
		return 0
	case render.Stopped(kvr):
		return 0
	case d.Prefill.Autoscaling != nil:
		return d.Prefill.Autoscaling.MinReplicas
	case d.Prefill.Replicas != nil:
		return *d.Prefill.Replicas
	}
	return 1
}

// disaggregationPools writes the pools' replica counts into status.disaggregation, keeping what
// the status poller wrote there; nil when the KVRouter is not disaggregated.
func disaggregationPools(kvr *v1alpha1.KVRouter, cur *v1alpha1.DisaggregationStatus, decode, prefill v1alpha1.ReplicaStatus) *v1alpha1.DisaggregationStatus {
	if !render.Disaggregated(kvr) {
		return nil
	}
	out := &v1alpha1.DisaggregationStatus{}
	if cur != nil {
		out = cur.DeepCopy()
	}
	out.Pools.Prefill.Desired, out.Pools.Prefill.Ready = prefill.Desired, prefill.Ready
	out.Pools.Decode.Desired, out.Pools.Decode.Ready = decode.Desired, decode.Ready
	return out
}

func desiredRouters(kvr *v1alpha1.KVRouter) int32 {
	if r := kvr.Spec.Router.Replicas; r != nil {
		return *r
	}
	return 1
}

// computeStatus writes status fields and conditions from what the reconcile observed. It does
// not touch observedGeneration: that is the caller's, and only after a reconcile that finished.
func computeStatus(kvr *v1alpha1.KVRouter, o *observation) {
	st := &kvr.Status
	gen := kvr.Generation

	engines := v1alpha1.ReplicaStatus{Desired: desiredEngines(kvr)}
	if o.engine.present {
		engines = v1alpha1.ReplicaStatus{Desired: o.engine.desired, Ready: o.engine.ready}
	}
	prefill := v1alpha1.ReplicaStatus{Desired: desiredPrefill(kvr)}
	if o.prefill.present {
		prefill = v1alpha1.ReplicaStatus{Desired: o.prefill.desired, Ready: o.prefill.ready}
	}
	routers := v1alpha1.ReplicaStatus{Desired: desiredRouters(kvr)}
	if o.router.present {
		routers = v1alpha1.ReplicaStatus{Desired: o.router.desired, Ready: o.router.ready}
	}
	if o.renderErr == nil {
		st.Engines, st.Router = engines, routers
		st.Replicas = engines.Ready
		st.Selector = render.ScaleSelector(kvr)
		st.Disaggregation = disaggregationPools(kvr, st.Disaggregation, engines, prefill)
		served := kvr
		if o.poolFallback {
			served = withoutInferencePool(kvr)
		}
		st.URL = render.URL(served)
	}

	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen,
		})
	}

	// CRDsInstalled
	if len(o.missing) > 0 {
		set(ConditionCRDsInstalled, metav1.ConditionFalse, ReasonCRDNotInstalled, missingMessage(o.missing))
	} else if o.renderErr == nil {
		set(ConditionCRDsInstalled, metav1.ConditionTrue, ReasonInstalled, "every CRD this spec needs is installed")
	}

	// Degraded: the most actionable problem wins.
	switch {
	case o.renderErr != nil:
		set(ConditionDegraded, metav1.ConditionTrue, ReasonInvalidSpec, o.renderErr.Error())
	case len(o.applyErrs) > 0:
		set(ConditionDegraded, metav1.ConditionTrue, ReasonApplyFailed, strings.Join(o.applyErrs, "; "))
	case len(o.missing) > 0:
		set(ConditionDegraded, metav1.ConditionTrue, ReasonCRDNotInstalled, missingMessage(o.missing))
	default:
		set(ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected, "every child is applied")
	}

	// Progressing
	counts := fmt.Sprintf("%d/%d engine replicas and %d/%d router replicas ready",
		engines.Ready, engines.Desired, routers.Ready, routers.Desired)
	if render.Disaggregated(kvr) {
		counts = fmt.Sprintf("%d/%d prefill and %d/%d decode engine replicas and %d/%d router replicas ready",
			prefill.Ready, prefill.Desired, engines.Ready, engines.Desired, routers.Ready, routers.Desired)
	}
	switch {
	case o.renderErr != nil:
		set(ConditionProgressing, metav1.ConditionFalse, ReasonInvalidSpec, "nothing is applied until the spec is fixed")
	case !o.engine.present || !o.router.present || !o.engine.settled || !o.router.settled ||
		(render.Disaggregated(kvr) && (!o.prefill.present || !o.prefill.settled)):
		set(ConditionProgressing, metav1.ConditionTrue, ReasonRollingOut, counts)
	default:
		set(ConditionProgressing, metav1.ConditionFalse, ReasonRolledOut, counts)
	}

	// Ready
	switch {
	case o.renderErr != nil:
		set(ConditionReady, metav1.ConditionFalse, ReasonInvalidSpec, o.renderErr.Error())
	case len(o.applyErrs) > 0:
		set(ConditionReady, metav1.ConditionFalse, ReasonApplyFailed, strings.Join(o.applyErrs, "; "))
	case o.engineGone:
		set(ConditionReady, metav1.ConditionFalse, ReasonCRDNotInstalled, missingMessage(o.missing))
	case engines.Desired == 0 && kvr.Spec.Autoscaling == nil:
		// Argo CD maps the reason Stopped to Suspended rather than Degraded.
		set(ConditionReady, metav1.ConditionFalse, ReasonStopped, "spec.engine.replicas is 0")
	case engines.Ready == 0 && render.Disaggregated(kvr):
		set(ConditionReady, metav1.ConditionFalse, ReasonDecodePoolNotReady, counts)
	case engines.Ready == 0:
		set(ConditionReady, metav1.ConditionFalse, ReasonEnginesNotReady, counts)
	case render.Disaggregated(kvr) && prefill.Desired > 0 && prefill.Ready == 0:
		// The decode engines serve every request whole meanwhile: not an outage, but not
		// the fleet the spec asks for either.
		set(ConditionReady, metav1.ConditionFalse, ReasonPrefillPoolNotReady, counts)
	case routers.Ready == 0:
		set(ConditionReady, metav1.ConditionFalse, ReasonRouterNotReady, counts)
	default:
		set(ConditionReady, metav1.ConditionTrue, ReasonServing, counts)
	}

	setInferencePoolCondition(kvr, o, set)
}

// missingMessage names each missing CRD, the spec field that needs it and what was skipped.
func missingMessage(missing []OptionalKind) string {
	parts := make([]string, 0, len(missing))
	seen := map[string]bool{}
	for _, k := range missing {
		if seen[k.CRD] {
			continue
		}
		seen[k.CRD] = true
		part := fmt.Sprintf("CRD %s is not installed (needed for %s): %s not applied", k.CRD, k.NeededFor, k.GVK.Kind)
		if k.Instead != "" {
			part += " (" + k.Instead + ")"
		}
		parts = append(parts, part)
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
