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

package helm

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
)

// releaseNS is where the tests install: not config/default's namespace, so that a namespace the
// chart does not take from the release shows up.
const releaseNS = "team-a"

func TestLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"defaults": nil,
		"everything on": {
			"watchNamespaces": []any{"a", "b"},
			"monitoring":      allMonitoring(t, map[string]any{"release": "prom"}),
		},
	} {
		t.Run(name, func(t *testing.T) {
			lint := action.NewLint()
			lint.Namespace = releaseNS
			lint.KubeVersion = &chartutil.KubeVersion{Version: "v1.36.0", Major: "1", Minor: "36"}
			res := lint.Run([]string{chartDir(t)}, vals)
			if res.TotalChartsLinted != 1 {
				t.Errorf("linted %d charts, want 1", res.TotalChartsLinted)
			}
			for _, err := range res.Errors {
				t.Errorf("lint error: %v", err)
			}
			for _, m := range res.Messages {
				// INFO is only the missing icon (an URL the repository does not publish).
				if m.Severity > support.InfoSev {
					t.Errorf("lint: %s", m)
				}
			}
		})
	}
}

// TestDefaultsAreConfigDefault checks that the chart with its default values installs what
// `kustomize build config/default` does, and with every monitoring switch on, config/prometheus
// and config/grafana as well. The differences allowed, each checked rather than ignored:
//   - config/default's Namespace is not in the chart: Helm installs into the release namespace,
//     which `helm install -n NS --create-namespace` makes (NOTES.txt tells how to give it the
//     Pod Security label config/default gives its Namespace).
//   - metadata.namespace and the namespace of ServiceAccount subjects are the release
//     namespace where kustomize has config/default's.
//   - templated objects carry Helm's labels (helm.sh/chart, app.kubernetes.io/instance,
//     app.kubernetes.io/version, and app.kubernetes.io/managed-by: Helm in place of kustomize);
//     the CRD of crds/, which Helm installs as it is, carries neither managed-by.
//
// Everything else (specs, rules, selectors, other labels, annotations) must be equal.
func TestDefaultsAreConfigDefault(t *testing.T) {
	chrt, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	want := kustomizeBuild(t, "config/default")
	var ns string
	want = slices.DeleteFunc(want, func(o object) bool {
		if o["kind"] == "Namespace" {
			ns = str(o, "metadata", "name")
			return true
		}
		return false
	})
	if ns == "" {
		t.Fatal("config/default has no Namespace")
	}
	monitoring := append(kustomizeBuild(t, "config/prometheus"), kustomizeBuild(t, "config/grafana")...)
	for _, tc := range []struct {
		name string
		vals map[string]any
		want []object
	}{
		{"defaults", nil, want},
		{"every monitoring switch on", map[string]any{"monitoring": allMonitoring(t, nil)}, append(slices.Clone(want), monitoring...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := byKey(mustRender(t, releaseNS, tc.vals).objs)
			wantByKey := byKey(tc.want)
			if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(wantByKey)); !slices.Equal(g, w) {
				t.Fatalf("the chart renders %q\nkustomize builds %q", g, w)
			}
			for k, w := range wantByKey {
				g := chartAsKustomize(t, got[k], ns, chrt.Metadata.Version, chrt.Metadata.AppVersion)
				w = kustomizeWithoutManagedBy(t, w)
				if !reflect.DeepEqual(g, w) {
					t.Errorf("%s differs from kustomize's (chart: regenerate with make helm?)\n%s", k, firstDifference(toYAML(g), toYAML(w)))
				}
			}
		})
	}
}

// chartAsKustomize undoes the allowed differences of a rendered object (TestDefaultsAreConfigDefault),
// checking each: Helm's labels must have their values and the namespaces must be the release's.
func chartAsKustomize(t *testing.T, o object, ns, version, appVersion string) object {
	t.Helper()
	o = deepCopy(t, o)
	labels, _ := get(o, "metadata", "labels").(map[string]any)
	if o["kind"] == "CustomResourceDefinition" {
		if _, ok := labels["app.kubernetes.io/managed-by"]; ok {
			t.Errorf("%s: crds/ should carry no managed-by label", key(o))
		}
	} else {
		for k, v := range helmLabels(version, appVersion) {
			if labels[k] != v {
				t.Errorf("%s: label %s = %v, want %q", key(o), k, labels[k], v)
			}
			delete(labels, k)
		}
	}
	md := o["metadata"].(map[string]any)
	if v, ok := md["namespace"]; ok {
		if v != releaseNS {
			t.Errorf("%s: namespace %v, want the release namespace %s", key(o), v, releaseNS)
		}
		md["namespace"] = ns
	}
	subjects, _ := o["subjects"].([]any)
	for _, s := range subjects {
		if sm := s.(map[string]any); sm["namespace"] != nil {
			if sm["namespace"] != releaseNS {
				t.Errorf("%s: subject %v, want the release namespace %s", key(o), sm, releaseNS)
			}
			sm["namespace"] = ns
		}
	}
	return o
}

func kustomizeWithoutManagedBy(t *testing.T, o object) object {
	t.Helper()
	o = deepCopy(t, o)
	if labels, _ := get(o, "metadata", "labels").(map[string]any); labels != nil {
		if v, ok := labels["app.kubernetes.io/managed-by"]; ok && v != "kustomize" {
			t.Errorf("kustomize's %s: managed-by %v, want kustomize", key(o), v)
		}
		delete(labels, "app.kubernetes.io/managed-by")
	}
	return o
}

// firstDifference shows where two YAML texts first differ, a few lines of each from there.
func firstDifference(chart, kustomize string) string {
	c, k := strings.Split(chart, "\n"), strings.Split(kustomize, "\n")
	i := 0
	for i < len(c) && i < len(k) && c[i] == k[i] {
		i++
	}
	window := func(l []string) string { return strings.Join(l[i:min(i+6, len(l))], "\n") }
	return fmt.Sprintf("from line %d, the chart:\n%s\nkustomize:\n%s", i+1, window(c), window(k))
}

func helmLabels(version, appVersion string) map[string]string {
	return map[string]string{
		"helm.sh/chart":                "kvrouter-" + version,
		"app.kubernetes.io/managed-by": "Helm",
		"app.kubernetes.io/instance":   releaseName,
		"app.kubernetes.io/version":    appVersion,
	}
}

// TestValues renders the chart over a matrix of values and checks what each value changes,
// along with what every rendering must hold.
func TestValues(t *testing.T) {
	defaults := readValues(t)
	defaultImage := func(k string) string {
		img := defaults["image"].(map[string]any)[k].(map[string]any)
		return img["repository"].(string) + ":" + img["tag"].(string)
	}
	for _, tc := range []struct {
		name  string
		vals  map[string]any
		check func(t *testing.T, r *rendered, c object)
	}{{
		name: "defaults",
		check: func(t *testing.T, r *rendered, c object) {
			for _, kind := range []string{"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "Deployment"} {
				if !has(r.objs, kind) {
					t.Errorf("no %s", kind)
				}
			}
			if has(r.objs, "ServiceMonitor") || has(r.objs, "ConfigMap") || has(r.objs, "Namespace") {
				t.Error("monitoring objects or a Namespace by default")
			}
			wantImages(t, c, defaultImage("manager"), defaultImage("router"), defaultImage("simulator"))
			if !slices.Contains(args(c), "--leader-elect") {
				t.Errorf("args %q lack --leader-elect", args(c))
			}
			if got := get(envVar(t, c, "WATCH_NAMESPACE"), "valueFrom", "fieldRef", "fieldPath"); got != "metadata.annotations['olm.targetNamespaces']" {
				t.Errorf("WATCH_NAMESPACE from %v, want config/manager's fieldRef", got)
			}
			if !strings.Contains(r.notes, "namespace "+releaseNS) || !strings.Contains(r.notes, "every namespace") {
				t.Errorf("NOTES.txt does not name the namespace and what is watched:\n%s", r.notes)
			}
		},
	}, {
		name: "custom images",
		vals: map[string]any{"image": map[string]any{
			"manager":   map[string]any{"repository": "registry.example.com/ops/manager", "tag": "", "digest": "sha256:" + strings.Repeat("a", 64)},
			"router":    map[string]any{"repository": "registry.example.com:5000/router", "tag": "v9", "digest": "sha256:" + strings.Repeat("b", 64)},
			"simulator": map[string]any{"repository": "registry.example.com/vllm-sim", "tag": "dev"},
		}, "imagePullPolicy": "Always"},
		check: func(t *testing.T, r *rendered, c object) {
			wantImages(t, c, "registry.example.com/ops/manager@sha256:"+strings.Repeat("a", 64),
				"registry.example.com:5000/router:v9@sha256:"+strings.Repeat("b", 64), "registry.example.com/vllm-sim:dev")
			if c["imagePullPolicy"] != "Always" {
				t.Errorf("imagePullPolicy %v, want Always", c["imagePullPolicy"])
			}
		},
	}, {
		name: "watch namespaces",
		vals: map[string]any{"watchNamespaces": []any{"team-b", "team-c"}},
		check: func(t *testing.T, r *rendered, c object) {
			e := envVar(t, c, "WATCH_NAMESPACE")
			if e["value"] != "team-b,team-c" || e["valueFrom"] != nil {
				t.Errorf("WATCH_NAMESPACE = %v, want the value team-b,team-c", e)
			}
			if !strings.Contains(r.notes, "team-b, team-c") {
				t.Errorf("NOTES.txt does not name the watched namespaces:\n%s", r.notes)
			}
		},
	}, {
		name: "monitoring on",
		vals: map[string]any{"monitoring": allMonitoring(t, map[string]any{"release": "prom"})},
		check: func(t *testing.T, r *rendered, c object) {
			sm := find(t, r.objs, "ServiceMonitor", "kvrouter-manager")
			if str(sm, "metadata", "labels", "release") != "prom" {
				t.Errorf("ServiceMonitor labels %v lack release: prom", get(sm, "metadata", "labels"))
			}
			cm := find(t, r.objs, "ConfigMap", "kvrouter-dashboard")
			if str(cm, "metadata", "namespace") != releaseNS || str(cm, "metadata", "labels", "grafana_dashboard") != "1" {
				t.Errorf("dashboard ConfigMap metadata %v", cm["metadata"])
			}
			want, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "grafana", "kvrouter-dashboard.json"))
			if err != nil {
				t.Fatal(err)
			}
			if got := str(cm, "data", "kvrouter-dashboard.json"); got != string(want) {
				t.Errorf("the dashboard differs from config/grafana/kvrouter-dashboard.json (%d bytes, want %d)", len(got), len(want))
			}
		},
	}, {
		name: "dashboard alone, in Grafana's namespace",
		vals: map[string]any{"monitoring": map[string]any{"dashboard": map[string]any{"enabled": true, "namespace": "grafana"}}},
		check: func(t *testing.T, r *rendered, c object) {
			if has(r.objs, "ServiceMonitor") {
				t.Error("a ServiceMonitor with only the dashboard on")
			}
			cm := find(t, r.objs, "ConfigMap", "kvrouter-dashboard")
			if ns := str(cm, "metadata", "namespace"); ns != "grafana" {
				t.Errorf("dashboard in %q, want grafana", ns)
			}
		},
	}, {
		name: "resources, scheduling, pull secrets, pod metadata",
		vals: map[string]any{
			"resources":         map[string]any{"limits": map[string]any{"cpu": "1", "memory": "1Gi"}},
			"imagePullSecrets":  []any{map[string]any{"name": "regcred"}},
			"nodeSelector":      map[string]any{"kubernetes.io/os": "linux"},
			"tolerations":       []any{map[string]any{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}},
			"priorityClassName": "system-cluster-critical",
			"podAnnotations":    map[string]any{"example.com/a": "1"},
			"podLabels":         map[string]any{"team": "ml"},
			"commonLabels":      map[string]any{"cost-center": "42"},
			"serviceAccount":    map[string]any{"annotations": map[string]any{"iam.example.com/role": "r"}},
			"replicas":          2,
			"extraArgs":         []any{"--router-status-interval=30s"},
			"extraEnv":          []any{map[string]any{"name": "GOMEMLIMIT", "value": "200MiB"}},
		},
		check: func(t *testing.T, r *rendered, c object) {
			// Helm merges a map value over the default: the limits given, the default requests.
			wantRes := map[string]any{
				"limits":   map[string]any{"cpu": "1", "memory": "1Gi"},
				"requests": get(defaults, "resources", "requests"),
			}
			if !reflect.DeepEqual(c["resources"], wantRes) {
				t.Errorf("resources:\n%s\nwant:\n%s", toYAML(c["resources"]), toYAML(wantRes))
			}
			d := find(t, r.objs, "Deployment", "kvrouter-manager")
			pod := get(d, "spec", "template", "spec")
			if str(pod, "imagePullSecrets", 0, "name") != "regcred" || str(pod, "nodeSelector", "kubernetes.io/os") != "linux" ||
				str(pod, "tolerations", 0, "key") != "infra" || str(pod, "priorityClassName") != "system-cluster-critical" {
				t.Errorf("pod spec:\n%s", toYAML(pod))
			}
			tm := get(d, "spec", "template", "metadata")
			if str(tm, "annotations", "example.com/a") != "1" || str(tm, "annotations", "kubectl.kubernetes.io/default-container") != "manager" ||
				str(tm, "labels", "team") != "ml" || str(tm, "labels", "app.kubernetes.io/name") != "kvrouter-operator" {
				t.Errorf("pod template metadata:\n%s", toYAML(tm))
			}
			if get(d, "spec", "replicas") != float64(2) {
				t.Errorf("replicas %v, want 2", get(d, "spec", "replicas"))
			}
			if a := args(c); a[len(a)-1] != "--router-status-interval=30s" {
				t.Errorf("args %q do not end with the extra argument", a)
			}
			if envVar(t, c, "GOMEMLIMIT")["value"] != "200MiB" {
				t.Error("extraEnv missing")
			}
			sa := find(t, r.objs, "ServiceAccount", "kvrouter-manager")
			if str(sa, "metadata", "annotations", "iam.example.com/role") != "r" {
				t.Errorf("ServiceAccount metadata %v", sa["metadata"])
			}
			for _, o := range r.objs {
				if o["kind"] != "CustomResourceDefinition" && str(o, "metadata", "labels", "cost-center") != "42" {
					t.Errorf("%s lacks commonLabels", key(o))
				}
			}
		},
	}, {
		name: "no resources, no leader election",
		vals: map[string]any{"resources": nil, "leaderElection": map[string]any{"enabled": false}},
		check: func(t *testing.T, r *rendered, c object) {
			if _, ok := c["resources"]; ok {
				t.Errorf("resources %v, want none", c["resources"])
			}
			if slices.Contains(args(c), "--leader-elect") {
				t.Errorf("args %q with leader election off", args(c))
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRender(t, releaseNS, tc.vals)
			d := find(t, r.objs, "Deployment", "kvrouter-manager")
			c, _ := get(d, "spec", "template", "spec", "containers", 0).(map[string]any)
			if c == nil {
				t.Fatal("the Deployment has no container")
			}
			// What every rendering holds: the release namespace, Helm's labels, a selector
			// that matches the pods.
			for _, o := range r.objs {
				ns, namespaced := get(o, "metadata", "namespace").(string)
				if namespaced && ns != releaseNS && !(o["kind"] == "ConfigMap" && ns == "grafana") {
					t.Errorf("%s in namespace %q, want %s", key(o), ns, releaseNS)
				}
				if o["kind"] != "CustomResourceDefinition" && str(o, "metadata", "labels", "app.kubernetes.io/instance") != releaseName {
					t.Errorf("%s lacks the instance label", key(o))
				}
			}
			sel, _ := get(d, "spec", "selector", "matchLabels").(map[string]any)
			podLabels, _ := get(d, "spec", "template", "metadata", "labels").(map[string]any)
			for k, v := range sel {
				if podLabels[k] != v {
					t.Errorf("selector %v does not match the pod labels %v", sel, podLabels)
				}
			}
			tc.check(t, r, c)
		})
	}
}

// TestValuesRefused checks that bad values fail the install with a message naming the problem.
func TestValuesRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"misspelt key", map[string]any{"replica": 2}, "replica"},
		{"watch namespace not a DNS label", map[string]any{"watchNamespaces": []any{"Team_A"}}, "watchNamespaces"},
		{"replicas not a number", map[string]any{"replicas": "two"}, "replicas"},
		{"image without tag or digest", map[string]any{"image": map[string]any{"router": map[string]any{"tag": ""}}}, "router"},
		{"replicas without leader election", map[string]any{"replicas": 2, "leaderElection": map[string]any{"enabled": false}}, "leaderElection"},
		{"unknown monitoring switch", map[string]any{"monitoring": map[string]any{"podMonitor": map[string]any{"enabled": true}}}, "podMonitor"},
		// The chart sets these keys itself: a second one would be a duplicate YAML key, and on
		// the pod it could change what the Deployment's selector matches. (Helm's schema errors
		// point at a wrong path for propertyNames, so the key is what the message must name.)
		{"pod label the chart sets", map[string]any{"podLabels": map[string]any{"app.kubernetes.io/name": "x"}}, "app.kubernetes.io/name"},
		{"common label the chart sets", map[string]any{"commonLabels": map[string]any{"helm.sh/chart": "x"}}, "helm.sh/chart"},
		{"monitoring label the chart sets", map[string]any{"monitoring": map[string]any{"dashboard": map[string]any{"labels": map[string]any{"app.kubernetes.io/part-of": "x"}}}}, "app.kubernetes.io/part-of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, chartDir(t), releaseNS, tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// readValues is the chart's values.yaml.
func readValues(t *testing.T) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(filepath.Join(chartDir(t), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

// allMonitoring is a monitoring value with every switch of values.yaml on, with labels.
func allMonitoring(t *testing.T, labels map[string]any) map[string]any {
	t.Helper()
	m := map[string]any{}
	mon, _ := readValues(t)["monitoring"].(map[string]any)
	if len(mon) < 2 {
		t.Fatalf("values.yaml monitoring has %d switches, want the ServiceMonitor and the dashboard at least", len(mon))
	}
	for k := range mon {
		m[k] = map[string]any{"enabled": true, "labels": labels}
	}
	return m
}

func wantImages(t *testing.T, c object, manager, router, simulator string) {
	t.Helper()
	if c["image"] != manager {
		t.Errorf("manager image %v, want %s", c["image"], manager)
	}
	if got := envVar(t, c, "RELATED_IMAGE_ROUTER")["value"]; got != router {
		t.Errorf("RELATED_IMAGE_ROUTER = %v, want %s", got, router)
	}
	if got := envVar(t, c, "RELATED_IMAGE_SIMULATOR")["value"]; got != simulator {
		t.Errorf("RELATED_IMAGE_SIMULATOR = %v, want %s", got, simulator)
	}
}

func envVar(t *testing.T, c object, name string) map[string]any {
	t.Helper()
	env, _ := c["env"].([]any)
	for _, e := range env {
		if em, _ := e.(map[string]any); em["name"] == name {
			return em
		}
	}
	t.Errorf("no %s among the env of the manager:\n%s", name, toYAML(env))
	return map[string]any{}
}

func args(c object) []string {
	var out []string
	l, _ := c["args"].([]any)
	for _, a := range l {
		s, _ := a.(string)
		out = append(out, s)
	}
	return out
}

func deepCopy(t *testing.T, o object) object {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var out object
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestValuesDocumented checks that docs/install.md's Helm section names every value of
// values.yaml, so that a value the generator adds (a new RELATED_IMAGE_* image, a new object of
// config/prometheus) does not go undocumented. Images and monitoring switches count as one value
// each (image.router, monitoring.serviceMonitor), resources as one.
func TestValuesDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## With Helm\n")
	if !ok {
		t.Fatal("docs/install.md has no section \"## With Helm\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var paths []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		m, isMap := v.(map[string]any)
		stop := prefix == "resources" || strings.HasPrefix(prefix, "image.") || strings.HasPrefix(prefix, "monitoring.")
		if !isMap || len(m) == 0 || stop {
			paths = append(paths, prefix)
			return
		}
		for k, sub := range m {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			walk(p, sub)
		}
	}
	walk("", readValues(t))
	slices.Sort(paths)
	if len(paths) < 10 {
		t.Fatalf("values.yaml gives only %q", paths)
	}
	for _, p := range paths {
		if !strings.Contains(section, "`"+p) {
			t.Errorf("docs/install.md#with-helm does not document the value %s", p)
		}
	}
}

// TestNamespaceThatReadsAsANumber installs into namespaces that are valid DNS labels but that
// YAML would read as a number or a boolean unless the chart quotes them.
func TestNamespaceThatReadsAsANumber(t *testing.T) {
	for _, ns := range []string{"123", "yes"} {
		r := mustRender(t, ns, map[string]any{"monitoring": allMonitoring(t, nil)})
		n := 0
		for _, o := range r.objs {
			md, _ := o["metadata"].(map[string]any)
			if v, ok := md["namespace"]; ok {
				n++
				if s, isStr := v.(string); !isStr || s != ns {
					t.Errorf("%s %v: namespace %#v, want the string %q", o["kind"], md["name"], v, ns)
				}
			}
		}
		if n == 0 {
			t.Fatalf("namespace %s: no namespaced object rendered", ns)
		}
	}
}
