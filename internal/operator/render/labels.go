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

package render

import (
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// Label keys and values shared with the router's discovery and with the contracts other areas
// build against. Changing one breaks selectors of running workloads (selectors are immutable).
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelKVRouter names the owning KVRouter on every child. Selectors key on it rather than on
	// app.kubernetes.io/instance alone, which GitOps tools also use for their own tracking.
	LabelKVRouter = "serving.kvrouter.dev/kvrouter"

	ManagedBy = "kvrouter"

	NameEngine = "vllm"
	NameRouter = "kvrouter-router"

	ComponentEngine = "engine"
	// ComponentEngineWorker marks the non-leader pods of a multi-node replica. They serve no HTTP
	// and publish no KV events, so the router's selector (component=engine) skips them.
	ComponentEngineWorker = "engine-worker"
	ComponentRouter       = "router"
)

// DefaultLabelAllowList is the set of the KVRouter's own labels copied onto its children when
// Options.LabelAllowList is nil. It is deliberately short: copying labels wholesale would carry
// GitOps tracking labels (Argo CD's app.kubernetes.io/instance, argocd.argoproj.io/*) onto objects
// that are not in Git, and the GitOps tool would then prune them.
var DefaultLabelAllowList = []string{
	"app.kubernetes.io/part-of",
	"app.kubernetes.io/version",
}

// reservedLabels can never be copied from the KVRouter, whatever the allow-list says: they are
// set by render and selectors depend on them.
var reservedLabels = map[string]bool{
	LabelName: true, LabelInstance: true, LabelComponent: true, LabelManagedBy: true, LabelKVRouter: true,
}

// selectorLabels are the labels a workload selects its pods by. They must never change for a
// given KVRouter, because Deployment and LeaderWorkerSet selectors are immutable.
func selectorLabels(kvr *v1alpha1.KVRouter, name, component string) map[string]string {
	return map[string]string{
		LabelName:      name,
		LabelInstance:  kvr.Name,
		LabelComponent: component,
		LabelKVRouter:  kvr.Name,
	}
}

// podLabels are the labels of pods: the selector labels plus managed-by. The KVRouter's own
// labels are left off pod templates on purpose: editing one would roll every engine, and a
// rollout of an engine is a model reload of several minutes.
func podLabels(kvr *v1alpha1.KVRouter, name, component string) map[string]string {
	l := selectorLabels(kvr, name, component)
	l[LabelManagedBy] = ManagedBy
	return l
}

// objectLabels are the labels of a child object's own metadata: pod labels plus the allow-listed
// labels of the KVRouter.
func objectLabels(kvr *v1alpha1.KVRouter, opts Options, name, component string) map[string]string {
	l := podLabels(kvr, name, component)
	allow := opts.LabelAllowList
	if allow == nil {
		allow = DefaultLabelAllowList
	}
	for _, k := range allow {
		if reservedLabels[k] {
			continue
		}
		if v, ok := kvr.Labels[k]; ok {
			l[k] = v
		}
	}
	return l
}

// EngineSelector is the label selector of the pods that serve the model's HTTP API and publish
// KV events: every engine pod of a single-node KVRouter, the leaders only of a multi-node one.
// It is what the router discovers and what status.selector reports for the scale subresource.
func EngineSelector(kvr *v1alpha1.KVRouter) string {
	return labels.SelectorFromSet(selectorLabels(kvr, NameEngine, ComponentEngine)).String()
}

// RouterSelector is the label selector of this KVRouter's router pods.
func RouterSelector(kvr *v1alpha1.KVRouter) string {
	return labels.SelectorFromSet(selectorLabels(kvr, NameRouter, ComponentRouter)).String()
}
