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
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
)

func TestParseFileRole(t *testing.T) {
	eps, err := ParseFile([]byte(`endpoints:
  - name: p0
    url: http://127.0.0.1:8001
    role: prefill
  - name: d0
    url: http://127.0.0.1:8002
    role: decode
  - name: a0
    url: http://127.0.0.1:8003
`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range eps {
		got[e.Name] = e.Role
	}
	if got["p0"] != RolePrefill || got["d0"] != RoleDecode || got["a0"] != "" {
		t.Fatalf("roles: %v", got)
	}
	_, err = ParseFile([]byte(`endpoints:
  - name: p0
    url: http://127.0.0.1:8001
    role: prefil
`))
	if err == nil || !strings.Contains(err.Error(), "p0") || !strings.Contains(err.Error(), "prefil") {
		t.Fatalf("unknown role: want an error naming the entry and the value, got %v", err)
	}
}

func TestKubernetesRoleLabel(t *testing.T) {
	var logged []string
	log := funcr.New(func(prefix, args string) { logged = append(logged, args) }, funcr.Options{})
	k := &Kubernetes{Log: log}
	for _, tc := range []struct{ label, want string }{{RolePrefill, RolePrefill}, {RoleDecode, RoleDecode}, {"", ""}} {
		p := enginePod("e", "10.1.2.3", true)
		if tc.label != "" {
			p.Labels[RoleLabel] = tc.label
		}
		if eps := k.endpoints(p); len(eps) != 1 || eps[0].Role != tc.want {
			t.Fatalf("label %q: %+v", tc.label, eps)
		}
	}
	if len(logged) != 0 {
		t.Fatalf("known roles logged: %v", logged)
	}
	// An unknown value: no role (the engine still serves whole requests), logged once.
	p := enginePod("odd", "10.1.2.4", true)
	p.Labels[RoleLabel] = "Prefill"
	for range 3 {
		if eps := k.endpoints(p); len(eps) != 1 || eps[0].Role != "" || !eps[0].Ready {
			t.Fatalf("unknown role: %+v", eps)
		}
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "odd") || !strings.Contains(logged[0], "Prefill") {
		t.Fatalf("want one log line naming the pod and value, got %v", logged)
	}
	// The same pod with another bad value is logged again.
	p.Labels[RoleLabel] = "both"
	k.endpoints(p)
	if len(logged) != 2 {
		t.Fatalf("a new bad value was not logged: %v", logged)
	}
}
