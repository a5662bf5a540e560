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
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// A second control plane with only the KVRouter CRD: no Gateway API (nor its Inference
// Extension), no KEDA, no LeaderWorkerSet, no Prometheus Operator. The operator must run there, apply what it can and say
// what is missing.
var _ = Describe("KVRouter on a cluster without the optional CRDs", Ordered, func() {
	ctx := context.Background()
	var (
		cfg *rest.Config
		c   client.Client
		ns  string
		kvr *v1alpha1.KVRouter
		// routed asks for a route only: once the Gateway API CRDs exist it needs nothing
		// missing and is not requeued, so only a watch can bring its deleted route back.
		routed *v1alpha1.KVRouter
	)

	BeforeAll(func() {
		var env *envtest.Environment
		env, cfg = startControlPlane(crdPaths(false))
		c = newClient(cfg)
		startOperator(operatorConfig(env, c))
		ns = newNamespace(c)
	})

	It("applies the core children and names the missing Gateway API and KEDA CRDs", func() {
		kvr = makeKVRouter(ns, "bare").Gateway("chat.example.com").Autoscaling(2, 6).Obj()
		Expect(c.Create(ctx, kvr)).To(Succeed())
		routed = makeKVRouter(ns, "routed").Simulate().Gateway("routed.example.com").Obj()
		Expect(c.Create(ctx, routed)).To(Succeed())
		Eventually(func(g Gomega) {
			child(g, c, kvr, render.RouterName(kvr), &appsv1.Deployment{})
			child(g, c, kvr, render.RouterName(kvr), &corev1.Service{})
			// Nothing would scale the engines: they run at the spec's floor.
			d := child(g, c, kvr, render.EngineWorkloadName(kvr), &appsv1.Deployment{})
			g.Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(2)))

			cur := reload(g, c, kvr)
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			crds := expectCondition(g, cur, ConditionCRDsInstalled, metav1.ConditionFalse, ReasonCRDNotInstalled)
			g.Expect(crds.Message).To(ContainSubstring("httproutes.gateway.networking.k8s.io"))
			g.Expect(crds.Message).To(ContainSubstring("scaledobjects.keda.sh"))
			expectCondition(g, cur, ConditionDegraded, metav1.ConditionTrue, ReasonCRDNotInstalled)
			g.Expect(eventReasons(g, c, kvr)).To(ContainElement(EventCRDNotInstalled))
		}).Should(Succeed())
	})

	It("serves without the monitors and rules it cannot apply, names their CRDs, and applies them once they are installed", func() {
		watched := makeKVRouter(ns, "watched").Simulate().Obj()
		watched.Spec.Monitoring = &v1alpha1.MonitoringSpec{}
		Expect(c.Create(ctx, watched)).To(Succeed())
		Eventually(func(g Gomega) {
			child(g, c, watched, render.RouterName(watched), &appsv1.Deployment{})
			child(g, c, watched, render.EngineWorkloadName(watched), &appsv1.Deployment{})
			cur := reload(g, c, watched)
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			crds := expectCondition(g, cur, ConditionCRDsInstalled, metav1.ConditionFalse, ReasonCRDNotInstalled)
			g.Expect(crds.Message).To(ContainSubstring("CRD servicemonitors.monitoring.coreos.com is not installed (needed for spec.monitoring)"))
			g.Expect(crds.Message).To(ContainSubstring("CRD podmonitors.monitoring.coreos.com is not installed (needed for spec.monitoring)"))
			g.Expect(crds.Message).To(ContainSubstring("CRD prometheusrules.monitoring.coreos.com is not installed (needed for spec.monitoring)"))
			// A missing monitor is no reason to call the engines unready.
			g.Expect(condition(cur, ConditionReady).Reason).NotTo(Equal(ReasonCRDNotInstalled))
		}).Should(Succeed())

		_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: monitoringCRDs(), ErrorIfPathMissing: true})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			for gvk, name := range map[schema.GroupVersionKind]string{
				serviceMonitorGVK: render.ServiceMonitorName(watched),
				podMonitorGVK:     render.PodMonitorName(watched),
				prometheusRuleGVK: render.PrometheusRuleName(watched),
			} {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(gvk)
				child(g, c, watched, name, u)
			}
			expectCondition(g, reload(g, c, watched), ConditionCRDsInstalled, metav1.ConditionTrue, ReasonInstalled)
		}).WithTimeout(30 * time.Second).Should(Succeed())
	})

	It("keeps the serving engines when the spec asks for a LeaderWorkerSet the cluster lacks", func() {
		single := makeKVRouter(ns, "wide").Replicas(1).Obj()
		Expect(c.Create(ctx, single)).To(Succeed())
		Eventually(func(g Gomega) {
			child(g, c, single, render.EngineWorkloadName(single), &appsv1.Deployment{})
		}).Should(Succeed())

		update(c, single, func(k *v1alpha1.KVRouter) {
			k.Spec.Engine.NodesPerReplica = 2
			k.Spec.Engine.TensorParallelSize = 8
		})
		Eventually(func(g Gomega) {
			cur := reload(g, c, single)
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			ready := expectCondition(g, cur, ConditionReady, metav1.ConditionFalse, ReasonCRDNotInstalled)
			g.Expect(ready.Message).To(ContainSubstring("leaderworkersets.leaderworkerset.x-k8s.io"))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			child(g, c, single, render.EngineWorkloadName(single), &appsv1.Deployment{})
		}).WithTimeout(2 * testRecheck).Should(Succeed())
	})

	It("applies the HTTPRoute once the Gateway API CRDs are installed, and watches it", func() {
		_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{gatewayAPICRDs()}, ErrorIfPathMissing: true})
		Expect(err).NotTo(HaveOccurred())

		var route gwapiv1.HTTPRoute
		Eventually(func(g Gomega) {
			child(g, c, kvr, render.RouteName(kvr), &route)
			cur := reload(g, c, kvr)
			crds := expectCondition(g, cur, ConditionCRDsInstalled, metav1.ConditionFalse, ReasonCRDNotInstalled)
			g.Expect(crds.Message).NotTo(ContainSubstring("gateway"))
			g.Expect(crds.Message).To(ContainSubstring("scaledobjects.keda.sh"))
		}).WithTimeout(30 * time.Second).Should(Succeed())

		var routedRoute gwapiv1.HTTPRoute
		Eventually(func(g Gomega) {
			child(g, c, routed, render.RouteName(routed), &routedRoute)
			expectCondition(g, reload(g, c, routed), ConditionCRDsInstalled, metav1.ConditionTrue, ReasonInstalled)
		}).Should(Succeed())

		By("the watch on HTTPRoutes started at run time brings a deleted route back")
		Expect(c.Delete(ctx, &routedRoute)).To(Succeed())
		Eventually(func(g Gomega) {
			fresh := child(g, c, routed, render.RouteName(routed), &gwapiv1.HTTPRoute{})
			g.Expect(fresh.UID).NotTo(Equal(routedRoute.UID))
		}).Should(Succeed())
	})

	It("serves a KVRouter that asks for an InferencePool as a proxy until the InferencePool CRD is installed, then as its endpoint picker", func() {
		// Gateway API's CRDs (installed by the previous spec already, unless it was left out of
		// the run), not the Inference Extension's.
		_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{gatewayAPICRDs()}, ErrorIfPathMissing: true})
		Expect(err).NotTo(HaveOccurred())
		picker := makeKVRouter(ns, "picker").Simulate().Gateway().InferencePool("").Obj()
		Expect(c.Create(ctx, picker)).To(Succeed())
		Eventually(func(g Gomega) {
			cur := reload(g, c, picker)
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			crds := expectCondition(g, cur, ConditionCRDsInstalled, metav1.ConditionFalse, ReasonCRDNotInstalled)
			g.Expect(crds.Message).To(ContainSubstring("CRD inferencepools.inference.networking.k8s.io is not installed (needed for spec.gateway.mode: InferencePool)"))
			g.Expect(crds.Message).To(ContainSubstring("the router serves as a proxy behind the HTTPRoute"))
			expectCondition(g, cur, ConditionDegraded, metav1.ConditionTrue, ReasonCRDNotInstalled)
			expectCondition(g, cur, ConditionInferencePoolReady, metav1.ConditionFalse, ReasonCRDNotInstalled)
			// The clients still get answers, through the router: Ready describes them.
			g.Expect(condition(cur, ConditionReady).Reason).NotTo(Equal(ReasonCRDNotInstalled))
			g.Expect(cur.Status.URL).To(Equal(render.RouterServiceURL(picker)))

			route := child(g, c, picker, render.RouteName(picker), &gwapiv1.HTTPRoute{})
			g.Expect(route.Spec.Rules[0].BackendRefs).To(ConsistOf(HaveField("Name", BeEquivalentTo(render.RouterName(picker)))))
			d := child(g, c, picker, render.RouterName(picker), &appsv1.Deployment{})
			g.Expect(flagValue(d.Spec.Template.Spec.Containers[0].Args, "--port")).To(Equal("8080"))
			g.Expect(d.Spec.Template.Spec.Containers[0].Args).NotTo(ContainElement("--mode"))
		}).Should(Succeed())

		_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{inferencePoolCRD()}, ErrorIfPathMissing: true})
		Expect(err).NotTo(HaveOccurred())
		var pool infv1.InferencePool
		Eventually(func(g Gomega) {
			child(g, c, picker, render.InferencePoolName(picker), &pool)
			route := child(g, c, picker, render.RouteName(picker), &gwapiv1.HTTPRoute{})
			g.Expect(route.Spec.Rules[0].BackendRefs).To(ConsistOf(HaveField("Kind", HaveValue(BeEquivalentTo("InferencePool")))))
			expectEndpointPicker(g, child(g, c, picker, render.RouterName(picker), &appsv1.Deployment{}))
			cur := reload(g, c, picker)
			expectCondition(g, cur, ConditionCRDsInstalled, metav1.ConditionTrue, ReasonInstalled)
			expectCondition(g, cur, ConditionInferencePoolReady, metav1.ConditionUnknown, ReasonPending)
			g.Expect(cur.Status.URL).To(BeEmpty(), "no exact hostname: only the Gateway, whose address the operator does not know, reaches the engines")
		}).WithTimeout(30 * time.Second).Should(Succeed())

		By("the watch on InferencePools started at run time brings a deleted pool back")
		Expect(c.Delete(ctx, &pool)).To(Succeed())
		Eventually(func(g Gomega) {
			fresh := child(g, c, picker, render.InferencePoolName(picker), &infv1.InferencePool{})
			g.Expect(fresh.UID).NotTo(Equal(pool.UID))
		}).Should(Succeed())
	})
})
