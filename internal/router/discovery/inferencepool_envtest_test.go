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
	poolclient "sigs.k8s.io/gateway-api-inference-extension/client-go/clientset/versioned"
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
		t.Fatalf("locating the gateway-api-inference-extension module (a dependency in go.mod): %v", err)
	}
	crd := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "inference.networking.k8s.io_inferencepools.yaml")
	if _, err := os.Stat(crd); err != nil {
		t.Fatalf("InferencePool CRD: %v", err)
	}
	return crd
}

// TestEnvtestInferencePoolDiscovery runs the InferencePool scenario against a real
// kube-apiserver with the real InferencePool CRD, as a user holding only inferencePoolRole, and
// checks from the audit log that the source needs every permission of that Role and no other.
func TestEnvtestInferencePoolDiscovery(t *testing.T) {
	cp := startAuditedControlPlane(t, inferencePoolCRD(t))
	cs := cp.admin
	pcs, err := poolclient.NewForConfig(cp.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := inferencePoolRole("ns", "pool")
	routerCfg := cp.grant(role)
	pods, err := kubernetes.NewForConfig(routerCfg)
	if err != nil {
		t.Fatal(err)
	}
	pools, err := poolclient.NewForConfig(routerCfg)
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

	cp.checkRole(role, "InferencePool discovery")
}
