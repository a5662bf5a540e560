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

package discovery

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/rbacaudit"
)

// TestEnvtestKubernetesDiscovery runs the discovery scenario against a real kube-apiserver and etcd
// (KUBEBUILDER_ASSETS, as `make envtest` builds them into bin/k8s/<version>), as a user that
// holds only the Role the operator renders for the router, and checks from the API server's
// audit log that discovery needs every permission of that Role and nothing more.
func TestEnvtestKubernetesDiscovery(t *testing.T) {
	cp := startAuditedControlPlane(t)
	cs := cp.admin
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := routerRole(t, "ns")
	role.OwnerReferences = nil // no KVRouter here to own it
	watcher, err := kubernetes.NewForConfig(cp.grant(role))
	if err != nil {
		t.Fatal(err)
	}
	runKubernetesScenario(t, watcher, cs)

	cp.checkRole(role, "discovery (drop it from internal/operator/render's routerRole)")
}

// routerRole is the Role the operator renders for a KVRouter's router in namespace ns.
func routerRole(t *testing.T, ns string) *rbacv1.Role {
	t.Helper()
	kvr := &v1alpha1.KVRouter{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r1"},
		Spec: v1alpha1.KVRouterSpec{Model: v1alpha1.ModelSpec{Name: "m"}}}
	objs, err := render.Objects(kvr, render.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if r, ok := o.(*rbacv1.Role); ok {
			if len(rbacaudit.Wildcards(r.Rules)) > 0 {
				t.Fatalf("the router's Role has wildcards: %v", rbacaudit.Wildcards(r.Rules))
			}
			return r
		}
	}
	t.Fatal("the renderer emits no Role for the router")
	return nil
}
