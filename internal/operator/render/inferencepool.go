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
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// The InferencePool's API (Gateway API Inference Extension), for the HTTPRoute's backendRef and
// the controller's optional kinds.
const (
	InferencePoolGroup = infv1.GroupName
	InferencePoolKind  = "InferencePool"
)

// DefaultFailureMode is the endpoint picker's failure mode when spec.gateway.failureMode is
// unset. It is not a schema default because the field means nothing in HTTPRoute mode, where the
// CRD refuses it.
const DefaultFailureMode = v1alpha1.FailOpen

// failureMode is spec.gateway.failureMode, else DefaultFailureMode.
func failureMode(kvr *v1alpha1.KVRouter) infv1.EndpointPickerFailureMode {
	if m := kvr.Spec.Gateway.FailureMode; m != "" {
		return infv1.EndpointPickerFailureMode(m)
	}
	return infv1.EndpointPickerFailureMode(DefaultFailureMode)
}

// inferencePool makes the engines a Gateway API Inference Extension InferencePool whose endpoint
// picker is the router. Its selector is the router's own discovery selector (EngineSelector), so
// the Gateway and the router agree on the members: the serving engine pods, leaders only for
// multi-node replicas, whose headless workers serve no HTTP. The picker reference names the
// router Service's ext_proc port; the Service, not the pods, because the Gateway balances its
// ext_proc streams over every router replica, each of which holds the full index.
func inferencePool(kvr *v1alpha1.KVRouter, opts Options) *infv1.InferencePool {
	sel := map[infv1.LabelKey]infv1.LabelValue{}
	for k, v := range selectorLabels(kvr, NameEngine, ComponentEngine) {
		sel[infv1.LabelKey(k)] = infv1.LabelValue(v)
	}
	return &infv1.InferencePool{
		TypeMeta:   metav1.TypeMeta{APIVersion: infv1.GroupVersion.String(), Kind: InferencePoolKind},
		ObjectMeta: childMeta(kvr, opts, InferencePoolName(kvr), NameEngine, ComponentEngine),
		Spec: infv1.InferencePoolSpec{
			Selector:    infv1.LabelSelector{MatchLabels: sel},
			TargetPorts: []infv1.Port{{Number: inferencePoolTargetPort(kvr)}},
			// AppProtocol stays unset although vLLM speaks HTTP/1.1 only: the field exists from
			// Inference Extension v1.4.0 on, server-side apply refuses a field the CRD does not
			// declare, and v1.0 to v1.3 CRDs would then refuse the whole pool. Unset means
			// HTTP/1.1 in every version (the v1.4.0+ schema defaults it to http).
			// Group is left to its schema default (the core group): render's output is what the
			// operator applies, and the apply drops empty strings.
			EndpointPickerRef: &infv1.EndpointPickerRef{
				Kind:        "Service",
				Name:        infv1.ObjectName(RouterName(kvr)),
				Port:        &infv1.Port{Number: RouterGRPCPort},
				FailureMode: failureMode(kvr),
			},
		},
	}
}

// inferencePoolTargetPort is where the Gateway sends requests in the pool's pods: vLLM's port,
// or with disaggregation the pd-sidecar's, which runs a split request's prefill leg on the
// engine the picker named in a header before the decode leg on its own engine.
func inferencePoolTargetPort(kvr *v1alpha1.KVRouter) infv1.PortNumber {
	if Disaggregated(kvr) {
		return PDSidecarPort
	}
	return EnginePort
}
