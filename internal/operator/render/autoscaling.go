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
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// ScaledObject identity. It is built as unstructured data so that the operator does not depend
// on KEDA's Go module (and its dependency tree) for one object.
const (
	ScaledObjectAPIVersion = "keda.sh/v1alpha1"
	ScaledObjectKind       = "ScaledObject"
)

// HPA behaviour of the ScaledObject. A new engine takes minutes to load its model and takes no
// load until then, so the queue it was started for is still there at the next poll: the
// scale-up window and rate limit stop KEDA from adding replicas for a queue that replicas already
// on their way will drain. The long scale-down window keeps a short lull from throwing away a
// warm replica (and its prefix cache) that the next burst needs.
const (
	pollingIntervalSeconds  = 15
	scaleUpWindowSeconds    = 120
	scaleUpPeriodSeconds    = 120
	scaleUpMaxPods          = 2
	scaleDownWindowSeconds  = 600
	scaleDownPeriodSeconds  = 120
	scaleDownMaxPods        = 1
	autoscaleMetricName     = "waiting-requests"
	autoscaleValueLocation  = "waitingRequests"
	autoscalePath           = "/v1/autoscale"
	prometheusWaitingMetric = "vllm:num_requests_waiting"
	metricTypeAverageValue  = "AverageValue"
	kedaTriggerMetricsAPI   = "metrics-api"
	kedaTriggerPrometheus   = "prometheus"
)

// defaultTargetQueueDepth is spec.autoscaling.targetQueueDepth's schema default, the prefill
// pool's target when spec.autoscaling is not set.
const defaultTargetQueueDepth = 4

// scaledObject scales an engine pool's workload on waiting requests per replica. The signal comes
// from the router's /v1/autoscale on its admin port (requests queued in engines and router; of
// the pool's engines only when disaggregated) unless spec.autoscaling.prometheus points at a
// Prometheus that scrapes the engines. Each pool has its own: prefill engines queue prompts,
// decode engines streams, and one signal for both would grow the pool that is not short.
func scaledObject(kvr *v1alpha1.KVRouter, opts Options, pool Pool) *unstructured.Unstructured {
	a := kvr.Spec.Autoscaling
	minReplicas, maxReplicas := int32(0), int32(0)
	depth := int32(defaultTargetQueueDepth)
	var prom *v1alpha1.PrometheusSpec
	if a != nil {
		minReplicas, maxReplicas, depth, prom = a.MinReplicas, a.MaxReplicas, a.TargetQueueDepth, a.Prometheus
	}
	if pool == PoolPrefill {
		pa := kvr.Spec.Disaggregation.Prefill.Autoscaling
		minReplicas, maxReplicas = pa.MinReplicas, pa.MaxReplicas
	}
	target := strconv.Itoa(int(depth))
	url := RouterAdminURL(kvr) + autoscalePath
	if pool != PoolNone {
		url += "?role=" + string(pool)
	}

	var trigger map[string]any
	if prom != nil {
		trigger = map[string]any{
			"type":       kedaTriggerPrometheus,
			"name":       autoscaleMetricName,
			"metricType": metricTypeAverageValue,
			"metadata": map[string]any{
				"serverAddress": prom.ServerAddress,
				"query":         prometheusQuery(kvr, pool),
				"threshold":     target,
				// An empty result means the engines are not scraped; say so (the
				// ScaledObject turns not Ready) instead of reading it as zero and
				// holding the fleet at its minimum.
				"ignoreNullValues": "false",
			},
		}
	} else {
		trigger = map[string]any{
			"type":       kedaTriggerMetricsAPI,
			"name":       autoscaleMetricName,
			"metricType": metricTypeAverageValue,
			"metadata": map[string]any{
				"url":           url,
				"format":        "json",
				"valueLocation": autoscaleValueLocation,
				"targetValue":   target,
			},
		}
	}

	meta := childMeta(kvr, opts, PoolScaledObjectName(kvr, pool), NameEngine, ComponentEngine)
	if pool != PoolNone {
		meta.Labels[LabelRole] = string(pool)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ScaledObjectAPIVersion,
		"kind":       ScaledObjectKind,
		"spec": map[string]any{
			"scaleTargetRef": map[string]any{
				"apiVersion": EngineWorkloadAPIVersion(kvr),
				"kind":       EngineWorkloadKind(kvr),
				"name":       PoolWorkloadName(kvr, pool),
			},
			"pollingInterval": int64(pollingIntervalSeconds),
			// Always explicit: KEDA's default minimum is 0, which would unload the model.
			"minReplicaCount": int64(minReplicas),
			"maxReplicaCount": int64(maxReplicas),
			"advanced": map[string]any{
				"horizontalPodAutoscalerConfig": map[string]any{
					"behavior": map[string]any{
						"scaleUp": map[string]any{
							"stabilizationWindowSeconds": int64(scaleUpWindowSeconds),
							"policies": []any{map[string]any{
								"type": "Pods", "value": int64(scaleUpMaxPods), "periodSeconds": int64(scaleUpPeriodSeconds),
							}},
						},
						"scaleDown": map[string]any{
							"stabilizationWindowSeconds": int64(scaleDownWindowSeconds),
							"policies": []any{map[string]any{
								"type": "Pods", "value": int64(scaleDownMaxPods), "periodSeconds": int64(scaleDownPeriodSeconds),
							}},
						},
					},
				},
			},
			"triggers": []any{trigger},
		},
	}}
	u.SetName(meta.Name)
	u.SetNamespace(meta.Namespace)
	u.SetLabels(meta.Labels)
	u.SetOwnerReferences(meta.OwnerReferences)
	return u
}

// prometheusQuery sums the requests waiting in the serving pods of one of this KVRouter's pools. The pod pattern
// matches the pod names of the engine workload only (Deployment pods are
// <workload>-<hash>-<suffix>, LeaderWorkerSet leaders <workload>-<group>), so a KVRouter whose
// name extends this one's does not leak into the sum.
func prometheusQuery(kvr *v1alpha1.KVRouter, pool Pool) string {
	pods := PoolWorkloadName(kvr, pool) + "-[a-z0-9]+-[a-z0-9]+"
	if isMultiNode(kvr) {
		pods = PoolWorkloadName(kvr, pool) + "-[0-9]+"
	}
	return fmt.Sprintf(`sum(%s{namespace=%q,pod=~%q})`, prometheusWaitingMetric, kvr.Namespace, pods)
}
