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

package controller

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// expectEndpointPicker checks that kvr's router runs as the InferencePool's endpoint picker: gRPC
// ports and probes instead of the public HTTP port, which it does not serve in that mode.
func expectEndpointPicker(g Gomega, d *appsv1.Deployment) {
	ctr := d.Spec.Template.Spec.Containers[0]
	g.Expect(flagValue(ctr.Args, "--mode")).To(Equal(render.RouterModeEPP))
	g.Expect(flagValue(ctr.Args, "--grpc-port")).To(Equal("9002"))
	g.Expect(ctr.Args).NotTo(ContainElement("--port"))
	g.Expect(ctr.Ports).To(ConsistOf(HaveField("ContainerPort", BeEquivalentTo(9002)), HaveField("ContainerPort", BeEquivalentTo(9003)),
		HaveField("ContainerPort", BeEquivalentTo(9090))))
	g.Expect(ctr.ReadinessProbe.GRPC).To(HaveValue(And(HaveField("Port", BeEquivalentTo(9003)), HaveField("Service", HaveValue(Equal("readiness"))))))
	g.Expect(ctr.LivenessProbe.GRPC).To(HaveValue(HaveField("Service", HaveValue(Equal("liveness")))))
}

// The router as the endpoint picker of an InferencePool, on the real InferencePool and Gateway
// API CRDs: what the API server accepts, the Gateways' verdict mirrored into the status, and
// the way back to HTTPRoute mode.
var _ = Describe("KVRouter with spec.gateway.mode InferencePool", func() {
	ctx := context.Background()

	It("applies a pool and a route the real CRDs accept, reports the Gateways' verdict, and removes the pool when the mode goes back", func() {
		ns := newNamespace(k8sClient)
		kvr := makeKVRouter(ns, "picker").Simulate().Gateway("picker.example.com").InferencePool(v1alpha1.FailClose).Obj()
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())

		By("the InferencePool selects the serving engines and names the router Service's ext_proc port")
		var pool infv1.InferencePool
		Eventually(func(g Gomega) {
			child(g, k8sClient, kvr, render.InferencePoolName(kvr), &pool)
			g.Expect(pool.Spec.Selector.MatchLabels).To(HaveKeyWithValue(infv1.LabelKey(render.LabelComponent), infv1.LabelValue(render.ComponentEngine)))
			g.Expect(pool.Spec.TargetPorts).To(ConsistOf(infv1.Port{Number: render.EnginePort}))
			ref := pool.Spec.EndpointPickerRef
			g.Expect(ref).NotTo(BeNil())
			g.Expect(ref.Group).To(HaveValue(BeEquivalentTo(""))) // the CRD's default: the core group
			g.Expect(ref.Kind).To(BeEquivalentTo("Service"))
			g.Expect(ref.Name).To(BeEquivalentTo(render.RouterName(kvr)))
			g.Expect(ref.Port).To(HaveValue(Equal(infv1.Port{Number: render.RouterGRPCPort})))
			g.Expect(ref.FailureMode).To(Equal(infv1.EndpointPickerFailClose))
		}).Should(Succeed())

		By("the HTTPRoute sends the public paths to the pool, the router runs as its picker behind a Service with its gRPC ports")
		Eventually(func(g Gomega) {
			route := child(g, k8sClient, kvr, render.RouteName(kvr), &gwapiv1.HTTPRoute{})
			g.Expect(route.Spec.Rules).To(HaveLen(1))
			g.Expect(route.Spec.Rules[0].BackendRefs).To(ConsistOf(HaveField("BackendRef.BackendObjectReference", And(
				HaveField("Group", HaveValue(BeEquivalentTo("inference.networking.k8s.io"))),
				HaveField("Kind", HaveValue(BeEquivalentTo("InferencePool"))),
				HaveField("Name", BeEquivalentTo(render.InferencePoolName(kvr))),
				HaveField("Port", HaveValue(BeEquivalentTo(render.EnginePort)))))))
			g.Expect(route.Spec.Rules[0].Matches).To(HaveLen(len(render.PublicPaths)))
			expectEndpointPicker(g, child(g, k8sClient, kvr, render.RouterName(kvr), &appsv1.Deployment{}))
			svc := child(g, k8sClient, kvr, render.RouterName(kvr), &corev1.Service{})
			g.Expect(svc.Spec.Ports).To(ConsistOf(
				And(HaveField("Port", BeEquivalentTo(9002)), HaveField("AppProtocol", HaveValue(Equal("http2")))),
				HaveField("Port", BeEquivalentTo(9003)), HaveField("Port", BeEquivalentTo(9090))))
			np := child(g, k8sClient, kvr, render.RouterNetworkPolicyName(kvr), &networkingv1.NetworkPolicy{})
			g.Expect(np.Spec.Ingress).To(ContainElement(And(HaveField("From", BeEmpty()),
				HaveField("Ports", ConsistOf(HaveField("Port.IntVal", BeEquivalentTo(9002)), HaveField("Port.IntVal", BeEquivalentTo(9003)))))))
			cur := reload(g, k8sClient, kvr)
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			g.Expect(cur.Status.URL).To(Equal("http://picker.example.com"))
			expectCondition(g, cur, ConditionCRDsInstalled, metav1.ConditionTrue, ReasonInstalled)
			expectCondition(g, cur, ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected)
			// No Gateway controller runs here: nobody has reported on the pool.
			expectCondition(g, cur, ConditionInferencePoolReady, metav1.ConditionUnknown, ReasonPending)
		}).Should(Succeed())

		By("a Gateway accepting the pool makes InferencePoolReady True; one that cannot resolve the picker makes it False")
		gateway := infv1.ParentReference{Group: ptr.To(infv1.Group("gateway.networking.k8s.io")), Kind: "Gateway", Name: "inference-gateway", Namespace: infv1.Namespace(ns)}
		report := func(refs metav1.ConditionStatus, reason string) {
			modifyStatus(k8sClient, &pool, func(p *infv1.InferencePool) {
				p.Status.Parents = []infv1.ParentStatus{{ParentRef: gateway, ControllerName: "example.com/gateway-controller", Conditions: []metav1.Condition{
					{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "SupportedByParent", Message: "ok", ObservedGeneration: p.Generation, LastTransitionTime: metav1.Now()},
					{Type: "ResolvedRefs", Status: refs, Reason: reason, Message: "the endpoint picker " + reason, ObservedGeneration: p.Generation, LastTransitionTime: metav1.Now()},
				}}}
			})
		}
		report(metav1.ConditionTrue, "ResolvedRefs")
		Eventually(func(g Gomega) {
			c := expectCondition(g, reload(g, k8sClient, kvr), ConditionInferencePoolReady, metav1.ConditionTrue, ReasonAccepted)
			g.Expect(c.Message).To(ContainSubstring("Gateway " + ns + "/inference-gateway"))
		}).Should(Succeed())
		report(metav1.ConditionFalse, "InvalidExtensionRef")
		Eventually(func(g Gomega) {
			c := expectCondition(g, reload(g, k8sClient, kvr), ConditionInferencePoolReady, metav1.ConditionFalse, ReasonRefsNotResolved)
			g.Expect(c.Message).To(ContainSubstring("InvalidExtensionRef"))
		}).Should(Succeed())

		By("going back to HTTPRoute mode deletes the pool, points the route at the router and serves HTTP again")
		update(k8sClient, kvr, func(k *v1alpha1.KVRouter) {
			k.Spec.Gateway.Mode = v1alpha1.GatewayModeHTTPRoute
			k.Spec.Gateway.FailureMode = ""
		})
		Eventually(func(g Gomega) {
			err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: render.InferencePoolName(kvr)}, &infv1.InferencePool{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "InferencePool still there: %v", err)
			route := child(g, k8sClient, kvr, render.RouteName(kvr), &gwapiv1.HTTPRoute{})
			g.Expect(route.Spec.Rules[0].BackendRefs).To(ConsistOf(HaveField("Name", BeEquivalentTo(render.RouterName(kvr)))))
			d := child(g, k8sClient, kvr, render.RouterName(kvr), &appsv1.Deployment{})
			g.Expect(d.Spec.Template.Spec.Containers[0].Args).NotTo(ContainElement("--mode"))
			g.Expect(flagValue(d.Spec.Template.Spec.Containers[0].Args, "--port")).To(Equal("8080"))
			g.Expect(d.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet).NotTo(BeNil())
			svc := child(g, k8sClient, kvr, render.RouterName(kvr), &corev1.Service{})
			g.Expect(svc.Spec.Ports).To(ConsistOf(HaveField("Port", BeEquivalentTo(8080)), HaveField("Port", BeEquivalentTo(9090))))
			cur := reload(g, k8sClient, kvr)
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			g.Expect(condition(cur, ConditionInferencePoolReady).Type).To(BeEmpty(), "InferencePoolReady kept in HTTPRoute mode")
			g.Expect(eventReasons(g, k8sClient, kvr)).To(ContainElement(EventDeleted))
		}).Should(Succeed())
	})
})
