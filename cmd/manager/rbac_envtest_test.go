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
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	"github.com/kvrouter/kvrouter/test/fleettest"
	"github.com/kvrouter/kvrouter/test/rbacaudit"
)

// TestEnvtestManagerLeaderElectionRBAC runs the manager's code path with leader election as a
// user that holds exactly what config/rbac gives the operator's ServiceAccount (the ClusterRole
// and the leader-election Role in kvrouter-system), and checks from the API server's audit log
// that no request of the manager was refused and that it used every permission of the
// leader-election Role. The controller's own permissions are checked the same way, over far
// more behaviour, by internal/operator/controller's suite (rbac_test.go).
func TestEnvtestManagerLeaderElectionRBAC(t *testing.T) {
	if os.Getenv(inOwnProcess) == "" {
		// runManager registers the controller under its name, which a process allows once
		// (TestEnvtestManager runs it too): this test runs in a test process of its own.
		cmd := exec.Command(os.Args[0], "-test.run=^TestEnvtestManagerLeaderElectionRBAC$", "-test.v")
		cmd.Env = append(os.Environ(), inOwnProcess+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestEnvtestManagerLeaderElectionRBAC") {
			t.Fatalf("%v:\n%s", err, out)
		}
		return
	}
	const user, ns = "kvrouter-manager-under-test", "kvrouter-system"
	root, env := bareControlPlane(t)
	auditLog, err := rbacaudit.Enable(env, t.TempDir(), user)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			if err := env.Stop(); err != nil {
				t.Error(err)
			}
		}
	}
	defer stop()
	scheme, err := controller.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	clusterRole := &rbacv1.ClusterRole{}
	readYAML(t, filepath.Join(root, "config", "rbac", "role.yaml"), clusterRole)
	leaderRole := &rbacv1.Role{}
	readYAML(t, filepath.Join(root, "config", "rbac", "leader_election_role.yaml"), leaderRole)
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
	operator, err := env.AddUser(envtest.User{Name: user}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := operator.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigPath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}

	var stderr fleettest.SyncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("manager output:\n%s", stderr.String())
		}
	})
	c, err := parseFlags([]string{"--kubeconfig", kubeconfigPath, "--metrics-bind-address", "0",
		"--health-probe-bind-address", freeAddr(t), "--leader-elect", "--leader-election-namespace", ns}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	exit := make(chan int, 1)
	go func() { exit <- runManager(mctx, c, &stderr) }()

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
	cancel() // the leader hands the Lease back (LeaderElectionReleaseOnCancel)
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("manager exited with %d:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("manager did not stop within 30s of cancellation")
	}

	stop() // every watch ends: its audit event is final
	reqs, err := rbacaudit.Read(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	isManager := func(r rbacaudit.Request) bool { return r.User == user }
	for _, r := range rbacaudit.Refused(reqs, isManager) {
		t.Errorf("the API server refused the manager %s in %q: config/rbac lacks it", r.Permission, r.Namespace)
	}
	inNamespace := rbacaudit.Used(reqs, func(r rbacaudit.Request) bool { return isManager(r) && r.Namespace == ns })
	for _, p := range rbacaudit.Unused(leaderRole.Rules, inNamespace) {
		t.Errorf("the leader-election Role grants %s, which the manager never used", p)
	}
}

// inOwnProcess marks the test process TestEnvtestManagerLeaderElectionRBAC starts for itself.
const inOwnProcess = "KVROUTER_TEST_IN_OWN_PROCESS"

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
