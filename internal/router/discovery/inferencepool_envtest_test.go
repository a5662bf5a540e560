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
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	poolclient "sigs.k8s.io/gateway-api-inference-extension/client-go/clientset/versioned"

	"github.com/kvrouter/kvrouter/test/rbacaudit"
)

// inferencePoolRole is what the router needs in InferencePool discovery. The pool rule names the
// pool: the source lists and watches it with a metadata.name field selector, which is what lets
// the API server authorize a list or watch against resourceNames.
func inferencePoolRole(ns, pool string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "router-inferencepool"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"inference.networking.k8s.io"}, Resources: []string{"inferencepools"},
				ResourceNames: []string{pool}, Verbs: []string{"list", "watch"}},
		},
	}
}

// inferencePoolCRD is the InferencePool CRD of the gateway-api-inference-extension module this
// module builds against, from the module cache.
func inferencePoolCRD(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api-inference-extension").Output()
	if err != nil {
		t.Skipf("locating the gateway-api-inference-extension module: %v", err)
	}
	crd := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "inference.networking.k8s.io_inferencepools.yaml")
	if _, err := os.Stat(crd); err != nil {
		t.Skipf("InferencePool CRD: %v", err)
	}
	return crd
}

// TestEnvtestInferencePoolDiscovery runs the InferencePool scenario against a real
// kube-apiserver with the real InferencePool CRD, as a user holding only inferencePoolRole, and
// checks from the audit log that the source needs every permission of that Role and no other.
func TestEnvtestInferencePoolDiscovery(t *testing.T) {
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
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: []string{inferencePoolCRD(t)}, ErrorIfPathMissing: true},
	}
	auditLog, err := rbacaudit.Enable(env, t.TempDir(), routerUser)
	if err != nil {
		t.Fatal(err)
	}
	// As in TestEnvtestKubernetesDiscovery: informers then list before they watch, so that both
	// verbs of the Role are exercised.
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
	pcs, err := poolclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := inferencePoolRole("ns", "pool")
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
	pods, err := kubernetes.NewForConfig(router.Config())
	if err != nil {
		t.Fatal(err)
	}
	pools, err := poolclient.NewForConfig(router.Config())
	if err != nil {
		t.Fatal(err)
	}
	const hold = "test.kvrouter.dev/hold"
	setFinalizers := func(ctx context.Context, f []string) {
		p, err := pcs.InferenceV1().InferencePools("ns").Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Finalizers = f
		if _, err := pcs.InferenceV1().InferencePools("ns").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	startDeleting := func(ctx context.Context) {
		setFinalizers(ctx, []string{hold})
		if err := pcs.InferenceV1().InferencePools("ns").Delete(ctx, "pool", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	finishDeleting := func(ctx context.Context) { setFinalizers(ctx, nil) }
	poolScenario(t, pods, pools, cs, pcs, startDeleting, finishDeleting)

	stop() // every watch ends: its audit event is final
	reqs, err := rbacaudit.Read(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	isRouter := func(r rbacaudit.Request) bool { return r.User == routerUser }
	for _, r := range rbacaudit.Refused(reqs, isRouter) {
		t.Errorf("the API server refused the router %s in %q (name %q)", r.Permission, r.Namespace, r.Name)
	}
	used := rbacaudit.Used(reqs, isRouter)
	for _, p := range rbacaudit.Unused(role.Rules, used) {
		t.Errorf("the Role grants %s, which InferencePool discovery never used", p)
	}
	if len(used) == 0 {
		t.Error("the audit log holds no request of the router")
	}
}
