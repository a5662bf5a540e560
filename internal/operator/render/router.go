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

package render

import (
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// RouterContainerName is the name of the router container.
const RouterContainerName = "router"

// routerImage is spec.router.image, else the operator's router image.
func routerImage(kvr *v1alpha1.KVRouter, opts Options) string {
	if kvr.Spec.Router.Image != "" {
		return kvr.Spec.Router.Image
	}
	return opts.routerImage()
}

// RouterModeEPP is the router's --mode as the InferencePool's endpoint picker: ext_proc and gRPC
// health instead of the public HTTP port (the router's default mode is the proxy).
const RouterModeEPP = "epp"

// routerArgs is the router's command line as the contract fixes it. As the endpoint picker it
// gets its gRPC ports instead of --port, which it does not serve in that mode. Discovery stays
// the pod watch in both modes: the operator renders the pool from the same selector, so the
// router need not read the InferencePool.
func routerArgs(kvr *v1alpha1.KVRouter) []string {
	var args []string
	if UsesInferencePool(kvr) {
		args = []string{
			"--mode", RouterModeEPP,
			// TLS on the ext_proc port, with a self-signed certificate the gateways do not
			// verify: what they expect of a picker (some cannot dial one in clear text).
			"--grpc-tls",
			"--grpc-port", strconv.Itoa(RouterGRPCPort),
			"--grpc-health-port", strconv.Itoa(RouterGRPCHealthPort),
		}
	} else {
		args = []string{"--port", strconv.Itoa(RouterPort)}
	}
	args = append(args,
		"--admin-addr", ":"+strconv.Itoa(RouterAdminPort),
		"--discovery", "kubernetes",
		"--namespace", kvr.Namespace,
		"--selector", EngineSelector(kvr),
		"--engine-port", strconv.Itoa(EnginePort),
		"--kv-events-port", strconv.Itoa(KVEventsPort),
		"--kv-replay-port", strconv.Itoa(KVReplayPort),
		"--block-size", strconv.Itoa(int(kvr.Spec.Engine.BlockSize)),
		"--policy", string(kvr.Spec.Router.Policy),
		"--model", ServedName(kvr),
	)
	if h := kvr.Spec.Router.SessionHeader; h != "" {
		args = append(args, "--session-header", h)
	}
	args = append(args, routerTokenizerArgs(kvr)...)
	args = append(args, disaggregationRouterArgs(kvr)...)
	return append(args, routerKeyArgs(kvr)...)
}

// routerTokenizerLocal says whether the router may tokenize in process: the engines must
// tokenize with the model's own tokenizer (not the simulator's synthetic one), and the router
// must be able to read it (a model given as a path exists only on the cache volume).
func routerTokenizerLocal(kvr *v1alpha1.KVRouter) bool {
	tk := kvr.Spec.Router.Tokenizer
	if tk.Source == v1alpha1.TokenizerEngine || kvr.Spec.Simulate || engineTokenizerArgs(kvr) {
		return false
	}
	return !modelIsPath(kvr) || tk.FromCacheVolume
}

// tokenizerFlags are the vLLM flags that make the engines tokenize with something else than
// spec.model.name's main revision: the router cannot know what they load, so the engines tokenize.
var tokenizerFlags = []string{"--revision", "--tokenizer", "--tokenizer-revision", "--tokenizer-mode",
	"--chat-template", "--chat-template-content-format", "--hf-overrides", "--trust-remote-code"}

func engineTokenizerArgs(kvr *v1alpha1.KVRouter) bool {
	for _, a := range kvr.Spec.Engine.ExtraArgs {
		name, _, _ := strings.Cut(a, "=")
		name = strings.ReplaceAll(name, "_", "-")
		if slices.Contains(tokenizerFlags, name) {
			return true
		}
	}
	return false
}

// hubEnv are the engines' Hugging Face settings the router follows when it fetches the tokenizer
// as they fetch the model (a mirror, offline mode, another cache).
var hubEnv = []string{"HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_HOME"}

// modelIsPath: spec.model.name is a directory inside the cache volume, not a Hub repository id
// (which never starts with a slash).
func modelIsPath(kvr *v1alpha1.KVRouter) bool { return strings.HasPrefix(kvr.Spec.Model.Name, "/") }

// routerTokenizerArgs names where the router's tokenizer comes from: the model's directory on
// the cache volume, or the Hub repository (which the router looks up in HF_HOME's cache first
// when the volume is mounted).
func routerTokenizerArgs(kvr *v1alpha1.KVRouter) []string {
	if !routerTokenizerLocal(kvr) {
		return []string{"--tokenizer", "engine"}
	}
	if modelIsPath(kvr) {
		return []string{"--tokenizer", "auto", "--tokenizer-dir", kvr.Spec.Model.Name}
	}
	return []string{"--tokenizer", "auto", "--tokenizer-model", kvr.Spec.Model.Name}
}

// routerTokenizerEnv gives the router the engines' Hub token and, with fromCacheVolume, their
// HF_HOME, so it fetches the tokenizer the way the engines fetch the model.
func routerTokenizerEnv(kvr *v1alpha1.KVRouter) []corev1.EnvVar {
	if !routerTokenizerLocal(kvr) {
		return nil
	}
	var env []corev1.EnvVar
	if kvr.Spec.Router.Tokenizer.FromCacheVolume {
		env = append(env, corev1.EnvVar{Name: "HF_HOME", Value: modelsDir})
	}
	if s := kvr.Spec.Model.HFTokenSecret; s != "" && !modelIsPath(kvr) {
		env = append(env, corev1.EnvVar{Name: "HF_TOKEN", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: s}, Key: "token"},
		}})
	}
	for _, e := range kvr.Spec.Engine.Env {
		if !slices.Contains(hubEnv, e.Name) {
			continue
		}
		// The engines' value replaces ours (HF_HOME on the cache volume), as it does for them.
		if i := slices.IndexFunc(env, func(v corev1.EnvVar) bool { return v.Name == e.Name }); i >= 0 {
			env[i] = *e.DeepCopy()
		} else {
			env = append(env, *e.DeepCopy())
		}
	}
	return env
}

// routerTokenizerVolume mounts the model cache read-only at the engines' path, so a model given
// as a path names the same directory in both.
func routerTokenizerVolume(kvr *v1alpha1.KVRouter) ([]corev1.Volume, []corev1.VolumeMount) {
	if !routerTokenizerLocal(kvr) || !kvr.Spec.Router.Tokenizer.FromCacheVolume {
		return nil, nil
	}
	return []corev1.Volume{{Name: volumeModels, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: kvr.Spec.Model.CachePVC, ReadOnly: true},
		}}},
		[]corev1.VolumeMount{{Name: volumeModels, MountPath: modelsDir, ReadOnly: true}}
}

func routerServiceAccount(kvr *v1alpha1.KVRouter, opts Options) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: childMeta(kvr, opts, RouterName(kvr), NameRouter, ComponentRouter),
	}
}

// routerRole lets the router discover engine pods in its own namespace, and nothing else: its
// pod informer lists and watches (internal/router/discovery's envtest runs it with exactly this Role
// and checks both verbs are used).
func routerRole(kvr *v1alpha1.KVRouter, opts Options) *rbacv1.Role {
	return &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: childMeta(kvr, opts, RouterName(kvr), NameRouter, ComponentRouter),
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
		},
	}
}

func routerRoleBinding(kvr *v1alpha1.KVRouter, opts Options) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: childMeta(kvr, opts, RouterName(kvr), NameRouter, ComponentRouter),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: RouterName(kvr)},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.ServiceAccountKind, Name: RouterName(kvr), Namespace: kvr.Namespace},
		},
	}
}

// routerResources is spec.router.resources, or a small request when it sets none.
func routerResources(kvr *v1alpha1.KVRouter) corev1.ResourceRequirements {
	r := kvr.Spec.Router.Resources
	if len(r.Requests) == 0 && len(r.Limits) == 0 {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("250m"),
			corev1.ResourceMemory: resource.MustParse("256Mi"),
		}}
	}
	return *r.DeepCopy()
}

// routerContainerPorts are the router's ports: the public HTTP port, or as the endpoint picker
// the ext_proc and gRPC health ports; and the admin port in both modes.
func routerContainerPorts(kvr *v1alpha1.KVRouter) []corev1.ContainerPort {
	admin := corev1.ContainerPort{Name: PortNameAdmin, ContainerPort: RouterAdminPort, Protocol: corev1.ProtocolTCP}
	if UsesInferencePool(kvr) {
		return []corev1.ContainerPort{
			{Name: PortNameGRPC, ContainerPort: RouterGRPCPort, Protocol: corev1.ProtocolTCP},
			{Name: PortNameGRPCHealth, ContainerPort: RouterGRPCHealthPort, Protocol: corev1.ProtocolTCP},
			admin,
		}
	}
	return []corev1.ContainerPort{
		{Name: PortNameHTTP, ContainerPort: RouterPort, Protocol: corev1.ProtocolTCP},
		admin,
	}
}

// routerProbe is the router's readiness or liveness probe: HTTP on the public port, or, for the
// endpoint picker, which serves no HTTP there, the kubelet's gRPC probe of its health port.
func routerProbe(kvr *v1alpha1.KVRouter, readiness bool) *corev1.Probe {
	p := &corev1.Probe{PeriodSeconds: 10, FailureThreshold: 3, TimeoutSeconds: 2}
	if readiness {
		p.PeriodSeconds = 5
	}
	switch {
	case UsesInferencePool(kvr):
		service := "liveness"
		if readiness {
			service = "readiness"
		}
		p.GRPC = &corev1.GRPCAction{Port: RouterGRPCHealthPort, Service: ptr.To(service)}
	case readiness:
		p.HTTPGet = &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString(PortNameHTTP)}
	default:
		p.HTTPGet = &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString(PortNameHTTP)}
	}
	return p
}

func routerDeployment(kvr *v1alpha1.KVRouter, opts Options) *appsv1.Deployment {
	sel := selectorLabels(kvr, NameRouter, ComponentRouter)
	c := corev1.Container{
		Name:            RouterContainerName,
		Image:           routerImage(kvr, opts),
		Command:         []string{"/router"},
		Args:            routerArgs(kvr),
		Ports:           routerContainerPorts(kvr),
		Resources:       routerResources(kvr),
		ReadinessProbe:  routerProbe(kvr, true),
		LivenessProbe:   routerProbe(kvr, false),
		SecurityContext: containerSecurityContext(true),
	}
	keyVolumes, keyMounts := routerKeyVolumes(kvr)
	c.VolumeMounts = append(c.VolumeMounts, keyMounts...)
	tokVolumes, tokMounts := routerTokenizerVolume(kvr)
	c.VolumeMounts = append(c.VolumeMounts, tokMounts...)
	c.Env = routerTokenizerEnv(kvr)
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: childMeta(kvr, opts, RouterName(kvr), NameRouter, ComponentRouter),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(ptr.Deref(kvr.Spec.Router.Replicas, 2)),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels(kvr, NameRouter, ComponentRouter)},
				Spec: corev1.PodSpec{
					ServiceAccountName:           RouterName(kvr),
					AutomountServiceAccountToken: ptr.To(true), // it watches pods
					EnableServiceLinks:           ptr.To(false),
					Containers:                   []corev1.Container{c},
					Volumes:                      append(keyVolumes, tokVolumes...),
					// The router image's USER is numeric and non-root: no UID needed anywhere.
					SecurityContext: podSecurityContext(nil, false),
					// Spread replicas over nodes so that losing one node keeps a router up.
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew:           1,
						TopologyKey:       corev1.LabelHostname,
						WhenUnsatisfiable: corev1.ScheduleAnyway,
						LabelSelector:     &metav1.LabelSelector{MatchLabels: sel},
					}},
				},
			},
		},
	}
}

// appProtocolH2C marks a Service port as HTTP/2 without TLS (gRPC in clear text: the health
// port), and appProtocolHTTP2 as HTTP/2 (the ext_proc port, over TLS, as the Inference
// Extension's own picker Service marks it), so that Gateways and meshes that read appProtocol
// speak HTTP/2 to them rather than HTTP/1.1.
const (
	appProtocolH2C   = "kubernetes.io/h2c"
	appProtocolHTTP2 = "http2"
)

func routerService(kvr *v1alpha1.KVRouter, opts Options) *corev1.Service {
	port := func(name string, number int32) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Port: number, TargetPort: intstr.FromString(name), Protocol: corev1.ProtocolTCP}
	}
	// One Service for every port: the admin port is kept to its readers by the router's
	// NetworkPolicy, not by being left out of the Service, so that the ServiceMonitor, KEDA and
	// the operator reach every router replica by one name.
	ports := []corev1.ServicePort{port(PortNameHTTP, RouterPort), port(PortNameAdmin, RouterAdminPort)}
	if UsesInferencePool(kvr) {
		// The InferencePool's endpointPickerRef names the ext_proc port; the health port is for
		// Gateways that health-check the picker through the Service.
		grpc, health := port(PortNameGRPC, RouterGRPCPort), port(PortNameGRPCHealth, RouterGRPCHealthPort)
		grpc.AppProtocol, health.AppProtocol = ptr.To(appProtocolHTTP2), ptr.To(appProtocolH2C)
		ports = []corev1.ServicePort{grpc, health, port(PortNameAdmin, RouterAdminPort)}
	}
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: childMeta(kvr, opts, RouterName(kvr), NameRouter, ComponentRouter),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: selectorLabels(kvr, NameRouter, ComponentRouter),
			Ports:    ports,
		},
	}
}

// routerPDB keeps voluntary evictions (node drains) from taking every router down at once.
func routerPDB(kvr *v1alpha1.KVRouter, opts Options) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: childMeta(kvr, opts, RouterName(kvr), NameRouter, ComponentRouter),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: selectorLabels(kvr, NameRouter, ComponentRouter)},
		},
	}
}
