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
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// objectViolations lists every way objs, rendered from kvr with opts, would be refused by an
// API server or break a contract between them: names, labels, ownership, selectors that miss
// their pods, ports, pod security, the KV-event NetworkPolicy, and JSON round trips.
func objectViolations(t testing.TB, kvr *v1alpha1.KVRouter, opts render.Options, objs []client.Object) []string {
	t.Helper()
	var out []string
	add := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	addErrs := func(where string, errs field.ErrorList) {
		for _, e := range errs {
			add("%s: %v", where, e)
		}
	}

	seen := map[string]bool{}
	var (
		router   corev1.PodTemplateSpec
		service  *corev1.Service
		servers  []corev1.PodTemplateSpec // engine pods that serve HTTP and publish KV events
		workers  []corev1.PodTemplateSpec
		policies []*networkingv1.NetworkPolicy
	)
	for _, o := range objs {
		gvk := o.GetObjectKind().GroupVersionKind()
		id := gvk.Kind + " " + o.GetName()
		if gvk.Kind == "" || gvk.Version == "" {
			add("%s: no apiVersion or kind", id)
		}
		if seen[id] {
			add("%s rendered twice", id)
		}
		seen[id] = true
		if o.GetNamespace() != kvr.Namespace {
			add("%s: namespace %q, want %q", id, o.GetNamespace(), kvr.Namespace)
		}
		for _, msg := range validation.IsDNS1123Label(o.GetName()) {
			add("%s: name: %s", id, msg)
		}
		addErrs(id, metav1validation.ValidateLabels(o.GetLabels(), field.NewPath("metadata", "labels")))
		addErrs(id, apivalidation.ValidateAnnotations(o.GetAnnotations(), field.NewPath("metadata", "annotations")))
		if o.GetLabels()[render.LabelKVRouter] != kvr.Name || o.GetLabels()[render.LabelManagedBy] != render.ManagedBy {
			add("%s: labels %v lack the KVRouter's or managed-by", id, o.GetLabels())
		}
		refs := o.GetOwnerReferences()
		if len(refs) != 1 || refs[0].APIVersion != v1alpha1.GroupVersion.String() || refs[0].Kind != "KVRouter" ||
			refs[0].Name != kvr.Name || refs[0].UID != kvr.UID || refs[0].Controller == nil || !*refs[0].Controller {
			add("%s: ownerReferences %+v, want one controller reference to KVRouter %s (%s)", id, refs, kvr.Name, kvr.UID)
		}
		if err := roundTrips(o); err != nil {
			add("%s: %v", id, err)
		}

		switch w := o.(type) {
		case *appsv1.Deployment:
			if !selectorSelects(t, w.Spec.Selector, w.Spec.Template.Labels) {
				add("%s: selector %v does not select its pods %v", id, w.Spec.Selector, w.Spec.Template.Labels)
			}
			if w.Name == render.RouterName(kvr) {
				router = w.Spec.Template
			} else {
				servers = append(servers, w.Spec.Template)
			}
		case *lwsv1.LeaderWorkerSet:
			tpl := w.Spec.LeaderWorkerTemplate
			if tpl.LeaderTemplate == nil {
				add("%s: no leader template", id)
			} else {
				servers = append(servers, *tpl.LeaderTemplate)
			}
			workers = append(workers, tpl.WorkerTemplate)
		case *corev1.Service:
			service = w
			for _, msg := range validation.IsDNS1035Label(w.Name) {
				add("%s: name: %s", id, msg)
			}
		case *networkingv1.NetworkPolicy:
			policies = append(policies, w)
		}
	}
	if router.Labels == nil || service == nil || len(servers) != len(render.EnginePools(kvr)) {
		add("want one router Deployment, one Service and one serving engine template per pool; got router %v, Service %v, %d engine templates",
			router.Labels != nil, service != nil, len(servers))
		return out
	}
	out = append(out, poolTemplateViolations(t, kvr, servers, workers, policies)...)

	for where, tpl := range podTemplates(objs) {
		addErrs(where, metav1validation.ValidateLabels(tpl.Labels, field.NewPath("template", "labels")))
		addErrs(where, apivalidation.ValidateAnnotations(tpl.Annotations, field.NewPath("template", "annotations")))
		for _, v := range podSpecViolations(tpl.Spec) {
			add("%s: %s", where, v)
		}
		userEnv := map[string]bool{}
		for _, e := range kvr.Spec.Engine.Env {
			userEnv[e.Name] = true
		}
		policy := podPolicy{openShift: opts.PlatformAssignsUID, specUID: kvr.Spec.Engine.RunAsUser,
			nonRootImages: withImages(kvrouterImages, kvr.Spec.Router.Image), userEnv: userEnv}
		for _, v := range podViolations(tpl, policy) {
			add("%s: %s", where, v)
		}
	}

	// The router finds exactly the serving engine pods.
	engineSel, err := labels.Parse(render.EngineSelector(kvr))
	if err != nil {
		add("EngineSelector: %v", err)
	} else {
		for _, s := range servers {
			if !engineSel.Matches(labels.Set(s.Labels)) {
				add("EngineSelector %s misses the serving engine pods %v", engineSel, s.Labels)
			}
		}
		for _, w := range workers {
			if engineSel.Matches(labels.Set(w.Labels)) {
				add("EngineSelector %s selects headless workers %v", engineSel, w.Labels)
			}
		}
	}
	if !labels.SelectorFromSet(service.Spec.Selector).Matches(labels.Set(router.Labels)) {
		add("Service %s selects %v, not the router pods %v", service.Name, service.Spec.Selector, router.Labels)
	}
	routerPorts := containerPorts(router.Spec)
	for _, p := range service.Spec.Ports {
		if p.TargetPort.StrVal != "" && !slices.ContainsFunc(routerPorts, func(c corev1.ContainerPort) bool { return c.Name == p.TargetPort.StrVal }) {
			add("Service %s targets port %q, which the router pods lack", service.Name, p.TargetPort.StrVal)
		}
	}

	var pool *infv1.InferencePool
	routes := 0
	for _, o := range objs {
		if p, ok := o.(*infv1.InferencePool); ok {
			pool = p
		}
	}
	if (pool != nil) != render.UsesInferencePool(kvr) {
		add("InferencePool rendered=%v, spec.gateway.mode %v", pool != nil, kvr.Spec.Gateway)
	}
	for _, o := range objs {
		id := o.GetObjectKind().GroupVersionKind().Kind + " " + o.GetName()
		switch w := o.(type) {
		case *policyv1.PodDisruptionBudget:
			if !selectorSelects(t, w.Spec.Selector, router.Labels) {
				add("%s does not select the router pods", id)
			}
		case *gwapiv1.HTTPRoute:
			routes++
			for _, r := range w.Spec.Rules {
				for _, p := range adminPaths {
					if routeMatchesPath(r, p) {
						add("%s routes %s, which only the router's admin port may serve", id, p)
					}
				}
				for _, b := range r.BackendRefs {
					group, kind := string(ptr.Deref(b.Group, "")), string(ptr.Deref(b.Kind, "Service"))
					switch {
					case render.UsesInferencePool(kvr):
						if pool == nil || group != infv1.GroupName || kind != render.InferencePoolKind || string(b.Name) != pool.Name ||
							b.Port == nil || !slices.Contains(pool.Spec.TargetPorts, infv1.Port{Number: infv1.PortNumber(*b.Port)}) {
							add("%s: backendRef %s/%s %s:%v is not the InferencePool on one of its target ports", id, group, kind, b.Name, b.Port)
						}
					case group != "" || kind != "Service" || string(b.Name) != service.Name || b.Port == nil ||
						!slices.ContainsFunc(service.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == *b.Port }):
						add("%s: backendRef %s:%v is not a port of Service %s", id, b.Name, b.Port, service.Name)
					}
				}
			}
		case *infv1.InferencePool:
			out = append(out, poolViolations(t, w, service, router, servers, workers)...)
		case *unstructured.Unstructured:
			out = append(out, unstructuredViolations(t, kvr, w, service, servers, workers)...)
		}
	}

	if (routes == 1) != (kvr.Spec.Gateway != nil) {
		add("%d HTTPRoutes rendered, spec.gateway set=%v", routes, kvr.Spec.Gateway != nil)
	}

	// The router's public ports (its HTTP port, or as the endpoint picker its ext_proc and gRPC
	// health ports) are open to all, a Gateway's data plane in its own namespace included; its
	// admin port to the operator and not to a stranger.
	routerDst := podOf("router", kvr.Namespace, router)
	gateway := pod{name: "a Gateway's data plane", namespace: "gateway-system", labels: map[string]string{"app": "envoy"},
		nsLabels: map[string]string{corev1.LabelMetadataName: "gateway-system"}}
	public := []int32{render.RouterPort}
	if render.UsesInferencePool(kvr) {
		public = []int32{render.RouterGRPCPort, render.RouterGRPCHealthPort}
	}
	for _, port := range public {
		if !slices.ContainsFunc(routerPorts, func(c corev1.ContainerPort) bool { return c.ContainerPort == port }) {
			add("the router pods do not declare their public port %d", port)
		}
		if !ingressAllowed(t, policies, gateway, routerDst, port) {
			add("NetworkPolicy: the router's port %d is closed to a Gateway", port)
		}
	}
	if render.UsesInferencePool(kvr) && slices.ContainsFunc(routerPorts, func(c corev1.ContainerPort) bool { return c.ContainerPort == render.RouterPort }) {
		add("the endpoint picker declares the HTTP port %d, which it does not serve", render.RouterPort)
	}
	operator := pod{name: "the operator", namespace: render.DefaultOperatorNamespace, labels: render.OperatorPodLabels,
		nsLabels: map[string]string{corev1.LabelMetadataName: render.DefaultOperatorNamespace}}
	if opts.OperatorNamespace != "" {
		operator.namespace, operator.nsLabels[corev1.LabelMetadataName] = opts.OperatorNamespace, opts.OperatorNamespace
	}
	strangerNS := map[string]string{corev1.LabelMetadataName: kvr.Namespace}
	for _, port := range public {
		if !ingressAllowed(t, policies, pod{name: "stranger", namespace: kvr.Namespace, nsLabels: strangerNS}, routerDst, port) {
			add("NetworkPolicy: the router's public port %d is closed to clients", port)
		}
	}
	if ingressAllowed(t, policies, pod{name: "stranger", namespace: kvr.Namespace, nsLabels: strangerNS}, routerDst, render.RouterAdminPort) {
		add("NetworkPolicy: the router's admin port is open to any pod")
	}
	if !ingressAllowed(t, policies, operator, routerDst, render.RouterAdminPort) {
		add("NetworkPolicy: the router's admin port is closed to the operator")
	}

	// KV events leave the engines for this KVRouter's router pods only.
	routerPod := pod{name: "router", namespace: kvr.Namespace, labels: router.Labels}
	twin := routerPod
	twin.name, twin.namespace = "the same router in another namespace", kvr.Namespace+"x"
	stranger := pod{name: "stranger", namespace: kvr.Namespace, labels: map[string]string{"app": "x"}}
	for _, s := range servers {
		dst := podOf("engine", kvr.Namespace, s)
		// A Gateway forwards to the engines themselves with an InferencePool (FailOpen too).
		if !ingressAllowed(t, policies, gateway, dst, render.EnginePort) {
			add("NetworkPolicy: the engines' HTTP port is closed to a Gateway")
		}
		for _, port := range []int32{render.KVEventsPort, render.KVReplayPort} {
			if !ingressAllowed(t, policies, routerPod, dst, port) {
				add("NetworkPolicy: port %d closed to the router", port)
			}
			for _, src := range []pod{twin, stranger} {
				if ingressAllowed(t, policies, src, dst, port) {
					add("NetworkPolicy: port %d open to %s", port, src.name)
				}
			}
		}
	}
	return out
}

// poolViolations checks an InferencePool against what it points at: its selector takes exactly
// the engine pods that serve HTTP (not headless workers), its target port is their HTTP port,
// and its endpoint picker is the router Service's ext_proc port, which reaches the router pods'
// gRPC port.
func poolViolations(t testing.TB, p *infv1.InferencePool, service *corev1.Service, router corev1.PodTemplateSpec,
	servers, workers []corev1.PodTemplateSpec) []string {
	var out []string
	id := "InferencePool " + p.Name
	sel := map[string]string{}
	for k, v := range p.Spec.Selector.MatchLabels {
		sel[string(k)] = string(v)
	}
	if len(sel) == 0 {
		out = append(out, id+": empty selector")
	}
	for _, s := range servers {
		if !labels.SelectorFromSet(sel).Matches(labels.Set(s.Labels)) {
			out = append(out, fmt.Sprintf("%s does not select the serving engine pods %v", id, s.Labels))
		}
		for _, tp := range p.Spec.TargetPorts {
			// With disaggregation the Gateway reaches an engine through its pd-sidecar.
			want := int32(render.EnginePort)
			if s.Labels[render.LabelRole] != "" {
				want = render.PDSidecarPort
			}
			if !slices.ContainsFunc(containerPorts(s.Spec), func(c corev1.ContainerPort) bool {
				return c.ContainerPort == int32(tp.Number) && c.ContainerPort == want
			}) {
				out = append(out, fmt.Sprintf("%s: target port %d is not the engines' port %d", id, tp.Number, want))
			}
		}
	}
	for _, w := range workers {
		if labels.SelectorFromSet(sel).Matches(labels.Set(w.Labels)) {
			out = append(out, fmt.Sprintf("%s selects headless workers, which serve no HTTP", id))
		}
	}
	if len(p.Spec.TargetPorts) == 0 {
		out = append(out, id+": no target ports")
	}
	ref := p.Spec.EndpointPickerRef
	if ref == nil {
		return append(out, id+": no endpointPickerRef")
	}
	if ptr.Deref(ref.Group, "") != "" || ref.Kind != "Service" || string(ref.Name) != service.Name || ref.Port == nil {
		return append(out, fmt.Sprintf("%s: endpointPickerRef %+v is not the router Service", id, ref))
	}
	i := slices.IndexFunc(service.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Port == int32(ref.Port.Number) })
	if i < 0 {
		return append(out, fmt.Sprintf("%s: endpointPickerRef port %d is not a port of Service %s", id, ref.Port.Number, service.Name))
	}
	sp := service.Spec.Ports[i]
	// The port's appProtocol must say what the router speaks there: HTTP/2 over TLS with
	// --grpc-tls, in clear text (h2c) without.
	want := "kubernetes.io/h2c"
	if slices.ContainsFunc(router.Spec.Containers, func(c corev1.Container) bool {
		return c.Name == render.RouterContainerName && slices.Contains(c.Args, "--grpc-tls")
	}) {
		want = "http2"
	}
	if !slices.ContainsFunc(containerPorts(router.Spec), func(c corev1.ContainerPort) bool {
		return c.Name == sp.TargetPort.StrVal && c.ContainerPort == render.RouterGRPCPort
	}) || ptr.Deref(sp.AppProtocol, "") != want {
		out = append(out, fmt.Sprintf("%s: the picker's Service port %s does not reach the router's ext_proc port as %s", id, sp.Name, want))
	}
	if m := ref.FailureMode; m != infv1.EndpointPickerFailOpen && m != infv1.EndpointPickerFailClose {
		out = append(out, fmt.Sprintf("%s: failureMode %q", id, m))
	}
	return out
}

// unstructuredViolations checks the optional kinds rendered unstructured.
func unstructuredViolations(t testing.TB, kvr *v1alpha1.KVRouter, u *unstructured.Unstructured, service *corev1.Service,
	servers, workers []corev1.PodTemplateSpec) []string {
	var out []string
	id := u.GetKind() + " " + u.GetName()
	matchLabels := func() labels.Selector {
		m, _, err := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
		if err != nil || len(m) == 0 {
			out = append(out, fmt.Sprintf("%s: spec.selector.matchLabels %v (%v)", id, m, err))
		}
		return labels.SelectorFromSet(m)
	}
	endpointPorts := func(field string) []string {
		eps, _, _ := unstructured.NestedSlice(u.Object, "spec", field)
		var ports []string
		for _, e := range eps {
			p, _ := e.(map[string]any)["port"].(string)
			ports = append(ports, p)
		}
		if len(ports) == 0 {
			out = append(out, fmt.Sprintf("%s: no %s", id, field))
		}
		return ports
	}
	switch u.GetKind() {
	case render.ServiceMonitorKind:
		if !matchLabels().Matches(labels.Set(service.Labels)) {
			out = append(out, fmt.Sprintf("%s does not select Service %s (%v)", id, service.Name, service.Labels))
		}
		for _, p := range endpointPorts("endpoints") {
			if !slices.ContainsFunc(service.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Name == p }) {
				out = append(out, fmt.Sprintf("%s scrapes port %q, which Service %s lacks", id, p, service.Name))
			}
			if p != render.PortNameAdmin {
				out = append(out, fmt.Sprintf("%s scrapes port %q, not the admin port that serves /metrics", id, p))
			}
		}
	case render.PodMonitorKind:
		sel := matchLabels()
		ports := endpointPorts("podMetricsEndpoints")
		for _, s := range servers {
			if !sel.Matches(labels.Set(s.Labels)) {
				out = append(out, fmt.Sprintf("%s does not select the engine pods %v", id, s.Labels))
			}
			for _, p := range ports {
				if !slices.ContainsFunc(containerPorts(s.Spec), func(c corev1.ContainerPort) bool { return c.Name == p }) {
					out = append(out, fmt.Sprintf("%s scrapes port %q, which the engine pods lack", id, p))
				}
			}
		}
		for _, w := range workers {
			if sel.Matches(labels.Set(w.Labels)) {
				out = append(out, fmt.Sprintf("%s selects headless workers, which serve no metrics", id))
			}
		}
	case "ScaledObject":
		ref, _, _ := unstructured.NestedStringMap(u.Object, "spec", "scaleTargetRef")
		if !slices.ContainsFunc(render.EnginePools(kvr), func(p render.Pool) bool { return ref["name"] == render.PoolWorkloadName(kvr, p) }) ||
			ref["kind"] != render.EngineWorkloadKind(kvr) ||
			ref["apiVersion"] != render.EngineWorkloadAPIVersion(kvr) {
			out = append(out, fmt.Sprintf("%s: scaleTargetRef %v is not the engine workload", id, ref))
		}
		triggers, _, _ := unstructured.NestedSlice(u.Object, "spec", "triggers")
		for _, tr := range triggers {
			tm, _ := tr.(map[string]any)
			if tm["type"] != "metrics-api" {
				continue
			}
			url, _, _ := unstructured.NestedString(tm, "metadata", "url")
			want := render.RouterAdminURL(kvr) + "/v1/autoscale"
			if role := u.GetLabels()[render.LabelRole]; role != "" {
				// Each pool scales on its own engines' queue.
				want += "?role=" + role
			}
			if url != want {
				out = append(out, fmt.Sprintf("%s: metrics-api url %q, want the admin port's %q", id, url, want))
			}
		}
	case render.PrometheusRuleKind:
		out = append(out, prometheusRuleViolations(id, kvr, u)...)
	default:
		out = append(out, fmt.Sprintf("%s: unexpected unstructured kind", id))
	}
	return out
}

// selectorRE finds the label matchers of a PromQL expression (no rule uses braces otherwise).
var selectorRE = regexp.MustCompile(`\{[^}]*\}`)

// prometheusRuleViolations: every rule of a KVRouter's PrometheusRule reads that KVRouter's
// series only, and carries what Alertmanager and the people it pages need.
func prometheusRuleViolations(id string, kvr *v1alpha1.KVRouter, u *unstructured.Unstructured) []string {
	var out []string
	groups, _, _ := unstructured.NestedSlice(u.Object, "spec", "groups")
	if len(groups) == 0 {
		return []string{id + ": no spec.groups"}
	}
	scope := []string{fmt.Sprintf("namespace=%q", kvr.Namespace), fmt.Sprintf("%s=%q", render.MetricsLabelKVRouter, kvr.Name)}
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		if len(rules) == 0 {
			out = append(out, id+": a group without rules")
		}
		for _, r := range rules {
			rule := r.(map[string]any)
			expr, _ := rule["expr"].(string)
			sels := selectorRE.FindAllString(expr, -1)
			if len(sels) == 0 {
				out = append(out, fmt.Sprintf("%s: rule %v selects no series", id, rule["alert"]))
			}
			for _, sel := range sels {
				for _, m := range scope {
					if !strings.Contains(sel, m) {
						out = append(out, fmt.Sprintf("%s: rule %v: selector %s lacks %s", id, rule["alert"], sel, m))
					}
				}
			}
			sev, _, _ := unstructured.NestedString(rule, "labels", "severity")
			if sev != render.SeverityCritical && sev != render.SeverityWarning {
				out = append(out, fmt.Sprintf("%s: rule %v: severity %q", id, rule["alert"], sev))
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if v, _, _ := unstructured.NestedString(rule, "annotations", a); v == "" {
					out = append(out, fmt.Sprintf("%s: rule %v has no %s", id, rule["alert"], a))
				}
			}
		}
	}
	return out
}

// podSpecViolations are the pod spec rules of the API server that rendering could break.
func podSpecViolations(spec corev1.PodSpec) []string {
	var out []string
	add := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		if volumes[v.Name] {
			add("volume %s twice", v.Name)
		}
		volumes[v.Name] = true
		for _, msg := range validation.IsDNS1123Label(v.Name) {
			add("volume %s: %s", v.Name, msg)
		}
		if c := v.PersistentVolumeClaim; c != nil {
			for _, msg := range validation.IsDNS1123Subdomain(c.ClaimName) {
				add("volume %s: claimName %q: %s", v.Name, c.ClaimName, msg)
			}
		}
	}
	for k, v := range spec.NodeSelector {
		for _, msg := range slices.Concat(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)) {
			add("nodeSelector %s=%s: %s", k, v, msg)
		}
	}
	ports := map[int32]bool{}
	portNames := map[string]bool{}
	containers := map[string]bool{}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		if containers[c.Name] {
			add("container %s twice", c.Name)
		}
		containers[c.Name] = true
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			add("container %s: %s", c.Name, msg)
		}
		if c.Image == "" {
			add("container %s: no image", c.Name)
		}
		for _, p := range c.Ports {
			if p.ContainerPort < 1 || p.ContainerPort > 65535 || ports[p.ContainerPort] {
				add("container %s: port %d out of range or twice in the pod", c.Name, p.ContainerPort)
			}
			ports[p.ContainerPort] = true
			if p.Name != "" {
				for _, msg := range validation.IsValidPortName(p.Name) {
					add("container %s: port name %s: %s", c.Name, p.Name, msg)
				}
				if portNames[p.Name] {
					add("container %s: port name %s twice in the pod", c.Name, p.Name)
				}
				portNames[p.Name] = true
			}
		}
		env := map[string]bool{}
		for _, e := range c.Env {
			if env[e.Name] {
				add("container %s: env %s twice (server-side apply refuses duplicate keys)", c.Name, e.Name)
			}
			env[e.Name] = true
			for _, msg := range validation.IsEnvVarName(e.Name) {
				add("container %s: env %s: %s", c.Name, e.Name, msg)
			}
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				for _, msg := range validation.IsDNS1123Subdomain(e.ValueFrom.SecretKeyRef.Name) {
					add("container %s: env %s from Secret %q: %s", c.Name, e.Name, e.ValueFrom.SecretKeyRef.Name, msg)
				}
			}
		}
		mounts := map[string]bool{}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				add("container %s mounts unknown volume %s", c.Name, m.Name)
			}
			if mounts[m.MountPath] {
				add("container %s mounts %s twice", c.Name, m.MountPath)
			}
			mounts[m.MountPath] = true
		}
		for _, probe := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
			if probe != nil && probe.HTTPGet != nil && probe.HTTPGet.Port.StrVal != "" &&
				!slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == probe.HTTPGet.Port.StrVal }) {
				add("container %s probes port %q, which it lacks", c.Name, probe.HTTPGet.Port.StrVal)
			}
			// A gRPC probe names its port by number only.
			if probe != nil && probe.GRPC != nil &&
				!slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == probe.GRPC.Port }) {
				add("container %s probes gRPC port %d, which it does not declare", c.Name, probe.GRPC.Port)
			}
		}
	}
	return out
}

func containerPorts(spec corev1.PodSpec) []corev1.ContainerPort {
	var out []corev1.ContainerPort
	for _, c := range spec.Containers {
		out = append(out, c.Ports...)
	}
	return out
}

func selectorSelects(t testing.TB, s *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	return s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0) && selects(t, s, l)
}

// roundTrips says whether obj survives JSON encoding and decoding into its own type unchanged,
// which is what an apply and a read back do.
func roundTrips(obj client.Object) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encoding as JSON: %w", err)
	}
	back := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object)
	if err := json.Unmarshal(b, back); err != nil {
		return fmt.Errorf("decoding its JSON: %w", err)
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if !equality.Semantic.DeepEqual(u.Object, back.(*unstructured.Unstructured).Object) {
			return fmt.Errorf("changes in a JSON round trip")
		}
		return nil
	}
	if !equality.Semantic.DeepEqual(obj, back) {
		return fmt.Errorf("changes in a JSON round trip")
	}
	if _, err := render.ToUnstructured(obj); err != nil {
		return err
	}
	return nil
}

// withImages returns set plus the non-empty extra keys.
func withImages(set map[string]bool, extra ...string) map[string]bool {
	out := map[string]bool{}
	for k, v := range set {
		out[k] = v
	}
	for _, k := range extra {
		if k != "" {
			out[k] = true
		}
	}
	return out
}

// TestRenderedObjectsAreValid runs the invariants over the security matrix on both platforms;
// FuzzRender runs them over random specs.
func TestRenderedObjectsAreValid(t *testing.T) {
	for name, kvr := range securityMatrix() {
		for _, opts := range []render.Options{{}, {PlatformAssignsUID: true}} {
			objs := mustObjects(t, kvr, opts)
			for _, v := range objectViolations(t, kvr, opts, objs) {
				t.Errorf("%s (openshift=%v): %s", name, opts.PlatformAssignsUID, v)
			}
		}
	}
}

// adminPaths are what the router serves on its admin port only; no HTTPRoute may send them to it.
var adminPaths = []string{"/metrics", "/v1/status", "/v1/autoscale"}

// routeMatchesPath says whether a Gateway would send a GET of path down rule r, by Gateway API's
// path semantics: no match at all is a PathPrefix "/"; PathPrefix matches whole segments; a
// regular expression is taken to match anything, since its dialect is the implementation's.
func routeMatchesPath(r gwapiv1.HTTPRouteRule, path string) bool {
	if len(r.Matches) == 0 {
		return true
	}
	for _, m := range r.Matches {
		typ, value := gwapiv1.PathMatchPathPrefix, "/"
		if m.Path != nil {
			if m.Path.Type != nil {
				typ = *m.Path.Type
			}
			if m.Path.Value != nil {
				value = *m.Path.Value
			}
		}
		switch typ {
		case gwapiv1.PathMatchExact:
			if path == value {
				return true
			}
		case gwapiv1.PathMatchPathPrefix:
			prefix := strings.TrimSuffix(value, "/")
			if prefix == "" || path == prefix || strings.HasPrefix(path, prefix+"/") {
				return true
			}
		default:
			return true
		}
	}
	return false
}

// poolTemplateViolations checks the pools of a disaggregated KVRouter: one serving template per
// pool, labelled with its role, each started with the KV connector and its side channel, which
// the other engines of the KVRouter may reach and a stranger may not; and no trace of any of it
// in an aggregated KVRouter.
func poolTemplateViolations(t testing.TB, kvr *v1alpha1.KVRouter, servers, workers []corev1.PodTemplateSpec,
	policies []*networkingv1.NetworkPolicy) []string {
	var out []string
	kvr = kvr.DeepCopy()
	render.Default(kvr)
	roles := map[string]bool{}
	for _, tpl := range append(slices.Clone(servers), workers...) {
		role := tpl.Labels[render.LabelRole]
		c := tpl.Spec.Containers[0]
		hasConnector := slices.Contains(c.Args, "--kv-transfer-config")
		hasEnv := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "VLLM_NIXL_SIDE_CHANNEL_PORT" })
		if !render.Disaggregated(kvr) {
			if role != "" || hasConnector || hasEnv {
				out = append(out, fmt.Sprintf("aggregated engine pods %v carry a role, the connector or its side channel", tpl.Labels))
			}
			continue
		}
		if role != string(render.PoolPrefill) && role != string(render.PoolDecode) {
			out = append(out, fmt.Sprintf("engine pods %v have no pool role", tpl.Labels))
		}
		if !hasConnector || !hasEnv || !slices.Contains(c.Args, "--kv-events-config") {
			out = append(out, fmt.Sprintf("%s engine pods lack --kv-transfer-config, --kv-events-config or the side-channel port", role))
		}
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
			return p.Name == render.PortNameKVTransfer && p.ContainerPort == kvr.Spec.Disaggregation.SideChannelPort
		}) {
			out = append(out, fmt.Sprintf("%s engine pods do not declare port %s", role, render.PortNameKVTransfer))
		}
	}
	for _, s := range servers {
		roles[s.Labels[render.LabelRole]] = true
	}
	if render.Disaggregated(kvr) {
		if !roles[string(render.PoolPrefill)] || !roles[string(render.PoolDecode)] {
			out = append(out, fmt.Sprintf("serving pools %v, want prefill and decode", roles))
		}
		port := kvr.Spec.Disaggregation.SideChannelPort
		for _, s := range servers {
			for _, peer := range servers {
				if !ingressAllowed(t, policies, podOf("peer engine", kvr.Namespace, peer), podOf("engine", kvr.Namespace, s), port) {
					out = append(out, fmt.Sprintf("NetworkPolicy: side-channel port %d of the %s pool closed to the %s pool",
						port, s.Labels[render.LabelRole], peer.Labels[render.LabelRole]))
				}
			}
			// UCX over TCP (transport TCP, and NVLink's fallback) listens on ports chosen at run time.
			if tr := kvr.Spec.Disaggregation.Network.Transport; tr == v1alpha1.TransportTCP || tr == v1alpha1.TransportNVLink {
				for _, peer := range servers {
					if !ingressAllowed(t, policies, podOf("peer engine", kvr.Namespace, peer), podOf("engine", kvr.Namespace, s), 41234) {
						out = append(out, fmt.Sprintf("NetworkPolicy: transport %s, but UCX's run-time TCP ports of the %s pool are closed to the %s pool",
							tr, s.Labels[render.LabelRole], peer.Labels[render.LabelRole]))
					}
				}
			}
			stranger := pod{name: "stranger", namespace: kvr.Namespace, labels: map[string]string{"app": "x"}}
			if ingressAllowed(t, policies, stranger, podOf("engine", kvr.Namespace, s), port) {
				out = append(out, fmt.Sprintf("NetworkPolicy: side-channel port %d open to a stranger", port))
			}
		}
	}
	return out
}
