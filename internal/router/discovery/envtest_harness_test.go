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

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kvrouter/kvrouter/test/rbacaudit"
)

// routerUser is the user discovery runs as in the envtests: it holds only the Role under test.
const routerUser = "kvrouter-router-under-test"

// auditedControlPlane is a real kube-apiserver and etcd (KUBEBUILDER_ASSETS, as `make envtest`
// builds them into bin/k8s/<version>) with crds installed, whose audit log records what
// routerUser asks for, so that a test can check discovery needs every permission of its Role and
// nothing more.
type auditedControlPlane struct {
	t        *testing.T
	env      *envtest.Environment
	cfg      *rest.Config
	admin    kubernetes.Interface
	auditLog string
	stopped  bool
}

// startAuditedControlPlane starts one, or skips the test without the binaries. It stops at the
// test's end if the test has not stopped it.
func startAuditedControlPlane(t *testing.T, crds ...string) *auditedControlPlane {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("KUBEBUILDER_ASSETS not set (make envtest builds the control plane into bin/k8s)")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			t.Skipf("envtest binary missing: %v", err)
		}
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets,
		CRDInstallOptions: envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true}}
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
	cp := &auditedControlPlane{t: t, env: env, cfg: cfg, auditLog: auditLog}
	t.Cleanup(cp.stop)
	if cp.admin, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return cp
}

func (cp *auditedControlPlane) stop() {
	if !cp.stopped {
		cp.stopped = true
		if err := cp.env.Stop(); err != nil {
			cp.t.Errorf("stop envtest: %v", err)
		}
	}
}

// grant creates role and binds it to routerUser, and returns routerUser's client configuration.
func (cp *auditedControlPlane) grant(role *rbacv1.Role) *rest.Config {
	t := cp.t
	t.Helper()
	if _, err := cp.admin.RbacV1().Roles(role.Namespace).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: role.Namespace, Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: routerUser}},
	}
	if _, err := cp.admin.RbacV1().RoleBindings(role.Namespace).Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user, err := cp.env.AddUser(envtest.User{Name: routerUser}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return user.Config()
}

// checkRole stops the control plane (every watch ends, so its audit event is final) and fails
// the test for each request of routerUser the API server refused and each permission of role it
// never used; what names the source whose needs role is meant to state.
func (cp *auditedControlPlane) checkRole(role *rbacv1.Role, what string) {
	t := cp.t
	t.Helper()
	cp.stop()
	reqs, err := rbacaudit.Read(cp.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	isRouter := func(r rbacaudit.Request) bool { return r.User == routerUser }
	for _, r := range rbacaudit.Refused(reqs, isRouter) {
		t.Errorf("the API server refused the router %s in %q (name %q): the Role lacks it", r.Permission, r.Namespace, r.Name)
	}
	used := rbacaudit.Used(reqs, isRouter)
	for _, p := range rbacaudit.Unused(role.Rules, used) {
		t.Errorf("the Role grants %s, which %s never used", p, what)
	}
	if len(used) == 0 {
		t.Error("the audit log holds no request of the router")
	}
}
