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
	"encoding/json"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

const (
	// EngineContainerName is the name of the container that runs vLLM (or vllm-sim).
	EngineContainerName = "vllm"

	// GPUResource is the extended resource of the NVIDIA device plugin.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"
	// GPUProductLabel is set on nodes by GPU Feature Discovery.
	GPUProductLabel = "nvidia.com/gpu.product"

	// PythonHashSeed seeds vLLM's block-hash chain. Without it vLLM seeds the chain randomly per
	// process, so no two engines (nor one engine across restarts) agree on a block's hash. The
	// router does not need that (its index keys blocks by content), but what reads vLLM's hashes
	// does: KV-transfer and offloading connectors, and hash-keyed indexers such as llm-d's.
	PythonHashSeed = "0"

	homeDir      = "/home/vllm"
	modelsDir    = "/models"
	volumeHome   = "home"
	volumeTmp    = "tmp"
	volumeShm    = "dshm"
	volumeModels = "model-cache"

	// engineDrainSeconds is the preStop pause before vLLM gets SIGTERM. A pod being deleted is
	// dropped from routing by every router replica as soon as its watch shows the deletion
	// (well under a second); meanwhile the engine keeps serving the streams it has, and takes
	// no new ones. Without the pause, SIGTERM could reach vLLM before a router has noticed,
	// and a request routed in that moment would fail.
	engineDrainSeconds = 30
	// engineGracePeriod covers the drain pause plus the time vLLM's server takes after SIGTERM
	// to finish the streams that are still open.
	engineGracePeriod = 120
)

// engineRole says which kind of pod a template is for.
type engineRole int

const (
	// roleServer: a single-node replica, or the leader of a multi-node one. Serves HTTP and
	// publishes KV events.
	roleServer engineRole = iota
	// roleWorker: a non-leader pod of a multi-node replica. Runs vLLM headless.
	roleWorker
)

// kvEventsConfig is vLLM's --kv-events-config. Field order is the order of the JSON text, which
// ends up in the pod spec, so it is fixed by the struct rather than by a map.
type kvEventsConfig struct {
	EnableKVCacheEvents bool   `json:"enable_kv_cache_events"`
	Publisher           string `json:"publisher"`
	Endpoint            string `json:"endpoint"`
	ReplayEndpoint      string `json:"replay_endpoint"`
	Topic               string `json:"topic"`
}

// engineArgs is the vLLM command line after `vllm serve` (or /vllm-sim), in the contract's order.
func engineArgs(kvr *v1alpha1.KVRouter, role engineRole, pool Pool) ([]string, error) {
	e := kvr.Spec.Engine
	served := ServedName(kvr)
	args := []string{
		"--model", kvr.Spec.Model.Name,
		"--served-model-name", served,
		"--port", strconv.Itoa(EnginePort),
		"--tensor-parallel-size", strconv.Itoa(int(e.TensorParallelSize)),
	}
	if isMultiNode(kvr) {
		args = append(args, "--pipeline-parallel-size", strconv.Itoa(int(e.NodesPerReplica)))
	}
	args = append(args, "--block-size", strconv.Itoa(int(e.BlockSize)))
	if kvr.Spec.Model.MaxModelLen != nil {
		args = append(args, "--max-model-len", strconv.Itoa(int(*kvr.Spec.Model.MaxModelLen)))
	}
	cfg, err := json.Marshal(kvEventsConfig{
		EnableKVCacheEvents: true,
		Publisher:           "zmq",
		Endpoint:            fmt.Sprintf("tcp://*:%d", KVEventsPort),
		ReplayEndpoint:      fmt.Sprintf("tcp://*:%d", KVReplayPort),
		// The kubelet expands $(POD_NAME) from the container's env, so each pod publishes
		// under its own name and the router can tell which engine an event came from.
		Topic: "kv@$(POD_NAME)@" + served,
	})
	if err != nil {
		return nil, fmt.Errorf("encoding --kv-events-config: %w", err)
	}
	args = append(args,
		"--prefix-caching-hash-algo", e.PrefixCachingHashAlgo,
		"--kv-events-config", string(cfg),
	)
	if isMultiNode(kvr) {
		args = append(args, multiNodeArgs(kvr, role)...)
	}
	args = append(args, loraArgs(kvr)...)
	if pool != PoolNone {
		ktc, err := kvTransferArgs(kvr)
		if err != nil {
			return nil, err
		}
		args = append(args, ktc...)
	}
	return append(args, e.ExtraArgs...), nil
}

// The LoRA slot settings rendered when spec.model.loras is set and leaves them unset: vLLM's own
// defaults, written out so that the pod spec shows what the engines run with and vllm-sim, which
// reads the same flags, sizes its slots alike.
const (
	DefaultMaxLoRAs    = 1
	DefaultMaxLoRARank = 16
)

// loraArgs are the flags that load spec.model.loras: one --lora-modules followed by one
// name=source per adapter (vLLM's syntax; the simulator takes the same), in the spec's order.
// Workers of a multi-node replica get them too: every pod of a replica must build the same
// LoRA layers.
func loraArgs(kvr *v1alpha1.KVRouter) []string {
	m := kvr.Spec.Model
	if len(m.LoRAs) == 0 {
		return nil
	}
	args := []string{"--enable-lora", "--lora-modules"}
	for _, l := range m.LoRAs {
		args = append(args, l.Name+"="+l.Source)
	}
	return append(args,
		"--max-loras", strconv.Itoa(int(ptr.Deref(m.MaxLoRAs, DefaultMaxLoRAs))),
		"--max-lora-rank", strconv.Itoa(int(ptr.Deref(m.MaxLoRARank, DefaultMaxLoRARank))),
	)
}

// EngineImage is the vLLM image a KVRouter's engines run: spec.engine.image, else the
// operator's (Options.EngineImage).
func EngineImage(kvr *v1alpha1.KVRouter, opts Options) string {
	if kvr.Spec.Engine.Image != "" {
		return kvr.Spec.Engine.Image
	}
	return opts.engineImage()
}

// enginePodTemplate is the pod template of a single-node replica, or of the leader (roleServer)
// or workers (roleWorker) of a multi-node one.
func enginePodTemplate(kvr *v1alpha1.KVRouter, opts Options, role engineRole, pool Pool) (corev1.PodTemplateSpec, error) {
	e := kvr.Spec.Engine
	sim := kvr.Spec.Simulate

	args, err := engineArgs(kvr, role, pool)
	if err != nil {
		return corev1.PodTemplateSpec{}, err
	}
	env, err := engineEnv(kvr, pool)
	if err != nil {
		return corev1.PodTemplateSpec{}, err
	}

	c := corev1.Container{
		Name:            EngineContainerName,
		Image:           EngineImage(kvr, opts),
		Command:         []string{"vllm", "serve"},
		Args:            args,
		Env:             env,
		Resources:       engineResources(kvr, pool),
		SecurityContext: containerSecurityContext(sim),
		VolumeMounts: []corev1.VolumeMount{
			{Name: volumeHome, MountPath: homeDir},
			{Name: volumeTmp, MountPath: "/tmp"},
		},
	}
	if sim {
		// vllm-sim accepts vLLM's command line, so only the binary and image change.
		c.Image = opts.simulatorImage()
		c.Command = []string{"/vllm-sim"}
	}
	if role == roleServer {
		c.Ports = []corev1.ContainerPort{
			{Name: PortNameHTTP, ContainerPort: EnginePort, Protocol: corev1.ProtocolTCP},
			{Name: PortNameKVEvents, ContainerPort: KVEventsPort, Protocol: corev1.ProtocolTCP},
			{Name: PortNameKVReplay, ContainerPort: KVReplayPort, Protocol: corev1.ProtocolTCP},
		}
		c.StartupProbe, c.ReadinessProbe, c.LivenessProbe = engineProbes(kvr)
		// The sleep action needs no binary in the image (the kvrouter image has none).
		c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: engineDrainSeconds}}}
	}
	if pool != PoolNone {
		// Every pod of a replica (workers too) holds KV blocks the other pool may pull.
		c.Ports = append(c.Ports, corev1.ContainerPort{
			Name: PortNameKVTransfer, ContainerPort: kvr.Spec.Disaggregation.SideChannelPort, Protocol: corev1.ProtocolTCP,
		})
	}

	volumes := []corev1.Volume{
		{Name: volumeHome, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: volumeTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	if !sim {
		// NCCL exchanges tensors through shared memory; the container runtime's default 64Mi
		// /dev/shm makes tensor-parallel engines crash or crawl.
		volumes = append(volumes, corev1.Volume{Name: volumeShm, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: e.ShmSize},
		}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: volumeShm, MountPath: "/dev/shm"})
	}
	if pvc := kvr.Spec.Model.CachePVC; pvc != "" {
		volumes = append(volumes, corev1.Volume{Name: volumeModels, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc},
		}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: volumeModels, MountPath: modelsDir})
	}

	component := ComponentEngine
	if role == roleWorker {
		component = ComponentEngineWorker
	}
	spec := corev1.PodSpec{
		Containers: []corev1.Container{c},
		Volumes:    volumes,
		// Engines never call the Kubernetes API.
		AutomountServiceAccountToken: ptr.To(false),
		// Service links would inject variables such as VLLM_PORT (from any Service named
		// "vllm" in the namespace), which vLLM reads as its own configuration.
		EnableServiceLinks:            ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To[int64](engineGracePeriod),
		// The SCC sets fsGroup on OpenShift; a fixed one outside the namespace's range would be refused.
		SecurityContext: podSecurityContext(engineUID(kvr, opts), !opts.PlatformAssignsUID),
		Tolerations:     engineTolerations(kvr, pool),
	}
	if !sim {
		spec.NodeSelector = map[string]string{GPUProductLabel: e.GPU.Product}
	}
	annotations := map[string]string{"kubectl.kubernetes.io/default-container": EngineContainerName}
	if pool != PoolNone {
		addPoolToPodSpec(kvr, opts, role, pool, &spec, annotations)
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      poolPodLabels(kvr, component, pool),
			Annotations: annotations,
		},
		Spec: spec,
	}, nil
}

// engineEnv is the engine container's environment: the variables the contract fixes, the model
// cache and token, then spec.engine.env (which may override HOME or HF_HOME, not the reserved ones).
func engineEnv(kvr *v1alpha1.KVRouter, pool Pool) ([]corev1.EnvVar, error) {
	hfHome := homeDir + "/.cache/huggingface"
	if kvr.Spec.Model.CachePVC != "" {
		hfHome = modelsDir
	}
	env := []corev1.EnvVar{
		{Name: "PYTHONHASHSEED", Value: PythonHashSeed},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		// Under an arbitrary UID the image's home is not writable. vLLM (~/.cache/vllm, its
		// torch.compile cache, ~/.config/vllm), Triton (~/.triton), FlashInfer and Hugging Face
		// resolve their caches from $HOME; the rest goes to /tmp. Both are emptyDirs.
		{Name: "HOME", Value: homeDir},
		{Name: "HF_HOME", Value: hfHome},
		// torch (before 2.13) calls getpass.getuser() while importing, which reads $USER before
		// the passwd database; a UID without a passwd entry (OpenShift's) would crash vLLM at
		// start with "getpwuid(): uid not found".
		{Name: "USER", Value: "vllm"},
	}
	if s := kvr.Spec.Model.HFTokenSecret; s != "" {
		env = append(env, corev1.EnvVar{Name: "HF_TOKEN", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: s}, Key: "token"},
		}})
	}
	env = append(env, engineKeyEnv(kvr)...)
	env = append(env, kvTransferEnv(kvr, pool)...)
	reserved := map[string]bool{}
	for _, r := range ReservedEngineEnv {
		reserved[r] = true
	}
	// Server-side apply keys env by name, so a repeated name would fail the whole apply: a user
	// entry replaces ours (or an earlier user entry) of the same name in place.
	index := map[string]int{}
	for i, v := range env {
		index[v.Name] = i
	}
	for _, v := range kvr.Spec.Engine.Env {
		if reserved[v.Name] {
			return nil, fmt.Errorf("spec.engine.env: %s is set by the operator and must match the router", v.Name)
		}
		if i, ok := index[v.Name]; ok {
			env[i] = *v.DeepCopy()
			continue
		}
		index[v.Name] = len(env)
		env = append(env, *v.DeepCopy())
	}
	return env, nil
}

// engineResources is spec.engine.resources (or the pool's own) with the GPU limit set to the GPUs
// of one pod (one tensor-parallel group), and a disaggregated pool's RDMA device. In simulate mode
// there is no GPU nor RDMA device, and small defaults apply when the spec sets none.
func engineResources(kvr *v1alpha1.KVRouter, pool Pool) corev1.ResourceRequirements {
	r := *kvr.Spec.Engine.Resources.DeepCopy()
	if ps := poolSpec(kvr, pool); ps != nil && ps.Resources != nil {
		r = *ps.Resources.DeepCopy()
	}
	if kvr.Spec.Simulate {
		if len(r.Requests) == 0 && len(r.Limits) == 0 {
			r.Requests = corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("100m"),
				corev1.ResourceMemory: resource.MustParse("128Mi"),
			}
			r.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
		}
		delete(r.Limits, GPUResource)
		delete(r.Requests, GPUResource)
		return r
	}
	if r.Limits == nil {
		r.Limits = corev1.ResourceList{}
	}
	gpus := *resource.NewQuantity(int64(kvr.Spec.Engine.TensorParallelSize), resource.DecimalSI)
	r.Limits[GPUResource] = gpus
	if _, ok := r.Requests[GPUResource]; ok {
		// Extended resources need requests equal to limits.
		r.Requests[GPUResource] = gpus
	}
	if d := kvr.Spec.Disaggregation; pool != PoolNone && d.Network.RDMAResource != nil {
		rdma := corev1.ResourceName(d.Network.RDMAResource.Name)
		n := *resource.NewQuantity(int64(d.Network.RDMAResource.Count), resource.DecimalSI)
		r.Limits[rdma] = n
		if _, ok := r.Requests[rdma]; ok {
			r.Requests[rdma] = n
		}
	}
	return r
}

// engineProbes: a startup probe that gives model loading spec.engine.startupTimeoutSeconds, then
// readiness and liveness on vLLM's /health. Liveness is lenient: a restart reloads the model.
func engineProbes(kvr *v1alpha1.KVRouter) (startup, readiness, liveness *corev1.Probe) {
	get := func() corev1.ProbeHandler {
		return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString(PortNameHTTP)}}
	}
	startupPeriod := int32(10)
	startupFailures := (kvr.Spec.Engine.StartupTimeoutSeconds + startupPeriod - 1) / startupPeriod
	if kvr.Spec.Simulate {
		// vllm-sim loads nothing; fail fast so a broken rollout shows within a minute.
		startupPeriod, startupFailures = 2, 30
	}
	startup = &corev1.Probe{ProbeHandler: get(), PeriodSeconds: startupPeriod, FailureThreshold: startupFailures, TimeoutSeconds: 5}
	readiness = &corev1.Probe{ProbeHandler: get(), PeriodSeconds: 5, FailureThreshold: 3, TimeoutSeconds: 5}
	liveness = &corev1.Probe{ProbeHandler: get(), PeriodSeconds: 10, FailureThreshold: 6, TimeoutSeconds: 10}
	return startup, readiness, liveness
}

// engineTolerations tolerate the taint GPU node pools usually carry, then add the spec's own.
func engineTolerations(kvr *v1alpha1.KVRouter, pool Pool) []corev1.Toleration {
	var t []corev1.Toleration
	if !kvr.Spec.Simulate {
		t = append(t, corev1.Toleration{Key: string(GPUResource), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	for _, u := range kvr.Spec.Engine.Tolerations {
		t = append(t, *u.DeepCopy())
	}
	if ps := poolSpec(kvr, pool); ps != nil {
		for _, u := range ps.Tolerations {
			t = append(t, *u.DeepCopy())
		}
	}
	return t
}

// podSecurityContext meets Pod Security "restricted" and OpenShift's restricted-v2 SCC: never
// root, the runtime's default seccomp profile, and a UID only when uid is set. Without one the
// image's numeric USER applies (the kvrouter images), or the UID the SCC assigns.
func podSecurityContext(uid *int64, fsGroup bool) *corev1.PodSecurityContext {
	sc := &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if uid != nil {
		sc.RunAsUser = ptr.To(*uid)
	}
	if uid != nil && fsGroup {
		// Makes a cachePVC filled by another UID writable; OnRootMismatch changes ownership
		// once rather than walking a model cache of thousands of files at every start.
		sc.FSGroup = ptr.To(*uid)
		sc.FSGroupChangePolicy = ptr.To(corev1.FSGroupChangeOnRootMismatch)
	}
	return sc
}

// engineUID is the UID engine pods run as, or nil to leave it to the image or the platform.
// vLLM's image runs as root: with runAsNonRoot and no UID the kubelet would refuse to start it,
// so outside OpenShift it runs as the image's vllm user (or the operator's EngineUID). vllm-sim's
// image has a numeric non-root USER and needs none.
func engineUID(kvr *v1alpha1.KVRouter, opts Options) *int64 {
	switch {
	case kvr.Spec.Engine.RunAsUser != nil:
		return kvr.Spec.Engine.RunAsUser
	case kvr.Spec.Simulate || opts.PlatformAssignsUID:
		return nil
	}
	return ptr.To(opts.engineUID())
}

// containerSecurityContext drops every capability and privilege escalation. The root filesystem
// stays writable for vLLM (the NVIDIA container toolkit's CDI hook writes to it); the kvrouter
// image is a static binary and gets a read-only one.
func containerSecurityContext(kvrouterImage bool) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		ReadOnlyRootFilesystem:   ptr.To(kvrouterImage),
	}
}

// engineReplicas is the replica count to apply: none when KEDA owns it. Leaving the field out of
// the applied object (rather than writing the live value back) is what keeps server-side apply
// from fighting the autoscaler, and GitOps from seeing drift.
func engineReplicas(kvr *v1alpha1.KVRouter) *int32 {
	if kvr.Spec.Autoscaling != nil {
		return nil
	}
	return ptr.To(ptr.Deref(kvr.Spec.Engine.Replicas, 1))
}

func engineDeployment(kvr *v1alpha1.KVRouter, opts Options, pool Pool) (*appsv1.Deployment, error) {
	tpl, err := enginePodTemplate(kvr, opts, roleServer, pool)
	if err != nil {
		return nil, err
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: poolMeta(kvr, opts, pool),
		Spec: appsv1.DeploymentSpec{
			Replicas: poolReplicas(kvr, pool),
			Selector: &metav1.LabelSelector{MatchLabels: poolSelectorLabels(kvr, ComponentEngine, pool)},
			Template: tpl,
		},
	}, nil
}
