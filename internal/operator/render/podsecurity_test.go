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
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/wrappers"
)

// podPolicy is what a pod template must satisfy beyond Pod Security "restricted".
type podPolicy struct {
	// openShift: the restricted-v2 SCC assigns UID, GID, fsGroup and SELinux context from the
	// namespace's ranges, so a pod that fixes any of them is refused (unless the UID is specUID).
	openShift bool
	// specUID is the spec's spec.engine.runAsUser: a UID the user asked for, on either platform.
	specUID *int64
	// nonRootImages declare a numeric, non-root USER: the kubelet accepts them under
	// runAsNonRoot without a runAsUser. Every other image is assumed to run as root (vLLM's does).
	nonRootImages map[string]bool
	// userEnv are the variables spec.engine.env sets: where they point is the user's choice
	// (an image of their own may have writable paths of its own).
	userEnv map[string]bool
}

// The images the operator's own pods run; the Dockerfile gives each a numeric non-root USER.
var kvrouterImages = map[string]bool{
	render.DefaultRouterImage: true, render.DefaultSimulatorImage: true,
	// config/manager's kustomize image name of the manager.
	"manager": true,
}

var restrictedEvaluator = func() policy.Evaluator {
	e, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		panic(err)
	}
	return e
}()

// podViolations lists every way tpl breaks Pod Security "restricted" at the latest version (the
// API server's own checks, from k8s.io/pod-security-admission), OpenShift's restricted-v2 SCC
// when p.openShift, or the needs of a process running under an arbitrary UID without a passwd
// entry. Empty: the pod is admitted on both platforms and can start.
func podViolations(tpl corev1.PodTemplateSpec, p podPolicy) []string {
	var out []string
	lv := api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}
	for _, r := range restrictedEvaluator.EvaluatePod(lv, &tpl.ObjectMeta, &tpl.Spec) {
		if !r.Allowed {
			out = append(out, fmt.Sprintf("Pod Security restricted: %s (%s)", r.ForbiddenReason, r.ForbiddenDetail))
		}
	}

	spec := tpl.Spec
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	// restricted lets containers set runAsNonRoot and seccomp one by one; every rendered pod
	// sets both at pod level, so that a container added later inherits them.
	if !ptr.Deref(psc.RunAsNonRoot, false) {
		out = append(out, "pod securityContext.runAsNonRoot is not true")
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		out = append(out, "pod securityContext.seccompProfile is not RuntimeDefault")
	}
	if p.openShift {
		if psc.RunAsUser != nil && !equalPtr(psc.RunAsUser, p.specUID) {
			out = append(out, fmt.Sprintf("restricted-v2: pod runAsUser %d fixed", *psc.RunAsUser))
		}
		if psc.RunAsGroup != nil || psc.FSGroup != nil || len(psc.SupplementalGroups) > 0 || psc.SELinuxOptions != nil {
			out = append(out, "restricted-v2: pod fixes runAsGroup, fsGroup, supplementalGroups or seLinuxOptions, which the SCC assigns")
		}
	}

	mounts := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		mounts[v.Name] = v
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		name := "container " + c.Name
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		if caps := ptr.Deref(sc.Capabilities, corev1.Capabilities{}); !slices.Equal(caps.Drop, []corev1.Capability{"ALL"}) || caps.Add != nil {
			out = append(out, name+": capabilities are not exactly drop [ALL]")
		}
		if sc.Privileged != nil && *sc.Privileged {
			out = append(out, name+": privileged")
		}
		if p.openShift {
			if sc.RunAsUser != nil && !equalPtr(sc.RunAsUser, p.specUID) || sc.RunAsGroup != nil || sc.SELinuxOptions != nil {
				out = append(out, "restricted-v2: "+name+" fixes runAsUser, runAsGroup or seLinuxOptions")
			}
		}
		uid := sc.RunAsUser
		if uid == nil {
			uid = psc.RunAsUser
		}
		if !p.openShift && uid == nil && !p.nonRootImages[c.Image] {
			out = append(out, fmt.Sprintf("%s: image %s runs as root and no runAsUser is set: the kubelet refuses it under runAsNonRoot", name, c.Image))
		}
		out = append(out, writablePathViolations(c, mounts, p.userEnv)...)
	}
	return out
}

// writablePathViolations: a container whose image is not the operator's may run under a UID
// that owns nothing in the image, so every path it writes must be a writable volume, and a
// Python one needs $USER (torch's getpass.getuser() fails for a UID without a passwd entry).
func writablePathViolations(c corev1.Container, volumes map[string]corev1.Volume, userEnv map[string]bool) []string {
	env := map[string]string{}
	set := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		// A user's valueFrom (a fieldRef, a Secret) sets the variable too, to a value only the
		// kubelet knows.
		set[e.Name] = e.Value != "" || e.ValueFrom != nil
	}
	if len(c.Command) == 0 || c.Command[0] != "vllm" {
		return nil
	}
	var out []string
	for _, v := range []string{"HOME", "USER"} {
		// What a user sets (even to nothing) is theirs to answer for; the operator's own
		// defaults must be there.
		if !set[v] && !userEnv[v] {
			out = append(out, fmt.Sprintf("container %s: %s is not set", c.Name, v))
		}
	}
	for _, v := range []string{"HOME", "HF_HOME", "TMPDIR"} {
		if dir := env[v]; dir != "" && !userEnv[v] && !onWritableVolume(dir, c.VolumeMounts, volumes) {
			out = append(out, fmt.Sprintf("container %s: %s=%s is not on a writable emptyDir or PVC", c.Name, v, dir))
		}
	}
	if !onWritableVolume("/tmp", c.VolumeMounts, volumes) {
		out = append(out, fmt.Sprintf("container %s: /tmp is not a writable emptyDir or PVC", c.Name))
	}
	return out
}

func onWritableVolume(dir string, mounts []corev1.VolumeMount, volumes map[string]corev1.Volume) bool {
	dir = path.Clean(dir)
	for _, m := range mounts {
		v, ok := volumes[m.Name]
		if !ok || m.ReadOnly || (v.EmptyDir == nil && v.PersistentVolumeClaim == nil) {
			continue
		}
		if mp := path.Clean(m.MountPath); dir == mp || strings.HasPrefix(dir, mp+"/") {
			return true
		}
	}
	return false
}

func equalPtr(a, b *int64) bool { return a != nil && b != nil && *a == *b }

// podTemplates returns every pod template among objs, keyed by a name for messages.
func podTemplates(objs []client.Object) map[string]corev1.PodTemplateSpec {
	out := map[string]corev1.PodTemplateSpec{}
	for _, o := range objs {
		switch w := o.(type) {
		case *appsv1.Deployment:
			out["Deployment "+w.Name] = w.Spec.Template
		case *lwsv1.LeaderWorkerSet:
			if l := w.Spec.LeaderWorkerTemplate.LeaderTemplate; l != nil {
				out["LeaderWorkerSet "+w.Name+" leader"] = *l
			}
			out["LeaderWorkerSet "+w.Name+" worker"] = w.Spec.LeaderWorkerTemplate.WorkerTemplate
		}
	}
	return out
}

// securityMatrix is every shape of pod the operator renders.
func securityMatrix() map[string]*v1alpha1.KVRouter {
	pvc := wrappers.MakeKVRouter("m", "ns").TensorParallel(2).CachePVC("weights").HFTokenSecret("hf").Obj()
	monitored := wrappers.MakeKVRouter("m", "ns").Obj()
	monitored.Spec.Monitoring = &v1alpha1.MonitoringSpec{}
	keyed := wrappers.MakeKVRouter("m", "ns").Obj()
	keyed.Spec.Router.APIKeySecret = &v1alpha1.SecretKeyRef{Name: "client-keys"}
	keyed.Spec.Engine.APIKeySecret = &v1alpha1.SecretKeyRef{Name: "engine-key"}
	disaggregated := func(w *wrappers.KVRouterWrapper) *v1alpha1.KVRouter {
		kvr := w.Obj()
		kvr.Spec.Disaggregation = &v1alpha1.DisaggregationSpec{
			Prefill: v1alpha1.PrefillPoolSpec{Replicas: ptr.To[int32](2)},
			Network: v1alpha1.KVNetworkSpec{Attachments: []string{"rdma-net"}, RDMAResource: &v1alpha1.ExtendedResource{Name: "rdma/ib"}},
		}
		return kvr
	}
	return map[string]*v1alpha1.KVRouter{
		"disaggregated":                    disaggregated(wrappers.MakeKVRouter("m", "ns").Replicas(2)),
		"disaggregated simulate":           disaggregated(wrappers.MakeKVRouter("m", "ns").Simulate()),
		"disaggregated autoscaling":        disaggregated(wrappers.MakeKVRouter("m", "ns").Autoscaling(1, 4)),
		"disaggregated inference pool LWS": disaggregated(wrappers.MakeKVRouter("m", "ns").TensorParallel(8).NodesPerReplica(2).Gateway("gw", "", "").InferencePool(v1alpha1.FailClose)),
		"disaggregated inference pool":     disaggregated(wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "").InferencePool("")),
		"single node":                      wrappers.MakeKVRouter("m", "ns").Obj(),
		"simulate":                         wrappers.MakeKVRouter("m", "ns").Simulate().Obj(),
		"LWS multinode":                    wrappers.MakeKVRouter("m", "ns").TensorParallel(8).NodesPerReplica(2).Obj(),
		"LWS simulate":                     wrappers.MakeKVRouter("m", "ns").TensorParallel(8).NodesPerReplica(4).Simulate().Obj(),
		"autoscaling":                      wrappers.MakeKVRouter("m", "ns").Autoscaling(1, 4).Prometheus("http://prom:9090").Obj(),
		"gateway":                          wrappers.MakeKVRouter("m", "ns").Gateway("gw", "infra", "llm.example.com").Obj(),
		"inference pool":                   wrappers.MakeKVRouter("m", "ns").Gateway("gw", "infra", "llm.example.com").InferencePool("").Obj(),
		"inference pool LWS":               wrappers.MakeKVRouter("m", "ns").TensorParallel(8).NodesPerReplica(2).Gateway("gw", "", "").InferencePool(v1alpha1.FailClose).Obj(),
		"inference pool API keys": wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "h").InferencePool(v1alpha1.FailClose).
			RouterAPIKeySecret("client-keys", "").EngineAPIKeySecret("engine-key", "").Obj(),
		"cache PVC":          pvc,
		"monitoring":         monitored,
		"API keys":           keyed,
		"user env overrides": wrappers.MakeKVRouter("m", "ns").Env("HF_HOME", "/home/vllm/hf").Env("VLLM_LOGGING_LEVEL", "DEBUG").Obj(),
	}
}

func TestEveryRenderedPodIsRestricted(t *testing.T) {
	for name, kvr := range securityMatrix() {
		for _, openShift := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/openshift=%v", name, openShift), func(t *testing.T) {
				objs := mustObjects(t, kvr, render.Options{PlatformAssignsUID: openShift})
				tpls := podTemplates(objs)
				if len(tpls) < 2 {
					t.Fatalf("found %d pod templates, want the engines' and the router's", len(tpls))
				}
				for where, tpl := range tpls {
					for _, v := range podViolations(tpl, podPolicy{openShift: openShift, nonRootImages: kvrouterImages}) {
						t.Errorf("%s: %s", where, v)
					}
				}
			})
		}
	}
}

func TestEngineUID(t *testing.T) {
	engineSC := func(t *testing.T, kvr *v1alpha1.KVRouter, opts render.Options) *corev1.PodSecurityContext {
		t.Helper()
		return find[*appsv1.Deployment](t, mustObjects(t, kvr, opts), render.EngineWorkloadName(kvr)).Spec.Template.Spec.SecurityContext
	}
	vllm := wrappers.MakeKVRouter("m", "ns").Obj()

	sc := engineSC(t, vllm, render.Options{})
	if ptr.Deref(sc.RunAsUser, 0) != render.DefaultEngineUID || ptr.Deref(sc.FSGroup, 0) != render.DefaultEngineUID || sc.RunAsGroup != nil {
		t.Errorf("kubernetes default: %+v, want the image's vllm user %d as UID and fsGroup, group left to the image", sc, render.DefaultEngineUID)
	}
	if sc = engineSC(t, vllm, render.Options{EngineUID: 4242}); ptr.Deref(sc.RunAsUser, 0) != 4242 {
		t.Errorf("Options.EngineUID not used: %+v", sc)
	}
	if sc = engineSC(t, vllm, render.Options{PlatformAssignsUID: true, EngineUID: 4242}); sc.RunAsUser != nil || sc.FSGroup != nil {
		t.Errorf("openshift: %+v, want no UID or fsGroup", sc)
	}
	if sc = engineSC(t, wrappers.MakeKVRouter("m", "ns").Simulate().Obj(), render.Options{}); sc.RunAsUser != nil {
		t.Errorf("simulate: %+v, want the vllm-sim image's own non-root USER", sc)
	}

	asked := wrappers.MakeKVRouter("m", "ns").Obj()
	asked.Spec.Engine.RunAsUser = ptr.To[int64](1001)
	for _, openShift := range []bool{false, true} {
		sc := engineSC(t, asked, render.Options{PlatformAssignsUID: openShift})
		if ptr.Deref(sc.RunAsUser, 0) != 1001 || (openShift && sc.FSGroup != nil) {
			t.Errorf("openshift=%v: spec.engine.runAsUser gave %+v", openShift, sc)
		}
		objs := mustObjects(t, asked, render.Options{PlatformAssignsUID: openShift})
		for where, tpl := range podTemplates(objs) {
			for _, v := range podViolations(tpl, podPolicy{openShift: openShift, specUID: asked.Spec.Engine.RunAsUser, nonRootImages: kvrouterImages}) {
				t.Errorf("openshift=%v %s: %s", openShift, where, v)
			}
		}
	}
	asked.Spec.Engine.RunAsUser = ptr.To[int64](0)
	if _, err := render.Objects(asked, render.Options{}); err == nil || !strings.Contains(err.Error(), "spec.engine.runAsUser") {
		t.Errorf("runAsUser 0: %v, want a refusal naming spec.engine.runAsUser", err)
	}
}

// TestPodViolationsCatchRegressions mutates a compliant engine pod one field at a time; each
// mutation must be reported, or podViolations would pass a regression.
func TestPodViolationsCatchRegressions(t *testing.T) {
	vanilla := podPolicy{nonRootImages: kvrouterImages}
	openShift := podPolicy{openShift: true, nonRootImages: kvrouterImages}
	engine := func(t *testing.T, opts render.Options) corev1.PodTemplateSpec {
		kvr := wrappers.MakeKVRouter("m", "ns").Obj()
		return find[*appsv1.Deployment](t, mustObjects(t, kvr, opts), render.EngineWorkloadName(kvr)).Spec.Template
	}
	container := func(tpl *corev1.PodTemplateSpec) *corev1.Container { return &tpl.Spec.Containers[0] }
	dropEnv := func(name string) func(*corev1.PodTemplateSpec) {
		return func(tpl *corev1.PodTemplateSpec) {
			c := container(tpl)
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
		}
	}
	dropMount := func(dir string) func(*corev1.PodTemplateSpec) {
		return func(tpl *corev1.PodTemplateSpec) {
			c := container(tpl)
			c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir })
		}
	}
	mutations := map[string]struct {
		policy podPolicy
		mutate func(*corev1.PodTemplateSpec)
	}{
		"no runAsNonRoot":    {vanilla, func(t *corev1.PodTemplateSpec) { t.Spec.SecurityContext.RunAsNonRoot = nil }},
		"runAsNonRoot false": {openShift, func(t *corev1.PodTemplateSpec) { t.Spec.SecurityContext.RunAsNonRoot = ptr.To(false) }},
		"no seccomp":         {vanilla, func(t *corev1.PodTemplateSpec) { t.Spec.SecurityContext.SeccompProfile = nil }},
		"seccomp Unconfined": {openShift, func(t *corev1.PodTemplateSpec) {
			t.Spec.SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined
		}},
		"capabilities kept": {vanilla, func(t *corev1.PodTemplateSpec) { container(t).SecurityContext.Capabilities = nil }},
		"capability added": {openShift, func(t *corev1.PodTemplateSpec) {
			container(t).SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		}},
		"privilege escalation":    {vanilla, func(t *corev1.PodTemplateSpec) { container(t).SecurityContext.AllowPrivilegeEscalation = nil }},
		"privileged":              {openShift, func(t *corev1.PodTemplateSpec) { container(t).SecurityContext.Privileged = ptr.To(true) }},
		"runs as root":            {vanilla, func(t *corev1.PodTemplateSpec) { t.Spec.SecurityContext.RunAsUser = ptr.To[int64](0) }},
		"no UID for a root image": {vanilla, func(t *corev1.PodTemplateSpec) { t.Spec.SecurityContext.RunAsUser = nil }},
		"fixed UID on OpenShift":  {openShift, func(t *corev1.PodTemplateSpec) { t.Spec.SecurityContext.RunAsUser = ptr.To[int64](2000) }},
		"fsGroup on OpenShift":    {openShift, func(t *corev1.PodTemplateSpec) { t.Spec.SecurityContext.FSGroup = ptr.To[int64](2000) }},
		"runAsGroup on OpenShift": {openShift, func(t *corev1.PodTemplateSpec) { container(t).SecurityContext.RunAsGroup = ptr.To[int64](0) }},
		"SELinux level fixed": {openShift, func(t *corev1.PodTemplateSpec) {
			t.Spec.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Level: "s0:c1"}
		}},
		"hostPath volume": {vanilla, func(t *corev1.PodTemplateSpec) {
			t.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		}},
		"host network":         {openShift, func(t *corev1.PodTemplateSpec) { t.Spec.HostNetwork = true }},
		"no USER":              {openShift, dropEnv("USER")},
		"no HOME":              {vanilla, dropEnv("HOME")},
		"HOME not on a volume": {openShift, dropMount("/home/vllm")},
		"no writable /tmp":     {openShift, dropMount("/tmp")},
		"non-compliant init": {vanilla, func(t *corev1.PodTemplateSpec) {
			t.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
		}},
		"HF_HOME outside a volume": {vanilla, func(t *corev1.PodTemplateSpec) {
			container(t).Env = append(container(t).Env, corev1.EnvVar{Name: "HF_HOME", Value: "/opt/hf"})
		}},
	}
	for _, p := range []podPolicy{vanilla, openShift} {
		if v := podViolations(engine(t, render.Options{PlatformAssignsUID: p.openShift}), p); len(v) > 0 {
			t.Fatalf("the unmutated engine pod (openshift=%v) has violations: %v", p.openShift, v)
		}
	}
	for name, m := range mutations {
		t.Run(name, func(t *testing.T) {
			tpl := engine(t, render.Options{PlatformAssignsUID: m.policy.openShift})
			m.mutate(&tpl)
			if v := podViolations(tpl, m.policy); len(v) == 0 {
				t.Error("not reported")
			}
		})
	}
}

// TestManagerDeploymentIsRestricted checks the operator's own Deployment on both platforms.
func TestManagerDeploymentIsRestricted(t *testing.T) {
	deployments := readDeployments(t, "../../../config/manager/manager.yaml")
	if len(deployments) == 0 {
		t.Fatal("no Deployment in config/manager/manager.yaml")
	}
	for _, d := range deployments {
		for _, openShift := range []bool{false, true} {
			for _, v := range podViolations(d.Spec.Template, podPolicy{openShift: openShift, nonRootImages: kvrouterImages}) {
				t.Errorf("Deployment %s (openshift=%v): %s", d.Name, openShift, v)
			}
		}
	}
}

func readDeployments(t *testing.T, file string) []appsv1.Deployment {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []appsv1.Deployment
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var d appsv1.Deployment
		if err := yaml.Unmarshal(doc, &d); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if d.Kind == "Deployment" {
			out = append(out, d)
		}
	}
}
