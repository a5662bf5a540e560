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
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/internal/operator/routerstatus"
	"github.com/kvrouter/kvrouter/internal/routerapi"
)

func withDisaggregation(d v1alpha1.DisaggregationSpec) func(*v1alpha1.KVRouter) {
	return func(k *v1alpha1.KVRouter) { k.Spec.Disaggregation = &d }
}

func poolScaledObject(g Gomega, kvr *v1alpha1.KVRouter, pool render.Pool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(scaledObjectGVK)
	return child(g, k8sClient, kvr, render.PoolScaledObjectName(kvr, pool), u)
}

var _ = Describe("Disaggregated prefill/decode", func() {
	ctx := context.Background()

	DescribeTable("refuses impossible specs with a message naming the field",
		func(kvr *kvrWrapper, message string) {
			obj := kvr.Obj()
			obj.Namespace = newNamespace(k8sClient)
			err := k8sClient.Create(ctx, obj)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("mode Threshold without thresholdTokens",
			makeKVRouter("", "pd-threshold").With(withDisaggregation(v1alpha1.DisaggregationSpec{Mode: v1alpha1.DisaggregationThreshold})),
			"spec.disaggregation.thresholdTokens is required with spec.disaggregation.mode: Threshold"),
		Entry("thresholdTokens in mode Auto",
			makeKVRouter("", "pd-tokens").With(withDisaggregation(v1alpha1.DisaggregationSpec{ThresholdTokens: ptr.To[int32](512)})),
			"spec.disaggregation.thresholdTokens is required with spec.disaggregation.mode: Threshold"),
		Entry("the side channel on the KV-event port",
			makeKVRouter("", "pd-port").With(withDisaggregation(v1alpha1.DisaggregationSpec{SideChannelPort: 5557})),
			"spec.disaggregation.sideChannelPort must not be one of the engine pods' other ports"),
		Entry("prefill autoscaling with min above max",
			makeKVRouter("", "pd-minmax").With(withDisaggregation(v1alpha1.DisaggregationSpec{
				Prefill: v1alpha1.PrefillPoolSpec{Autoscaling: &v1alpha1.PoolAutoscalingSpec{MinReplicas: 3, MaxReplicas: 2}}})),
			"spec.disaggregation.prefill.autoscaling.maxReplicas must be greater than or equal to minReplicas"),
		Entry("extraArgs setting --kv-transfer-config",
			makeKVRouter("", "pd-args").ExtraArgs("--kv-transfer-config", "{}").With(withDisaggregation(v1alpha1.DisaggregationSpec{})),
			"with spec.disaggregation, spec.engine.extraArgs must not set --kv-transfer-config"),
		Entry("env setting the side-channel host",
			makeKVRouter("", "pd-env").Env("VLLM_NIXL_SIDE_CHANNEL_HOST", "10.0.0.1").With(withDisaggregation(v1alpha1.DisaggregationSpec{})),
			"with spec.disaggregation, spec.engine.env must not set VLLM_NIXL_SIDE_CHANNEL_HOST"),
		Entry("an unknown connector",
			makeKVRouter("", "pd-conn").With(withDisaggregation(v1alpha1.DisaggregationSpec{Connector: "P2pNcclConnector"})),
			"spec.disaggregation.connector: Unsupported value"),
		Entry("LMCache's connector, whose push protocol is not implemented",
			makeKVRouter("", "pd-lmcache").With(withDisaggregation(v1alpha1.DisaggregationSpec{Connector: v1alpha1.ConnectorLMCache})),
			"spec.disaggregation.connector: LMCacheConnectorV1 is not supported yet"),
		Entry("extraArgs setting one field of --kv-transfer-config",
			makeKVRouter("", "pd-dotted").ExtraArgs("--kv-transfer-config.kv_role=kv_producer").With(withDisaggregation(v1alpha1.DisaggregationSpec{})),
			"spec.engine.extraArgs must not set --kv-transfer-config, nor one of its fields"),
		Entry("mode Never with whole requests on decode engines only",
			makeKVRouter("", "pd-never-decode").With(withDisaggregation(v1alpha1.DisaggregationSpec{
				Mode: v1alpha1.DisaggregationNever, WholeRequestsOn: v1alpha1.WholeOnDecode})),
			"spec.disaggregation.wholeRequestsOn: Decode with spec.disaggregation.mode: Never"),
		Entry("more than one data-parallel rank per pod",
			makeKVRouter("", "pd-dp").ExtraArgs("--data-parallel-size", "2").With(withDisaggregation(v1alpha1.DisaggregationSpec{})),
			"spec.engine.extraArgs must not set --data-parallel-size"),
		Entry("the side channel on vLLM's master port in a multi-node replica",
			makeKVRouter("", "pd-master").MultiNode(2, 8).With(withDisaggregation(v1alpha1.DisaggregationSpec{SideChannelPort: 29501})),
			"spec.disaggregation.sideChannelPort must not be 29501 when spec.engine.nodesPerReplica > 1"),
	)

	It("accepts a user UCX_TLS and one data-parallel rank next to disaggregation", func() {
		obj := makeKVRouter(newNamespace(k8sClient), "pd-ucx").Env("UCX_TLS", "dc_x,cuda_copy").ExtraArgs("--data-parallel-size=1").
			With(withDisaggregation(v1alpha1.DisaggregationSpec{})).Obj()
		Expect(k8sClient.Create(ctx, obj)).To(Succeed())
		Expect(k8sClient.Delete(ctx, obj)).To(Succeed())
	})

	It("reconciles both pools and their ScaledObjects, reports both, and prunes them when switched off", func() {
		ns := newNamespace(k8sClient)
		kvr := makeKVRouter(ns, "pd").Simulate().Replicas(2).RouterReplicas(1).With(func(k *v1alpha1.KVRouter) {
			k.Spec.Autoscaling = &v1alpha1.AutoscalingSpec{MinReplicas: 2, MaxReplicas: 6}
		}).With(withDisaggregation(v1alpha1.DisaggregationSpec{
			Prefill: v1alpha1.PrefillPoolSpec{Replicas: ptr.To[int32](2), Autoscaling: &v1alpha1.PoolAutoscalingSpec{MinReplicas: 1, MaxReplicas: 4}},
		})).Obj()
		stub := newStubRouter(kvr)
		stub.set(func(d *routerapi.Status) {
			*d = fleetDoc(0.5, 0)
			d.Endpoints[0].Role, d.Endpoints[1].Role = routerstatus.RolePrefill, routerstatus.RoleDecode
			d.Endpoints[0].Engine.HitRate = 0.8
			d.Disaggregation = &routerapi.Disaggregation{Mode: "Auto", SplitRequests: 30, WholeRequests: 70, SplitShare: 0.3, Fallbacks: 1,
				Pools: map[string]routerapi.Pool{
					routerstatus.RolePrefill: {Engines: 1, ReadyEngines: 1, InFlight: 3, QueuedPrefillTokens: 4096},
					routerstatus.RoleDecode:  {Engines: 1, ReadyEngines: 1, InFlight: 9},
				}}
		})
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())

		prefillName, decodeName := render.PoolWorkloadName(kvr, render.PoolPrefill), render.PoolWorkloadName(kvr, render.PoolDecode)
		By("two engine Deployments, labelled by pool, KEDA owning their replica counts, and no aggregated one")
		Eventually(func(g Gomega) {
			for role, name := range map[string]string{"prefill": prefillName, "decode": decodeName} {
				d := child(g, k8sClient, kvr, name, &appsv1.Deployment{})
				g.Expect(d.Spec.Template.Labels).To(HaveKeyWithValue(render.LabelRole, role))
				g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--kv-transfer-config"))
			}
			err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: render.EngineWorkloadName(kvr)}, &appsv1.Deployment{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "aggregated engine Deployment: %v", err)
			pso := poolScaledObject(g, kvr, render.PoolPrefill)
			g.Expect(pso.Object).To(HaveKeyWithValue("spec", And(
				HaveKeyWithValue("scaleTargetRef", HaveKeyWithValue("name", prefillName)),
				HaveKeyWithValue("minReplicaCount", BeEquivalentTo(1)),
				HaveKeyWithValue("maxReplicaCount", BeEquivalentTo(4)))))
			dso := poolScaledObject(g, kvr, render.PoolDecode)
			g.Expect(dso.Object).To(HaveKeyWithValue("spec", And(
				HaveKeyWithValue("scaleTargetRef", HaveKeyWithValue("name", decodeName)),
				HaveKeyWithValue("minReplicaCount", BeEquivalentTo(2)),
				HaveKeyWithValue("maxReplicaCount", BeEquivalentTo(6)))))
			router := child(g, k8sClient, kvr, render.RouterName(kvr), &appsv1.Deployment{})
			g.Expect(router.Spec.Template.Spec.Containers[0].Args).To(ContainElements("--pd-mode", "Auto", "--pd-whole-on", "any"))
			np := child(g, k8sClient, kvr, render.NetworkPolicyName(kvr), &networkingv1.NetworkPolicy{})
			g.Expect(np.Spec.Ingress).To(ContainElement(HaveField("Ports", ConsistOf(HaveField("Port.IntVal", BeEquivalentTo(render.DefaultSideChannelPort))))))
		}).Should(Succeed())

		By("decode ready, prefill not: not Ready, reason PrefillPoolNotReady; scale status is the decode pool")
		setDeploymentReady(k8sClient, ns, decodeName, 1)
		setDeploymentReady(k8sClient, ns, render.RouterName(kvr), 1)
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			expectCondition(g, cur, ConditionReady, metav1.ConditionFalse, ReasonPrefillPoolNotReady)
			g.Expect(cur.Status.Replicas).To(BeEquivalentTo(1))
			g.Expect(cur.Status.Selector).To(ContainSubstring(render.LabelRole + "=decode"))
			g.Expect(cur.Status.Disaggregation).NotTo(BeNil())
			g.Expect(cur.Status.Disaggregation.Pools.Decode.Ready).To(BeEquivalentTo(1))
			g.Expect(cur.Status.Disaggregation.Pools.Prefill.Ready).To(BeEquivalentTo(0))
		}).Should(Succeed())

		By("both pools ready: Ready, and the router's split figures on the status")
		setDeploymentReady(k8sClient, ns, prefillName, 1)
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			expectCondition(g, cur, ConditionReady, metav1.ConditionTrue, ReasonServing)
			d := cur.Status.Disaggregation
			g.Expect(d).NotTo(BeNil())
			g.Expect(d.Mode).To(Equal("Auto"))
			g.Expect(d.SplitShare).To(Equal("30.0%"))
			g.Expect(d.SplitRequests).To(BeEquivalentTo(30))
			g.Expect(d.WholeRequests).To(BeEquivalentTo(70))
			g.Expect(d.Fallbacks).To(BeEquivalentTo(1))
			g.Expect(d.Pools.Prefill).To(Equal(v1alpha1.PoolStatus{Desired: 1, Ready: 1, HitRate: "80.0%", QueuedPrefillTokens: 4096, InFlight: 3}))
			g.Expect(d.Pools.Decode).To(Equal(v1alpha1.PoolStatus{Desired: 1, Ready: 1, HitRate: "50.0%", InFlight: 9}))
			g.Expect(cur.Status.Endpoints).To(ContainElement(And(HaveField("Name", "e-0"), HaveField("Role", "prefill"))))
		}).Should(Succeed())

		By("switched off: the pools and their ScaledObjects are deleted, the aggregated engines come back")
		update(k8sClient, kvr, func(k *v1alpha1.KVRouter) { k.Spec.Disaggregation = nil })
		stub.set(func(d *routerapi.Status) { d.Disaggregation = nil })
		Eventually(func(g Gomega) {
			child(g, k8sClient, kvr, render.EngineWorkloadName(kvr), &appsv1.Deployment{})
			for _, name := range []string{prefillName, decodeName} {
				err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &appsv1.Deployment{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s: %v", name, err)
			}
			for _, pool := range []render.Pool{render.PoolPrefill, render.PoolDecode} {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(scaledObjectGVK)
				err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: render.PoolScaledObjectName(kvr, pool)}, u)
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ScaledObject of %s: %v", pool, err)
			}
			scaledObject(g, k8sClient, kvr)
			cur := reload(g, k8sClient, kvr)
			g.Expect(cur.Status.Disaggregation).To(BeNil())
			g.Expect(cur.Status.Selector).To(Equal(render.EngineSelector(kvr)))
		}).Should(Succeed())
	})
})
