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
	"strings"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// Fixed ports of the contract between the operator, the engines and the router.
const (
	EnginePort   = 8000
	KVEventsPort = 5557
	KVReplayPort = 5558
	// RouterPort is the router's public port: inference, /v1/models and the kubelet's probes.
	RouterPort = 8080
	// RouterAdminPort serves the router's /metrics, /v1/status and /v1/autoscale, for
	// Prometheus, the operator and KEDA only (see routerNetworkPolicy).
	RouterAdminPort = 9090
	// RouterGRPCPort serves the Envoy ext_proc protocol when the router is the InferencePool's
	// endpoint picker (spec.gateway.mode: InferencePool), for the Gateway's data plane.
	RouterGRPCPort = 9002
	// RouterGRPCHealthPort serves the gRPC health protocol in that mode (services liveness,
	// readiness and envoy.service.ext_proc.v3.ExternalProcessor): the public HTTP port, and so
	// its /health and /ready, is not served then.
	RouterGRPCHealthPort = 9003
	PortNameHTTP         = "http"
	PortNameAdmin        = "admin"
	PortNameGRPC         = "grpc"
	PortNameGRPCHealth   = "grpc-health"
	PortNameKVEvents     = "kv-events"
	PortNameKVReplay     = "kv-replay"
)

// MaxNameLength is the longest KVRouter name whose children all get valid names: the router
// Service is "<name>-router" and Service names are DNS-1035 labels of at most 63 characters.
const MaxNameLength = 63 - len("-router")

// EngineWorkloadName is the name of the engine Deployment or LeaderWorkerSet.
func EngineWorkloadName(kvr *v1alpha1.KVRouter) string { return kvr.Name + "-engine" }

// EngineWorkloadKind says what EngineWorkloadName names: "Deployment" or "LeaderWorkerSet".
func EngineWorkloadKind(kvr *v1alpha1.KVRouter) string {
	if isMultiNode(kvr) {
		return "LeaderWorkerSet"
	}
	return "Deployment"
}

// EngineWorkloadAPIVersion is the apiVersion of the engine workload.
func EngineWorkloadAPIVersion(kvr *v1alpha1.KVRouter) string {
	if isMultiNode(kvr) {
		return "leaderworkerset.x-k8s.io/v1"
	}
	return "apps/v1"
}

// RouterName names the router Deployment, Service, ServiceAccount, Role, RoleBinding and PDB.
func RouterName(kvr *v1alpha1.KVRouter) string { return kvr.Name + "-router" }

// RouteName names the HTTPRoute.
func RouteName(kvr *v1alpha1.KVRouter) string { return kvr.Name }

// InferencePoolName names the InferencePool (spec.gateway.mode: InferencePool).
func InferencePoolName(kvr *v1alpha1.KVRouter) string { return kvr.Name }

// UsesInferencePool says whether the Gateway reaches the engines through an InferencePool whose
// endpoint picker is the router, rather than through the router as a proxy.
func UsesInferencePool(kvr *v1alpha1.KVRouter) bool {
	return kvr.Spec.Gateway != nil && kvr.Spec.Gateway.Mode == v1alpha1.GatewayModeInferencePool
}

// ScaledObjectName names the KEDA ScaledObject.
func ScaledObjectName(kvr *v1alpha1.KVRouter) string { return kvr.Name + "-engine" }

// NetworkPolicyName names the NetworkPolicy that guards the engines' ports.
func NetworkPolicyName(kvr *v1alpha1.KVRouter) string { return kvr.Name + "-engine" }

// RouterNetworkPolicyName names the NetworkPolicy that guards the router's admin port.
func RouterNetworkPolicyName(kvr *v1alpha1.KVRouter) string { return kvr.Name + "-router" }

// ServiceMonitorName names the ServiceMonitor that scrapes the router.
func ServiceMonitorName(kvr *v1alpha1.KVRouter) string { return kvr.Name + "-router" }

// PodMonitorName names the PodMonitor that scrapes the engines.
func PodMonitorName(kvr *v1alpha1.KVRouter) string { return kvr.Name + "-engine" }

// PrometheusRuleName names the PrometheusRule that holds the KVRouter's alerts.
func PrometheusRuleName(kvr *v1alpha1.KVRouter) string { return kvr.Name + "-alerts" }

// ServedName is the model name clients send: spec.model.servedName, else metadata.name.
func ServedName(kvr *v1alpha1.KVRouter) string {
	if kvr.Spec.Model.ServedName != "" {
		return kvr.Spec.Model.ServedName
	}
	return kvr.Name
}

// RouterServiceURL is the in-cluster URL of the router Service.
func RouterServiceURL(kvr *v1alpha1.KVRouter) string {
	return fmt.Sprintf("http://%s.%s.svc:%d", RouterName(kvr), kvr.Namespace, RouterPort)
}

// RouterAdminURL is the in-cluster URL of the router Service's admin port, where the operator
// reads /v1/status and KEDA /v1/autoscale.
func RouterAdminURL(kvr *v1alpha1.KVRouter) string {
	return fmt.Sprintf("http://%s.%s.svc:%d", RouterName(kvr), kvr.Namespace, RouterAdminPort)
}

// URL is where clients send requests, for status.url: the first exact hostname of the HTTPRoute
// when a Gateway is attached, else the router Service. The scheme is http because render cannot
// see the Gateway's listeners; a reconciler that reads them may upgrade it to https. With an
// InferencePool and no exact hostname it is empty: the router serves no HTTP then, and only the
// Gateway, whose address render cannot see, reaches the engines.
func URL(kvr *v1alpha1.KVRouter) string {
	if gw := kvr.Spec.Gateway; gw != nil {
		for _, h := range gw.Hostnames {
			if !strings.HasPrefix(string(h), "*") {
				// With modelMatch Path the model's API is under its prefix on the shared host.
				return "http://" + string(h) + RoutePathPrefix(kvr)
			}
		}
	}
	if UsesInferencePool(kvr) {
		return ""
	}
	return RouterServiceURL(kvr)
}

func isMultiNode(kvr *v1alpha1.KVRouter) bool { return kvr.Spec.Engine.NodesPerReplica > 1 }
