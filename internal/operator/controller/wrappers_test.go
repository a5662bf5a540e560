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
	"os"
	"path/filepath"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// kvrWrapper builds KVRouters for tests fluently: makeKVRouter(ns, "m").Replicas(2).Obj().
type kvrWrapper struct{ kvr v1alpha1.KVRouter }

func makeKVRouter(ns, name string) *kvrWrapper {
	return &kvrWrapper{kvr: v1alpha1.KVRouter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.KVRouterSpec{Model: v1alpha1.ModelSpec{Name: "Qwen/Qwen3-0.6B"}},
	}}
}

func (w *kvrWrapper) Replicas(n int32) *kvrWrapper { w.kvr.Spec.Engine.Replicas = ptr.To(n); return w }
func (w *kvrWrapper) TP(n int32) *kvrWrapper       { w.kvr.Spec.Engine.TensorParallelSize = n; return w }
func (w *kvrWrapper) Simulate() *kvrWrapper        { w.kvr.Spec.Simulate = true; return w }
func (w *kvrWrapper) RouterReplicas(n int32) *kvrWrapper {
	w.kvr.Spec.Router.Replicas = ptr.To(n)
	return w
}
func (w *kvrWrapper) Policy(p v1alpha1.RoutingPolicy) *kvrWrapper {
	w.kvr.Spec.Router.Policy = p
	return w
}
func (w *kvrWrapper) ExtraArgs(a ...string) *kvrWrapper { w.kvr.Spec.Engine.ExtraArgs = a; return w }
func (w *kvrWrapper) Env(name, value string) *kvrWrapper {
	w.kvr.Spec.Engine.Env = append(w.kvr.Spec.Engine.Env, corev1.EnvVar{Name: name, Value: value})
	return w
}
func (w *kvrWrapper) Label(k, v string) *kvrWrapper {
	if w.kvr.Labels == nil {
		w.kvr.Labels = map[string]string{}
	}
	w.kvr.Labels[k] = v
	return w
}

// MultiNode spreads each replica over nodes nodes of perNode GPUs, filled by tensor parallelism.
func (w *kvrWrapper) MultiNode(nodes, perNode int32) *kvrWrapper {
	w.kvr.Spec.Engine.NodesPerReplica = nodes
	w.kvr.Spec.Engine.GPU.PerNode = perNode
	w.kvr.Spec.Engine.TensorParallelSize = perNode
	return w
}

func (w *kvrWrapper) Gateway(hostnames ...string) *kvrWrapper {
	gw := &v1alpha1.GatewaySpec{ParentRefs: []gwapiv1.ParentReference{{Name: "inference-gateway"}}}
	for _, h := range hostnames {
		gw.Hostnames = append(gw.Hostnames, gwapiv1.Hostname(h))
	}
	w.kvr.Spec.Gateway = gw
	return w
}

// InferencePool puts the engines behind an InferencePool whose endpoint picker is the router;
// Gateway must be set first.
func (w *kvrWrapper) InferencePool(failureMode v1alpha1.EndpointPickerFailureMode) *kvrWrapper {
	w.kvr.Spec.Gateway.Mode = v1alpha1.GatewayModeInferencePool
	w.kvr.Spec.Gateway.FailureMode = failureMode
	return w
}

func (w *kvrWrapper) Autoscaling(minReplicas, maxReplicas int32) *kvrWrapper {
	w.kvr.Spec.Autoscaling = &v1alpha1.AutoscalingSpec{MinReplicas: minReplicas, MaxReplicas: maxReplicas}
	return w
}

// With changes what no other method sets.
func (w *kvrWrapper) With(mutate func(*v1alpha1.KVRouter)) *kvrWrapper { mutate(&w.kvr); return w }
func (w *kvrWrapper) Obj() *v1alpha1.KVRouter                          { return w.kvr.DeepCopy() }

// readManifest decodes a KVRouter from testdata.
func readManifest(name string) *v1alpha1.KVRouter {
	data, err := os.ReadFile(filepath.Join("testdata", name))
	Expect(err).NotTo(HaveOccurred())
	kvr := &v1alpha1.KVRouter{}
	Expect(yaml.UnmarshalStrict(data, kvr)).To(Succeed())
	return kvr
}

// newNamespace creates a namespace of its own for one spec, so specs never see each other's
// objects.
func newNamespace(c client.Client) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kvr-test-"}}
	Expect(c.Create(context.Background(), ns)).To(Succeed())
	return ns.Name
}

func ensureNamespace(c client.Client, name string) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	Expect(client.IgnoreAlreadyExists(c.Create(context.Background(), ns))).To(Succeed())
}

// child fetches a child of kvr, failing the Eventually attempt (g) if it is absent or not
// controlled by kvr.
func child[T client.Object](g Gomega, c client.Client, kvr *v1alpha1.KVRouter, name string, obj T) T {
	g.Expect(c.Get(context.Background(), types.NamespacedName{Namespace: kvr.Namespace, Name: name}, obj)).To(Succeed())
	ref := metav1.GetControllerOf(obj)
	g.Expect(ref).NotTo(BeNil(), "%T %s has no controller reference", obj, name)
	g.Expect(ref.Kind).To(Equal("KVRouter"))
	g.Expect(ref.Name).To(Equal(kvr.Name))
	return obj
}

func scaledObject(g Gomega, c client.Client, kvr *v1alpha1.KVRouter) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(scaledObjectGVK)
	return child(g, c, kvr, render.ScaledObjectName(kvr), u)
}

// reload reads kvr again from the API server.
func reload(g Gomega, c client.Client, kvr *v1alpha1.KVRouter) *v1alpha1.KVRouter {
	out := &v1alpha1.KVRouter{}
	g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(kvr), out)).To(Succeed())
	return out
}

// update applies mutate to the latest kvr and writes it, retrying on conflicts.
func update(c client.Client, kvr *v1alpha1.KVRouter, mutate func(*v1alpha1.KVRouter)) {
	modify(c, kvr.DeepCopy(), mutate)
}

// conflictBackoff outlasts a burst of the controller's writes: each reconcile of a spec change
// writes the status once or twice, so a handful of tries a few milliseconds apart always wins.
var conflictBackoff = wait.Backoff{Steps: 10, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.1, Cap: time.Second}

// modify re-reads obj, applies mutate and writes it with a plain update, as an HPA or a person
// with kubectl would; it retries only on conflicts. The operator writes the same objects (spec
// applies on children, status on KVRouters) while specs run, so a write based on an earlier read
// loses the race now and then: "the object has been modified". Any other error fails at once.
func modify[T client.Object](c client.Client, obj T, mutate func(T), opts ...client.UpdateOption) {
	GinkgoHelper()
	Expect(retry.RetryOnConflict(conflictBackoff, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate(obj)
		return c.Update(context.Background(), obj, opts...)
	})).To(Succeed())
}

// modifyStatus is modify for the status subresource.
func modifyStatus[T client.Object](c client.Client, obj T, mutate func(T)) {
	GinkgoHelper()
	Expect(retry.RetryOnConflict(conflictBackoff, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate(obj)
		return c.Status().Update(context.Background(), obj)
	})).To(Succeed())
}

// settledValue returns what read returns once two reads 300 ms apart agree. A change sets off writes
// by both controllers (the reconciler's status, the status poller's conditions), and the last of
// them can land just after the assertions on the change pass; a steady-state check that starts
// from an earlier read would see that write and fail.
func settledValue[T comparable](read func(Gomega) T) T {
	GinkgoHelper()
	var v T
	Eventually(func(g Gomega) {
		before := read(g)
		time.Sleep(300 * time.Millisecond)
		v = read(g)
		g.Expect(v).To(Equal(before))
	}).Should(Succeed())
	return v
}

// scaleTo sets kvr's replicas through the scale subresource the way `kubectl scale` does: read
// the latest Scale, change spec.replicas, update, and retry on conflicts (the Scale carries the
// KVRouter's resourceVersion, which every status write of the controller moves).
func scaleTo(c client.Client, kvr *v1alpha1.KVRouter, replicas int32) {
	GinkgoHelper()
	Expect(retry.RetryOnConflict(conflictBackoff, func() error {
		scale := &autoscalingv1.Scale{}
		if err := c.SubResource("scale").Get(context.Background(), kvr, scale); err != nil {
			return err
		}
		scale.Spec.Replicas = replicas
		return c.SubResource("scale").Update(context.Background(), kvr, client.WithSubResourceBody(scale))
	})).To(Succeed())
}

// condition returns the condition t of kvr, or an empty one if it is not set.
func condition(kvr *v1alpha1.KVRouter, t string) metav1.Condition {
	if cond := meta.FindStatusCondition(kvr.Status.Conditions, t); cond != nil {
		return *cond
	}
	return metav1.Condition{}
}

// haveCondition matches a condition by status and reason, for the current generation.
func expectCondition(g Gomega, kvr *v1alpha1.KVRouter, t string, status metav1.ConditionStatus, reason string) metav1.Condition {
	cond := condition(kvr, t)
	g.Expect(cond.Type).To(Equal(t), "condition %s not set; conditions: %+v", t, kvr.Status.Conditions)
	g.Expect(cond.Status).To(Equal(status), "%s: %s %s", t, cond.Reason, cond.Message)
	g.Expect(cond.Reason).To(Equal(reason), "%s: %s", t, cond.Message)
	g.Expect(cond.ObservedGeneration).To(Equal(kvr.Generation))
	return cond
}

// setDeploymentReady writes the status a deployment controller would write once ready of the
// Deployment's replicas are ready (envtest runs no controllers).
func setDeploymentReady(c client.Client, ns, name string, ready int32) {
	GinkgoHelper()
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	Eventually(func(g Gomega) {
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(d), d)).To(Succeed())
	}).Should(Succeed())
	modifyStatus(c, d, func(d *appsv1.Deployment) {
		want := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation,
			Replicas:           want,
			UpdatedReplicas:    want,
			ReadyReplicas:      ready,
			AvailableReplicas:  ready,
		}
	})
}

// eventReasons lists the reasons of the Events about kvr.
func eventReasons(g Gomega, c client.Client, kvr *v1alpha1.KVRouter) []string {
	list := &eventsv1.EventList{}
	g.Expect(c.List(context.Background(), list, client.InNamespace(kvr.Namespace))).To(Succeed())
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "KVRouter" && e.Regarding.Name == kvr.Name {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// flagValue returns the value following flag in args.
func flagValue(args []string, flag string) string {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return fmt.Sprintf("<%s not set>", flag)
	}
	return args[i+1]
}

// appliedBy reports whether manager owns path of obj through server-side apply.
func appliedBy(obj client.Object, manager string, path ...string) bool {
	return ownsField(obj.GetManagedFields(), manager, path...)
}
