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

package render_test

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/wrappers"
)

func routeOf(t *testing.T, kvr *v1alpha1.KVRouter) *gwapiv1.HTTPRoute {
	t.Helper()
	return find[*gwapiv1.HTTPRoute](t, mustObjects(t, kvr, render.Options{}), render.RouteName(kvr))
}

func withModelMatch(kvr *v1alpha1.KVRouter, m v1alpha1.ModelMatch) *v1alpha1.KVRouter {
	kvr.Spec.Gateway.ModelMatch = m
	return kvr
}

// request is what a Gateway sees of a request: its path and the model header (empty: none).
type request struct{ path, model string }

// routes reports whether the rule takes the request, and the path the backend then gets. It
// implements the parts of Gateway API matching that render uses: exact paths, exact header values
// (header names compare case-insensitively), and the full-path rewrite.
func routes(rule gwapiv1.HTTPRouteRule, r request) (bool, string) {
	for _, m := range rule.Matches {
		if m.Path == nil || *m.Path.Type != gwapiv1.PathMatchExact || *m.Path.Value != r.path {
			continue
		}
		ok := true
		for _, h := range m.Headers {
			if *h.Type != gwapiv1.HeaderMatchExact || !strings.EqualFold(string(h.Name), v1alpha1.ModelHeader) || h.Value != r.model || r.model == "" {
				ok = false
			}
		}
		if !ok {
			continue
		}
		path := r.path
		for _, f := range rule.Filters {
			if f.Type == gwapiv1.HTTPRouteFilterURLRewrite && f.URLRewrite.Path.Type == gwapiv1.FullPathHTTPPathModifier {
				path = *f.URLRewrite.Path.ReplaceFullPath
			}
		}
		return true, path
	}
	return false, ""
}

func routeTakes(route *gwapiv1.HTTPRoute, r request) (bool, string) {
	for _, rule := range route.Spec.Rules {
		if ok, path := routes(rule, r); ok {
			return true, path
		}
	}
	return false, ""
}

func TestModelMatchDefaultKeepsThePathsAlone(t *testing.T) {
	// No modelMatch (an object from before the field, or a file) renders what None renders.
	unset := routeOf(t, wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "llm.example.com").Obj())
	none := routeOf(t, withModelMatch(wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "llm.example.com").Obj(), v1alpha1.ModelMatchNone))
	if !equality.Semantic.DeepEqual(unset.Spec.Rules, none.Spec.Rules) {
		t.Errorf("rules without modelMatch %+v, with None %+v", unset.Spec.Rules, none.Spec.Rules)
	}
	if len(none.Spec.Rules) != 1 || len(none.Spec.Rules[0].Filters) != 0 {
		t.Errorf("None renders %+v, want one rule without filters", none.Spec.Rules)
	}
	for _, p := range render.PublicPaths {
		if ok, _ := routeTakes(none, request{path: p, model: "anything"}); !ok {
			t.Errorf("None does not take %s", p)
		}
	}
}

func TestModelMatchHeader(t *testing.T) {
	kvr := withLoRAs(withModelMatch(wrappers.MakeKVRouter("m", "ns").ServedName("llama").Gateway("gw", "", "llm.example.com").Obj(),
		v1alpha1.ModelMatchHeader), "sql=org/sql", "chat=org/chat")
	route := routeOf(t, kvr)
	if len(route.Spec.Rules) != 1 || len(route.Spec.Rules[0].Filters) != 0 {
		t.Fatalf("rules %+v, want one rule without filters", route.Spec.Rules)
	}
	for _, p := range render.PublicPaths {
		for _, model := range []string{"llama", "sql", "chat"} {
			if ok, path := routeTakes(route, request{path: p, model: model}); !ok || path != p {
				t.Errorf("%s for model %s: taken %v to %q, want %s", p, model, ok, path, p)
			}
		}
		for _, model := range []string{"", "m", "other", "LLAMA", "sql-2"} {
			if ok, _ := routeTakes(route, request{path: p, model: model}); ok {
				t.Errorf("%s for model %q taken: another KVRouter on the hostname serves it", p, model)
			}
		}
	}
	if ok, _ := routeTakes(route, request{path: "/v1/status", model: "llama"}); ok {
		t.Error("the admin path /v1/status is routed")
	}
	// The largest spec the schema admits stays within Gateway API's 64 matches in a rule.
	big := withModelMatch(wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "llm.example.com").Obj(), v1alpha1.ModelMatchHeader)
	for i := range render.MaxLoRAs {
		withLoRAs(big, "a"+strings.Repeat("x", i)+"=org/a")
	}
	if n := len(routeOf(t, big).Spec.Rules[0].Matches); n > 64 {
		t.Errorf("%d matches in a rule with %d adapters; Gateway API allows 64", n, render.MaxLoRAs)
	}
}

func TestModelMatchPath(t *testing.T) {
	kvr := withLoRAs(withModelMatch(wrappers.MakeKVRouter("qwen", "ns").ServedName("Qwen/Qwen3-8B").Gateway("gw", "", "llm.example.com").Obj(),
		v1alpha1.ModelMatchPath), "sql=org/sql")
	route := routeOf(t, kvr)
	for _, p := range render.PublicPaths {
		// Any model in the body: the path chose the KVRouter, the router checks the name.
		if ok, path := routeTakes(route, request{path: "/qwen" + p}); !ok || path != p {
			t.Errorf("/qwen%s: taken %v to %q, want %s", p, ok, path, p)
		}
		if ok, _ := routeTakes(route, request{path: p, model: "Qwen/Qwen3-8B"}); ok {
			t.Errorf("%s without the prefix taken", p)
		}
	}
	for _, p := range []string{"/qwen/v1/status", "/qwen/v1/autoscale", "/qwen", "/other/v1/completions"} {
		if ok, _ := routeTakes(route, request{path: p}); ok {
			t.Errorf("%s routed", p)
		}
	}
	if u := render.URL(kvr); u != "http://llm.example.com/qwen" {
		t.Errorf("URL = %s, want the hostname with the prefix", u)
	}
	// Every rule sends to the same backend with the streaming timeouts.
	for _, rule := range route.Spec.Rules {
		if b := rule.BackendRefs[0]; b.Name != "qwen-router" || *rule.Timeouts.Request != "0s" {
			t.Errorf("rule %+v", rule)
		}
	}
}

// Three KVRouters on one hostname: each request reaches exactly one of them, the one that serves
// its model.
func TestThreeModelsShareAHostname(t *testing.T) {
	for _, mode := range []v1alpha1.ModelMatch{v1alpha1.ModelMatchHeader, v1alpha1.ModelMatchPath} {
		kvrs := []*v1alpha1.KVRouter{
			withModelMatch(wrappers.MakeKVRouter("llama", "ns").Gateway("gw", "", "llm.example.com").Obj(), mode),
			withLoRAs(withModelMatch(wrappers.MakeKVRouter("qwen", "ns").Gateway("gw", "", "llm.example.com").Obj(), mode), "qwen-sql=org/sql"),
			withModelMatch(wrappers.MakeKVRouter("mistral", "ns").Gateway("gw", "", "llm.example.com").Obj(), mode),
		}
		for _, kvr := range kvrs {
			for _, model := range render.ModelNames(kvr) {
				r := request{path: "/v1/chat/completions", model: model}
				if mode == v1alpha1.ModelMatchPath {
					r.path = render.RoutePathPrefix(kvr) + r.path
				}
				var takers []string
				for _, other := range kvrs {
					if ok, _ := routeTakes(routeOf(t, other), r); ok {
						takers = append(takers, other.Name)
					}
				}
				if !slices.Equal(takers, []string{kvr.Name}) {
					t.Errorf("%s: %+v taken by %q, want only %s", mode, r, takers, kvr.Name)
				}
			}
		}
	}
}
