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
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/internal/operator/routerstatus"
)

var _ = Describe("KVRouter reconciler", func() {
	ctx := context.Background()

	It("creates every child of the issue's manifest with the fields that matter", func() {
		ensureNamespace(k8sClient, "inference")
		kvr := readManifest("issue-2.yaml")
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())

		By("the engine Deployment runs vLLM with the contract's command line, GPUs and no replica count")
		Eventually(func(g Gomega) {
			d := child(g, k8sClient, kvr, "qwen3-32b-engine", &appsv1.Deployment{})
			spec := d.Spec.Template.Spec
			g.Expect(spec.Containers).To(HaveLen(1))
			c := spec.Containers[0]
			g.Expect(c.Image).To(Equal("vllm/vllm-openai:v0.26.0"))
			g.Expect(c.Command).To(Equal([]string{"vllm", "serve"}))
			g.Expect(flagValue(c.Args, "--model")).To(Equal("Qwen/Qwen3-32B"))
			g.Expect(flagValue(c.Args, "--served-model-name")).To(Equal("qwen3-32b"))
			g.Expect(flagValue(c.Args, "--port")).To(Equal("8000"))
			g.Expect(flagValue(c.Args, "--tensor-parallel-size")).To(Equal("2"))
			g.Expect(flagValue(c.Args, "--block-size")).To(Equal("16"))
			g.Expect(flagValue(c.Args, "--max-model-len")).To(Equal("32768"))
			g.Expect(flagValue(c.Args, "--prefix-caching-hash-algo")).To(Equal("sha256_cbor"))
			g.Expect(c.Args).To(ContainElement("--enable-chunked-prefill"))
			var kvEvents map[string]any
			g.Expect(json.Unmarshal([]byte(flagValue(c.Args, "--kv-events-config")), &kvEvents)).To(Succeed())
			g.Expect(kvEvents).To(HaveKeyWithValue("enable_kv_cache_events", true))
			g.Expect(kvEvents).To(HaveKeyWithValue("publisher", "zmq"))
			g.Expect(kvEvents).To(HaveKeyWithValue("endpoint", "tcp://*:5557"))
			g.Expect(kvEvents).To(HaveKeyWithValue("replay_endpoint", "tcp://*:5558"))
			g.Expect(kvEvents).To(HaveKeyWithValue("topic", ContainSubstring("$(POD_NAME)")))
			g.Expect(c.Env).To(ContainElement(corev1.EnvVar{Name: "PYTHONHASHSEED", Value: "0"}))
			g.Expect(c.Env).To(ContainElement(HaveField("Name", "HF_TOKEN")))
			g.Expect(c.Resources.Limits).To(HaveKeyWithValue(corev1.ResourceName("nvidia.com/gpu"), resource.MustParse("2")))
			g.Expect(spec.NodeSelector).To(HaveKeyWithValue("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"))
			g.Expect(spec.Tolerations).To(ContainElement(HaveField("Key", "nvidia.com/gpu")))
			g.Expect(spec.Volumes).To(ContainElement(HaveField("PersistentVolumeClaim.ClaimName", "model-cache")))
			// KEDA owns the replica count: the operator's apply leaves it out.
			g.Expect(appliedBy(d, FieldManager, "spec", "template")).To(BeTrue())
			g.Expect(appliedBy(d, FieldManager, "spec", "replicas")).To(BeFalse())
		}).Should(Succeed())

		By("the router Deployment points at the engines with the spec's policy and model")
		Eventually(func(g Gomega) {
			d := child(g, k8sClient, kvr, "qwen3-32b-router", &appsv1.Deployment{})
			g.Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(2)))
			c := d.Spec.Template.Spec.Containers[0]
			g.Expect(c.Image).To(Equal("kvrouter:test"))
			g.Expect(flagValue(c.Args, "--selector")).To(Equal(render.EngineSelector(kvr)))
			g.Expect(flagValue(c.Args, "--policy")).To(Equal("Auto"))
			g.Expect(flagValue(c.Args, "--model")).To(Equal("qwen3-32b"))
			g.Expect(flagValue(c.Args, "--block-size")).To(Equal("16"))
			g.Expect(d.Spec.Template.Spec.ServiceAccountName).To(Equal("qwen3-32b-router"))
		}).Should(Succeed())

		By("the router's Service, identity, RBAC, PDB and the engines' and the router's NetworkPolicies exist")
		Eventually(func(g Gomega) {
			svc := child(g, k8sClient, kvr, "qwen3-32b-router", &corev1.Service{})
			g.Expect(svc.Spec.Ports).To(ContainElements(HaveField("Port", BeEquivalentTo(8080)), HaveField("Port", BeEquivalentTo(9090))))
			child(g, k8sClient, kvr, "qwen3-32b-router", &corev1.ServiceAccount{})
			role := child(g, k8sClient, kvr, "qwen3-32b-router", &rbacv1.Role{})
			g.Expect(role.Rules).To(ConsistOf(rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}}))
			rb := child(g, k8sClient, kvr, "qwen3-32b-router", &rbacv1.RoleBinding{})
			g.Expect(rb.Subjects).To(ContainElement(HaveField("Name", "qwen3-32b-router")))
			child(g, k8sClient, kvr, "qwen3-32b-router", &policyv1.PodDisruptionBudget{})
			np := child(g, k8sClient, kvr, render.NetworkPolicyName(kvr), &networkingv1.NetworkPolicy{})
			g.Expect(np.Spec.Ingress).NotTo(BeEmpty())
			kvIngress := np.Spec.Ingress[0]
			g.Expect(kvIngress.Ports).To(ContainElement(HaveField("Port.IntVal", BeEquivalentTo(5557))))
			g.Expect(kvIngress.From).To(ConsistOf(HaveField("PodSelector.MatchLabels",
				HaveKeyWithValue(render.LabelComponent, render.ComponentRouter))))
			rnp := child(g, k8sClient, kvr, render.RouterNetworkPolicyName(kvr), &networkingv1.NetworkPolicy{})
			g.Expect(rnp.Spec.PodSelector.MatchLabels).To(HaveKeyWithValue(render.LabelComponent, render.ComponentRouter))
			g.Expect(rnp.Spec.Ingress).To(ContainElement(And(
				HaveField("Ports", ConsistOf(HaveField("Port.IntVal", BeEquivalentTo(render.RouterAdminPort)))),
				HaveField("From", Not(BeEmpty())))))
		}).Should(Succeed())

		By("the HTTPRoute attaches the router Service to the spec's Gateway without timeouts")
		Eventually(func(g Gomega) {
			route := child(g, k8sClient, kvr, "qwen3-32b", &gwapiv1.HTTPRoute{})
			g.Expect(route.Spec.ParentRefs).To(ConsistOf(And(
				HaveField("Name", gwapiv1.ObjectName("inference-gateway")),
				HaveField("Namespace", HaveValue(BeEquivalentTo("gateway-system"))))))
			g.Expect(route.Spec.Hostnames).To(ConsistOf(gwapiv1.Hostname("llm.example.com")))
			g.Expect(route.Spec.Rules).To(HaveLen(1))
			g.Expect(route.Spec.Rules[0].BackendRefs).To(ConsistOf(HaveField("Name", gwapiv1.ObjectName("qwen3-32b-router"))))
			g.Expect(route.Spec.Rules[0].Timeouts.Request).To(HaveValue(BeEquivalentTo("0s")))
			g.Expect(route.Spec.Rules[0].Matches).To(HaveLen(len(render.PublicPaths)))
		}).Should(Succeed())

		By("the ScaledObject scales the engine Deployment between the spec's bounds")
		Eventually(func(g Gomega) {
			so := scaledObject(g, k8sClient, kvr)
			g.Expect(so.Object).To(HaveKeyWithValue("spec", And(
				HaveKeyWithValue("scaleTargetRef", HaveKeyWithValue("name", "qwen3-32b-engine")),
				HaveKeyWithValue("minReplicaCount", BeEquivalentTo(2)),
				HaveKeyWithValue("maxReplicaCount", BeEquivalentTo(16)))))
			triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
			g.Expect(triggers).NotTo(BeEmpty())
		}).Should(Succeed())

		By("status reports the selector, the Gateway URL and the engines not ready yet")
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			g.Expect(cur.Status.Selector).To(Equal(render.EngineSelector(kvr)))
			g.Expect(cur.Status.URL).To(Equal("http://llm.example.com"))
			// Nothing runs KEDA here: the live Deployment has the API server's default of 1.
			g.Expect(cur.Status.Engines).To(Equal(v1alpha1.ReplicaStatus{Desired: 1, Ready: 0}))
			g.Expect(cur.Status.Router).To(Equal(v1alpha1.ReplicaStatus{Desired: 2, Ready: 0}))
			expectCondition(g, cur, ConditionReady, metav1.ConditionFalse, ReasonEnginesNotReady)
			expectCondition(g, cur, ConditionProgressing, metav1.ConditionTrue, ReasonRollingOut)
			expectCondition(g, cur, ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected)
			expectCondition(g, cur, ConditionCRDsInstalled, metav1.ConditionTrue, ReasonInstalled)
		}).Should(Succeed())
	})

	It("copies only allow-listed labels of the KVRouter onto its children", func() {
		ns := newNamespace(k8sClient)
		kvr := makeKVRouter(ns, "labels").Simulate().
			Label("app.kubernetes.io/part-of", "llm-platform").
			Label("app.kubernetes.io/instance", "argo-app"). // Argo CD's tracking label
			Label("argocd.argoproj.io/instance", "argo-app").
			Label("team", "search").Obj()
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())
		Eventually(func(g Gomega) {
			for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}} {
				name := render.RouterName(kvr)
				child(g, k8sClient, kvr, name, obj)
				l := obj.GetLabels()
				g.Expect(l).To(HaveKeyWithValue("app.kubernetes.io/part-of", "llm-platform"))
				g.Expect(l).To(HaveKeyWithValue("app.kubernetes.io/instance", "labels"))
				g.Expect(l).To(HaveKeyWithValue("app.kubernetes.io/managed-by", "kvrouter"))
				g.Expect(l).NotTo(HaveKey("argocd.argoproj.io/instance"))
				g.Expect(l).NotTo(HaveKey("team"))
			}
		}).Should(Succeed())
	})

	It("updates children when the spec changes and deletes the ones it no longer asks for", func() {
		ns := newNamespace(k8sClient)
		kvr := makeKVRouter(ns, "edit").Replicas(3).Gateway("chat.example.com").Obj()
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())
		Eventually(func(g Gomega) {
			child(g, k8sClient, kvr, render.RouteName(kvr), &gwapiv1.HTTPRoute{})
			d := child(g, k8sClient, kvr, render.EngineWorkloadName(kvr), &appsv1.Deployment{})
			g.Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(3)))
		}).Should(Succeed())

		update(k8sClient, kvr, func(k *v1alpha1.KVRouter) {
			k.Spec.Router.Policy = v1alpha1.PolicyLeastLoaded
			k.Spec.Router.Replicas = ptr.To[int32](3)
			k.Spec.Engine.TensorParallelSize = 4
			k.Spec.Engine.Replicas = ptr.To[int32](5)
			k.Spec.Engine.ExtraArgs = []string{"--gpu-memory-utilization", "0.85"}
		})
		Eventually(func(g Gomega) {
			r := child(g, k8sClient, kvr, render.RouterName(kvr), &appsv1.Deployment{})
			g.Expect(r.Spec.Replicas).To(HaveValue(BeEquivalentTo(3)))
			g.Expect(flagValue(r.Spec.Template.Spec.Containers[0].Args, "--policy")).To(Equal("LeastLoaded"))
			e := child(g, k8sClient, kvr, render.EngineWorkloadName(kvr), &appsv1.Deployment{})
			g.Expect(e.Spec.Replicas).To(HaveValue(BeEquivalentTo(5)))
			c := e.Spec.Template.Spec.Containers[0]
			g.Expect(flagValue(c.Args, "--tensor-parallel-size")).To(Equal("4"))
			g.Expect(flagValue(c.Args, "--gpu-memory-utilization")).To(Equal("0.85"))
			g.Expect(c.Resources.Limits).To(HaveKeyWithValue(corev1.ResourceName("nvidia.com/gpu"), resource.MustParse("4")))
		}).Should(Succeed())

		By("removing spec.gateway deletes the HTTPRoute and points status.url at the router Service")
		update(k8sClient, kvr, func(k *v1alpha1.KVRouter) { k.Spec.Gateway = nil })
		Eventually(func(g Gomega) {
			err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: render.RouteName(kvr)}, &gwapiv1.HTTPRoute{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "HTTPRoute still there: %v", err)
			cur := reload(g, k8sClient, kvr)
			g.Expect(cur.Status.URL).To(Equal(render.RouterServiceURL(kvr)))
			g.Expect(eventReasons(g, k8sClient, kvr)).To(ContainElement(EventDeleted))
		}).Should(Succeed())
	})

	It("hands the replica count to KEDA without resetting it, and takes it back", func() {
		ns := newNamespace(k8sClient)
		kvr := makeKVRouter(ns, "scale").Replicas(5).Obj()
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())
		engine := types.NamespacedName{Namespace: ns, Name: render.EngineWorkloadName(kvr)}
		Eventually(func(g Gomega) {
			d := child(g, k8sClient, kvr, engine.Name, &appsv1.Deployment{})
			g.Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(5)))
			g.Expect(appliedBy(d, FieldManager, "spec", "replicas")).To(BeTrue())
		}).Should(Succeed())

		update(k8sClient, kvr, func(k *v1alpha1.KVRouter) {
			k.Spec.Autoscaling = &v1alpha1.AutoscalingSpec{MinReplicas: 2, MaxReplicas: 10}
		})
		Eventually(func(g Gomega) {
			scaledObject(g, k8sClient, kvr)
			d := child(g, k8sClient, kvr, engine.Name, &appsv1.Deployment{})
			g.Expect(appliedBy(d, FieldManager, "spec", "replicas")).To(BeFalse())
		}).Should(Succeed())
		d := &appsv1.Deployment{}
		Expect(k8sClient.Get(ctx, engine, d)).To(Succeed())
		Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(5)), "the replica count fell back to the default when the operator let go of it")

		By("what the autoscaler writes survives the operator's next reconcile")
		modify(k8sClient, d, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](7) }, client.FieldOwner("keda-hpa"))
		update(k8sClient, kvr, func(k *v1alpha1.KVRouter) { k.Spec.Router.Policy = v1alpha1.PolicyRoundRobin })
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			g.Expect(cur.Status.Engines.Desired).To(BeEquivalentTo(7))
		}).Should(Succeed())
		Expect(k8sClient.Get(ctx, engine, d)).To(Succeed())
		Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(7)))

		By("removing spec.autoscaling deletes the ScaledObject and applies spec.engine.replicas again")
		update(k8sClient, kvr, func(k *v1alpha1.KVRouter) { k.Spec.Autoscaling = nil })
		Eventually(func(g Gomega) {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(scaledObjectGVK)
			err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: render.ScaledObjectName(kvr)}, u)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ScaledObject still there: %v", err)
			d := child(g, k8sClient, kvr, engine.Name, &appsv1.Deployment{})
			g.Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(5)))
			g.Expect(appliedBy(d, FieldManager, "spec", "replicas")).To(BeTrue())
		}).Should(Succeed())
	})

	It("moves the engines to a LeaderWorkerSet when a replica spans several nodes", func() {
		ns := newNamespace(k8sClient)
		kvr := makeKVRouter(ns, "big").Replicas(2).Obj()
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())
		Eventually(func(g Gomega) {
			child(g, k8sClient, kvr, render.EngineWorkloadName(kvr), &appsv1.Deployment{})
		}).Should(Succeed())

		update(k8sClient, kvr, func(k *v1alpha1.KVRouter) {
			k.Spec.Engine.NodesPerReplica = 2
			k.Spec.Engine.TensorParallelSize = 8
		})
		Eventually(func(g Gomega) {
			lws := child(g, k8sClient, kvr, render.EngineWorkloadName(kvr), &lwsv1.LeaderWorkerSet{})
			g.Expect(lws.Spec.Replicas).To(HaveValue(BeEquivalentTo(2)))
			g.Expect(lws.Spec.LeaderWorkerTemplate.Size).To(HaveValue(BeEquivalentTo(2)))
			g.Expect(lws.Spec.LeaderWorkerTemplate.RestartPolicy).To(Equal(lwsv1.RecreateGroupOnPodRestart))
			err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: render.EngineWorkloadName(kvr)}, &appsv1.Deployment{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "engine Deployment still there: %v", err)
		}).Should(Succeed())
	})

	It("brings back a deleted child and reverts hand edits", func() {
		ns := newNamespace(k8sClient)
		kvr := makeKVRouter(ns, "heal").Simulate().Obj()
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())
		var svc corev1.Service
		var np networkingv1.NetworkPolicy
		var engine appsv1.Deployment
		Eventually(func(g Gomega) {
			child(g, k8sClient, kvr, render.RouterName(kvr), &svc)
			child(g, k8sClient, kvr, render.NetworkPolicyName(kvr), &np)
			child(g, k8sClient, kvr, render.EngineWorkloadName(kvr), &engine)
		}).Should(Succeed())

		for _, obj := range []client.Object{&svc, &np, &engine} {
			Expect(k8sClient.Delete(ctx, obj)).To(Succeed())
		}
		Eventually(func(g Gomega) {
			for _, old := range []client.Object{&svc, &np, &engine} {
				fresh := old.DeepCopyObject().(client.Object)
				child(g, k8sClient, kvr, old.GetName(), fresh)
				g.Expect(fresh.GetUID()).NotTo(Equal(old.GetUID()), "%T %s was not recreated", old, old.GetName())
			}
		}).Should(Succeed())

		router := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.RouterName(kvr)}}
		modify(k8sClient, router, func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Image = "example.com/not-the-router:latest"
		}, client.FieldOwner("someone"))
		Eventually(func(g Gomega) {
			d := child(g, k8sClient, kvr, render.RouterName(kvr), &appsv1.Deployment{})
			g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal("kvrouter:test"))
		}).Should(Succeed())
	})

	It("moves conditions and observedGeneration with the spec and the workloads' readiness", func() {
		ns := newNamespace(k8sClient)
		kvr := makeKVRouter(ns, "status").Simulate().Replicas(2).RouterReplicas(1).Obj()
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())

		By("just created: nothing is ready, the rollout is in progress")
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			g.Expect(cur.Status.Replicas).To(BeEquivalentTo(0))
			g.Expect(cur.Status.Engines).To(Equal(v1alpha1.ReplicaStatus{Desired: 2}))
			g.Expect(cur.Status.Router).To(Equal(v1alpha1.ReplicaStatus{Desired: 1}))
			expectCondition(g, cur, ConditionReady, metav1.ConditionFalse, ReasonEnginesNotReady)
			expectCondition(g, cur, ConditionProgressing, metav1.ConditionTrue, ReasonRollingOut)
			expectCondition(g, cur, ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected)
		}).Should(Succeed())

		By("one engine ready but no router: still not ready")
		setDeploymentReady(k8sClient, ns, render.EngineWorkloadName(kvr), 1)
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			g.Expect(cur.Status.Replicas).To(BeEquivalentTo(1))
			expectCondition(g, cur, ConditionReady, metav1.ConditionFalse, ReasonRouterNotReady)
		}).Should(Succeed())

		By("every replica ready: Ready, rollout complete, an Event")
		setDeploymentReady(k8sClient, ns, render.EngineWorkloadName(kvr), 2)
		setDeploymentReady(k8sClient, ns, render.RouterName(kvr), 1)
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			g.Expect(cur.Status.Replicas).To(BeEquivalentTo(2))
			g.Expect(cur.Status.Engines).To(Equal(v1alpha1.ReplicaStatus{Desired: 2, Ready: 2}))
			g.Expect(cur.Status.Router).To(Equal(v1alpha1.ReplicaStatus{Desired: 1, Ready: 1}))
			expectCondition(g, cur, ConditionReady, metav1.ConditionTrue, ReasonServing)
			expectCondition(g, cur, ConditionProgressing, metav1.ConditionFalse, ReasonRolledOut)
			g.Expect(eventReasons(g, k8sClient, kvr)).To(ContainElement(EventReady))
		}).Should(Succeed())

		By("the status poller finds no router to read (envtest has no Service networking)")
		Eventually(func(g Gomega) {
			expectCondition(g, reload(g, k8sClient, kvr), routerstatus.ConditionRouterStatusAvailable,
				metav1.ConditionFalse, routerstatus.ReasonUnreachable)
		}).Should(Succeed())

		By("a steady state writes nothing: no status churn, no re-applied children")
		versions := func(g Gomega) string {
			cur := &v1alpha1.KVRouter{}
			engine, router := &appsv1.Deployment{}, &appsv1.Deployment{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(kvr), cur)).To(Succeed())
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: render.EngineWorkloadName(kvr)}, engine)).To(Succeed())
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: render.RouterName(kvr)}, router)).To(Succeed())
			return cur.ResourceVersion + "/" + engine.ResourceVersion + "/" + router.ResourceVersion
		}
		steady := settledValue(versions)
		Consistently(versions).WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(steady))

		By("a spec change: observedGeneration follows, the router rolls out while the KVRouter stays ready")
		update(k8sClient, kvr, func(k *v1alpha1.KVRouter) { k.Spec.Router.Policy = v1alpha1.PolicyPrefixOnly })
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			g.Expect(cur.Generation).To(BeEquivalentTo(2))
			g.Expect(cur.Status.ObservedGeneration).To(BeEquivalentTo(2))
			expectCondition(g, cur, ConditionReady, metav1.ConditionTrue, ReasonServing)
			expectCondition(g, cur, ConditionProgressing, metav1.ConditionTrue, ReasonRollingOut)
		}).Should(Succeed())
		setDeploymentReady(k8sClient, ns, render.RouterName(kvr), 1)
		Eventually(func(g Gomega) {
			expectCondition(g, reload(g, k8sClient, kvr), ConditionProgressing, metav1.ConditionFalse, ReasonRolledOut)
		}).Should(Succeed())

		By("scaled to zero: stopped, not failed")
		update(k8sClient, kvr, func(k *v1alpha1.KVRouter) { k.Spec.Engine.Replicas = ptr.To[int32](0) })
		setDeploymentReady(k8sClient, ns, render.EngineWorkloadName(kvr), 0)
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			expectCondition(g, cur, ConditionReady, metav1.ConditionFalse, ReasonStopped)
			g.Expect(eventReasons(g, k8sClient, kvr)).To(ContainElement(EventNotReady))
		}).Should(Succeed())
	})

	// The renderer's refusals (managed flags in extraArgs, reserved env, names too long for a
	// Service) are CRD rules now: the API server refuses those specs (validation_test.go), so
	// no spec created here can reach the InvalidSpec path. TestReconcileRefusedSpec covers it
	// with an object stored before the rules existed.
	It("never sees a spec the renderer would refuse: the API server refuses it first", func() {
		ns := newNamespace(k8sClient)
		kvr := makeKVRouter(ns, "refused").Simulate().ExtraArgs("--block-size", "32").Obj()
		err := k8sClient.Create(ctx, kvr)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
		Expect(err.Error()).To(ContainSubstring("spec.engine.extraArgs"))
	})

	It("reports a failed apply, keeps the last observedGeneration, and recovers", func() {
		ns := newNamespace(k8sClient)
		quota := denyServices(k8sClient, ns) // rbac_test.go

		kvr := makeKVRouter(ns, "quota").Simulate().Obj()
		Expect(k8sClient.Create(ctx, kvr)).To(Succeed())
		Eventually(func(g Gomega) {
			cur := reload(g, k8sClient, kvr)
			deg := expectCondition(g, cur, ConditionDegraded, metav1.ConditionTrue, ReasonApplyFailed)
			g.Expect(deg.Message).To(ContainSubstring("Service " + render.RouterName(kvr)))
			expectCondition(g, cur, ConditionReady, metav1.ConditionFalse, ReasonApplyFailed)
			g.Expect(cur.Status.ObservedGeneration).To(BeZero(), "observedGeneration claimed by a failed reconcile")
			g.Expect(eventReasons(g, k8sClient, kvr)).To(ContainElement(EventApplyFailed))
			// The other children were applied regardless.
			child(g, k8sClient, kvr, render.EngineWorkloadName(kvr), &appsv1.Deployment{})
		}).Should(Succeed())

		Expect(k8sClient.Delete(ctx, quota)).To(Succeed())
		// Retries of the failed reconcile back off exponentially; a change to the KVRouter
		// reconciles it at once.
		update(k8sClient, kvr, func(k *v1alpha1.KVRouter) { k.Labels = map[string]string{"touched": "yes"} })
		Eventually(func(g Gomega) {
			child(g, k8sClient, kvr, render.RouterName(kvr), &corev1.Service{})
			cur := reload(g, k8sClient, kvr)
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			expectCondition(g, cur, ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected)
		}).Should(Succeed())
	})
})
