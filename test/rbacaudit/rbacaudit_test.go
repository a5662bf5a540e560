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

package rbacaudit

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// Lines as kube-apiserver writes them at Metadata level (trimmed to the fields that matter).
const auditLog = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseComplete","verb":"patch","user":{"username":"op"},"userAgent":"ua","objectRef":{"resource":"deployments","namespace":"ns","name":"d","apiGroup":"apps"},"responseStatus":{"code":201},"annotations":{"authorization.k8s.io/decision":"allow"}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a2","stage":"ResponseComplete","verb":"patch","user":{"username":"op"},"objectRef":{"resource":"deployments","namespace":"ns","name":"d","apiGroup":"apps"},"responseStatus":{"code":200},"annotations":{"authorization.k8s.io/decision":"allow"}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a3","stage":"ResponseStarted","verb":"watch","user":{"username":"op"},"objectRef":{"resource":"pods","namespace":"ns"},"responseStatus":{"code":200},"annotations":{"authorization.k8s.io/decision":"allow"}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a3","stage":"ResponseComplete","verb":"watch","user":{"username":"op"},"objectRef":{"resource":"pods","namespace":"ns"},"responseStatus":{"code":200},"annotations":{"authorization.k8s.io/decision":"allow"}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a4","stage":"ResponseComplete","verb":"patch","user":{"username":"op"},"objectRef":{"resource":"kvrouters","subresource":"status","name":"k","apiGroup":"serving.kvrouter.dev"},"responseStatus":{"code":200},"annotations":{"authorization.k8s.io/decision":"allow"}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a5","stage":"ResponseComplete","verb":"list","user":{"username":"op"},"objectRef":{"resource":"secrets"},"responseStatus":{"code":403},"annotations":{"authorization.k8s.io/decision":"forbid"}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a6","stage":"ResponseComplete","verb":"get","user":{"username":"op"},"requestURI":"/apis","responseStatus":{"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a7","stage":"ResponseComplete","verb":"get","user":{"username":"other"},"objectRef":{"resource":"configmaps","name":"c"},"responseStatus":{"code":200},"annotations":{"authorization.k8s.io/decision":"allow"}}
`

func TestReadUsedRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(auditLog), 0o600); err != nil {
		t.Fatal(err)
	}
	reqs, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	// 7 resource requests (the watch counted once, /apis left out), plus the create that the
	// 201 patch implies.
	if len(reqs) != 7 {
		t.Fatalf("%d requests: %+v", len(reqs), reqs)
	}
	op := func(r Request) bool { return r.User == "op" }
	used := Used(reqs, op)
	want := []Permission{
		{"apps", "deployments", "patch"}, {"apps", "deployments", "create"}, {"", "pods", "watch"},
		{"serving.kvrouter.dev", "kvrouters/status", "patch"},
	}
	if len(used) != len(want) {
		t.Errorf("used %v, want %v", used, want)
	}
	for _, p := range want {
		if !used[p] {
			t.Errorf("%s not used", p)
		}
	}
	refused := Refused(reqs, op)
	if len(refused) != 1 || refused[0].Permission != (Permission{"", "secrets", "list"}) || refused[0].Code != 403 {
		t.Errorf("refused %+v", refused)
	}
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"patch", "create", "get"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"watch"}},
	}
	if got := Unused(rules, used); !slices.Equal(got, []Permission{{"apps", "deployments", "get"}}) {
		t.Errorf("Unused = %v", got)
	}
	if s := (Permission{"apps", "deployments", "get"}).String(); s != "get deployments.apps" {
		t.Errorf("String = %q", s)
	}
	if s := (Permission{"serving.kvrouter.dev", "kvrouters/finalizers", "update"}).String(); s != "update kvrouters.serving.kvrouter.dev/finalizers" {
		t.Errorf("String = %q", s)
	}
}

func TestWildcardsAndGrants(t *testing.T) {
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{"*"}, Resources: []string{"deployments/*"}, Verbs: []string{"get"}},
		{NonResourceURLs: []string{"/metrics*"}, Verbs: []string{"*"}},
	}
	got := Wildcards(rules)
	want := []string{`rules[1].apiGroups: "*"`, `rules[1].resources: "deployments/*"`, `rules[2].verbs: "*"`, `rules[2].nonResourceURLs: "/metrics*"`}
	if !slices.Equal(got, want) {
		t.Errorf("Wildcards = %q, want %q", got, want)
	}
	if Wildcards(rules[:1]) != nil {
		t.Error("a rule without wildcards reported")
	}
	if !Grants(rules, Permission{"", "pods", "list"}) || Grants(rules, Permission{"", "pods", "watch"}) {
		t.Error("Grants on exact rules")
	}
	named := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}, ResourceNames: []string{"p"}}}
	if Grants(named, Permission{"", "pods", "get"}) {
		t.Error("a rule limited to resourceNames grants the whole resource")
	}
}
