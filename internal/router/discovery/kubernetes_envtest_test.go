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
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/rbacaudit"
)

// TestEnvtestKubernetesDiscovery runs the discovery scenario against a real kube-apiserver and etcd
// (KUBEBUILDER_ASSETS, as `make envtest` builds them into bin/k8s/<version>), as a user that
// holds only the Role the operator renders for the router, and checks from the API server's
// audit log that discovery needs every permission of that Role and nothing more.
func TestEnvtestKubernetesDiscovery(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("KUBEBUILDER_ASSETS not set (make envtest builds the control plane into bin/k8s)")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			t.Skipf("envtest binary missing: %v", err)
		}
	}
	const routerUser = "kvrouter-router-under-test"
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	auditLog, err := rbacaudit.Enable(env, t.TempDir(), routerUser)
	if err != nil {
		t.Fatal(err)
	}
	// Without streaming watch-lists (Kubernetes 1.33 and earlier) an informer lists, then
	// watches; with them it only watches. Turned off here so that both verbs the Role grants are
	// exercised.
	env.ControlPlane.GetAPIServer().Configure().Set("feature-gates", "WatchList=false")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			if err := env.Stop(); err != nil {
				t.Errorf("stop envtest: %v", err)
			}
		}
	}
	defer stop()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := routerRole(t, "ns")
	role.OwnerReferences = nil // no KVRouter here to own it
	if _, err := cs.RbacV1().Roles("ns").Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: routerUser}},
	}
	if _, err := cs.RbacV1().RoleBindings("ns").Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	router, err := env.AddUser(envtest.User{Name: routerUser}, nil)
	if err != nil {
		t.Fatal(err)
	}
	watcher, err := kubernetes.NewForConfig(router.Config())
	if err != nil {
		t.Fatal(err)
	}
	runKubernetesScenario(t, watcher, cs)

	stop() // every watch ends: its audit event is final
	reqs, err := rbacaudit.Read(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	isRouter := func(r rbacaudit.Request) bool { return r.User == routerUser }
	for _, r := range rbacaudit.Refused(reqs, isRouter) {
		t.Errorf("the API server refused the router %s in %q: the rendered Role lacks it", r.Permission, r.Namespace)
	}
	used := rbacaudit.Used(reqs, isRouter)
	for _, p := range rbacaudit.Unused(role.Rules, used) {
		t.Errorf("the router's Role grants %s, which discovery never used: drop it from internal/operator/render's routerRole", p)
	}
	if len(used) == 0 {
		t.Error("the audit log holds no request of the router")
	}
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
