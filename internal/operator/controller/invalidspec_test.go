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
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// TestReconcileRefusedSpec covers the reconciler's InvalidSpec path. Since the CRD's CEL rules
// refuse every spec the renderer refuses, no API server lets such a spec in any more; it can still
// reach the operator as an object stored before the CRD carried those rules (CEL checks writes,
// not what is stored). A fake client, which validates nothing, stands in for that cluster.
func TestReconcileRefusedSpec(t *testing.T) {
	scheme := testScheme(t)
	kvr := simulatedKVRouter()
	kvr.Spec.Engine.ExtraArgs = []string{"--block-size", "32"}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(kvr).WithStatusSubresource(&v1alpha1.KVRouter{}).Build()
	rec := events.NewFakeRecorder(10)
	r := &KVRouterReconciler{Client: c, Scheme: scheme, Recorder: rec, kinds: newKindRegistry(c.RESTMapper(), time.Minute)}

	ctx := context.Background()
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(kvr)})
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("Reconcile = %+v, %v; want no error and no requeue (retrying cannot fix a spec)", res, err)
	}
	got := &v1alpha1.KVRouter{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(kvr), got); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{ConditionDegraded, ConditionReady} {
		cond := meta.FindStatusCondition(got.Status.Conditions, typ)
		if cond == nil || cond.Reason != ReasonInvalidSpec || !strings.Contains(cond.Message, "--block-size") {
			t.Errorf("%s = %+v, want reason %s naming --block-size", typ, cond, ReasonInvalidSpec)
		}
	}
	if deg := meta.FindStatusCondition(got.Status.Conditions, ConditionDegraded); deg != nil && deg.Status != metav1.ConditionTrue {
		t.Errorf("Degraded = %s", deg.Status)
	}
	if got.Status.ObservedGeneration != kvr.Generation {
		t.Errorf("observedGeneration = %d, want %d: a refused spec is a finished reconcile", got.Status.ObservedGeneration, kvr.Generation)
	}
	deployments := &appsv1.DeploymentList{}
	if err := c.List(ctx, deployments); err != nil || len(deployments.Items) != 0 {
		t.Errorf("applied %d Deployments (err %v) for a refused spec", len(deployments.Items), err)
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, EventInvalidSpec) {
			t.Errorf("event %q, want %s", e, EventInvalidSpec)
		}
	default:
		t.Error("no InvalidSpec event")
	}
}
