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
	"crypto/tls"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kvrouter/kvrouter/test/rbacaudit"
)

// TestEnvtestManagerSecureMetrics runs the manager's code path with its default metrics flags (HTTPS,
// authentication and authorization) as a user that holds exactly config/rbac's ClusterRole, and
// scrapes it: without a token the answer is 401; with the token of a ServiceAccount that holds
// no role, 403; with the token of one bound to config/rbac's kvrouter-metrics-reader, 200 and
// the metrics. The API server's audit log then shows that the manager created the TokenReviews
// and SubjectAccessReviews that its ClusterRole grants for this, and was refused nothing.
func TestEnvtestManagerSecureMetrics(t *testing.T) {
	if !inOwnTestProcess(t) {
		return
	}
	const user, ns = "kvrouter-manager-under-test", "monitoring"
	cp := startAuditedControlPlane(t, user)
	root := cp.root
	admin, err := kubernetes.NewForConfig(cp.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	clusterRole := &rbacv1.ClusterRole{}
	readYAML(t, filepath.Join(root, "config", "rbac", "role.yaml"), clusterRole)
	reader := &rbacv1.ClusterRole{}
	readYAML(t, filepath.Join(root, "config", "rbac", "metrics_reader_role.yaml"), reader)
	bind := func(name, role string, subject rbacv1.Subject) {
		t.Helper()
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: []rbacv1.Subject{subject},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []*rbacv1.ClusterRole{clusterRole, reader} {
		if _, err := admin.RbacV1().ClusterRoles().Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bind(clusterRole.Name, clusterRole.Name, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user})
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// envtest runs no controller-manager: ServiceAccounts are created by hand, and their
	// tokens come from the TokenRequest API, as a projected token volume gets them.
	token := func(sa string) string {
		t.Helper()
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	prometheus, stranger := token("prometheus"), token("stranger")
	bind("prometheus-reads-kvrouter-metrics", reader.Name, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: ns})

	metricsAddr := freeAddr(t)
	m := startManager(t, "--kubeconfig", cp.userKubeconfig(t), "--metrics-bind-address", metricsAddr,
		"--health-probe-bind-address", freeAddr(t))

	// The certificate is self-signed at start: what is checked here is who may read, not the
	// certificate.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	scrape := func(scheme, bearer string) (int, string, error) {
		req, err := http.NewRequest(http.MethodGet, scheme+"://"+metricsAddr+"/metrics", nil)
		if err != nil {
			return 0, "", err
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	waitFor(t, "the metrics endpoint", func() error {
		_, _, err := scrape("https", "")
		return err
	})
	for _, s := range []struct {
		who, token string
		code       int
	}{
		{"no token", "", http.StatusUnauthorized},
		// controller-runtime's filter answers 500 when the TokenReview calls the token
		// invalid (it treats that as an error, not as "unauthenticated"): refused all the same.
		{"a token the API server does not know", "not-a-token", http.StatusInternalServerError},
		{"a ServiceAccount without kvrouter-metrics-reader", stranger, http.StatusForbidden},
		{"a ServiceAccount bound to kvrouter-metrics-reader", prometheus, http.StatusOK},
	} {
		code, body, err := scrape("https", s.token)
		if err != nil {
			t.Fatalf("%s: %v", s.who, err)
		}
		if code != s.code {
			t.Errorf("%s: %d, want %d: %.200s", s.who, code, s.code, body)
		}
		if code == http.StatusOK && !strings.Contains(body, "controller_runtime_reconcile_total") {
			t.Errorf("%s: 200 without the controller's metrics:\n%.500s", s.who, body)
		}
		if code != http.StatusOK && strings.Contains(body, "controller_runtime_") {
			t.Errorf("%s: %d with metrics in the body", s.who, code)
		}
	}
	if code, body, err := scrape("http", prometheus); err == nil && code == http.StatusOK {
		t.Errorf("plain HTTP served the metrics: %.200s", body)
	}

	m.stop(t)
	reqs := cp.auditedRequests(t)
	used := rbacaudit.Used(reqs, cp.isUser)
	for _, p := range []rbacaudit.Permission{
		{Group: "authentication.k8s.io", Resource: "tokenreviews", Verb: "create"},
		{Group: "authorization.k8s.io", Resource: "subjectaccessreviews", Verb: "create"},
	} {
		if !used[p] {
			t.Errorf("the manager never used %s, which config/rbac grants it for the metrics endpoint", p)
		}
		if !rbacaudit.Grants(clusterRole.Rules, p) {
			t.Errorf("config/rbac's ClusterRole lacks %s", p)
		}
	}
}
