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
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

func testKVRouter() *v1alpha1.KVRouter {
	return &v1alpha1.KVRouter{
		ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns", Generation: 3},
		Spec: v1alpha1.KVRouterSpec{
			Model:  v1alpha1.ModelSpec{Name: "x"},
			Engine: v1alpha1.EngineSpec{Replicas: ptr.To[int32](2)},
			Router: v1alpha1.RouterSpec{Replicas: ptr.To[int32](1)},
		},
	}
}

func settled(desired, ready int32) workloadState {
	return workloadState{present: true, desired: desired, ready: ready, settled: desired == ready}
}

func TestComputeStatusConditions(t *testing.T) {
	lwsMissing := OptionalKinds[2]
	cases := []struct {
		name                  string
		obs                   observation
		mutate                func(*v1alpha1.KVRouter)
		ready, prog, degraded string // reasons
		readyTrue, progTrue   bool
		degradedTrue          bool
	}{
		{name: "serving", obs: observation{engine: settled(2, 2), router: settled(1, 1)},
			ready: ReasonServing, readyTrue: true, prog: ReasonRolledOut, degraded: ReasonAsExpected},
		{name: "partly ready is serving but progressing", obs: observation{engine: settled(2, 1), router: settled(1, 1)},
			ready: ReasonServing, readyTrue: true, prog: ReasonRollingOut, progTrue: true, degraded: ReasonAsExpected},
		{name: "no engine ready", obs: observation{engine: settled(2, 0), router: settled(1, 1)},
			ready: ReasonEnginesNotReady, prog: ReasonRollingOut, progTrue: true, degraded: ReasonAsExpected},
		{name: "no router ready", obs: observation{engine: settled(2, 2), router: settled(1, 0)},
			ready: ReasonRouterNotReady, prog: ReasonRollingOut, progTrue: true, degraded: ReasonAsExpected},
		{name: "apply failed", obs: observation{applyErrs: []string{"applying Service m-router: denied"}, engine: settled(2, 2), router: settled(1, 1)},
			ready: ReasonApplyFailed, prog: ReasonRolledOut, degraded: ReasonApplyFailed, degradedTrue: true},
		{name: "refused spec", obs: observation{renderErr: errors.New("bad flag")},
			ready: ReasonInvalidSpec, prog: ReasonInvalidSpec, degraded: ReasonInvalidSpec, degradedTrue: true},
		{name: "engine CRD missing", obs: observation{missing: []OptionalKind{lwsMissing}, engineGone: true, router: settled(1, 1)},
			ready: ReasonCRDNotInstalled, prog: ReasonRollingOut, progTrue: true, degraded: ReasonCRDNotInstalled, degradedTrue: true},
		{name: "stopped", obs: observation{engine: settled(0, 0), router: settled(1, 1)},
			mutate: func(k *v1alpha1.KVRouter) { k.Spec.Engine.Replicas = ptr.To[int32](0) },
			ready:  ReasonStopped, prog: ReasonRolledOut, degraded: ReasonAsExpected},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kvr := testKVRouter()
			if tc.mutate != nil {
				tc.mutate(kvr)
			}
			computeStatus(kvr, &tc.obs)
			check := func(typ, reason string, wantTrue bool) {
				t.Helper()
				c := meta.FindStatusCondition(kvr.Status.Conditions, typ)
				if c == nil {
					t.Fatalf("%s not set", typ)
				}
				if c.Reason != reason || (c.Status == metav1.ConditionTrue) != wantTrue {
					t.Errorf("%s = %s/%s (%s), want reason %s true=%v", typ, c.Status, c.Reason, c.Message, reason, wantTrue)
				}
				if c.ObservedGeneration != 3 {
					t.Errorf("%s observedGeneration = %d, want 3", typ, c.ObservedGeneration)
				}
			}
			check(ConditionReady, tc.ready, tc.readyTrue)
			check(ConditionProgressing, tc.prog, tc.progTrue)
			check(ConditionDegraded, tc.degraded, tc.degradedTrue)
			if kvr.Status.ObservedGeneration != 0 {
				t.Error("computeStatus set observedGeneration; only the reconciler may, after success")
			}
		})
	}
}

func TestComputeStatusNamesMissingCRDs(t *testing.T) {
	kvr := testKVRouter()
	computeStatus(kvr, &observation{missing: OptionalKinds[:2], engine: settled(2, 2), router: settled(1, 1)})
	c := meta.FindStatusCondition(kvr.Status.Conditions, ConditionCRDsInstalled)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonCRDNotInstalled {
		t.Fatalf("CRDsInstalled = %+v", c)
	}
	for _, crd := range []string{"httproutes.gateway.networking.k8s.io", "scaledobjects.keda.sh"} {
		if !strings.Contains(c.Message, crd) {
			t.Errorf("message %q does not name %s", c.Message, crd)
		}
	}
	// The engines still serve: a missing route or autoscaler degrades, it does not stop.
	if !meta.IsStatusConditionTrue(kvr.Status.Conditions, ConditionReady) {
		t.Error("Ready is not True although engines and router are ready")
	}
	if kvr.Status.Replicas != 2 || kvr.Status.Selector == "" || kvr.Status.URL == "" {
		t.Errorf("status = %+v", kvr.Status)
	}
}

func TestDeploymentState(t *testing.T) {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Generation: 2},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](3)},
		Status:     appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3},
	}
	if deploymentState(d).settled {
		t.Error("a Deployment whose controller has not seen the new generation counts as settled")
	}
	d.Status.ObservedGeneration = 2
	if s := deploymentState(d); !s.settled || s.desired != 3 || s.ready != 3 {
		t.Errorf("state = %+v", s)
	}
	d.Status.Replicas = 4 // an old pod still terminating
	if deploymentState(d).settled {
		t.Error("a Deployment with surplus old replicas counts as settled")
	}
}
