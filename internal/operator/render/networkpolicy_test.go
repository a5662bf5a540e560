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

package render_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/wrappers"
)

// pod is what NetworkPolicy semantics look at: labels, namespace (and its labels), named ports.
type pod struct {
	name      string
	namespace string
	nsLabels  map[string]string
	labels    map[string]string
	ports     []corev1.ContainerPort
}

func podOf(name, namespace string, tpl corev1.PodTemplateSpec) pod {
	p := pod{name: name, namespace: namespace, labels: tpl.Labels,
		nsLabels: map[string]string{corev1.LabelMetadataName: namespace}}
	for _, c := range tpl.Spec.Containers {
		p.ports = append(p.ports, c.Ports...)
	}
	return p
}

// ingressAllowed says whether src may open a TCP connection to dst on port, by the rules of
// Kubernetes NetworkPolicy: a pod that no Ingress policy selects accepts everything; one that
// some do accepts what the union of their ingress rules allows. A rule allows when one of its
// ports matches (none listed: every port; a named port resolves against dst's container ports;
// endPort makes a range) and one of its peers matches src (none listed: every source; a
// podSelector alone means dst's namespace; a namespaceSelector alone, every pod of the selected
// namespaces; both, the selected pods of the selected namespaces). ipBlock peers select by
// address, which this evaluator does not model: it refuses policies that use them.
func ingressAllowed(t testing.TB, policies []*networkingv1.NetworkPolicy, src, dst pod, port int32) bool {
	t.Helper()
	isolated := false
	for _, np := range policies {
		if np.Namespace != dst.namespace || !selects(t, &np.Spec.PodSelector, dst.labels) || !hasIngressType(np) {
			continue
		}
		isolated = true
		for _, rule := range np.Spec.Ingress {
			if portMatches(rule.Ports, dst, port) && peerMatches(t, rule.From, src, dst) {
				return true
			}
		}
	}
	return !isolated
}

func hasIngressType(np *networkingv1.NetworkPolicy) bool {
	// Without policyTypes, Ingress is implied.
	return len(np.Spec.PolicyTypes) == 0 || slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
}

func portMatches(ports []networkingv1.NetworkPolicyPort, dst pod, port int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		if p.Port == nil {
			return true // every port of the protocol
		}
		lo := p.Port.IntVal
		if p.Port.StrVal != "" {
			lo = -1
			for _, cp := range dst.ports {
				if cp.Name == p.Port.StrVal && (cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP) {
					lo = cp.ContainerPort
				}
			}
		}
		hi := lo
		if p.EndPort != nil {
			hi = *p.EndPort
		}
		if lo >= 0 && port >= lo && port <= hi {
			return true
		}
	}
	return false
}

func peerMatches(t testing.TB, peers []networkingv1.NetworkPolicyPeer, src, dst pod) bool {
	t.Helper()
	if len(peers) == 0 {
		return true
	}
	for _, peer := range peers {
		if peer.IPBlock != nil {
			t.Fatalf("ipBlock peer %+v: the evaluator cannot tell which pods it covers", peer.IPBlock)
		}
		nsOK := src.namespace == dst.namespace
		if peer.NamespaceSelector != nil {
			nsOK = selects(t, peer.NamespaceSelector, src.nsLabels)
		}
		podOK := peer.PodSelector == nil || selects(t, peer.PodSelector, src.labels)
		if nsOK && podOK {
			return true
		}
	}
	return false
}

func selects(t testing.TB, s *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatalf("selector %+v: %v", s, err)
	}
	return sel.Matches(labels.Set(l))
}

func networkPolicies(objs ...[]client.Object) []*networkingv1.NetworkPolicy {
	var out []*networkingv1.NetworkPolicy
	for _, list := range objs {
		for _, o := range list {
			if np, ok := o.(*networkingv1.NetworkPolicy); ok {
				out = append(out, np)
			}
		}
	}
	return out
}

// rolePods returns the engine pods (by role) and the router pod of a rendered KVRouter.
func rolePods(t *testing.T, kvr *v1alpha1.KVRouter, objs []client.Object) (engines []pod, router pod) {
	t.Helper()
	for where, tpl := range podTemplates(objs) {
		p := podOf(kvr.Namespace+"/"+where, kvr.Namespace, tpl)
		switch tpl.Labels[render.LabelName] {
		case render.NameEngine:
			engines = append(engines, p)
		case render.NameRouter:
			router = p
		default:
			t.Fatalf("%s: unknown pod %v", where, tpl.Labels)
		}
	}
	if len(engines) == 0 || router.name == "" {
		t.Fatalf("engines %d, router %q", len(engines), router.name)
	}
	return engines, router
}

// TestNetworkPolicyRestrictsKVEventPorts evaluates the union of the rendered NetworkPolicies for
// every port an engine pod listens on (its declared ports, vLLM's rendezvous port 29500 and an
// arbitrary NCCL-style port) against every kind of client: the KV-event and replay ports carry
// prompt token ids and must be open to this KVRouter's router pods only (and, within a multi-node
// replica, to its own engine pods, which exchange the same prompts' tensors on ports chosen at
// run time); the OpenAI port is open to all.
func TestNetworkPolicyRestrictsKVEventPorts(t *testing.T) {
	kvPorts := []int32{render.KVEventsPort, render.KVReplayPort}
	for name, kvr := range map[string]*v1alpha1.KVRouter{
		"single node":   wrappers.MakeKVRouter("m", "ns").Obj(),
		"simulate":      wrappers.MakeKVRouter("m", "ns").Simulate().Obj(),
		"LWS multinode": wrappers.MakeKVRouter("m", "ns").TensorParallel(8).NodesPerReplica(2).Obj(),
		"LWS simulate":  wrappers.MakeKVRouter("m", "ns").TensorParallel(8).NodesPerReplica(3).Simulate().Obj(),
		// The Gateway forwards to the engines itself: the same rules serve it.
		"inference pool":     wrappers.MakeKVRouter("m", "ns").Gateway("gw", "infra").InferencePool("").Obj(),
		"inference pool LWS": wrappers.MakeKVRouter("m", "ns").TensorParallel(8).NodesPerReplica(2).Gateway("gw", "infra").InferencePool("").Obj(),
	} {
		t.Run(name, func(t *testing.T) {
			multiNode := kvr.Spec.Engine.NodesPerReplica > 1
			objs := mustObjects(t, kvr, render.Options{})
			engines, router := rolePods(t, kvr, objs)

			// Neighbours: another KVRouter in the namespace (one whose name extends this
			// one's), and one of the same name in another namespace, whose pods carry exactly
			// this KVRouter's labels.
			other := wrappers.MakeKVRouter(kvr.Name+"-2", kvr.Namespace).Obj()
			other.Spec = *kvr.Spec.DeepCopy()
			otherObjs := mustObjects(t, other, render.Options{})
			otherEngines, otherRouter := rolePods(t, other, otherObjs)
			twin := wrappers.MakeKVRouter(kvr.Name, "elsewhere").Obj()
			twin.Spec = *kvr.Spec.DeepCopy()
			twinObjs := mustObjects(t, twin, render.Options{})
			twinEngines, twinRouter := rolePods(t, twin, twinObjs)
			policies := networkPolicies(objs, otherObjs, twinObjs)

			type source struct {
				pod
				router bool // this KVRouter's router: may read KV events
				peer   bool // an engine pod of this multi-node KVRouter: may reach every port
			}
			sources := []source{
				{pod: router, router: true},
				{pod: pod{name: "a client pod", namespace: kvr.Namespace, labels: map[string]string{"app": "chat"}}},
				{pod: pod{name: "a pod without labels", namespace: kvr.Namespace}},
				// Claims to be a router by name and component, but of no KVRouter.
				{pod: pod{name: "a look-alike router", namespace: kvr.Namespace, labels: map[string]string{
					render.LabelName: render.NameRouter, render.LabelComponent: render.ComponentRouter}}},
				{pod: otherRouter},
				{pod: twinRouter},
				{pod: pod{name: "prometheus", namespace: "monitoring", labels: map[string]string{"app.kubernetes.io/name": "prometheus"}}},
				{pod: pod{name: "a Gateway's data plane", namespace: "gateway-system", labels: map[string]string{"app": "envoy"}}},
			}
			for _, e := range engines {
				sources = append(sources, source{pod: e, peer: multiNode})
			}
			for _, e := range slices.Concat(otherEngines, twinEngines) {
				sources = append(sources, source{pod: e})
			}

			for _, dst := range engines {
				// Workers declare no ports but listen on the rendezvous and NCCL ones.
				ports := []int32{render.EnginePort, render.KVEventsPort, render.KVReplayPort, 29500, 40123}
				for _, p := range dst.ports {
					if !slices.Contains(ports, p.ContainerPort) {
						ports = append(ports, p.ContainerPort)
					}
				}
				for _, port := range ports {
					for _, src := range sources {
						want := port == render.EnginePort || src.peer || src.router && slices.Contains(kvPorts, port)
						if got := ingressAllowed(t, policies, src.pod, dst, port); got != want {
							t.Errorf("%s -> %s port %d: allowed=%v, want %v", src.name, dst.name, port, got, want)
						}
					}
				}
			}
			for _, e := range engines {
				if !slices.ContainsFunc(policies, func(np *networkingv1.NetworkPolicy) bool {
					return np.Namespace == e.namespace && selects(t, &np.Spec.PodSelector, e.labels)
				}) {
					t.Errorf("no NetworkPolicy selects %s", e.name)
				}
			}
		})
	}
}

// TestNetworkPolicyEvaluator checks the evaluator itself on the cases the rendered policies do
// not exercise, so that a rendered policy using them is judged correctly.
func TestNetworkPolicyEvaluator(t *testing.T) {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	dst := pod{name: "dst", namespace: "a", labels: map[string]string{"app": "db"},
		ports: []corev1.ContainerPort{{Name: "sql", ContainerPort: 5432}}}
	inA := pod{name: "in a", namespace: "a", labels: map[string]string{"role": "client"}}
	inB := pod{name: "in b", namespace: "b", labels: map[string]string{"role": "client"}, nsLabels: map[string]string{"team": "x"}}
	np := func(rules ...networkingv1.NetworkPolicyIngressRule) []*networkingv1.NetworkPolicy {
		return []*networkingv1.NetworkPolicy{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
				Ingress:     rules,
			},
		}}
	}
	named := intstrPort("sql")
	clients := &metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}}
	teamX := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "x"}}
	for _, tc := range []struct {
		name     string
		policies []*networkingv1.NetworkPolicy
		src      pod
		port     int32
		want     bool
	}{
		{"no policy: open", nil, inB, 1, true},
		{"selected with no rules: closed", np(), inA, 5432, false},
		{"named port", np(networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &named}}}), inB, 5432, true},
		{"named port, other number", np(networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{{Port: &named}}}), inB, 5433, false},
		{"UDP rule does not open TCP", np(networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp}}}), inA, 5432, false},
		{"endPort range", np(networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{{Port: ptrPort(5000), EndPort: ptrInt32(6000)}}}), inA, 5432, true},
		{"podSelector is same-namespace", np(networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{PodSelector: clients}}}), inB, 5432, false},
		{"podSelector in namespace", np(networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{PodSelector: clients}}}), inA, 5432, true},
		{"namespaceSelector alone", np(networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: teamX}}}), inB, 5432, true},
		{"both selectors", np(networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: teamX,
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "admin"}}}}}), inB, 5432, false},
	} {
		if got := ingressAllowed(t, tc.policies, tc.src, dst, tc.port); got != tc.want {
			t.Errorf("%s: allowed=%v, want %v", tc.name, got, tc.want)
		}
	}
}

func intstrPort(name string) intstr.IntOrString { return intstr.FromString(name) }

func ptrPort(n int) *intstr.IntOrString {
	p := intstr.FromInt(n)
	return &p
}

func ptrInt32(n int32) *int32 { return &n }

// TestNetworkPolicyRouterAdminPort evaluates the rendered policies for the router pods: the
// public port (as the InferencePool's endpoint picker, the ext_proc and gRPC health ports) is
// open to everyone; the admin port (metrics, /v1/status, /v1/autoscale) only to the operator's
// pods in the operator's namespace, to the monitoring namespaces and, when the ScaledObject
// reads /v1/autoscale, to KEDA's namespaces; Options replace those defaults.
func TestNetworkPolicyRouterAdminPort(t *testing.T) {
	inNS := func(name, ns string, l map[string]string) pod {
		return pod{name: name, namespace: ns, labels: l, nsLabels: map[string]string{corev1.LabelMetadataName: ns}}
	}
	custom := render.Options{
		OperatorNamespace:    "ops",
		MonitoringNamespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "observability"}},
		AutoscalerNamespaces: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "autoscalers"}},
	}
	observability := inNS("prometheus in a labelled namespace", "obs", map[string]string{"app": "prometheus"})
	observability.nsLabels["team"] = "observability"
	for _, c := range []struct {
		name string
		kvr  *v1alpha1.KVRouter
		opts render.Options
		// admin: the sources that may reach the admin port, by name.
		admin []string
	}{
		{"defaults", wrappers.MakeKVRouter("m", "ns").Obj(), render.Options{},
			[]string{"operator", "prometheus", "openshift platform prometheus", "openshift user-workload prometheus"}},
		{"metrics-api autoscaling", wrappers.MakeKVRouter("m", "ns").Autoscaling(1, 4).Obj(), render.Options{},
			[]string{"operator", "prometheus", "openshift platform prometheus", "openshift user-workload prometheus", "keda", "openshift keda"}},
		{"custom readers", wrappers.MakeKVRouter("m", "ns").Autoscaling(1, 4).Obj(), custom,
			[]string{"operator in ops", "prometheus in a labelled namespace", "autoscaler"}},
		{"endpoint picker", wrappers.MakeKVRouter("m", "ns").Gateway("gw", "gateways").InferencePool("").Autoscaling(1, 4).Obj(), render.Options{},
			[]string{"operator", "prometheus", "openshift platform prometheus", "openshift user-workload prometheus", "keda", "openshift keda"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := mustObjects(t, c.kvr, c.opts)
			_, router := rolePods(t, c.kvr, objs)
			policies := networkPolicies(objs)
			sources := []pod{
				inNS("operator", render.DefaultOperatorNamespace, render.OperatorPodLabels),
				inNS("operator in ops", "ops", render.OperatorPodLabels),
				inNS("another pod of the operator's namespace", render.DefaultOperatorNamespace, map[string]string{"app": "x"}),
				inNS("an operator look-alike in the KVRouter's namespace", c.kvr.Namespace, render.OperatorPodLabels),
				inNS("prometheus", "monitoring", map[string]string{"app.kubernetes.io/name": "prometheus"}),
				inNS("openshift platform prometheus", "openshift-monitoring", nil),
				inNS("openshift user-workload prometheus", "openshift-user-workload-monitoring", nil),
				observability,
				inNS("keda", "keda", map[string]string{"app": "keda-operator"}),
				inNS("openshift keda", "openshift-keda", nil),
				inNS("autoscaler", "autoscalers", nil),
				inNS("a client in the KVRouter's namespace", c.kvr.Namespace, map[string]string{"app": "chat"}),
				inNS("a Gateway", "gateways", map[string]string{"app": "envoy"}),
				router,
			}
			public, closed := []int32{render.RouterPort}, []int32{6060, render.RouterGRPCPort, render.RouterGRPCHealthPort}
			if render.UsesInferencePool(c.kvr) {
				// 8080 is not served as the endpoint picker; the policy need not open it.
				public, closed = []int32{render.RouterGRPCPort, render.RouterGRPCHealthPort}, []int32{6060, render.RouterPort}
			}
			for _, src := range sources {
				for _, port := range public {
					if !ingressAllowed(t, policies, src, router, port) {
						t.Errorf("%s -> router public port %d: closed, want open", src.name, port)
					}
				}
				want := slices.Contains(c.admin, src.name)
				if got := ingressAllowed(t, policies, src, router, render.RouterAdminPort); got != want {
					t.Errorf("%s -> router admin port: allowed=%v, want %v", src.name, got, want)
				}
				for _, port := range closed {
					if ingressAllowed(t, policies, src, router, port) {
						t.Errorf("%s -> router port %d (not served): open", src.name, port)
					}
				}
			}
		})
	}
}
