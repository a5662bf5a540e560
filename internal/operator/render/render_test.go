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
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/wrappers"
)

func mustObjects(t *testing.T, kvr *v1alpha1.KVRouter, opts render.Options) []client.Object {
	t.Helper()
	objs, err := render.Objects(kvr, opts)
	if err != nil {
		t.Fatalf("Objects: %v", err)
	}
	return objs
}

// find returns the only object of type T, failing the test if there is not exactly one.
func find[T client.Object](t *testing.T, objs []client.Object, name string) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok && o.GetName() == name {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %T named %q, found %d", zero, name, len(found))
	}
	return found[0]
}

func scaledObject(t *testing.T, objs []client.Object) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok && u.GetKind() == "ScaledObject" {
			return u
		}
	}
	t.Fatal("no ScaledObject rendered")
	return nil
}

func engineContainer(t *testing.T, spec corev1.PodSpec) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == render.EngineContainerName {
			return c
		}
	}
	t.Fatalf("no %q container", render.EngineContainerName)
	return corev1.Container{}
}

func argValue(t *testing.T, args []string, flag string) string {
	t.Helper()
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("flag %s missing from %v", flag, args)
	}
	return args[i+1]
}

func TestNoEngineReplicasUnderAutoscaling(t *testing.T) {
	t.Run("Deployment", func(t *testing.T) {
		kvr := wrappers.MakeKVRouter("m", "ns").Replicas(8).Autoscaling(2, 16).Obj()
		objs := mustObjects(t, kvr, render.Options{})
		d := find[*appsv1.Deployment](t, objs, render.EngineWorkloadName(kvr))
		if d.Spec.Replicas != nil {
			t.Errorf("engine Deployment replicas = %d, want unset so KEDA owns it", *d.Spec.Replicas)
		}
		u, err := render.ToUnstructured(d)
		if err != nil {
			t.Fatal(err)
		}
		if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "replicas"); found {
			t.Error("applied engine Deployment carries spec.replicas")
		}
		so := scaledObject(t, objs)
		if min, _, _ := unstructured.NestedInt64(so.Object, "spec", "minReplicaCount"); min != 2 {
			t.Errorf("minReplicaCount = %d, want 2", min)
		}
	})
	t.Run("LeaderWorkerSet", func(t *testing.T) {
		kvr := wrappers.MakeKVRouter("m", "ns").TensorParallel(8).NodesPerReplica(2).Replicas(3).Autoscaling(1, 4).Obj()
		lws := find[*lwsv1.LeaderWorkerSet](t, mustObjects(t, kvr, render.Options{}), render.EngineWorkloadName(kvr))
		if lws.Spec.Replicas != nil {
			t.Errorf("LeaderWorkerSet replicas = %d, want unset", *lws.Spec.Replicas)
		}
	})
	t.Run("fixed count without autoscaling", func(t *testing.T) {
		kvr := wrappers.MakeKVRouter("m", "ns").Replicas(3).Obj()
		d := find[*appsv1.Deployment](t, mustObjects(t, kvr, render.Options{}), render.EngineWorkloadName(kvr))
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
			t.Errorf("engine replicas = %v, want 3", d.Spec.Replicas)
		}
	})
	t.Run("minimum always explicit", func(t *testing.T) {
		kvr := wrappers.MakeKVRouter("m", "ns").Obj()
		kvr.Spec.Autoscaling = &v1alpha1.AutoscalingSpec{MaxReplicas: 5} // min left to the default
		so := scaledObject(t, mustObjects(t, kvr, render.Options{}))
		if min, found, _ := unstructured.NestedInt64(so.Object, "spec", "minReplicaCount"); !found || min != 1 {
			t.Errorf("minReplicaCount = %d (found %v), want 1", min, found)
		}
	})
}

func TestGPULimitEqualsTensorParallelSize(t *testing.T) {
	for _, tp := range []int32{1, 2, 4, 8} {
		kvr := wrappers.MakeKVRouter("m", "ns").TensorParallel(tp).Obj()
		d := find[*appsv1.Deployment](t, mustObjects(t, kvr, render.Options{}), render.EngineWorkloadName(kvr))
		c := engineContainer(t, d.Spec.Template.Spec)
		got := c.Resources.Limits[render.GPUResource]
		if got.Value() != int64(tp) {
			t.Errorf("TP %d: nvidia.com/gpu limit = %s", tp, got.String())
		}
		if v := argValue(t, c.Args, "--tensor-parallel-size"); v != got.String() {
			t.Errorf("TP %d: --tensor-parallel-size %s", tp, v)
		}
		if d.Spec.Template.Spec.NodeSelector[render.GPUProductLabel] != "NVIDIA-H100-80GB-HBM3" {
			t.Errorf("nodeSelector = %v", d.Spec.Template.Spec.NodeSelector)
		}
	}
	// Each pod of a multi-node replica holds one tensor-parallel group.
	kvr := wrappers.MakeKVRouter("m", "ns").TensorParallel(8).NodesPerReplica(2).Obj()
	lws := find[*lwsv1.LeaderWorkerSet](t, mustObjects(t, kvr, render.Options{}), render.EngineWorkloadName(kvr))
	for role, spec := range map[string]corev1.PodSpec{
		"leader": lws.Spec.LeaderWorkerTemplate.LeaderTemplate.Spec,
		"worker": lws.Spec.LeaderWorkerTemplate.WorkerTemplate.Spec,
	} {
		q := engineContainer(t, spec).Resources.Limits[render.GPUResource]
		if q.Value() != 8 {
			t.Errorf("%s GPU limit = %s, want 8", role, q.String())
		}
	}
}

func TestUserResourcesKeptAndGPUAdded(t *testing.T) {
	res := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: mustQuantity(t, "96Gi")}}
	kvr := wrappers.MakeKVRouter("m", "ns").TensorParallel(2).EngineResources(res).Obj()
	d := find[*appsv1.Deployment](t, mustObjects(t, kvr, render.Options{}), render.EngineWorkloadName(kvr))
	lim := engineContainer(t, d.Spec.Template.Spec).Resources.Limits
	if m := lim[corev1.ResourceMemory]; m.String() != "96Gi" {
		t.Errorf("memory limit = %s, want 96Gi", m.String())
	}
	if len(kvr.Spec.Engine.Resources.Limits) != 1 {
		t.Error("rendering wrote the GPU limit into the input KVRouter")
	}
}

func TestMultiNodeLeadersOnlySelector(t *testing.T) {
	kvr := wrappers.MakeKVRouter("big", "ns").TensorParallel(8).NodesPerReplica(2).Obj()
	objs := mustObjects(t, kvr, render.Options{})
	if render.EngineWorkloadKind(kvr) != "LeaderWorkerSet" {
		t.Fatalf("EngineWorkloadKind = %s", render.EngineWorkloadKind(kvr))
	}
	lws := find[*lwsv1.LeaderWorkerSet](t, objs, render.EngineWorkloadName(kvr))
	sel, err := labels.Parse(render.EngineSelector(kvr))
	if err != nil {
		t.Fatal(err)
	}
	tpl := lws.Spec.LeaderWorkerTemplate
	if !sel.Matches(labels.Set(tpl.LeaderTemplate.Labels)) {
		t.Errorf("selector %s does not select the leader (%v)", sel, tpl.LeaderTemplate.Labels)
	}
	if sel.Matches(labels.Set(tpl.WorkerTemplate.Labels)) {
		t.Errorf("selector %s selects workers (%v)", sel, tpl.WorkerTemplate.Labels)
	}
	if *tpl.Size != 2 || tpl.RestartPolicy != lwsv1.RecreateGroupOnPodRestart {
		t.Errorf("size %d restartPolicy %s", *tpl.Size, tpl.RestartPolicy)
	}

	leader := engineContainer(t, tpl.LeaderTemplate.Spec)
	worker := engineContainer(t, tpl.WorkerTemplate.Spec)
	if argValue(t, leader.Args, "--pipeline-parallel-size") != "2" || argValue(t, leader.Args, "--node-rank") != "0" {
		t.Errorf("leader args %v", leader.Args)
	}
	if slices.Contains(leader.Args, "--headless") || !slices.Contains(worker.Args, "--headless") {
		t.Error("only workers run headless")
	}
	if argValue(t, worker.Args, "--node-rank") != "$(LWS_WORKER_INDEX)" {
		t.Errorf("worker args %v", worker.Args)
	}
	if len(worker.Ports) != 0 || worker.ReadinessProbe != nil {
		t.Error("headless workers serve no HTTP and must not be probed over it")
	}
	if len(leader.Ports) != 3 || leader.StartupProbe == nil {
		t.Error("the leader serves the API and publishes KV events")
	}

	so := scaledObject(t, mustObjects(t, wrappers.MakeKVRouter("big", "ns").TensorParallel(8).NodesPerReplica(2).Autoscaling(1, 2).Obj(), render.Options{}))
	ref, _, _ := unstructured.NestedStringMap(so.Object, "spec", "scaleTargetRef")
	if ref["kind"] != "LeaderWorkerSet" || ref["apiVersion"] != "leaderworkerset.x-k8s.io/v1" || ref["name"] != "big-engine" {
		t.Errorf("scaleTargetRef = %v", ref)
	}
}

func TestSingleNodeSelectorSelectsEnginePods(t *testing.T) {
	kvr := wrappers.MakeKVRouter("m", "ns").Obj()
	d := find[*appsv1.Deployment](t, mustObjects(t, kvr, render.Options{}), render.EngineWorkloadName(kvr))
	sel, err := labels.Parse(render.EngineSelector(kvr))
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("selector %s does not select %v", sel, d.Spec.Template.Labels)
	}
	// Another KVRouter's engines must not be selected, even with a name that extends this one.
	other := find[*appsv1.Deployment](t, mustObjects(t, wrappers.MakeKVRouter("m-2", "ns").Obj(), render.Options{}), "m-2-engine")
	if sel.Matches(labels.Set(other.Spec.Template.Labels)) {
		t.Error("selector matches another KVRouter's engines")
	}
}

func TestLabelAllowList(t *testing.T) {
	kvr := wrappers.MakeKVRouter("m", "ns").
		Label("argocd.argoproj.io/instance", "apps").
		Label("app.kubernetes.io/instance", "argo-app").
		Label("app.kubernetes.io/part-of", "assistant").
		Label("team", "search").Obj()
	kvr.Annotations = map[string]string{"argocd.argoproj.io/tracking-id": "apps:x"}

	for _, o := range mustObjects(t, kvr, render.Options{}) {
		l := o.GetLabels()
		if _, ok := l["argocd.argoproj.io/instance"]; ok {
			t.Errorf("%T %s: Argo CD tracking label copied", o, o.GetName())
		}
		if l["app.kubernetes.io/instance"] != "m" {
			t.Errorf("%T %s: app.kubernetes.io/instance = %q, want the KVRouter name", o, o.GetName(), l["app.kubernetes.io/instance"])
		}
		if l["app.kubernetes.io/part-of"] != "assistant" {
			t.Errorf("%T %s: allow-listed part-of label missing", o, o.GetName())
		}
		if _, ok := l["team"]; ok {
			t.Errorf("%T %s: label outside the allow-list copied", o, o.GetName())
		}
		if len(o.GetAnnotations()) != 0 {
			t.Errorf("%T %s: annotations %v copied", o, o.GetName(), o.GetAnnotations())
		}
	}

	// The operator may widen the list, but never to the labels selectors depend on.
	objs := mustObjects(t, kvr, render.Options{LabelAllowList: []string{"team", "app.kubernetes.io/instance"}})
	sa := objs[0]
	if sa.GetLabels()["team"] != "search" || sa.GetLabels()["app.kubernetes.io/instance"] != "m" {
		t.Errorf("labels with a custom allow-list: %v", sa.GetLabels())
	}
}

func TestServedNameDefault(t *testing.T) {
	kvr := wrappers.MakeKVRouter("chat", "ns").Obj()
	if render.ServedName(kvr) != "chat" {
		t.Fatalf("ServedName = %q, want metadata.name", render.ServedName(kvr))
	}
	objs := mustObjects(t, kvr, render.Options{})
	engine := engineContainer(t, find[*appsv1.Deployment](t, objs, "chat-engine").Spec.Template.Spec)
	router := find[*appsv1.Deployment](t, objs, "chat-router").Spec.Template.Spec.Containers[0]
	if argValue(t, engine.Args, "--served-model-name") != "chat" || argValue(t, router.Args, "--model") != "chat" {
		t.Errorf("engine %v router %v", engine.Args, router.Args)
	}
	kvr = wrappers.MakeKVRouter("chat", "ns").ServedName("org/chat-v2").Obj()
	engine = engineContainer(t, find[*appsv1.Deployment](t, mustObjects(t, kvr, render.Options{}), "chat-engine").Spec.Template.Spec)
	if argValue(t, engine.Args, "--served-model-name") != "org/chat-v2" {
		t.Errorf("args %v", engine.Args)
	}
}

func TestEngineCommandLineFollowsContract(t *testing.T) {
	kvr := wrappers.MakeKVRouter("m", "ns").Model("Qwen/Qwen3-32B").ServedName("qwen").TensorParallel(2).
		BlockSize(32).MaxModelLen(8192).ExtraArgs("--enable-chunked-prefill").Obj()
	c := engineContainer(t, find[*appsv1.Deployment](t, mustObjects(t, kvr, render.Options{}), "m-engine").Spec.Template.Spec)
	if !slices.Equal(c.Command, []string{"vllm", "serve"}) {
		t.Errorf("command %v", c.Command)
	}
	want := []string{
		"--model", "Qwen/Qwen3-32B", "--served-model-name", "qwen", "--port", "8000",
		"--tensor-parallel-size", "2", "--block-size", "32", "--max-model-len", "8192",
		"--prefix-caching-hash-algo", "sha256_cbor", "--kv-events-config",
	}
	if !slices.Equal(c.Args[:len(want)], want) {
		t.Errorf("args\n got %v\nwant %v...", c.Args, want)
	}
	if c.Args[len(c.Args)-1] != "--enable-chunked-prefill" {
		t.Errorf("extra args not last: %v", c.Args)
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(argValue(t, c.Args, "--kv-events-config")), &cfg); err != nil {
		t.Fatalf("--kv-events-config is not JSON: %v", err)
	}
	wantCfg := map[string]any{
		"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",
		"replay_endpoint": "tcp://*:5558", "topic": "kv@$(POD_NAME)@qwen",
	}
	if !equality.Semantic.DeepEqual(cfg, wantCfg) {
		t.Errorf("kv-events-config = %v", cfg)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if env["PYTHONHASHSEED"].Value != "0" || env["POD_NAME"].ValueFrom.FieldRef.FieldPath != "metadata.name" ||
		env["POD_IP"].ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("contract env missing: %v", c.Env)
	}
	sc := c.SecurityContext
	if *sc.AllowPrivilegeEscalation || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.RunAsUser != nil {
		t.Errorf("security context %+v", sc)
	}
	if len(c.Args) == 0 || !strings.HasPrefix(c.Image, "vllm/vllm-openai:") {
		t.Errorf("image %s", c.Image)
	}
}

func TestEngineEnvMerge(t *testing.T) {
	kvr := wrappers.MakeKVRouter("m", "ns").HFTokenSecret("hf").Env("HF_HOME", "/data/hf").Env("A", "1").Env("A", "2").Obj()
	c := engineContainer(t, find[*appsv1.Deployment](t, mustObjects(t, kvr, render.Options{}), "m-engine").Spec.Template.Spec)
	seen := map[string]int{}
	for _, e := range c.Env {
		seen[e.Name]++
		switch e.Name {
		case "HF_HOME":
			if e.Value != "/data/hf" {
				t.Errorf("HF_HOME = %q, want the spec's override", e.Value)
			}
		case "A":
			if e.Value != "2" {
				t.Errorf("A = %q, want the last entry", e.Value)
			}
		case "HF_TOKEN":
			if e.ValueFrom.SecretKeyRef.Name != "hf" || e.ValueFrom.SecretKeyRef.Key != "token" {
				t.Errorf("HF_TOKEN from %+v", e.ValueFrom.SecretKeyRef)
			}
		}
	}
	for name, n := range seen {
		if n > 1 {
			t.Errorf("%s appears %d times; server-side apply rejects duplicate keys", name, n)
		}
	}
	if seen["HF_TOKEN"] != 1 {
		t.Error("HF_TOKEN missing")
	}
}

func TestSimulateMode(t *testing.T) {
	kvr := wrappers.MakeKVRouter("sim", "ns").TensorParallel(2).Simulate().Obj()
	objs := mustObjects(t, kvr, render.Options{SimulatorImage: "example.com/kvrouter:test", RouterImage: "example.com/router:test"})
	spec := find[*appsv1.Deployment](t, objs, "sim-engine").Spec.Template.Spec
	c := engineContainer(t, spec)
	if !slices.Equal(c.Command, []string{"/vllm-sim"}) || c.Image != "example.com/kvrouter:test" {
		t.Errorf("command %v image %s", c.Command, c.Image)
	}
	if _, ok := c.Resources.Limits[render.GPUResource]; ok {
		t.Error("simulate mode requests a GPU")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Error("simulate mode needs small CPU and memory requests")
	}
	if len(spec.NodeSelector) != 0 || len(spec.Tolerations) != 0 {
		t.Errorf("simulate mode targets GPU nodes: %v %v", spec.NodeSelector, spec.Tolerations)
	}
	for _, v := range spec.Volumes {
		if v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory {
			t.Error("simulate mode mounts /dev/shm")
		}
	}
	if c.StartupProbe.PeriodSeconds*c.StartupProbe.FailureThreshold > 120 {
		t.Errorf("startup probe allows %ds, want a short one", c.StartupProbe.PeriodSeconds*c.StartupProbe.FailureThreshold)
	}
	// Same vLLM command line as the real engines.
	if argValue(t, c.Args, "--tensor-parallel-size") != "2" || argValue(t, c.Args, "--port") != "8000" {
		t.Errorf("args %v", c.Args)
	}
	if spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		t.Error("the kvrouter image is nonroot and should say so")
	}
}

func TestRouter(t *testing.T) {
	kvr := wrappers.MakeKVRouter("m", "ns").BlockSize(64).Policy(v1alpha1.PolicyDecodeBound).SessionHeader("X-Session").RouterReplicas(3).Obj()
	objs := mustObjects(t, kvr, render.Options{})
	d := find[*appsv1.Deployment](t, objs, "m-router")
	c := d.Spec.Template.Spec.Containers[0]
	want := []string{"--port", "8080", "--admin-addr", ":9090", "--discovery", "kubernetes", "--namespace", "ns",
		"--selector", render.EngineSelector(kvr), "--engine-port", "8000", "--kv-events-port", "5557",
		"--kv-replay-port", "5558", "--block-size", "64", "--policy", "DecodeBound", "--model", "m",
		"--session-header", "X-Session", "--tokenizer", "auto", "--tokenizer-model", kvr.Spec.Model.Name}
	if !slices.Equal(c.Args, want) || !slices.Equal(c.Command, []string{"/router"}) {
		t.Errorf("router command %v %v", c.Command, c.Args)
	}
	if *d.Spec.Replicas != 3 || d.Spec.Template.Spec.ServiceAccountName != "m-router" {
		t.Errorf("replicas %d sa %s", *d.Spec.Replicas, d.Spec.Template.Spec.ServiceAccountName)
	}
	if c.Image != render.DefaultRouterImage {
		t.Errorf("image %s", c.Image)
	}
	svc := find[*corev1.Service](t, objs, "m-router")
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Error("router Service does not select the router pods")
	}
	// The public port and the admin port (metrics, /v1/status, /v1/autoscale), on the pod and
	// on the Service, by name.
	wantPorts := []corev1.ContainerPort{
		{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
		{Name: "admin", ContainerPort: 9090, Protocol: corev1.ProtocolTCP},
	}
	if !slices.Equal(c.Ports, wantPorts) {
		t.Errorf("router container ports %+v, want %+v", c.Ports, wantPorts)
	}
	wantSvc := []corev1.ServicePort{
		{Name: "http", Port: 8080, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP},
		{Name: "admin", Port: 9090, TargetPort: intstr.FromString("admin"), Protocol: corev1.ProtocolTCP},
	}
	if !slices.Equal(svc.Spec.Ports, wantSvc) {
		t.Errorf("router Service ports %+v, want %+v", svc.Spec.Ports, wantSvc)
	}
	if p := c.ReadinessProbe.HTTPGet.Port.StrVal; p != "http" || c.LivenessProbe.HTTPGet.Port.StrVal != "http" {
		t.Errorf("probes on port %q and %q, want the public port", p, c.LivenessProbe.HTTPGet.Port.StrVal)
	}
	c2 := find[*appsv1.Deployment](t, mustObjects(t, wrappers.MakeKVRouter("m", "ns").RouterImage("my/router:1").Obj(), render.Options{RouterImage: "op/image:2"}), "m-router").Spec.Template.Spec.Containers[0]
	if c2.Image != "my/router:1" {
		t.Errorf("spec.router.image not used: %s", c2.Image)
	}
}

func TestHTTPRoute(t *testing.T) {
	if objs := mustObjects(t, wrappers.MakeKVRouter("m", "ns").Obj(), render.Options{}); slices.ContainsFunc(objs, func(o client.Object) bool {
		_, ok := o.(*gwapiv1.HTTPRoute)
		return ok
	}) {
		t.Error("HTTPRoute rendered without spec.gateway")
	}
	kvr := wrappers.MakeKVRouter("m", "ns").Gateway("gw", "infra", "llm.example.com").Obj()
	r := find[*gwapiv1.HTTPRoute](t, mustObjects(t, kvr, render.Options{}), render.RouteName(kvr))
	if len(r.Spec.ParentRefs) != 1 || r.Spec.ParentRefs[0].Name != "gw" || *r.Spec.ParentRefs[0].Namespace != "infra" {
		t.Errorf("parentRefs %+v", r.Spec.ParentRefs)
	}
	if len(r.Spec.Rules) != 1 {
		t.Fatalf("%d rules, want 1", len(r.Spec.Rules))
	}
	rule := r.Spec.Rules[0]
	if b := rule.BackendRefs[0]; b.Name != "m-router" || *b.Port != render.RouterPort {
		t.Errorf("backendRef %+v", b)
	}
	// Exactly the inference API and the model list; a prefix match would also take in
	// /v1/status and /v1/autoscale.
	var paths []string
	for _, m := range rule.Matches {
		if m.Path == nil || m.Path.Type == nil || *m.Path.Type != gwapiv1.PathMatchExact || m.Path.Value == nil ||
			m.Method != nil || len(m.Headers) > 0 || len(m.QueryParams) > 0 {
			t.Fatalf("match %+v, want an exact path match only", m)
		}
		paths = append(paths, *m.Path.Value)
	}
	if want := []string{"/v1/completions", "/v1/chat/completions", "/v1/models"}; !slices.Equal(paths, want) {
		t.Errorf("paths %q, want %q", paths, want)
	}
	if *rule.Timeouts.Request != "0s" || *rule.Timeouts.BackendRequest != "0s" {
		t.Errorf("timeouts %+v", rule.Timeouts)
	}
	if render.URL(kvr) != "http://llm.example.com" {
		t.Errorf("URL = %s", render.URL(kvr))
	}
	if u := render.URL(wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "*.example.com").Obj()); u != "http://m-router.ns.svc:8080" {
		t.Errorf("URL with only a wildcard hostname = %s", u)
	}
}

func TestScaledObjectTriggers(t *testing.T) {
	kvr := wrappers.MakeKVRouter("m", "ns").Autoscaling(1, 8).Obj()
	so := scaledObject(t, mustObjects(t, kvr, render.Options{}))
	trig := trigger(t, so)
	md := trig["metadata"].(map[string]any)
	if trig["type"] != "metrics-api" || trig["metricType"] != "AverageValue" ||
		md["url"] != "http://m-router.ns.svc:9090/v1/autoscale" || md["valueLocation"] != "waitingRequests" || md["targetValue"] != "4" {
		t.Errorf("trigger %v", trig)
	}
	up, _, _ := unstructured.NestedInt64(so.Object, "spec", "advanced", "horizontalPodAutoscalerConfig", "behavior", "scaleUp", "stabilizationWindowSeconds")
	down, _, _ := unstructured.NestedInt64(so.Object, "spec", "advanced", "horizontalPodAutoscalerConfig", "behavior", "scaleDown", "stabilizationWindowSeconds")
	if up < 60 || up > 120 || down < 300 || down > 600 {
		t.Errorf("stabilization windows up %ds down %ds", up, down)
	}

	kvr = wrappers.MakeKVRouter("m", "ns").Autoscaling(1, 8).Prometheus("http://prom:9090").Obj()
	md = trigger(t, scaledObject(t, mustObjects(t, kvr, render.Options{})))["metadata"].(map[string]any)
	if md["serverAddress"] != "http://prom:9090" ||
		md["query"] != `sum(vllm:num_requests_waiting{namespace="ns",pod=~"m-engine-[a-z0-9]+-[a-z0-9]+"})` {
		t.Errorf("prometheus trigger %v", md)
	}
}

func trigger(t *testing.T, so *unstructured.Unstructured) map[string]any {
	t.Helper()
	ts, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	if len(ts) != 1 {
		t.Fatalf("want one trigger, got %v", ts)
	}
	return ts[0].(map[string]any)
}

func TestEveryObjectIsOwnedAndTyped(t *testing.T) {
	kvr := wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "h.example.com").Autoscaling(1, 2).Obj()
	for _, o := range mustObjects(t, kvr, render.Options{}) {
		gvk := o.GetObjectKind().GroupVersionKind()
		if gvk.Kind == "" || gvk.Version == "" {
			t.Errorf("%s has no apiVersion/kind", o.GetName())
		}
		if o.GetNamespace() != "ns" {
			t.Errorf("%s %s in namespace %q", gvk.Kind, o.GetName(), o.GetNamespace())
		}
		refs := o.GetOwnerReferences()
		if len(refs) != 1 || refs[0].Kind != "KVRouter" || refs[0].Name != "m" || refs[0].UID != kvr.UID ||
			!*refs[0].Controller || !*refs[0].BlockOwnerDeletion {
			t.Errorf("%s %s ownerReferences %+v", gvk.Kind, o.GetName(), refs)
		}
		if o.GetLabels()[render.LabelManagedBy] != "kvrouter" || o.GetLabels()[render.LabelKVRouter] != "m" {
			t.Errorf("%s %s labels %v", gvk.Kind, o.GetName(), o.GetLabels())
		}
	}
}

func TestObjectsIsPureAndStable(t *testing.T) {
	kvr := wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "h").Autoscaling(1, 2).Env("X", "1").Obj()
	before := kvr.DeepCopy()
	var first bytes.Buffer
	for i := range 20 {
		var out bytes.Buffer
		if err := render.WriteYAML(&out, mustObjects(t, kvr, render.Options{})); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = out
		} else if !bytes.Equal(first.Bytes(), out.Bytes()) {
			t.Fatal("two renders of the same KVRouter differ")
		}
	}
	if !equality.Semantic.DeepEqual(before, kvr) {
		t.Error("Objects modified its input")
	}
	if strings.Contains(first.String(), "creationTimestamp") || strings.Contains(first.String(), "status:") {
		t.Error("YAML carries creationTimestamp or status")
	}
}

func TestInvalidSpecsAreRefused(t *testing.T) {
	cases := map[string]struct {
		kvr  *v1alpha1.KVRouter
		want string
	}{
		"block size in extraArgs":  {wrappers.MakeKVRouter("m", "ns").ExtraArgs("--block-size=32").Obj(), "spec.engine.extraArgs[0]"},
		"underscore form":          {wrappers.MakeKVRouter("m", "ns").ExtraArgs("--kv_events_config", "{}").Obj(), "spec.engine.extraArgs[0]"},
		"short tp":                 {wrappers.MakeKVRouter("m", "ns").ExtraArgs("-tp", "4").Obj(), "spec.engine.extraArgs[0]"},
		"hash seed override":       {wrappers.MakeKVRouter("m", "ns").Env("PYTHONHASHSEED", "1").Obj(), "spec.engine.env[0].name"},
		"max below min":            {wrappers.MakeKVRouter("m", "ns").Autoscaling(4, 2).Obj(), "spec.autoscaling.maxReplicas"},
		"TP beyond node":           {wrappers.MakeKVRouter("m", "ns").TensorParallel(8).GPU("X", 4).Obj(), "spec.engine.tensorParallelSize"},
		"multi-node partial nodes": {wrappers.MakeKVRouter("m", "ns").TensorParallel(4).NodesPerReplica(2).Obj(), "spec.engine.tensorParallelSize"},
		"name with a dot":          {wrappers.MakeKVRouter("llama-3.1", "ns").Obj(), "metadata.name"},
		"name too long":            {wrappers.MakeKVRouter(strings.Repeat("a", render.MaxNameLength+1), "ns").Obj(), "metadata.name"},
		"no namespace":             {wrappers.MakeKVRouter("m", "").Obj(), "metadata.namespace"},
		"no model":                 {wrappers.MakeKVRouter("m", "ns").Model("").Obj(), "spec.model.name"},
		"PVC name with a space":    {wrappers.MakeKVRouter("m", "ns").CachePVC("model cache").Obj(), "spec.model.cachePVC"},
		"Secret name upper-case":   {wrappers.MakeKVRouter("m", "ns").HFTokenSecret("HF").Obj(), "spec.model.hfTokenSecret"},
		"GPU product with a space": {wrappers.MakeKVRouter("m", "ns").GPU("AMD Instinct MI300X", 8).Obj(), "spec.engine.gpu.product"},
		"env name with a space":    {wrappers.MakeKVRouter("m", "ns").Env("MY VAR", "1").Obj(), "spec.engine.env[0].name"},
		"monitoring on a reserved label": {withMonitoring(wrappers.MakeKVRouter("m", "ns").Obj(),
			v1alpha1.MonitoringSpec{Labels: map[string]string{render.LabelKVRouter: "x"}}), "spec.monitoring.labels[serving.kvrouter.dev/kvrouter]"},
		"monitoring label value": {withMonitoring(wrappers.MakeKVRouter("m", "ns").Obj(),
			v1alpha1.MonitoringSpec{Labels: map[string]string{"release": "kube prometheus"}}), "spec.monitoring.labels"},
		"scrape interval units out of order": {withMonitoring(wrappers.MakeKVRouter("m", "ns").Obj(),
			v1alpha1.MonitoringSpec{Interval: "30s1m"}), "spec.monitoring.interval"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := render.Objects(tc.kvr, render.Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
	// A value that merely looks like a managed flag's name is fine.
	if _, err := render.Objects(wrappers.MakeKVRouter("m", "ns").ExtraArgs("--tokenizer-mode", "model").Obj(), render.Options{}); err != nil {
		t.Errorf("valid extraArgs refused: %v", err)
	}
}

func withMonitoring(kvr *v1alpha1.KVRouter, m v1alpha1.MonitoringSpec) *v1alpha1.KVRouter {
	kvr.Spec.Monitoring = &m
	return kvr
}

func TestMonitorsOnlyWithSpecMonitoring(t *testing.T) {
	kinds := func(objs []client.Object) []string {
		var out []string
		for _, o := range objs {
			if k := o.GetObjectKind().GroupVersionKind().Kind; k == render.ServiceMonitorKind || k == render.PodMonitorKind || k == render.PrometheusRuleKind {
				out = append(out, k+" "+o.GetName())
			}
		}
		return out
	}
	if got := kinds(mustObjects(t, wrappers.MakeKVRouter("m", "ns").Obj(), render.Options{})); len(got) != 0 {
		t.Errorf("without spec.monitoring: %v", got)
	}
	kvr := withMonitoring(wrappers.MakeKVRouter("m", "ns").TensorParallel(8).NodesPerReplica(2).Obj(), v1alpha1.MonitoringSpec{})
	if got := kinds(mustObjects(t, kvr, render.Options{})); !slices.Equal(got, []string{"ServiceMonitor m-router", "PodMonitor m-engine", "PrometheusRule m-alerts"}) {
		t.Errorf("with spec.monitoring: %v", got)
	}
}

// TestMonitorPorts: Prometheus scrapes the router on its admin port (the public port serves no
// /metrics) and the engines on their HTTP port.
func TestMonitorPorts(t *testing.T) {
	kvr := withMonitoring(wrappers.MakeKVRouter("m", "ns").Obj(), v1alpha1.MonitoringSpec{})
	want := map[string]string{render.ServiceMonitorKind: "admin", render.PodMonitorKind: "http"}
	for _, o := range mustObjects(t, kvr, render.Options{}) {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		field := map[string]string{render.ServiceMonitorKind: "endpoints", render.PodMonitorKind: "podMetricsEndpoints"}[u.GetKind()]
		if field == "" {
			continue
		}
		eps, _, _ := unstructured.NestedSlice(u.Object, "spec", field)
		if len(eps) != 1 {
			t.Fatalf("%s: %d endpoints", u.GetKind(), len(eps))
		}
		ep := eps[0].(map[string]any)
		if ep["port"] != want[u.GetKind()] || ep["path"] != "/metrics" {
			t.Errorf("%s scrapes port %v path %v, want %s /metrics", u.GetKind(), ep["port"], ep["path"], want[u.GetKind()])
		}
		delete(want, u.GetKind())
	}
	if len(want) != 0 {
		t.Errorf("not rendered: %v", want)
	}
}

// A simulated fleet serves what vLLM serves: vllm-sim's fault and reset endpoints (/sim/*,
// /reset_prefix_cache) stay off, because render turns on neither --enable-sim-api nor vLLM's
// dev mode.
func TestSimulateKeepsTheSimulatorAPIOff(t *testing.T) {
	for _, kvr := range []*v1alpha1.KVRouter{
		wrappers.MakeKVRouter("m", "ns").Simulate().Obj(),
		wrappers.MakeKVRouter("m", "ns").TensorParallel(8).NodesPerReplica(2).Simulate().Obj(),
	} {
		for where, tpl := range podTemplates(mustObjects(t, kvr, render.Options{})) {
			for _, c := range tpl.Spec.Containers {
				for _, a := range slices.Concat(c.Command, c.Args) {
					if strings.HasPrefix(a, "--enable-sim-api") {
						t.Errorf("%s/%s runs with %s", where, c.Name, a)
					}
				}
				for _, e := range c.Env {
					if e.Name == "VLLM_SERVER_DEV_MODE" {
						t.Errorf("%s/%s sets %s", where, c.Name, e.Name)
					}
				}
			}
		}
	}
}
