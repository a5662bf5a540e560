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

// Package rbacaudit checks RBAC rules against what a client really does. It turns on the audit
// log of an envtest kube-apiserver, reads back the requests a user made, and compares them with
// the permissions the user's rules grant: a permission no request used is a candidate for
// removal, and a wildcard grants permissions nobody reviewed. It is used by tests only.
package rbacaudit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Permission is one verb on one resource of one API group; Resource carries the subresource as
// "kvrouters/status".
type Permission struct {
	Group, Resource, Verb string
}

// String is "verb resource.group", the form kubectl auth can-i takes.
func (p Permission) String() string {
	res, sub, _ := strings.Cut(p.Resource, "/")
	if p.Group != "" {
		res += "." + p.Group
	}
	if sub != "" {
		res += "/" + sub
	}
	return p.Verb + " " + res
}

// Request is one API request recorded in an audit log, reduced to what RBAC decides on.
type Request struct {
	User, UserAgent string
	Permission
	Namespace, Name string
	// Allowed is the authorizer's decision.
	Allowed bool
	// Code is the HTTP status of the response (0 when the log holds only the start of a watch).
	Code int32
}

// Enable makes env's kube-apiserver write an audit log of the requests users make (at Metadata
// level: who, what, on which object; never a request or response body) into dir, and returns
// the log's path. Call it before env.Start. Users empty: every user.
func Enable(env *envtest.Environment, dir string, users ...string) (string, error) {
	policy := "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n"
	if len(users) > 0 {
		quoted, err := json.Marshal(users)
		if err != nil {
			return "", err
		}
		policy += "  users: " + string(quoted) + "\n- level: None\n"
	}
	policyPath := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policyPath, []byte(policy), 0o600); err != nil {
		return "", fmt.Errorf("writing the audit policy: %w", err)
	}
	logPath := filepath.Join(dir, "audit.log")
	env.ControlPlane.GetAPIServer().Configure().
		Set("audit-policy-file", policyPath).
		Set("audit-log-path", logPath).
		// Blocking (the default, said here because the tests rely on it): an event is in the file
		// before the response reaches the client.
		Set("audit-log-mode", "blocking")
	return logPath, nil
}

// Read parses audit logs (JSON lines) into requests, one per audited API request: a watch
// logged at its start and again at its end counts once, with its final status. A patch that
// created its object (a server-side apply of a new object answers 201) also counts as a create,
// because the API server authorizes it as one.
func Read(paths ...string) ([]Request, error) {
	var out []Request
	at := map[string]int{} // audit ID -> index in out
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading audit log: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for line := 1; sc.Scan(); line++ {
			var ev auditv1.Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, line, err)
			}
			if ev.ObjectRef == nil || ev.ObjectRef.Resource == "" {
				continue // non-resource URLs (discovery, /healthz): no resource rule grants them
			}
			r := Request{User: ev.User.Username, UserAgent: ev.UserAgent, Namespace: ev.ObjectRef.Namespace,
				Name: ev.ObjectRef.Name, Allowed: ev.Annotations["authorization.k8s.io/decision"] == "allow",
				Permission: Permission{Group: ev.ObjectRef.APIGroup, Resource: ev.ObjectRef.Resource, Verb: ev.Verb}}
			if ev.ObjectRef.Subresource != "" {
				r.Resource += "/" + ev.ObjectRef.Subresource
			}
			if ev.ResponseStatus != nil {
				r.Code = ev.ResponseStatus.Code
			}
			if i, ok := at[string(ev.AuditID)]; ok {
				out[i] = r
				continue
			}
			at[string(ev.AuditID)] = len(out)
			out = append(out, r)
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
	}
	n := len(out)
	for _, r := range out[:n] {
		if r.Verb == "patch" && r.Code == 201 {
			r.Verb = "create"
			out = append(out, r)
		}
	}
	return out, nil
}

// Used is the set of permissions that the allowed requests matching keep exercised.
func Used(reqs []Request, keep func(Request) bool) map[Permission]bool {
	used := map[Permission]bool{}
	for _, r := range reqs {
		if r.Allowed && keep(r) {
			used[r.Permission] = true
		}
	}
	return used
}

// Refused lists the requests matching keep that the authorizer denied.
func Refused(reqs []Request, keep func(Request) bool) []Request {
	var out []Request
	for _, r := range reqs {
		if !r.Allowed && keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// Unused lists the permissions rules grant that are not in used.
func Unused(rules []rbacv1.PolicyRule, used map[Permission]bool) []Permission {
	var out []Permission
	for _, p := range Granted(rules) {
		if !used[p] {
			out = append(out, p)
		}
	}
	return out
}

// Granted expands rules into the permissions they grant, in rule order. Wildcards are kept as
// they are (see Wildcards); nonResourceURLs and resourceNames are not permissions of this kind
// and are left out.
func Granted(rules []rbacv1.PolicyRule) []Permission {
	var out []Permission
	for _, rule := range rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					p := Permission{Group: g, Resource: res, Verb: v}
					if !slices.Contains(out, p) {
						out = append(out, p)
					}
				}
			}
		}
	}
	return out
}

// Wildcards lists every wildcard in rules (a "*" anywhere in a verb, API group, resource,
// resource name or non-resource URL), naming the rule and the field.
func Wildcards(rules []rbacv1.PolicyRule) []string {
	var out []string
	for i, rule := range rules {
		for _, f := range []struct {
			field  string
			values []string
		}{
			{"verbs", rule.Verbs}, {"apiGroups", rule.APIGroups}, {"resources", rule.Resources},
			{"resourceNames", rule.ResourceNames}, {"nonResourceURLs", rule.NonResourceURLs},
		} {
			for _, v := range f.values {
				if strings.Contains(v, "*") {
					out = append(out, fmt.Sprintf("rules[%d].%s: %q", i, f.field, v))
				}
			}
		}
	}
	return out
}

// Grants reports whether rules grant p, wildcards included (the way the RBAC authorizer reads
// them; resourceNames restrict a rule, so such rules do not count).
func Grants(rules []rbacv1.PolicyRule, p Permission) bool {
	match := func(values []string, v string) bool {
		return slices.Contains(values, v) || slices.Contains(values, "*")
	}
	for _, rule := range rules {
		if len(rule.ResourceNames) > 0 {
			continue
		}
		if match(rule.APIGroups, p.Group) && match(rule.Verbs, p.Verb) && match(rule.Resources, p.Resource) {
			return true
		}
	}
	return false
}
