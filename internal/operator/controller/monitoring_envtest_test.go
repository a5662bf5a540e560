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
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

var _ = Describe("KVRouter monitoring", func() {
	ctx := context.Background()

	It("applies a ServiceMonitor, a PodMonitor and a PrometheusRule that the Prometheus Operator's schema accepts, and deletes them with spec.monitoring", func() {
		ns := newNamespace(k8sClient)
		kvr := makeKVRouter(ns, "watched").Simulate().Obj()
		kvr.Spec.Monitoring = &v1alpha1.MonitoringSpec{Labels: map[string]string{"release": "prom"}, Interval: "15s"}
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())

		Eventually(func(g Gomega) {
			sm := monitorOf(g, kvr, serviceMonitorGVK, render.ServiceMonitorName(kvr))
			g.Expect(sm.GetLabels()).To(HaveKeyWithValue("release", "prom"))
			sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
			g.Expect(sel).To(HaveKeyWithValue(render.LabelComponent, render.ComponentRouter))
			eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			g.Expect(eps).To(ConsistOf(And(
				HaveKeyWithValue("port", render.PortNameAdmin),
				HaveKeyWithValue("interval", "15s"),
				HaveKeyWithValue("relabelings", ContainElement(HaveKeyWithValue("targetLabel", render.MetricsLabelKVRouter))),
			)))

			pm := monitorOf(g, kvr, podMonitorGVK, render.PodMonitorName(kvr))
			sel, _, _ = unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
			g.Expect(sel).To(HaveKeyWithValue(render.LabelComponent, render.ComponentEngine))
			eps, _, _ = unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
			g.Expect(eps).To(ConsistOf(HaveKeyWithValue("path", "/metrics")))

			rule := monitorOf(g, kvr, prometheusRuleGVK, render.PrometheusRuleName(kvr))
			g.Expect(rule.GetLabels()).To(HaveKeyWithValue("release", "prom"))
			groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
			g.Expect(groups).To(HaveLen(1))
			rules, _, _ := unstructured.NestedSlice(groups[0].(map[string]any), "rules")
			g.Expect(rules).To(HaveLen(len(render.AlertRules(render.AlertScope{}))))
			scope := fmt.Sprintf(`namespace=%q,kvrouter=%q`, ns, kvr.Name)
			for _, r := range rules {
				g.Expect(r).To(HaveKeyWithValue("expr", ContainSubstring(scope)))
			}

			expectCondition(g, reload(g, k8sClient, kvr), ConditionCRDsInstalled, metav1.ConditionTrue, ReasonInstalled)
		}).Should(Succeed())

		By("the watch on ServiceMonitors brings a deleted one back")
		sm := &unstructured.Unstructured{}
		sm.SetGroupVersionKind(serviceMonitorGVK)
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: render.ServiceMonitorName(kvr)}, sm)).To(Succeed())
		Expect(k8sClient.Delete(ctx, sm)).To(Succeed())
		Eventually(func(g Gomega) {
			fresh := monitorOf(g, kvr, serviceMonitorGVK, render.ServiceMonitorName(kvr))
			g.Expect(fresh.GetUID()).NotTo(Equal(sm.GetUID()))
		}).Should(Succeed())

		By("removing spec.monitoring deletes all three")
		update(k8sClient, kvr, func(k *v1alpha1.KVRouter) { k.Spec.Monitoring = nil })
		Eventually(func(g Gomega) {
			for gvk, name := range map[schema.GroupVersionKind]string{
				serviceMonitorGVK: render.ServiceMonitorName(kvr),
				podMonitorGVK:     render.PodMonitorName(kvr),
				prometheusRuleGVK: render.PrometheusRuleName(kvr),
			} {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(gvk)
				err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, u)
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s %s still there: %v", gvk.Kind, name, err)
			}
		}).Should(Succeed())
	})
})

func monitorOf(g Gomega, kvr *v1alpha1.KVRouter, gvk schema.GroupVersionKind, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return child(g, k8sClient, kvr, name, u)
}
