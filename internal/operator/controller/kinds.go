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
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// The kinds of KEDA's ScaledObject and of the Prometheus Operator's monitors and rules. Their
// Go modules are not dependencies (they would raise every k8s.io module), so these are handled
// as unstructured objects.
var (
	scaledObjectGVK   = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}
	serviceMonitorGVK = schema.FromAPIVersionAndKind(render.MonitoringAPIVersion, render.ServiceMonitorKind)
	podMonitorGVK     = schema.FromAPIVersionAndKind(render.MonitoringAPIVersion, render.PodMonitorKind)
	prometheusRuleGVK = schema.FromAPIVersionAndKind(render.MonitoringAPIVersion, render.PrometheusRuleKind)
)

// coreChildKinds are the kinds every Kubernetes cluster serves; the reconciler watches them from
// the start and sweeps them for children the spec no longer asks for.
var coreChildKinds = []schema.GroupVersionKind{
	appsv1.SchemeGroupVersion.WithKind("Deployment"),
	corev1.SchemeGroupVersion.WithKind("Service"),
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
	rbacv1.SchemeGroupVersion.WithKind("Role"),
	rbacv1.SchemeGroupVersion.WithKind("RoleBinding"),
	policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"),
	networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"),
}

// OptionalKind is a child kind whose CRD a cluster may not have.
type OptionalKind struct {
	// GVK is the kind the renderer emits.
	GVK schema.GroupVersionKind
	// CRD is the CustomResourceDefinition name, for messages users can act on.
	CRD string
	// NeededFor names the spec field that asks for this kind, for messages.
	NeededFor string
	// Instead says what the operator does in the kind's place, for messages; empty: nothing.
	Instead string
}

// OptionalKinds lists the kinds that come from CRDs outside Kubernetes.
var OptionalKinds = []OptionalKind{
	{GVK: schema.GroupVersion(gwapiv1.GroupVersion).WithKind("HTTPRoute"), CRD: "httproutes.gateway.networking.k8s.io", NeededFor: "spec.gateway"},
	{GVK: scaledObjectGVK, CRD: "scaledobjects.keda.sh", NeededFor: "spec.autoscaling"},
	{GVK: lwsv1.SchemeGroupVersion.WithKind("LeaderWorkerSet"), CRD: "leaderworkersets.leaderworkerset.x-k8s.io", NeededFor: "spec.engine.nodesPerReplica > 1"},
	{GVK: serviceMonitorGVK, CRD: "servicemonitors.monitoring.coreos.com", NeededFor: "spec.monitoring"},
	{GVK: podMonitorGVK, CRD: "podmonitors.monitoring.coreos.com", NeededFor: "spec.monitoring"},
	{GVK: prometheusRuleGVK, CRD: "prometheusrules.monitoring.coreos.com", NeededFor: "spec.monitoring"},
	// Without the pool the router would be an endpoint picker nobody calls and serve no HTTP: the
	// operator renders HTTPRoute mode until the CRD appears (see withoutInferencePool).
	{GVK: inferencePoolGVK, CRD: "inferencepools.inference.networking.k8s.io", NeededFor: "spec.gateway.mode: InferencePool",
		Instead: "until it is installed, the router serves as a proxy behind the HTTPRoute, as with spec.gateway.mode: HTTPRoute"},
}

// inferencePoolGVK is the Gateway API Inference Extension's InferencePool.
var inferencePoolGVK = schema.GroupVersion(infv1.GroupVersion).WithKind(render.InferencePoolKind)

func optionalKindFor(gvk schema.GroupVersionKind) (OptionalKind, bool) {
	for _, k := range OptionalKinds {
		if k.GVK == gvk {
			return k, true
		}
	}
	return OptionalKind{}, false
}

// kindRegistry remembers which optional kinds the API server serves. Discovery answers are cached
// for recheckEvery so that a reconcile costs no API call in the steady state, yet a CRD installed
// after the operator started is picked up without a restart.
type kindRegistry struct {
	mapper       meta.RESTMapper
	recheckEvery time.Duration
	now          func() time.Time

	mu        sync.Mutex
	installed map[schema.GroupVersionKind]bool
	checkedAt time.Time
}

func newKindRegistry(mapper meta.RESTMapper, recheckEvery time.Duration) *kindRegistry {
	return &kindRegistry{mapper: mapper, recheckEvery: recheckEvery, now: time.Now, installed: map[schema.GroupVersionKind]bool{}}
}

// refresh asks the RESTMapper about every optional kind unless it did so less than recheckEvery
// ago, and returns the kinds that became available since the previous check. A discovery error
// other than "no such kind" keeps the previous answer: a flaky API server must not make the
// reconciler delete children it believes are unsupported.
func (r *kindRegistry) refresh(force bool) (added []schema.GroupVersionKind, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !force && !r.checkedAt.IsZero() && r.now().Sub(r.checkedAt) < r.recheckEvery {
		return nil, nil
	}
	var errs []error
	for _, k := range OptionalKinds {
		_, mapErr := r.mapper.RESTMapping(k.GVK.GroupKind(), k.GVK.Version)
		switch {
		case mapErr == nil:
			if !r.installed[k.GVK] {
				added = append(added, k.GVK)
			}
			r.installed[k.GVK] = true
		case meta.IsNoMatchError(mapErr):
			r.installed[k.GVK] = false
		default:
			errs = append(errs, fmt.Errorf("discovering %s: %w", k.CRD, mapErr))
		}
	}
	r.checkedAt = r.now()
	return added, errors.Join(errs...)
}

// isInstalled reports whether gvk is served. Kinds that are not optional are always served.
func (r *kindRegistry) isInstalled(gvk schema.GroupVersionKind) bool {
	if _, optional := optionalKindFor(gvk); !optional {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.installed[gvk]
}

// installedKinds returns the core kinds plus the optional kinds that are served, in a stable order.
func (r *kindRegistry) installedKinds() []schema.GroupVersionKind {
	kinds := append([]schema.GroupVersionKind(nil), coreChildKinds...)
	r.mu.Lock()
	defer r.mu.Unlock()
	var opt []schema.GroupVersionKind
	for gvk, ok := range r.installed {
		if ok {
			opt = append(opt, gvk)
		}
	}
	sort.Slice(opt, func(i, j int) bool { return opt[i].String() < opt[j].String() })
	return append(kinds, opt...)
}
