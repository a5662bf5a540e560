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
	"errors"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// partialFailureFixture is a simulated KVRouter whose engines (2) and router (1) already run
// and are ready, on a fake cluster. The reconciles below fail part of the way; what serves must
// still be reported as serving.
func partialFailureFixture(t *testing.T, funcs interceptor.Funcs) (*KVRouterReconciler, client.Client, *v1alpha1.KVRouter) {
	t.Helper()
	scheme := testScheme(t)
	kvr := simulatedKVRouter()
	render.Default(kvr)
	running := func(name string, n int32) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: kvr.Namespace, Name: name, Generation: 1,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "KVRouter",
					Name: kvr.Name, UID: kvr.UID, Controller: ptr.To(true)}}},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(n)},
			Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: n, UpdatedReplicas: n,
				ReadyReplicas: n, AvailableReplicas: n},
		}
	}
	// The scheme's kinds are served, the optional typed ones (Gateway API, LWS) among them.
	mapper := meta.NewDefaultRESTMapper(nil)
	for gvk := range scheme.AllKnownTypes() {
		mapper.Add(gvk, meta.RESTScopeNamespace)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).
		WithObjects(kvr, running(render.EngineWorkloadName(kvr), 2), running(render.RouterName(kvr), 1)).
		WithStatusSubresource(&v1alpha1.KVRouter{}, &appsv1.Deployment{}).
		WithInterceptorFuncs(funcs).Build()
	r := &KVRouterReconciler{Client: c, Scheme: scheme, Recorder: events.NewFakeRecorder(100),
		kinds: newKindRegistry(c.RESTMapper(), time.Minute), watched: map[schema.GroupVersionKind]bool{},
		ctrl: fakeWatches{}}
	return r, c, kvr
}

// testScheme is the operator's scheme (NewScheme), failing the test if it cannot be built.
func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	return scheme
}

// simulatedKVRouter is testKVRouter with a UID (children's ownerReferences need one) in
// simulate mode, as a fake cluster without GPUs runs it.
func simulatedKVRouter() *v1alpha1.KVRouter {
	kvr := testKVRouter()
	kvr.UID = "uid-1"
	kvr.Spec.Simulate = true
	return kvr
}

func reconcileOnce(t *testing.T, r *KVRouterReconciler, c client.Client, kvr *v1alpha1.KVRouter) (*v1alpha1.KVRouter, error) {
	t.Helper()
	_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(kvr)})
	got := &v1alpha1.KVRouter{}
	if gerr := c.Get(context.Background(), client.ObjectKeyFromObject(kvr), got); gerr != nil {
		t.Fatal(gerr)
	}
	return got, err
}

// A router Deployment the API server refuses to change (an admission policy, say) keeps running
// its previous version: the status reports that router as ready and Degraded says what was
// refused, rather than the router being reported down and rolling out.
func TestFailedRouterApplyReportsTheLiveRouter(t *testing.T) {
	var routerName string
	r, c, kvr := partialFailureFixture(t, interceptor.Funcs{
		Apply: func(ctx context.Context, cl client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if u, ok := obj.(interface {
				GetName() string
				GetKind() string
			}); ok && u.GetKind() == "Deployment" && u.GetName() == routerName {
				return errors.New("admission webhook denied the request")
			}
			return cl.Apply(ctx, obj, opts...)
		},
	})
	routerName = render.RouterName(kvr)

	got, err := reconcileOnce(t, r, c, kvr)
	if err == nil {
		t.Fatal("Reconcile succeeded although the router apply was denied")
	}
	if got.Status.Router != (v1alpha1.ReplicaStatus{Desired: 1, Ready: 1}) {
		t.Errorf("status.router = %+v, want the live router's {1 1}", got.Status.Router)
	}
	if deg := meta.FindStatusCondition(got.Status.Conditions, ConditionDegraded); deg == nil ||
		deg.Status != metav1.ConditionTrue || deg.Reason != ReasonApplyFailed {
		t.Errorf("Degraded = %+v, want True/%s", deg, ReasonApplyFailed)
	}
	if p := meta.FindStatusCondition(got.Status.Conditions, ConditionProgressing); p != nil && p.Status == metav1.ConditionTrue {
		t.Errorf("Progressing = %+v, want False: nothing rolls out, the apply was refused", p)
	}
}

// fakeWatches stands in for the controller's watches; watchFails for a controller that cannot
// add one (the informer for a newly installed CRD's kind does not start).
type (
	fakeWatches struct{ controller.Controller }
	watchFails  struct{ controller.Controller }
)

func (fakeWatches) Watch(source.TypedSource[reconcile.Request]) error { return nil }

func (watchFails) Watch(source.TypedSource[reconcile.Request]) error {
	return errors.New("informer did not sync")
}

// A kind the operator cannot watch yet is retried, but it neither stops the applies nor turns a
// serving fleet into "no engine ready" on the status.
func TestFailedWatchKeepsTheStatus(t *testing.T) {
	r, c, kvr := partialFailureFixture(t, interceptor.Funcs{})
	r.ctrl = watchFails{}
	if added, _ := newKindRegistry(c.RESTMapper(), time.Minute).refresh(true); len(added) == 0 {
		t.Fatal("the fake RESTMapper serves no optional kind; the test cannot make a watch fail")
	}

	got, err := reconcileOnce(t, r, c, kvr)
	if err == nil {
		t.Fatal("Reconcile hid the failed watch; it must return it so that the watch is retried")
	}
	if got.Status.Engines != (v1alpha1.ReplicaStatus{Desired: 2, Ready: 2}) {
		t.Errorf("status.engines = %+v, want the live {2 2}", got.Status.Engines)
	}
	// (The fake client's server-side apply cannot merge some kinds, so Ready may be False with
	// ApplyFailed here; what matters is that it is not blamed on the engines.)
	if ready := meta.FindStatusCondition(got.Status.Conditions, ConditionReady); ready == nil || ready.Reason == ReasonEnginesNotReady {
		t.Errorf("Ready = %+v: the engines serve", ready)
	}
}
