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
	return &gwapiv1.HTTPRoute{
		TypeMeta:   metav1.TypeMeta{APIVersion: gwapiv1.GroupVersion.String(), Kind: "HTTPRoute"},
		ObjectMeta: childMeta(kvr, opts, RouteName(kvr), NameRouter, ComponentRouter),
		Spec: gwapiv1.HTTPRouteSpec{
			CommonRouteSpec: gwapiv1.CommonRouteSpec{ParentRefs: parents},
			Hostnames:       append([]gwapiv1.Hostname(nil), gw.Hostnames...),
			Rules:           routeRules(kvr),
		},
	}
}

// routeRules are the HTTPRoute's rules for spec.gateway.modelMatch. None: one rule, the public
// paths. Header: one rule, each public path once per model name (the served name, then the
// adapters) with the model header equal to it; a header match is more specific than none, so
// these routes also win over a route of the same paths without one. Path: one rule per public
// path, /<metadata.name><path> rewritten to <path>: a rule's filters apply to all its matches,
// and the exact rewrite keeps the admin paths (/v1/status) unreachable, as with None.
func routeRules(kvr *v1alpha1.KVRouter) []gwapiv1.HTTPRouteRule {
	noTimeout := gwapiv1.Duration("0s")
	rule := func(matches []gwapiv1.HTTPRouteMatch, filters ...gwapiv1.HTTPRouteFilter) gwapiv1.HTTPRouteRule {
		return gwapiv1.HTTPRouteRule{
			Matches: matches,
			Filters: filters,
			BackendRefs: []gwapiv1.HTTPBackendRef{{BackendRef: gwapiv1.BackendRef{
				BackendObjectReference: routeBackend(kvr),
			}}},
			Timeouts: &gwapiv1.HTTPRouteTimeouts{Request: &noTimeout, BackendRequest: &noTimeout},
		}
	}
	exact := func(path string) *gwapiv1.HTTPPathMatch {
		return &gwapiv1.HTTPPathMatch{Type: ptr.To(gwapiv1.PathMatchExact), Value: ptr.To(path)}
	}
	switch kvr.Spec.Gateway.ModelMatch {
	case v1alpha1.ModelMatchHeader:
		names := ModelNames(kvr)
		matches := make([]gwapiv1.HTTPRouteMatch, 0, len(PublicPaths)*len(names))
		for _, p := range PublicPaths {
			for _, n := range names {
				matches = append(matches, gwapiv1.HTTPRouteMatch{
					Path: exact(p),
					Headers: []gwapiv1.HTTPHeaderMatch{{
						Type: ptr.To(gwapiv1.HeaderMatchExact), Name: v1alpha1.ModelHeader, Value: n,
					}},
				})
			}
		}
		return []gwapiv1.HTTPRouteRule{rule(matches)}
	case v1alpha1.ModelMatchPath:
		rules := make([]gwapiv1.HTTPRouteRule, 0, len(PublicPaths))
		for _, p := range PublicPaths {
			rules = append(rules, rule(
				[]gwapiv1.HTTPRouteMatch{{Path: exact(RoutePathPrefix(kvr) + p)}},
				gwapiv1.HTTPRouteFilter{
					Type: gwapiv1.HTTPRouteFilterURLRewrite,
					URLRewrite: &gwapiv1.HTTPURLRewriteFilter{Path: &gwapiv1.HTTPPathModifier{
						Type: gwapiv1.FullPathHTTPPathModifier, ReplaceFullPath: ptr.To(p),
					}},
				}))
		}
		return rules
	}
	matches := make([]gwapiv1.HTTPRouteMatch, 0, len(PublicPaths))
	for _, p := range PublicPaths {
		matches = append(matches, gwapiv1.HTTPRouteMatch{Path: exact(p)})
	}
	return []gwapiv1.HTTPRouteRule{rule(matches)}
}

// ModelNames are the model names a KVRouter serves: the served name, then its LoRA adapters in
// the spec's order.
func ModelNames(kvr *v1alpha1.KVRouter) []string {
	names := []string{ServedName(kvr)}
	for _, l := range kvr.Spec.Model.LoRAs {
		names = append(names, l.Name)
	}
	return names
}

// RoutePathPrefix is the path the HTTPRoute puts in front of the public paths: "/<metadata.name>"
// with spec.gateway.modelMatch Path, else "". The KVRouter's name rather than its served name:
// it is a DNS label, so always a valid path segment, while a served name may hold "/" or "..".
func RoutePathPrefix(kvr *v1alpha1.KVRouter) string {
	if gw := kvr.Spec.Gateway; gw != nil && gw.ModelMatch == v1alpha1.ModelMatchPath {
		return "/" + kvr.Name
	}
	return ""
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
			Port:  ptr.To(gwapiv1.PortNumber(inferencePoolTargetPort(kvr))),
		}
	}
	return gwapiv1.BackendObjectReference{
		Name: gwapiv1.ObjectName(RouterName(kvr)),
		Port: ptr.To(gwapiv1.PortNumber(RouterPort)),
	}
}
