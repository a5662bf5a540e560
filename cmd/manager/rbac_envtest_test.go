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

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/controller"
	"github.com/kvrouter/kvrouter/test/rbacaudit"
)

// TestEnvtestManagerLeaderElectionRBAC runs the manager's code path with leader election as a
// user that holds exactly what config/rbac gives the operator's ServiceAccount (the ClusterRole
// and the leader-election Role in kvrouter-system), and checks from the API server's audit log
// that no request of the manager was refused and that it used every permission of the
// leader-election Role. The controller's own permissions are checked the same way, over far
// more behaviour, by internal/operator/controller's suite (rbac_test.go).
func TestEnvtestManagerLeaderElectionRBAC(t *testing.T) {
	if !inOwnTestProcess(t) {
		return
	}
	const user, ns = "kvrouter-manager-under-test", "kvrouter-system"
	cp := startAuditedControlPlane(t, user)
	scheme, err := controller.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cp.cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	clusterRole := &rbacv1.ClusterRole{}
	readYAML(t, filepath.Join(cp.root, "config", "rbac", "role.yaml"), clusterRole)
	leaderRole := &rbacv1.Role{}
	readYAML(t, filepath.Join(cp.root, "config", "rbac", "leader_election_role.yaml"), leaderRole)
	subjects := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}
	for _, obj := range []client.Object{
		clusterRole,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: clusterRole.Name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole.Name}},
		leaderRole,
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: leaderRole.Name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: leaderRole.Name}},
	} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	m := startManager(t, "--kubeconfig", cp.userKubeconfig(t), "--metrics-bind-address", "0",
		"--health-probe-bind-address", freeAddr(t), "--leader-elect", "--leader-election-namespace", ns)
	c := m.config

	waitFor(t, "the manager to lead", func() error {
		lease := &coordinationv1.Lease{}
		if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: c.leaderElectionID}, lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return errors.New("no holder")
		}
		return nil
	})
	waitFor(t, "the leader-election Event", func() error {
		evs := &corev1.EventList{}
		if err := admin.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == "LeaderElection" {
				return nil
			}
		}
		return errors.New("no LeaderElection Event")
	})
	kvr := &v1alpha1.KVRouter{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "led"},
		Spec: v1alpha1.KVRouterSpec{Model: v1alpha1.ModelSpec{Name: "Qwen/Qwen3-0.6B"}, Simulate: true}}
	if err := admin.Create(ctx, kvr); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the leader to reconcile", func() error {
		cur := &v1alpha1.KVRouter{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(kvr), cur); err != nil {
			return err
		}
		if cur.Status.ObservedGeneration != cur.Generation {
			return errors.New("not reconciled")
		}
		return nil
	})
	m.stop(t) // the leader hands the Lease back (LeaderElectionReleaseOnCancel)
	reqs := cp.auditedRequests(t)
	inNamespace := rbacaudit.Used(reqs, func(r rbacaudit.Request) bool { return cp.isUser(r) && r.Namespace == ns })
	for _, p := range rbacaudit.Unused(leaderRole.Rules, inNamespace) {
		t.Errorf("the leader-election Role grants %s, which the manager never used", p)
	}
}

// bareControlPlane returns the module root and an envtest environment, not started yet, with only
// the KVRouter CRD.
func bareControlPlane(t *testing.T) (root string, env *envtest.Environment) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "k8s", "v1.36.3")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		t.Fatalf("kube-apiserver not found in %s: run `make envtest`, or set KUBEBUILDER_ASSETS", assets)
	}
	return root, &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions: envtest.CRDInstallOptions{
			Paths: []string{filepath.Join(root, "config", "crd", "bases")}, ErrorIfPathMissing: true,
		},
	}
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
