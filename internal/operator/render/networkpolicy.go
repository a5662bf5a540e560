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

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// engineNetworkPolicy limits who may connect to the engine pods. KV events carry the token ids
// of users' prompts, so the event and replay ports accept only this KVRouter's router pods. The
// policy selects the engine pods, which makes every port it does not list closed to everyone, so
// it also opens the OpenAI port (clients, the router, Prometheus and, with an InferencePool, the
// Gateway's data plane, which forwards requests to the engines itself) and, for multi-node
// replicas, all ports between the pods of this KVRouter's engine groups (vLLM's rendezvous and
// NCCL pick their ports at run time).
func engineNetworkPolicy(kvr *v1alpha1.KVRouter, opts Options) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	port := func(p int) networkingv1.NetworkPolicyPort {
		v := intstr.FromInt(p)
		return networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &v}
	}
	enginePods := &metav1.LabelSelector{MatchLabels: map[string]string{
		LabelName:     NameEngine,
		LabelKVRouter: kvr.Name,
	}}
	rules := []networkingv1.NetworkPolicyIngressRule{
		{
			Ports: []networkingv1.NetworkPolicyPort{port(KVEventsPort), port(KVReplayPort)},
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{
				MatchLabels: selectorLabels(kvr, NameRouter, ComponentRouter),
			}}},
		},
		{Ports: []networkingv1.NetworkPolicyPort{port(EnginePort)}},
	}
	if Disaggregated(kvr) {
		rules = append(rules, disaggregationIngress(kvr, enginePods, port)...)
	}
	if isMultiNode(kvr) || usesUCXTCP(kvr) {
		// UCX's TCP transport, like vLLM's rendezvous and NCCL, listens on ports chosen at
		// run time: open every port between this KVRouter's engines.
		rules = append(rules, networkingv1.NetworkPolicyIngressRule{
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: enginePods.DeepCopy()}},
		})
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: childMeta(kvr, opts, NetworkPolicyName(kvr), NameEngine, ComponentEngine),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: *enginePods,
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     rules,
		},
	}
}

// routerNetworkPolicy keeps the router's admin port (metrics, /v1/status, /v1/autoscale: endpoint
// names and addresses, load and cache figures) to its readers: the operator's pods, the
// monitoring namespaces and, when the ScaledObject reads /v1/autoscale, KEDA's. The public port
// stays open to every source, as without a policy: clients, Gateways and the kubelet's probes.
// Selecting the router pods closes every other port, of which they have none.
//
// As the InferencePool's endpoint picker the router has no public port; its ext_proc and gRPC
// health ports take that port's place and are open to every source for the same reason: the
// Gateway's data plane is not something a pod or namespace selector can name. It runs in a
// namespace of the Gateway implementation's choosing (Envoy Gateway's, the Gateway's own for
// Istio) or, for a cloud load balancer such as GKE's, outside the cluster's pods altogether;
// the kubelet's gRPC probes and Gateways that health-check the picker come from nodes and load
// balancers. Nothing reaches the engines through ext_proc: the picker only answers which engine
// to use, what a client could learn from the engines' own port, which is open too.
func routerNetworkPolicy(kvr *v1alpha1.KVRouter, opts Options) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	port := func(p int) networkingv1.NetworkPolicyPort {
		v := intstr.FromInt(p)
		return networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &v}
	}
	readers := []networkingv1.NetworkPolicyPeer{
		{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: opts.operatorNamespace()}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: maps.Clone(OperatorPodLabels)},
		},
		{NamespaceSelector: opts.monitoringNamespaces()},
	}
	if readsRouterAutoscale(kvr) {
		readers = append(readers, networkingv1.NetworkPolicyPeer{NamespaceSelector: opts.autoscalerNamespaces()})
	}
	public := []networkingv1.NetworkPolicyPort{port(RouterPort)}
	if UsesInferencePool(kvr) {
		public = []networkingv1.NetworkPolicyPort{port(RouterGRPCPort), port(RouterGRPCHealthPort)}
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: childMeta(kvr, opts, RouterNetworkPolicyName(kvr), NameRouter, ComponentRouter),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selectorLabels(kvr, NameRouter, ComponentRouter)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: public},
				{Ports: []networkingv1.NetworkPolicyPort{port(RouterAdminPort)}, From: readers},
			},
		},
	}
}

// disaggregationIngress opens the connector's side channel (the handshake that tells a decode
// engine where a prefill engine's blocks are) to this KVRouter's engines only, and the
// pd-sidecar port, like the engines' OpenAI port, to every source (the Gateway's data plane).
func disaggregationIngress(kvr *v1alpha1.KVRouter, enginePods *metav1.LabelSelector,
	port func(int) networkingv1.NetworkPolicyPort) []networkingv1.NetworkPolicyIngressRule {
	rules := []networkingv1.NetworkPolicyIngressRule{{
		Ports: []networkingv1.NetworkPolicyPort{port(int(kvr.Spec.Disaggregation.SideChannelPort))},
		From:  []networkingv1.NetworkPolicyPeer{{PodSelector: enginePods.DeepCopy()}},
	}}
	if UsesInferencePool(kvr) {
		rules = append(rules, networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{port(PDSidecarPort)}})
	}
	return rules
}

// readsRouterAutoscale says whether a ScaledObject of this KVRouter reads the router's
// /v1/autoscale (rather than Prometheus), so that KEDA must reach the router's admin port.
func readsRouterAutoscale(kvr *v1alpha1.KVRouter) bool {
	a := kvr.Spec.Autoscaling
	if a != nil && a.Prometheus == nil {
		return true
	}
	d := kvr.Spec.Disaggregation
	return d != nil && d.Prefill.Autoscaling != nil && (a == nil || a.Prometheus == nil)
}
