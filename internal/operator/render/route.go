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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// PublicPaths are the router paths the HTTPRoute sends to it: the inference API and the model
// list, matched exactly. Everything else the router serves stays inside the cluster: the probes,
// and the admin endpoints (/metrics, /v1/status, /v1/autoscale), which the router serves on its
// admin port only. Exact matches rather than a /v1/ prefix, because a prefix would also match
// /v1/status and /v1/autoscale, and Gateway API has no way to subtract paths from a prefix (its
// regular expressions are an optional feature, and RE2 has no negative lookahead); a path the
// router does not serve would get its 404 anyway. A new public path of the router goes here.
var PublicPaths = []string{"/v1/completions", "/v1/chat/completions", "/v1/models"}

// httpRoute attaches the router Service (or, in InferencePool mode, the InferencePool) to the
// Gateways of spec.gateway, for PublicPaths only. Timeouts are zero (disabled): a streamed
// completion can run for minutes, and Envoy-based Gateways otherwise cut it at their default of
// 15 seconds.
func httpRoute(kvr *v1alpha1.KVRouter, opts Options) *gwapiv1.HTTPRoute {
	gw := kvr.Spec.Gateway
	parents := make([]gwapiv1.ParentReference, 0, len(gw.ParentRefs))
	for _, p := range gw.ParentRefs {
		parents = append(parents, *p.DeepCopy())
	}
	matches := make([]gwapiv1.HTTPRouteMatch, 0, len(PublicPaths))
	for _, p := range PublicPaths {
		matches = append(matches, gwapiv1.HTTPRouteMatch{Path: &gwapiv1.HTTPPathMatch{
			Type: ptr.To(gwapiv1.PathMatchExact), Value: ptr.To(p),
		}})
	}
	noTimeout := gwapiv1.Duration("0s")
	return &gwapiv1.HTTPRoute{
		TypeMeta:   metav1.TypeMeta{APIVersion: gwapiv1.GroupVersion.String(), Kind: "HTTPRoute"},
		ObjectMeta: childMeta(kvr, opts, RouteName(kvr), NameRouter, ComponentRouter),
		Spec: gwapiv1.HTTPRouteSpec{
			CommonRouteSpec: gwapiv1.CommonRouteSpec{ParentRefs: parents},
			Hostnames:       append([]gwapiv1.Hostname(nil), gw.Hostnames...),
			Rules: []gwapiv1.HTTPRouteRule{{
				Matches: matches,
				BackendRefs: []gwapiv1.HTTPBackendRef{{BackendRef: gwapiv1.BackendRef{
					BackendObjectReference: routeBackend(kvr),
				}}},
				Timeouts: &gwapiv1.HTTPRouteTimeouts{Request: &noTimeout, BackendRequest: &noTimeout},
			}},
		},
	}
}

// routeBackend is the router Service's public port, or the InferencePool. The pool's port is the
// engines' (its targetPorts): Gateway API makes it optional for kinds other than Service and the
// Inference Extension's conformance tests require it to be accepted either way, but some
// implementations' earlier releases refused a pool reference without it.
func routeBackend(kvr *v1alpha1.KVRouter) gwapiv1.BackendObjectReference {
	if UsesInferencePool(kvr) {
		return gwapiv1.BackendObjectReference{
			Group: ptr.To(gwapiv1.Group(InferencePoolGroup)),
			Kind:  ptr.To(gwapiv1.Kind(InferencePoolKind)),
			Name:  gwapiv1.ObjectName(InferencePoolName(kvr)),
			Port:  ptr.To(gwapiv1.PortNumber(EnginePort)),
		}
	}
	return gwapiv1.BackendObjectReference{
		Name: gwapiv1.ObjectName(RouterName(kvr)),
		Port: ptr.To(gwapiv1.PortNumber(RouterPort)),
	}
}
