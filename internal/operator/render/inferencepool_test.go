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
	"encoding/json"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/wrappers"
)

func pooled() *wrappers.KVRouterWrapper {
	return wrappers.MakeKVRouter("m", "ns").Gateway("gw", "infra", "llm.example.com").InferencePool("")
}

func hasKind(objs []client.Object, kind string) bool {
	return slices.ContainsFunc(objs, func(o client.Object) bool { return o.GetObjectKind().GroupVersionKind().Kind == kind })
}

// TestInferencePool: the pool is the engines the router discovers, on their HTTP port, with the
// router Service's ext_proc port as its endpoint picker, failing open unless the spec says
// otherwise.
func TestInferencePool(t *testing.T) {
	for _, kvr := range []*v1alpha1.KVRouter{
		wrappers.MakeKVRouter("m", "ns").Obj(),
		wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "h.example.com").Obj(),
	} {
		if hasKind(mustObjects(t, kvr, render.Options{}), render.InferencePoolKind) {
			t.Errorf("InferencePool rendered in HTTPRoute mode (gateway %v)", kvr.Spec.Gateway != nil)
		}
	}

	kvr := pooled().Obj()
	objs := mustObjects(t, kvr, render.Options{})
	pool := find[*infv1.InferencePool](t, objs, render.InferencePoolName(kvr))
	if pool.APIVersion != "inference.networking.k8s.io/v1" || pool.Kind != "InferencePool" || pool.Name != "m" {
		t.Errorf("pool %s %s %s", pool.APIVersion, pool.Kind, pool.Name)
	}
	sel := map[string]string{}
	for k, v := range pool.Spec.Selector.MatchLabels {
		sel[string(k)] = string(v)
	}
	if got := labels.SelectorFromSet(sel).String(); got != render.EngineSelector(kvr) {
		t.Errorf("pool selector %s, want the router's --selector %s", got, render.EngineSelector(kvr))
	}
	engine := find[*appsv1.Deployment](t, objs, render.EngineWorkloadName(kvr))
	if !labels.SelectorFromSet(sel).Matches(labels.Set(engine.Spec.Template.Labels)) {
		t.Errorf("pool selector %v misses the engine pods %v", sel, engine.Spec.Template.Labels)
	}
	// No appProtocol: Inference Extension CRDs before v1.4.0 do not declare it and would refuse
	// the pool; unset is HTTP/1.1, what vLLM speaks.
	if !slices.Equal(pool.Spec.TargetPorts, []infv1.Port{{Number: render.EnginePort}}) || pool.Spec.AppProtocol != "" {
		t.Errorf("targetPorts %v appProtocol %q", pool.Spec.TargetPorts, pool.Spec.AppProtocol)
	}
	want := &infv1.EndpointPickerRef{Kind: "Service", Name: "m-router", Port: &infv1.Port{Number: 9002}, FailureMode: infv1.EndpointPickerFailOpen}
	if got := pool.Spec.EndpointPickerRef; got == nil || got.Group != nil || got.Kind != want.Kind || got.Name != want.Name ||
		got.Port == nil || *got.Port != *want.Port || got.FailureMode != want.FailureMode {
		t.Errorf("endpointPickerRef %+v, want %+v", got, want)
	}

	closed := pooled().Obj()
	closed.Spec.Gateway.FailureMode = v1alpha1.FailClose
	if m := find[*infv1.InferencePool](t, mustObjects(t, closed, render.Options{}), "m").Spec.EndpointPickerRef.FailureMode; m != infv1.EndpointPickerFailClose {
		t.Errorf("failureMode FailClose rendered as %q", m)
	}

	// Multi-node: the pool holds the leaders, which serve HTTP, not the headless workers.
	wide := pooled().TensorParallel(8).NodesPerReplica(2).Obj()
	wideObjs := mustObjects(t, wide, render.Options{})
	widePool := find[*infv1.InferencePool](t, wideObjs, "m")
	wideSel := map[string]string{}
	for k, v := range widePool.Spec.Selector.MatchLabels {
		wideSel[string(k)] = string(v)
	}
	for where, tpl := range podTemplates(wideObjs) {
		if tpl.Labels[render.LabelName] != render.NameEngine {
			continue
		}
		leader := strings.HasSuffix(where, " leader")
		if got := labels.SelectorFromSet(wideSel).Matches(labels.Set(tpl.Labels)); got != leader {
			t.Errorf("%s: in the pool %v, want %v", where, got, leader)
		}
	}
}

// TestInferencePoolRoute: the HTTPRoute keeps its parents, hostnames, paths and timeouts, and
// sends requests to the pool on the engines' port instead of to the router.
func TestInferencePoolRoute(t *testing.T) {
	kvr := pooled().Obj()
	objs := mustObjects(t, kvr, render.Options{})
	r := find[*gwapiv1.HTTPRoute](t, objs, render.RouteName(kvr))
	proxied := find[*gwapiv1.HTTPRoute](t, mustObjects(t, wrappers.MakeKVRouter("m", "ns").Gateway("gw", "infra", "llm.example.com").Obj(), render.Options{}), "m")
	if len(r.Spec.Rules) != 1 {
		t.Fatalf("%d rules", len(r.Spec.Rules))
	}
	rule, proxiedRule := r.Spec.Rules[0], proxied.Spec.Rules[0]
	want := gwapiv1.BackendObjectReference{
		Group: ptr.To(gwapiv1.Group("inference.networking.k8s.io")), Kind: ptr.To(gwapiv1.Kind("InferencePool")),
		Name: "m", Port: ptr.To(gwapiv1.PortNumber(render.EnginePort)),
	}
	if len(rule.BackendRefs) != 1 || !equalBackend(rule.BackendRefs[0].BackendObjectReference, want) {
		t.Errorf("backendRefs %+v, want the pool %+v", rule.BackendRefs, want)
	}
	rule.BackendRefs, proxiedRule.BackendRefs = nil, nil
	if !equalJSON(t, rule, proxiedRule) || !equalJSON(t, r.Spec.CommonRouteSpec, proxied.Spec.CommonRouteSpec) ||
		!slices.Equal(r.Spec.Hostnames, proxied.Spec.Hostnames) {
		t.Errorf("the pool's route differs from the proxy's beyond its backend:\n%+v\n%+v", r.Spec, proxied.Spec)
	}
	if render.URL(kvr) != "http://llm.example.com" {
		t.Errorf("URL %q", render.URL(kvr))
	}
	// No exact hostname: only the Gateway reaches the engines, and render cannot see its address.
	if u := render.URL(wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "*.example.com").InferencePool("").Obj()); u != "" {
		t.Errorf("URL with a wildcard hostname and an InferencePool = %q, want none", u)
	}
}

func equalBackend(a, b gwapiv1.BackendObjectReference) bool {
	return ptr.Deref(a.Group, "") == ptr.Deref(b.Group, "") && ptr.Deref(a.Kind, "") == ptr.Deref(b.Kind, "") &&
		a.Name == b.Name && ptr.Deref(a.Namespace, "") == ptr.Deref(b.Namespace, "") && ptr.Deref(a.Port, 0) == ptr.Deref(b.Port, 0)
}

// TestRouterAsEndpointPicker: in InferencePool mode the router runs --mode epp, declares and
// exposes its gRPC ports instead of the public HTTP port (which it does not serve), keeps its
// admin port, and is probed over gRPC health.
func TestRouterAsEndpointPicker(t *testing.T) {
	kvr := pooled().BlockSize(32).Obj()
	objs := mustObjects(t, kvr, render.Options{})
	c := find[*appsv1.Deployment](t, objs, "m-router").Spec.Template.Spec.Containers[0]
	wantArgs := []string{"--mode", "epp", "--grpc-tls", "--grpc-port", "9002", "--grpc-health-port", "9003", "--admin-addr", ":9090",
		"--discovery", "kubernetes", "--namespace", "ns", "--selector", render.EngineSelector(kvr), "--engine-port", "8000",
		"--kv-events-port", "5557", "--kv-replay-port", "5558", "--block-size", "32", "--policy", "Auto", "--model", "m",
		"--tokenizer", "auto", "--tokenizer-model", kvr.Spec.Model.Name}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args %v\nwant %v", c.Args, wantArgs)
	}
	wantPorts := []corev1.ContainerPort{
		{Name: "grpc", ContainerPort: 9002, Protocol: corev1.ProtocolTCP},
		{Name: "grpc-health", ContainerPort: 9003, Protocol: corev1.ProtocolTCP},
		{Name: "admin", ContainerPort: 9090, Protocol: corev1.ProtocolTCP},
	}
	if !slices.Equal(c.Ports, wantPorts) {
		t.Errorf("ports %+v", c.Ports)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.GRPC == nil || p.HTTPGet != nil || p.GRPC.Port != 9003 || ptr.Deref(p.GRPC.Service, "") != name {
			t.Errorf("%s probe %+v, want gRPC health service %q on 9003", name, p, name)
		}
	}
	svc := find[*corev1.Service](t, objs, "m-router")
	h2c := ptr.To("kubernetes.io/h2c")
	wantSvc := []corev1.ServicePort{
		{Name: "grpc", Port: 9002, TargetPort: intstr.FromString("grpc"), Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("http2")},
		{Name: "grpc-health", Port: 9003, TargetPort: intstr.FromString("grpc-health"), Protocol: corev1.ProtocolTCP, AppProtocol: h2c},
		{Name: "admin", Port: 9090, TargetPort: intstr.FromString("admin"), Protocol: corev1.ProtocolTCP},
	}
	if !equalJSON(t, svc.Spec.Ports, wantSvc) {
		t.Errorf("Service ports %+v", svc.Spec.Ports)
	}

	// The keys reach the picker as they reach the proxy: it checks the clients' key on the
	// request headers the Gateway sends and puts the engines' key in their place.
	keyed := pooled().InferencePool(v1alpha1.FailClose).EngineAPIKeySecret("engine-key", "").RouterAPIKeySecret("keys", "").Obj()
	kc := find[*appsv1.Deployment](t, mustObjects(t, keyed, render.Options{}), "m-router").Spec.Template.Spec.Containers[0]
	if !slices.Contains(kc.Args, "--engine-api-key-file") || !slices.Contains(kc.Args, "--api-key-file") {
		t.Errorf("keys not passed to the picker: %v", kc.Args)
	}
}

// TestGatewayModeValidation: what the CRD refuses about spec.gateway's mode, Validate refuses
// too, naming the field.
func TestGatewayModeValidation(t *testing.T) {
	failOpenRoute := wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "h").Obj()
	failOpenRoute.Spec.Gateway.FailureMode = v1alpha1.FailOpen
	unknownMode := wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "h").Obj()
	unknownMode.Spec.Gateway.Mode = "Service"
	unknownFailure := pooled().Obj()
	unknownFailure.Spec.Gateway.FailureMode = "FailSometimes"
	for name, tc := range map[string]struct {
		kvr  *v1alpha1.KVRouter
		want string
	}{
		"failureMode with HTTPRoute mode": {failOpenRoute, "spec.gateway.failureMode"},
		"unknown mode":                    {unknownMode, "spec.gateway.mode"},
		"unknown failureMode":             {unknownFailure, "spec.gateway.failureMode"},
		"router API key, pool fails open": {pooled().RouterAPIKeySecret("keys", "").Obj(), "spec.router.apiKeySecret"},
	} {
		if _, err := render.Objects(tc.kvr, render.Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", name, err, tc.want)
		}
	}
	for name, kvr := range map[string]*v1alpha1.KVRouter{
		"FailClose":                  pooled().InferencePool(v1alpha1.FailClose).Obj(),
		"router API key, FailClose":  pooled().InferencePool(v1alpha1.FailClose).RouterAPIKeySecret("keys", "").Obj(),
		"engine API key with a pool": pooled().EngineAPIKeySecret("k", "").Obj(),
		"router API key, HTTPRoute":  wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "h").RouterAPIKeySecret("keys", "").Obj(),
	} {
		if _, err := render.Objects(kvr, render.Options{}); err != nil {
			t.Errorf("%s refused: %v", name, err)
		}
	}
}

// equalJSON compares two values by their JSON, which is what the API server sees of them.
func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}
