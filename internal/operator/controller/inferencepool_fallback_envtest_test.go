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
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// poolDenial is the message of the admission policy that refuses InferencePools in a test's
// namespace, standing in for any refusal of the pool: a CRD older than the fields the operator
// renders, a webhook, a quota.
const poolDenial = "InferencePools are refused in this namespace (test policy)"

// denyInferencePools makes the API server refuse every create and update of an InferencePool in
// ns, with a ValidatingAdmissionPolicy, and returns once the refusal is in force (the policy
// reaches the admission plugin through an informer). Deleting the returned binding lifts it.
func denyInferencePools(c client.Client, ns string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	GinkgoHelper()
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-inferencepools-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{infv1.GroupName}, APIVersions: []string{"*"},
						Resources: []string{"inferencepools"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: poolDenial}},
		},
	}
	if err := c.Create(ctx, policy); !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(c.Delete(ctx, policy))).To(Succeed()) })
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}},
		},
	}
	Expect(c.Create(ctx, binding)).To(Succeed())
	DeferCleanup(func() { Expect(client.IgnoreNotFound(c.Delete(ctx, binding))).To(Succeed()) })
	Eventually(func(g Gomega) {
		g.Expect(poolAdmitted(c, ns)).To(MatchError(ContainSubstring(poolDenial)))
	}).Should(Succeed())
	return binding
}

// poolAdmitted asks, with a dry run, whether the API server admits an InferencePool in ns now.
func poolAdmitted(c client.Client, ns string) error {
	probe := &infv1.InferencePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "admission-probe"},
		Spec: infv1.InferencePoolSpec{
			Selector:          infv1.LabelSelector{MatchLabels: map[infv1.LabelKey]infv1.LabelValue{"app": "probe"}},
			TargetPorts:       []infv1.Port{{Number: 8000}},
			EndpointPickerRef: &infv1.EndpointPickerRef{Kind: "Service", Name: "probe", Port: &infv1.Port{Number: 9002}},
		},
	}
	return c.Create(context.Background(), probe, client.DryRunAll)
}

// allowInferencePools lifts denyInferencePools and returns once InferencePools are admitted
// in ns again.
func allowInferencePools(c client.Client, ns string, binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	GinkgoHelper()
	Expect(c.Delete(context.Background(), binding)).To(Succeed())
	Eventually(func() error { return poolAdmitted(c, ns) }).Should(Succeed())
}

// A pool the API server refuses must not take the serving path away: the router stays a proxy
// and the route stays on it until the pool is there; a refused update of a pool that is there
// keeps it and its picker.
var _ = Describe("KVRouter whose InferencePool the API server refuses", func() {
	ctx := context.Background()

	It("serves through the router as a proxy, reports the refusal, and moves to the pool once it is admitted", func() {
		ns := newNamespace(k8sClient)
		binding := denyInferencePools(k8sClient, ns)
		kvr := makeKVRouter(ns, "refused-pool").Simulate().Gateway("refused.example.com").InferencePool("").Obj()
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())
		poolKey := types.NamespacedName{Namespace: ns, Name: render.InferencePoolName(kvr)}

		By("no pool: the router is a proxy behind the route, and the status says why")
		Eventually(func(g Gomega) {
			d := child(g, k8sClient, kvr, render.RouterName(kvr), &appsv1.Deployment{})
			g.Expect(d.Spec.Template.Spec.Containers[0].Args).NotTo(ContainElement("--mode"))
			g.Expect(flagValue(d.Spec.Template.Spec.Containers[0].Args, "--port")).To(Equal("8080"))
			route := child(g, k8sClient, kvr, render.RouteName(kvr), &gwapiv1.HTTPRoute{})
			g.Expect(route.Spec.Rules[0].BackendRefs).To(ConsistOf(And(
				HaveField("Kind", HaveValue(BeEquivalentTo("Service"))),
				HaveField("Name", BeEquivalentTo(render.RouterName(kvr))))))
			g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, poolKey, &infv1.InferencePool{}))).To(BeTrue())

			cur := reload(g, k8sClient, kvr)
			pool := expectCondition(g, cur, ConditionInferencePoolReady, metav1.ConditionFalse, ReasonApplyFailed)
			g.Expect(pool.Message).To(And(ContainSubstring(poolDenial), ContainSubstring("proxy behind the HTTPRoute")))
			deg := expectCondition(g, cur, ConditionDegraded, metav1.ConditionTrue, ReasonApplyFailed)
			g.Expect(deg.Message).To(And(ContainSubstring("applying InferencePool "+poolKey.Name), ContainSubstring(poolDenial)))
			g.Expect(cur.Status.URL).To(Equal("http://refused.example.com"))
			g.Expect(eventReasons(g, k8sClient, kvr)).To(ContainElement(EventApplyFailed))
		}).Should(Succeed())

		By("the pool admitted: it is applied, the router turns picker and the route turns to the pool")
		allowInferencePools(k8sClient, ns, binding)
		// Retries of the failed reconcile back off exponentially; a change to the KVRouter
		// reconciles it at once.
		update(k8sClient, kvr, func(k *v1alpha1.KVRouter) { k.Labels = map[string]string{"touched": "yes"} })
		var pool infv1.InferencePool
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, poolKey, &pool)).To(Succeed())
			route := child(g, k8sClient, kvr, render.RouteName(kvr), &gwapiv1.HTTPRoute{})
			g.Expect(route.Spec.Rules[0].BackendRefs).To(ConsistOf(HaveField("Kind", HaveValue(BeEquivalentTo(render.InferencePoolKind)))))
			expectEndpointPicker(g, child(g, k8sClient, kvr, render.RouterName(kvr), &appsv1.Deployment{}))
			cur := reload(g, k8sClient, kvr)
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			expectCondition(g, cur, ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected)
			expectCondition(g, cur, ConditionInferencePoolReady, metav1.ConditionUnknown, ReasonPending)
		}).Should(Succeed())

		By("a refused update of the pool keeps the pool as it was, and the router its picker")
		binding = denyInferencePools(k8sClient, ns)
		update(k8sClient, kvr, func(k *v1alpha1.KVRouter) { k.Spec.Gateway.FailureMode = v1alpha1.FailClose })
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			c := expectCondition(g, cur, ConditionInferencePoolReady, metav1.ConditionUnknown, ReasonApplyFailed)
			g.Expect(c.ObservedGeneration).To(Equal(cur.Generation))
			g.Expect(c.Message).To(And(ContainSubstring(poolDenial), ContainSubstring("as last applied")))
			expectCondition(g, cur, ConditionDegraded, metav1.ConditionTrue, ReasonApplyFailed)
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, poolKey, &pool)).To(Succeed())
			g.Expect(pool.Spec.EndpointPickerRef.FailureMode).To(Equal(infv1.EndpointPickerFailOpen))
			route := child(g, k8sClient, kvr, render.RouteName(kvr), &gwapiv1.HTTPRoute{})
			g.Expect(route.Spec.Rules[0].BackendRefs).To(ConsistOf(HaveField("Kind", HaveValue(BeEquivalentTo(render.InferencePoolKind)))))
			expectEndpointPicker(g, child(g, k8sClient, kvr, render.RouterName(kvr), &appsv1.Deployment{}))
		}).WithTimeout(2 * testRecheck).Should(Succeed())

		allowInferencePools(k8sClient, ns, binding)
		update(k8sClient, kvr, func(k *v1alpha1.KVRouter) { k.Labels = map[string]string{"touched": "again"} })
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, poolKey, &pool)).To(Succeed())
			g.Expect(pool.Spec.EndpointPickerRef.FailureMode).To(Equal(infv1.EndpointPickerFailClose))
			expectCondition(g, reload(g, k8sClient, kvr), ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected)
		}).Should(Succeed())
	})
})

// oldInferenceExtension is the newest Inference Extension release whose InferencePool CRD lacks
// spec.appProtocol (added in v1.4.0). Server-side apply refuses a field the CRD does not declare,
// so a pool rendered with it could not be created on clusters that run v1.0 to v1.3.
const oldInferenceExtension = "sigs.k8s.io/gateway-api-inference-extension@v1.3.0"

// A control plane of its own, since the CRD is cluster-wide: the KVRouter and Gateway API CRDs,
// and the InferencePool CRD of an Inference Extension release older than the module's.
var _ = Describe("KVRouter in InferencePool mode on an older InferencePool CRD", Ordered, func() {
	var c client.Client

	BeforeAll(func() {
		poolCRD := filepath.Join(downloadModule(oldInferenceExtension), "config", "crd", "bases", "inference.networking.k8s.io_inferencepools.yaml")
		env, cfg := startControlPlane(append(crdPaths(false), gatewayAPICRDs(), poolCRD))
		c = newClient(cfg)
		startOperator(operatorConfig(env, c))
	})

	It("applies a pool that CRD accepts, and serves through it", func() {
		ns := newNamespace(c)
		kvr := makeKVRouter(ns, "old-crd").Simulate().Gateway("old.example.com").InferencePool("").Obj()
		Expect(c.Create(context.Background(), kvr)).To(Succeed())
		Eventually(func(g Gomega) {
			pool := child(g, c, kvr, render.InferencePoolName(kvr), &infv1.InferencePool{})
			g.Expect(pool.Spec.TargetPorts).To(ConsistOf(infv1.Port{Number: render.EnginePort}))
			route := child(g, c, kvr, render.RouteName(kvr), &gwapiv1.HTTPRoute{})
			g.Expect(route.Spec.Rules[0].BackendRefs).To(ConsistOf(HaveField("Kind", HaveValue(BeEquivalentTo(render.InferencePoolKind)))))
			expectEndpointPicker(g, child(g, c, kvr, render.RouterName(kvr), &appsv1.Deployment{}))
			cur := reload(g, c, kvr)
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			expectCondition(g, cur, ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected)
			expectCondition(g, cur, ConditionInferencePoolReady, metav1.ConditionUnknown, ReasonPending)
		}).Should(Succeed())
	})
})
