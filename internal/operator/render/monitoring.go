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
	"maps"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// The Prometheus Operator's kinds. Its Go module (pkg/apis/monitoring) requires newer k8s.io
// modules than the operator builds with, so they are rendered unstructured, like KEDA's.
const (
	MonitoringAPIVersion = "monitoring.coreos.com/v1"
	ServiceMonitorKind   = "ServiceMonitor"
	PodMonitorKind       = "PodMonitor"
	PrometheusRuleKind   = "PrometheusRule"

	metricsPath = "/metrics"
	// MetricsLabelKVRouter is the label every scraped series gets, valued with the KVRouter's
	// name: dashboards and alerts select one KVRouter by it (with namespace) whatever the pod
	// and job names are.
	MetricsLabelKVRouter = "kvrouter"
)

// serviceMonitor scrapes the router through its Service (kvrouter_* metrics on the admin port).
func serviceMonitor(kvr *v1alpha1.KVRouter, opts Options) *unstructured.Unstructured {
	return monitor(kvr, opts, ServiceMonitorKind, ServiceMonitorName(kvr), NameRouter, ComponentRouter, "endpoints",
		PortNameAdmin, selectorLabels(kvr, NameRouter, ComponentRouter))
}

// podMonitor scrapes the engines' vllm:* metrics from the pods: the router finds engines by
// their pods, so there is no engine Service to scrape through. The selector is the router's
// (single-node pods, multi-node leaders): headless workers serve no HTTP.
func podMonitor(kvr *v1alpha1.KVRouter, opts Options) *unstructured.Unstructured {
	return monitor(kvr, opts, PodMonitorKind, PodMonitorName(kvr), NameEngine, ComponentEngine, "podMetricsEndpoints",
		PortNameHTTP, selectorLabels(kvr, NameEngine, ComponentEngine))
}

func monitor(kvr *v1alpha1.KVRouter, opts Options, kind, name, appName, component, endpointsField, port string, sel map[string]string) *unstructured.Unstructured {
	m := kvr.Spec.Monitoring
	endpoint := map[string]any{
		"port": port,
		"path": metricsPath,
		// A constant label rather than one copied from a pod or Service label: the monitor
		// belongs to one KVRouter, and the value survives any relabelling of the
		// Kubernetes labels.
		"relabelings": []any{map[string]any{
			"action":      "replace",
			"targetLabel": MetricsLabelKVRouter,
			"replacement": kvr.Name,
		}},
	}
	if m.Interval != "" {
		endpoint["interval"] = m.Interval
	}
	matchLabels := map[string]any{}
	for k, v := range sel {
		matchLabels[k] = v
	}
	return monitoringObject(kvr, opts, kind, name, appName, component, map[string]any{
		"selector":     map[string]any{"matchLabels": matchLabels},
		endpointsField: []any{endpoint},
	})
}

// prometheusRule holds the alerting rules (alerts.go) for this KVRouter's series: the
// relabelling above gives every series of its router and engines the kvrouter label, and the
// Prometheus Operator adds namespace. It carries spec.monitoring.labels like the monitors,
// because a Prometheus selects rules by label too (ruleSelector).
func prometheusRule(kvr *v1alpha1.KVRouter, opts Options) *unstructured.Unstructured {
	return monitoringObject(kvr, opts, PrometheusRuleKind, PrometheusRuleName(kvr), NameRouter, ComponentRouter, map[string]any{
		"groups": AlertRuleGroups(AlertScope{Namespace: kvr.Namespace, KVRouter: kvr.Name}),
	})
}

// monitoringObject is a Prometheus Operator object of the KVRouter, labelled with
// spec.monitoring.labels so that the Prometheus that should read it selects it.
func monitoringObject(kvr *v1alpha1.KVRouter, opts Options, kind, name, appName, component string, spec map[string]any) *unstructured.Unstructured {
	meta := childMeta(kvr, opts, name, appName, component)
	labels := maps.Clone(kvr.Spec.Monitoring.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	// Validate refuses the reserved keys in spec.monitoring.labels; ours win regardless.
	maps.Copy(labels, meta.Labels)

	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": MonitoringAPIVersion,
		"kind":       kind,
		"spec":       spec,
	}}
	u.SetName(meta.Name)
	u.SetNamespace(meta.Namespace)
	u.SetLabels(labels)
	u.SetOwnerReferences(meta.OwnerReferences)
	return u
}
