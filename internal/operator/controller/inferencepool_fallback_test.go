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
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// TestKeepPoolMode: after a failed apply only a live pool of this KVRouter's, not being
// deleted, lets the router stay the picker and the route point at the pool.
func TestKeepPoolMode(t *testing.T) {
	const uid = types.UID("uid-1")
	pool := func(owner types.UID, deleting bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "KVRouter",
			Name: "m", UID: owner, Controller: ptr.To(true)}})
		if deleting {
			u.SetDeletionTimestamp(ptr.To(metav1.Now()))
		}
		return u
	}
	denied := errors.New(".spec.appProtocol: field not declared in schema")
	for _, tc := range []struct {
		name     string
		applyErr error
		live     *unstructured.Unstructured
		want     bool
	}{
		{"applied", nil, pool(uid, false), true},
		{"refused, no pool", denied, nil, false},
		{"refused, our pool is there", denied, pool(uid, false), true},
		{"refused, our pool is being deleted", denied, pool(uid, true), false},
		{"refused, another owner's pool of that name", denied, pool("uid-2", false), false},
		{"refused, an unowned pool of that name", denied, &unstructured.Unstructured{}, false},
	} {
		if got := keepPoolMode(tc.applyErr, tc.live, uid); got != tc.want {
			t.Errorf("%s: keepPoolMode = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPoolApplyFailureCondition: the two ways a failed pool apply shows in InferencePoolReady,
// each with the API server's answer.
func TestPoolApplyFailureCondition(t *testing.T) {
	apiErr := errors.New("admission webhook denied the request: no pools here")
	for _, tc := range []struct {
		name     string
		obs      observation
		status   metav1.ConditionStatus
		contains []string
	}{
		{"no pool: HTTPRoute mode instead", observation{poolFallback: true, poolErr: apiErr},
			metav1.ConditionFalse, []string{"InferencePool m could not be applied", "proxy behind the HTTPRoute", apiErr.Error()}},
		{"the pool as last applied stays", observation{poolErr: apiErr, pool: poolState{present: true, generation: 1, name: "m"}},
			metav1.ConditionUnknown, []string{"InferencePool m could not be updated", "as last applied", ReasonPending, apiErr.Error()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kvr := pooledKVRouter()
			obs := tc.obs
			obs.applyErrs = []string{"applying InferencePool m: " + apiErr.Error()}
			obs.engine, obs.router = settled(2, 2), settled(1, 1)
			computeStatus(kvr, &obs)
			c := meta.FindStatusCondition(kvr.Status.Conditions, ConditionInferencePoolReady)
			if c == nil || c.Status != tc.status || c.Reason != ReasonApplyFailed {
				t.Fatalf("InferencePoolReady = %+v, want %s/%s", c, tc.status, ReasonApplyFailed)
			}
			for _, s := range tc.contains {
				if !strings.Contains(c.Message, s) {
					t.Errorf("message %q lacks %q", c.Message, s)
				}
			}
			if d := meta.FindStatusCondition(kvr.Status.Conditions, ConditionDegraded); d == nil || d.Status != metav1.ConditionTrue || d.Reason != ReasonApplyFailed {
				t.Errorf("Degraded = %+v, want True/%s", d, ReasonApplyFailed)
			}
		})
	}
}

// TestPoolApplyFailureKeepsTheProxy: on a fake cluster, a pool the API server refuses (as a
// pre-v1.4.0 CRD refused a pool with appProtocol) leaves the router a proxy and the route on
// the router Service; once the pool applies, it is applied before the router turns picker and
// before the route turns to it; a refused update of that pool then keeps the picker mode.
func TestPoolApplyFailureKeepsTheProxy(t *testing.T) {
	refuse := true
	var applied []string
	r, c, kvr := partialFailureFixture(t, interceptor.Funcs{
		Apply: func(ctx context.Context, cl client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			u, ok := obj.(interface {
				GetName() string
				GetKind() string
			})
			if ok {
				applied = append(applied, u.GetKind()+"/"+u.GetName())
				if u.GetKind() == render.InferencePoolKind && refuse {
					return errors.New(`failed to create typed patch object (ns/m; inference.networking.k8s.io/v1, Kind=InferencePool): .spec.appProtocol: field not declared in schema`)
				}
			}
			return cl.Apply(ctx, obj, opts...)
		},
	})
	ctx := context.Background()
	setGateway := func(failureMode v1alpha1.EndpointPickerFailureMode) {
		t.Helper()
		cur := &v1alpha1.KVRouter{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(kvr), cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.Gateway = &v1alpha1.GatewaySpec{ParentRefs: []gwapiv1.ParentReference{{Name: "gw"}},
			Mode: v1alpha1.GatewayModeInferencePool, FailureMode: failureMode}
		if err := c.Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
	}
	routerArgs := func() []string {
		t.Helper()
		d := &appsv1.Deployment{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: kvr.Namespace, Name: render.RouterName(kvr)}, d); err != nil {
			t.Fatal(err)
		}
		return d.Spec.Template.Spec.Containers[0].Args
	}
	routeBackend := func() gwapiv1.BackendObjectReference {
		t.Helper()
		route := &gwapiv1.HTTPRoute{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: kvr.Namespace, Name: render.RouteName(kvr)}, route); err != nil {
			t.Fatal(err)
		}
		return route.Spec.Rules[0].BackendRefs[0].BackendObjectReference
	}
	poolCondition := func(got *v1alpha1.KVRouter) *metav1.Condition {
		return meta.FindStatusCondition(got.Status.Conditions, ConditionInferencePoolReady)
	}

	setGateway("")
	got, err := reconcileOnce(t, r, c, kvr)
	if err == nil || !strings.Contains(err.Error(), "field not declared in schema") {
		t.Fatalf("Reconcile = %v, want the pool's apply error, so that it is retried", err)
	}
	if len(applied) == 0 || applied[0] != render.InferencePoolKind+"/"+render.InferencePoolName(kvr) {
		t.Errorf("applied %v: the pool must come first", applied)
	}
	if slices.Contains(routerArgs(), render.RouterModeEPP) {
		t.Errorf("router args %v: an endpoint picker of no pool", routerArgs())
	}
	if b := routeBackend(); b.Kind != nil && *b.Kind != "Service" || string(b.Name) != render.RouterName(kvr) {
		t.Errorf("route backend %+v, want the router Service", b)
	}
	err = c.Get(ctx, types.NamespacedName{Namespace: kvr.Namespace, Name: render.InferencePoolName(kvr)}, &infv1.InferencePool{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("InferencePool: %v, want none", err)
	}
	if pc := poolCondition(got); pc == nil || pc.Status != metav1.ConditionFalse || pc.Reason != ReasonApplyFailed ||
		!strings.Contains(pc.Message, "field not declared in schema") {
		t.Errorf("InferencePoolReady = %+v, want False/%s with the API server's answer", pc, ReasonApplyFailed)
	}
	if d := meta.FindStatusCondition(got.Status.Conditions, ConditionDegraded); d == nil || d.Status != metav1.ConditionTrue ||
		d.Reason != ReasonApplyFailed || !strings.Contains(d.Message, "applying InferencePool "+render.InferencePoolName(kvr)) {
		t.Errorf("Degraded = %+v, want True/%s naming the pool", d, ReasonApplyFailed)
	}
	if got.Status.URL != render.RouterServiceURL(kvr) {
		t.Errorf("status.url = %q, want the proxy's %q", got.Status.URL, render.RouterServiceURL(kvr))
	}

	refuse, applied = false, nil
	got, err = reconcileOnce(t, r, c, kvr)
	// The fake client's server-side apply cannot merge a second apply of some kinds (the
	// NetworkPolicies): only the pool's part matters here.
	if err != nil && strings.Contains(err.Error(), render.InferencePoolKind) {
		t.Fatalf("Reconcile with the pool accepted: %v", err)
	}
	at := func(kind, name string) int { return slices.Index(applied, kind+"/"+name) }
	if p := at(render.InferencePoolKind, render.InferencePoolName(kvr)); p < 0 ||
		p > at("Deployment", render.RouterName(kvr)) || p > at("HTTPRoute", render.RouteName(kvr)) {
		t.Errorf("applied %v: the pool must precede the router and the route", applied)
	}
	if flagValue(routerArgs(), "--mode") != render.RouterModeEPP {
		t.Errorf("router args %v, want the endpoint picker", routerArgs())
	}
	if b := routeBackend(); b.Kind == nil || *b.Kind != render.InferencePoolKind {
		t.Errorf("route backend %+v, want the pool", b)
	}
	if pc := poolCondition(got); pc == nil || pc.Reason != ReasonPending {
		t.Errorf("InferencePoolReady = %+v, want %s", pc, ReasonPending)
	}

	refuse = true
	setGateway(v1alpha1.FailClose)
	got, err = reconcileOnce(t, r, c, kvr)
	if err == nil || !strings.Contains(err.Error(), "field not declared in schema") {
		t.Fatalf("Reconcile = %v, want the refused pool update", err)
	}
	if flagValue(routerArgs(), "--mode") != render.RouterModeEPP {
		t.Errorf("router args %v: the live pool still needs its picker", routerArgs())
	}
	if b := routeBackend(); b.Kind == nil || *b.Kind != render.InferencePoolKind {
		t.Errorf("route backend %+v, want the live pool", b)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: kvr.Namespace, Name: render.InferencePoolName(kvr)}, &infv1.InferencePool{}); err != nil {
		t.Errorf("the live pool was not kept: %v", err)
	}
	if pc := poolCondition(got); pc == nil || pc.Status != metav1.ConditionUnknown || pc.Reason != ReasonApplyFailed ||
		!strings.Contains(pc.Message, "as last applied") {
		t.Errorf("InferencePoolReady = %+v, want Unknown/%s", pc, ReasonApplyFailed)
	}
}
