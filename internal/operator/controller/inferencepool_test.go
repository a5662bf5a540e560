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
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

func pooledKVRouter() *v1alpha1.KVRouter {
	kvr := testKVRouter()
	kvr.Spec.Gateway = &v1alpha1.GatewaySpec{ParentRefs: []gwapiv1.ParentReference{{Name: "gw"}}, Mode: v1alpha1.GatewayModeInferencePool}
	return kvr
}

func parent(name string, gen int64, conds ...metav1.Condition) infv1.ParentStatus {
	for i := range conds {
		conds[i].ObservedGeneration = gen
	}
	return infv1.ParentStatus{ParentRef: infv1.ParentReference{Name: infv1.ObjectName(name), Namespace: "gateways"},
		ControllerName: "example.com/gateway", Conditions: conds}
}

func cond(t infv1.InferencePoolConditionType, s metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: string(t), Status: s, Reason: reason, Message: reason + " message"}
}

// TestInferencePoolCondition: the pool's status.parents, as Gateways write them, become one
// condition on the KVRouter; it exists only in InferencePool mode and never changes Ready.
func TestInferencePoolCondition(t *testing.T) {
	acceptedT := cond(infv1.InferencePoolConditionAccepted, metav1.ConditionTrue, "SupportedByParent")
	acceptedF := cond(infv1.InferencePoolConditionAccepted, metav1.ConditionFalse, "NotSupportedByParent")
	resolvedT := cond(infv1.InferencePoolConditionResolvedRefs, metav1.ConditionTrue, "ResolvedRefs")
	resolvedF := cond(infv1.InferencePoolConditionResolvedRefs, metav1.ConditionFalse, "InvalidExtensionRef")
	pool := func(parents ...infv1.ParentStatus) poolState {
		return poolState{present: true, generation: 2, name: "m", parents: parents}
	}
	for _, tc := range []struct {
		name     string
		obs      observation
		status   metav1.ConditionStatus
		reason   string
		contains []string
	}{
		{"no Gateway yet", observation{pool: pool()}, metav1.ConditionUnknown, ReasonPending, []string{"no Gateway reports"}},
		{"accepted", observation{pool: pool(parent("a", 2, acceptedT, resolvedT), parent("b", 2, acceptedT, resolvedT))},
			metav1.ConditionTrue, ReasonAccepted, []string{"Gateway gateways/a (example.com/gateway)", "Gateway gateways/b"}},
		{"refused by one of two", observation{pool: pool(parent("a", 2, acceptedT, resolvedT), parent("b", 2, acceptedF))},
			metav1.ConditionFalse, ReasonNotAccepted, []string{"gateways/b", "NotSupportedByParent"}},
		{"picker not resolved", observation{pool: pool(parent("a", 2, acceptedT, resolvedF))},
			metav1.ConditionFalse, ReasonRefsNotResolved, []string{"InvalidExtensionRef", "router Service"}},
		{"refusal wins over unresolved", observation{pool: pool(parent("a", 2, acceptedT, resolvedF), parent("b", 2, acceptedF))},
			metav1.ConditionFalse, ReasonNotAccepted, nil},
		{"stale acceptance of an older generation", observation{pool: pool(parent("a", 1, acceptedT, resolvedT))},
			metav1.ConditionUnknown, ReasonPending, []string{"gateways/a"}},
		{"ResolvedRefs not reported yet", observation{pool: pool(parent("a", 2, acceptedT))},
			metav1.ConditionUnknown, ReasonPending, nil},
		{"CRD missing: HTTPRoute mode instead", observation{poolFallback: true, missing: []OptionalKind{OptionalKinds[len(OptionalKinds)-1]}},
			metav1.ConditionFalse, ReasonCRDNotInstalled, []string{"inferencepools.inference.networking.k8s.io", "proxy behind the HTTPRoute"}},
		{"not applied", observation{applyErrs: []string{"applying InferencePool m: denied"}},
			metav1.ConditionUnknown, ReasonApplyFailed, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kvr := pooledKVRouter()
			obs := tc.obs
			obs.engine, obs.router = settled(2, 2), settled(1, 1)
			computeStatus(kvr, &obs)
			c := meta.FindStatusCondition(kvr.Status.Conditions, ConditionInferencePoolReady)
			if c == nil {
				t.Fatal("InferencePoolReady not set")
			}
			if c.Status != tc.status || c.Reason != tc.reason || c.ObservedGeneration != kvr.Generation {
				t.Errorf("InferencePoolReady = %s/%s (gen %d): %s", c.Status, c.Reason, c.ObservedGeneration, c.Message)
			}
			for _, s := range tc.contains {
				if !strings.Contains(c.Message, s) {
					t.Errorf("message %q lacks %q", c.Message, s)
				}
			}
			if len(obs.applyErrs) == 0 && !meta.IsStatusConditionTrue(kvr.Status.Conditions, ConditionReady) {
				t.Errorf("Ready is not True: %+v", meta.FindStatusCondition(kvr.Status.Conditions, ConditionReady))
			}
		})
	}

	// Leaving InferencePool mode removes the condition.
	kvr := pooledKVRouter()
	computeStatus(kvr, &observation{pool: pool()})
	kvr.Spec.Gateway.Mode = v1alpha1.GatewayModeHTTPRoute
	computeStatus(kvr, &observation{})
	if meta.FindStatusCondition(kvr.Status.Conditions, ConditionInferencePoolReady) != nil {
		t.Error("InferencePoolReady kept in HTTPRoute mode")
	}
}

// TestInferencePoolFallbackURL: while the CRD is missing the router serves as a proxy, so
// status.url is its Service when no exact hostname names the Gateway; with the pool it is empty.
func TestInferencePoolFallbackURL(t *testing.T) {
	kvr := pooledKVRouter()
	computeStatus(kvr, &observation{pool: poolState{present: true}})
	if kvr.Status.URL != "" {
		t.Errorf("URL with a pool and no hostname = %q", kvr.Status.URL)
	}
	computeStatus(kvr, &observation{poolFallback: true})
	if kvr.Status.URL != "http://m-router.ns.svc:8080" {
		t.Errorf("URL while the router is the proxy = %q", kvr.Status.URL)
	}
}
