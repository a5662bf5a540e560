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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The release images of the router, of the simulated engine and of vLLM, used when Options
// leaves them empty. The operator's Deployment normally sets all three (RELATED_IMAGE_ROUTER,
// RELATED_IMAGE_SIMULATOR, RELATED_IMAGE_ENGINE), so these matter for `manager render` and
// local runs.
const (
	DefaultRouterImage    = "ghcr.io/kvrouter/router:v0.1.0"
	DefaultSimulatorImage = "ghcr.io/kvrouter/vllm-sim:v0.1.0"
	DefaultEngineImage    = "vllm/vllm-openai:v0.26.0"
)

// Options are the operator-level settings that shape the objects, as opposed to the per-KVRouter
// spec.
type Options struct {
	// RouterImage runs the router (/router). spec.router.image overrides it per KVRouter.
	// Empty: DefaultRouterImage.
	RouterImage string

	// SimulatorImage runs vllm-sim (/vllm-sim) in place of vLLM when spec.simulate is true.
	// Empty: DefaultSimulatorImage.
	SimulatorImage string
	// EngineImage runs vLLM. spec.engine.image overrides it per KVRouter. Empty:
	// DefaultEngineImage.
	EngineImage string

	// LabelAllowList names the labels of the KVRouter copied onto its children. Nil:
	// DefaultLabelAllowList. An empty, non-nil list copies none.
	LabelAllowList []string

	// PlatformAssignsUID says the cluster gives every pod its UID, as OpenShift's restricted-v2
	// SCC does (one from the namespace's range). Pods then carry no runAsUser, runAsGroup or
	// fsGroup: any fixed value outside that range would be refused. Otherwise engine pods whose
	// image runs as root (vLLM's) run as EngineUID, because runAsNonRoot alone makes the kubelet
	// refuse such an image.
	PlatformAssignsUID bool

	// EngineUID is the UID of vLLM engine pods where the platform assigns none. 0:
	// DefaultEngineUID. spec.engine.runAsUser overrides it per KVRouter.
	EngineUID int64

	// Who may reach the router's admin port (its metrics, /v1/status and /v1/autoscale) through
	// the router's NetworkPolicy. The public port stays open to all.
	//
	// OperatorNamespace is the namespace of the operator's own pods (those with OperatorPodLabels),
	// which read /v1/status. Empty: DefaultOperatorNamespace.
	OperatorNamespace string
	// MonitoringNamespaces selects the namespaces whose pods may scrape the router (Prometheus).
	// Nil: DefaultMonitoringNamespaces.
	MonitoringNamespaces *metav1.LabelSelector
	// AutoscalerNamespaces selects the namespaces whose pods may read /v1/autoscale (KEDA's
	// operator, which runs the metrics-api trigger). Nil: DefaultAutoscalerNamespaces.
	AutoscalerNamespaces *metav1.LabelSelector
}

// DefaultOperatorNamespace is where config/default installs the operator.
const DefaultOperatorNamespace = "kvrouter-system"

// OperatorPodLabels are the labels of the operator's pods (config/manager, and the CSV's
// Deployment that OLM creates from it).
var OperatorPodLabels = map[string]string{
	"app.kubernetes.io/name":      "kvrouter-operator",
	"app.kubernetes.io/component": "manager",
}

// DefaultMonitoringNamespaces is where the usual Prometheus installations run: kube-prometheus
// and most charts in "monitoring", OpenShift's platform and user-workload Prometheus in their
// own namespaces. Namespaces are matched by the name label every namespace carries.
func DefaultMonitoringNamespaces() *metav1.LabelSelector {
	return namespacesNamed("monitoring", "openshift-monitoring", "openshift-user-workload-monitoring")
}

// DefaultAutoscalerNamespaces is where KEDA runs: "keda" from its chart and manifests,
// "openshift-keda" from OpenShift's Custom Metrics Autoscaler.
func DefaultAutoscalerNamespaces() *metav1.LabelSelector {
	return namespacesNamed("keda", "openshift-keda")
}

func namespacesNamed(names ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: names,
	}}}
}

func (o Options) operatorNamespace() string {
	if o.OperatorNamespace == "" {
		return DefaultOperatorNamespace
	}
	return o.OperatorNamespace
}

func (o Options) monitoringNamespaces() *metav1.LabelSelector {
	if o.MonitoringNamespaces == nil {
		return DefaultMonitoringNamespaces()
	}
	return o.MonitoringNamespaces.DeepCopy()
}

func (o Options) autoscalerNamespaces() *metav1.LabelSelector {
	if o.AutoscalerNamespaces == nil {
		return DefaultAutoscalerNamespaces()
	}
	return o.AutoscalerNamespaces.DeepCopy()
}

// DefaultEngineUID is the vllm user (UID 2000, primary group 0) that the vllm/vllm-openai image
// defines but does not switch to: its HOME and caches are group-0 writable, as for OpenShift's
// arbitrary UIDs.
const DefaultEngineUID int64 = 2000

func (o Options) engineUID() int64 {
	if o.EngineUID == 0 {
		return DefaultEngineUID
	}
	return o.EngineUID
}

func (o Options) routerImage() string {
	if o.RouterImage == "" {
		return DefaultRouterImage
	}
	return o.RouterImage
}

func (o Options) engineImage() string {
	if o.EngineImage == "" {
		return DefaultEngineImage
	}
	return o.EngineImage
}

func (o Options) simulatorImage() string {
	if o.SimulatorImage == "" {
		return DefaultSimulatorImage
	}
	return o.SimulatorImage
}
