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
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// Pool is the engine pool a workload runs: none for an aggregated KVRouter, else prefill or
// decode (spec.disaggregation).
type Pool string

const (
	PoolNone    Pool = ""
	PoolPrefill Pool = "prefill"
	PoolDecode  Pool = "decode"
)

// LabelRole on an engine pod names its pool. The router's discovery reads it
// (internal/router/discovery.RoleLabel; a test keeps the two equal), so the router learns each
// engine's role from the pod and needs no flag for it.
const LabelRole = "serving.kvrouter.dev/role"

// Ports and names of a disaggregated engine pod.
const (
	PortNameKVTransfer = "kv-transfer"
	// DefaultSideChannelPort is the schema default of spec.disaggregation.sideChannelPort.
	DefaultSideChannelPort = 5600
	// PDSidecarPort is the port of the pd-sidecar container that runs the prefill leg of a
	// request the Gateway sends to an engine pod (InferencePool mode with disaggregation).
	PDSidecarPort          = 8200
	PortNamePDSidecar      = "pd-sidecar"
	PDSidecarContainerName = "pd-sidecar"
	// RouterModeSidecar is the router's --mode in that container.
	RouterModeSidecar = "sidecar"
	// MultusNetworksAnnotation attaches a pod to Multus networks.
	MultusNetworksAnnotation = "k8s.v1.cni.cncf.io/networks"
	// kvTransferRole: every engine may send and receive KV blocks, so any engine can also serve
	// a whole request; its role is only the pool it sits in.
	kvTransferRole = "kv_both"
	// kvLoadFailurePolicy: a decode engine whose pull fails (transfer error, prefill engine
	// gone) recomputes the prompt instead of failing the request, which vLLM's default ("fail")
	// would do: the router has already sent the decode leg and cannot serve it again.
	kvLoadFailurePolicy = "recompute"
)

// DisaggregationEngineFlags are vLLM flags render sets for a disaggregated KVRouter; its
// spec.engine.extraArgs may not repeat them (the CRD refuses it too).
var DisaggregationEngineFlags = []string{"--kv-transfer-config"}

// DisaggregationEngineEnv are variables render sets for a disaggregated KVRouter; its
// spec.engine.env may not set them. UCX_TLS is not one: render sets a default per transport,
// and a user value replaces it (UCX tuning such as dc_x, ^cuda_ipc or EFA's srd).
var DisaggregationEngineEnv = []string{"VLLM_NIXL_SIDE_CHANNEL_HOST", "VLLM_NIXL_SIDE_CHANNEL_PORT"}

// Disaggregated says whether the KVRouter runs a prefill and a decode pool.
func Disaggregated(kvr *v1alpha1.KVRouter) bool { return kvr.Spec.Disaggregation != nil }

// EnginePools are the engine pools the KVRouter runs, in render order.
func EnginePools(kvr *v1alpha1.KVRouter) []Pool {
	if Disaggregated(kvr) {
		return []Pool{PoolPrefill, PoolDecode}
	}
	return []Pool{PoolNone}
}

// PoolWorkloadName names the Deployment or LeaderWorkerSet of a pool: the aggregated engine
// workload's name, with the pool appended.
func PoolWorkloadName(kvr *v1alpha1.KVRouter, pool Pool) string {
	if pool == PoolNone {
		return EngineWorkloadName(kvr)
	}
	return EngineWorkloadName(kvr) + "-" + string(pool)
}

// PoolScaledObjectName names the KEDA ScaledObject of a pool.
func PoolScaledObjectName(kvr *v1alpha1.KVRouter, pool Pool) string {
	if pool == PoolNone {
		return ScaledObjectName(kvr)
	}
	return ScaledObjectName(kvr) + "-" + string(pool)
}

// ScaleWorkloadName is the engine workload that spec.engine.replicas (the scale subresource)
// sizes: the decode pool of a disaggregated KVRouter.
func ScaleWorkloadName(kvr *v1alpha1.KVRouter) string {
	if Disaggregated(kvr) {
		return PoolWorkloadName(kvr, PoolDecode)
	}
	return EngineWorkloadName(kvr)
}

// ScaleSelector selects the pods that status.replicas counts, for the scale subresource: the
// serving engine pods, of the decode pool only when disaggregated. The router discovers both
// pools with EngineSelector.
func ScaleSelector(kvr *v1alpha1.KVRouter) string {
	return labels.SelectorFromSet(poolSelectorLabels(kvr, ComponentEngine, scalePool(kvr))).String()
}

func scalePool(kvr *v1alpha1.KVRouter) Pool {
	if Disaggregated(kvr) {
		return PoolDecode
	}
	return PoolNone
}

// poolSelectorLabels are the selector labels of a pool's workload: the engine's, plus the role.
// The aggregated workload's are unchanged, so its immutable selector is too.
func poolSelectorLabels(kvr *v1alpha1.KVRouter, component string, pool Pool) map[string]string {
	l := selectorLabels(kvr, NameEngine, component)
	if pool != PoolNone {
		l[LabelRole] = string(pool)
	}
	return l
}

func poolPodLabels(kvr *v1alpha1.KVRouter, component string, pool Pool) map[string]string {
	l := podLabels(kvr, NameEngine, component)
	if pool != PoolNone {
		l[LabelRole] = string(pool)
	}
	return l
}

func poolMeta(kvr *v1alpha1.KVRouter, opts Options, pool Pool) metav1.ObjectMeta {
	m := childMeta(kvr, opts, PoolWorkloadName(kvr, pool), NameEngine, ComponentEngine)
	if pool != PoolNone {
		m.Labels[LabelRole] = string(pool)
	}
	return m
}

// poolSpec is spec.disaggregation's settings of a pool, nil when aggregated.
func poolSpec(kvr *v1alpha1.KVRouter, pool Pool) *v1alpha1.PoolSpec {
	d := kvr.Spec.Disaggregation
	switch {
	case d == nil:
		return nil
	case pool == PoolPrefill:
		return &d.Prefill.PoolSpec
	case pool == PoolDecode:
		return &d.Decode
	}
	return nil
}

// poolAutoscaled says whether KEDA owns the pool's replica count: spec.autoscaling for the
// aggregated and the decode pool, spec.disaggregation.prefill.autoscaling for the prefill pool.
// A stopped KVRouter (spec.engine.replicas 0, no spec.autoscaling) stops the prefill pool
// even under its own autoscaling: KEDA's floor would otherwise keep its GPUs.
func poolAutoscaled(kvr *v1alpha1.KVRouter, pool Pool) bool {
	if pool == PoolPrefill {
		return kvr.Spec.Disaggregation.Prefill.Autoscaling != nil && !Stopped(kvr)
	}
	return kvr.Spec.Autoscaling != nil
}

// Stopped says whether the spec stops the engines: spec.engine.replicas 0 without
// spec.autoscaling (which would own the count).
func Stopped(kvr *v1alpha1.KVRouter) bool {
	return kvr.Spec.Autoscaling == nil && kvr.Spec.Engine.Replicas != nil && *kvr.Spec.Engine.Replicas == 0
}

// PoolAutoscaled is poolAutoscaled for the controller, which applies an autoscaled workload
// without replicas and hands the live count to KEDA.
func PoolAutoscaled(kvr *v1alpha1.KVRouter, pool Pool) bool { return poolAutoscaled(kvr, pool) }

// PoolMinReplicas is the floor of an autoscaled pool.
func PoolMinReplicas(kvr *v1alpha1.KVRouter, pool Pool) int32 {
	if pool == PoolPrefill {
		return kvr.Spec.Disaggregation.Prefill.Autoscaling.MinReplicas
	}
	return kvr.Spec.Autoscaling.MinReplicas
}

// poolReplicas is the replica count to apply to a pool's workload: none when KEDA owns it
// (see engineReplicas). The prefill pool stops with the KVRouter (spec.engine.replicas 0):
// prefill engines without decode engines would hold GPUs and serve nothing split.
func poolReplicas(kvr *v1alpha1.KVRouter, pool Pool) *int32 {
	if pool != PoolPrefill {
		return engineReplicas(kvr)
	}
	if poolAutoscaled(kvr, pool) {
		return nil
	}
	if Stopped(kvr) {
		return ptr.To[int32](0)
	}
	return ptr.To(ptr.Deref(kvr.Spec.Disaggregation.Prefill.Replicas, 1))
}

// kvTransferConfig is vLLM's --kv-transfer-config, in a fixed field order.
type kvTransferConfig struct {
	KVConnector         string `json:"kv_connector"`
	KVRole              string `json:"kv_role"`
	KVLoadFailurePolicy string `json:"kv_load_failure_policy"`
}

func kvTransferArgs(kvr *v1alpha1.KVRouter) ([]string, error) {
	cfg, err := json.Marshal(kvTransferConfig{KVConnector: string(kvr.Spec.Disaggregation.Connector), KVRole: kvTransferRole,
		KVLoadFailurePolicy: kvLoadFailurePolicy})
	if err != nil {
		return nil, fmt.Errorf("encoding --kv-transfer-config: %w", err)
	}
	return []string{"--kv-transfer-config", string(cfg)}, nil
}

// ucxTransports is UCX_TLS per transport: the UCX transports NIXL's UCX backend may pick.
// cuda_copy stages through host memory when no direct path exists; cuda_ipc moves blocks
// between GPUs of one NVLink domain; rc is RDMA reliable connection, over InfiniBand or RoCE.
// NVLink keeps tcp: cuda_ipc offers neither the remote reads NIXL issues nor active messages
// (its notifications), and separate pods rarely share a CUDA IPC domain, so without a network
// transport UCX could not connect two engines at all.
var ucxTransports = map[v1alpha1.KVTransport]string{
	v1alpha1.TransportRDMA:   "rc,cuda_copy,cuda_ipc",
	v1alpha1.TransportRoCE:   "rc,cuda_copy,cuda_ipc",
	v1alpha1.TransportNVLink: "cuda_ipc,cuda_copy,tcp",
	v1alpha1.TransportTCP:    "tcp,cuda_copy",
}

// usesUCXTCP says whether UCX may carry KV blocks over TCP, whose listeners take ports chosen
// at run time: the engines' NetworkPolicy must then open every port between them.
func usesUCXTCP(kvr *v1alpha1.KVRouter) bool {
	d := kvr.Spec.Disaggregation
	return d != nil && (d.Network.Transport == v1alpha1.TransportTCP || d.Network.Transport == v1alpha1.TransportNVLink)
}

// kvTransferEnv points the connector's side channel at the pod's own address (from
// POD_IP, set above it) and port, and picks UCX's transports.
func kvTransferEnv(kvr *v1alpha1.KVRouter, pool Pool) []corev1.EnvVar {
	if pool == PoolNone {
		return nil
	}
	d := kvr.Spec.Disaggregation
	return []corev1.EnvVar{
		{Name: "VLLM_NIXL_SIDE_CHANNEL_HOST", Value: "$(POD_IP)"},
		{Name: "VLLM_NIXL_SIDE_CHANNEL_PORT", Value: strconv.Itoa(int(d.SideChannelPort))},
		{Name: "UCX_TLS", Value: ucxTransports[d.Network.Transport]},
	}
}

// addPoolToPodSpec adds what a pool changes in an engine pod: its node selector, the Multus
// networks of the transfer, and in InferencePool mode the pd-sidecar on serving pods.
func addPoolToPodSpec(kvr *v1alpha1.KVRouter, opts Options, role engineRole, pool Pool, spec *corev1.PodSpec, annotations map[string]string) {
	d := kvr.Spec.Disaggregation
	if ps := poolSpec(kvr, pool); ps != nil && len(ps.NodeSelector) > 0 {
		if spec.NodeSelector == nil {
			spec.NodeSelector = map[string]string{}
		}
		// The pool's entries win, the GPU product label included: prefill (compute-bound) and
		// decode (memory-bound) pools on different GPU models is a reason to split at all.
		for k, v := range ps.NodeSelector {
			spec.NodeSelector[k] = v
		}
	}
	if len(d.Network.Attachments) > 0 {
		annotations[MultusNetworksAnnotation] = strings.Join(d.Network.Attachments, ",")
	}
	if role == roleServer && UsesInferencePool(kvr) {
		spec.Containers = append(spec.Containers, pdSidecar(kvr, opts))
	}
}

// pdSidecar runs the router in sidecar mode next to vLLM: the Gateway sends a request to the
// engine pod the endpoint picker named (the decode engine), with the prefill engine in the
// x-prefiller-host-port header; the sidecar runs the prefill leg there, then the decode leg on
// its own engine, so the Gateway needs to know nothing of the protocol. A request the picker
// serves whole passes through to the engine unchanged.
func pdSidecar(kvr *v1alpha1.KVRouter, opts Options) corev1.Container {
	return corev1.Container{
		Name:    PDSidecarContainerName,
		Image:   routerImage(kvr, opts),
		Command: []string{"/router"},
		Args: []string{
			"--mode", RouterModeSidecar,
			"--port", strconv.Itoa(PDSidecarPort),
			"--engine-url", fmt.Sprintf("http://127.0.0.1:%d", EnginePort),
			// No admin listener: nothing reads it in an engine pod, and its default port
			// (9090) could be the side channel's (spec.disaggregation.sideChannelPort).
			"--admin-addr", "",
		},
		// Like vLLM's: keep taking the requests the Gateway sends until it has dropped the
		// terminating pod, instead of refusing them the moment SIGTERM arrives.
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: engineDrainSeconds}}},
		Ports:     []corev1.ContainerPort{{Name: PortNamePDSidecar, ContainerPort: PDSidecarPort, Protocol: corev1.ProtocolTCP}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		}},
		SecurityContext: containerSecurityContext(true),
	}
}

// disaggregationRouterArgs tell the router how to use the pools; it learns which engine is in
// which from LabelRole.
func disaggregationRouterArgs(kvr *v1alpha1.KVRouter) []string {
	d := kvr.Spec.Disaggregation
	if d == nil {
		return nil
	}
	args := []string{"--pd-mode", string(d.Mode)}
	if d.Mode == v1alpha1.DisaggregationThreshold && d.ThresholdTokens != nil {
		args = append(args, "--pd-threshold-tokens", strconv.Itoa(int(*d.ThresholdTokens)))
	}
	args = append(args, "--pd-whole-on", strings.ToLower(string(d.WholeRequestsOn)))
	if UsesInferencePool(kvr) {
		// The Gateway must deliver a picked request to the pd-sidecar, which runs the prefill
		// leg the picker named in x-prefiller-host-port; the engine's own port would skip it.
		// The InferencePool targets that port too, but the picker names the destination.
		args = append(args, "--epp-destination-port", strconv.Itoa(PDSidecarPort))
	}
	return args
}

// Bounds of spec.disaggregation that the schema sets and Validate mirrors.
const (
	maxPoolReplicas    = 1000
	maxThresholdTokens = 10000000
	maxPoolListItems   = 16
)

// engineOwnPorts are the engine pod's other ports, which the side channel must not take.
var engineOwnPorts = []int32{EnginePort, KVEventsPort, KVReplayPort, PDSidecarPort}

// validateDisaggregation mirrors the schema and CEL rules of spec.disaggregation and the rules on
// the spec that keep its flags and variables out of spec.engine.extraArgs and env.
func validateDisaggregation(kvr *v1alpha1.KVRouter) field.ErrorList {
	d := kvr.Spec.Disaggregation
	if d == nil {
		return nil
	}
	var errs field.ErrorList
	dp := field.NewPath("spec", "disaggregation")
	pp := dp.Child("prefill")
	if r := d.Prefill.Replicas; r != nil && (*r < 1 || *r > maxPoolReplicas) {
		errs = append(errs, field.Invalid(pp.Child("replicas"), *r, fmt.Sprintf("must be between 1 and %d", maxPoolReplicas)))
	}
	if a := d.Prefill.Autoscaling; a != nil {
		ap := pp.Child("autoscaling")
		if a.MinReplicas < 1 {
			errs = append(errs, field.Invalid(ap.Child("minReplicas"), a.MinReplicas, "must be at least 1"))
		}
		if a.MaxReplicas < 1 || a.MaxReplicas > maxPoolReplicas {
			errs = append(errs, field.Invalid(ap.Child("maxReplicas"), a.MaxReplicas, fmt.Sprintf("must be between 1 and %d", maxPoolReplicas)))
		}
		if a.MaxReplicas < a.MinReplicas {
			errs = append(errs, field.Invalid(ap.Child("maxReplicas"), a.MaxReplicas, "must be greater than or equal to minReplicas"))
		}
	}
	for _, p := range []struct {
		path *field.Path
		spec v1alpha1.PoolSpec
	}{{pp, d.Prefill.PoolSpec}, {dp.Child("decode"), d.Decode}} {
		errs = append(errs, metav1validation.ValidateLabels(p.spec.NodeSelector, p.path.Child("nodeSelector"))...)
		if len(p.spec.NodeSelector) > maxPoolListItems {
			errs = append(errs, field.TooMany(p.path.Child("nodeSelector"), len(p.spec.NodeSelector), maxPoolListItems))
		}
		if len(p.spec.Tolerations) > maxPoolListItems {
			errs = append(errs, field.TooMany(p.path.Child("tolerations"), len(p.spec.Tolerations), maxPoolListItems))
		}
	}
	connectors := []string{string(v1alpha1.ConnectorNixl), string(v1alpha1.ConnectorLMCache)}
	if !slices.Contains(connectors, string(d.Connector)) {
		errs = append(errs, field.NotSupported(dp.Child("connector"), d.Connector, connectors))
	} else if d.Connector == v1alpha1.ConnectorLMCache {
		errs = append(errs, field.Forbidden(dp.Child("connector"), lmcacheRefusal))
	}
	if d.SideChannelPort < 1024 || d.SideChannelPort > 65535 {
		errs = append(errs, field.Invalid(dp.Child("sideChannelPort"), d.SideChannelPort, "must be between 1024 and 65535"))
	} else if slices.Contains(engineOwnPorts, d.SideChannelPort) {
		errs = append(errs, field.Invalid(dp.Child("sideChannelPort"), d.SideChannelPort,
			"must not be one of the engine pods' other ports (8000 http, 5557 kv-events, 5558 kv-replay, 8200 pd-sidecar)"))
	} else if d.SideChannelPort == vllmMasterPort && kvr.Spec.Engine.NodesPerReplica > 1 {
		errs = append(errs, field.Invalid(dp.Child("sideChannelPort"), d.SideChannelPort,
			"must not be 29501 when spec.engine.nodesPerReplica > 1: vLLM's multi-node rendezvous (--master-port) listens there on the leader"))
	}
	np := dp.Child("network")
	transports := []string{string(v1alpha1.TransportRDMA), string(v1alpha1.TransportRoCE), string(v1alpha1.TransportNVLink), string(v1alpha1.TransportTCP)}
	if !slices.Contains(transports, string(d.Network.Transport)) {
		errs = append(errs, field.NotSupported(np.Child("transport"), d.Network.Transport, transports))
	}
	if len(d.Network.Attachments) > maxPoolListItems {
		errs = append(errs, field.TooMany(np.Child("attachments"), len(d.Network.Attachments), maxPoolListItems))
	}
	for i, a := range d.Network.Attachments {
		if len(a) > 253 || !networkAttachment.MatchString(a) {
			errs = append(errs, field.Invalid(np.Child("attachments").Index(i), a, "must be a NetworkAttachmentDefinition name, or namespace/name"))
		}
	}
	if r := d.Network.RDMAResource; r != nil {
		rp := np.Child("rdmaResource")
		if r.Name == "" || len(r.Name) > 253 || !extendedResourceName.MatchString(r.Name) {
			errs = append(errs, field.Invalid(rp.Child("name"), r.Name, "must be a resource name such as rdma/ib"))
		}
		if r.Name == string(GPUResource) {
			errs = append(errs, field.Invalid(rp.Child("name"), r.Name, "must not be nvidia.com/gpu: the GPU limit is set from spec.engine.tensorParallelSize"))
		}
		if r.Count < 1 || r.Count > 64 {
			errs = append(errs, field.Invalid(rp.Child("count"), r.Count, "must be between 1 and 64"))
		}
	}
	modes := []string{string(v1alpha1.DisaggregationAuto), string(v1alpha1.DisaggregationAlways), string(v1alpha1.DisaggregationNever), string(v1alpha1.DisaggregationThreshold)}
	if !slices.Contains(modes, string(d.Mode)) {
		errs = append(errs, field.NotSupported(dp.Child("mode"), d.Mode, modes))
	}
	switch {
	case d.Mode == v1alpha1.DisaggregationThreshold && d.ThresholdTokens == nil:
		errs = append(errs, field.Required(dp.Child("thresholdTokens"), "mode Threshold splits requests from this uncached prompt length"))
	case d.Mode != v1alpha1.DisaggregationThreshold && d.ThresholdTokens != nil:
		errs = append(errs, field.Invalid(dp.Child("thresholdTokens"), *d.ThresholdTokens, "applies only to spec.disaggregation.mode: Threshold"))
	case d.ThresholdTokens != nil && (*d.ThresholdTokens < 1 || *d.ThresholdTokens > maxThresholdTokens):
		errs = append(errs, field.Invalid(dp.Child("thresholdTokens"), *d.ThresholdTokens, fmt.Sprintf("must be between 1 and %d", maxThresholdTokens)))
	}
	wholeOn := []string{string(v1alpha1.WholeOnAny), string(v1alpha1.WholeOnDecode)}
	if !slices.Contains(wholeOn, string(d.WholeRequestsOn)) {
		errs = append(errs, field.NotSupported(dp.Child("wholeRequestsOn"), d.WholeRequestsOn, wholeOn))
	} else if d.Mode == v1alpha1.DisaggregationNever && d.WholeRequestsOn == v1alpha1.WholeOnDecode {
		// Never serves every request whole; on decode engines only, the prefill pool would hold
		// its GPUs and serve nothing.
		errs = append(errs, field.Invalid(dp.Child("wholeRequestsOn"), d.WholeRequestsOn,
			"Decode with spec.disaggregation.mode: Never would leave the prefill pool serving nothing; use Any, or another mode"))
	}
	ep := field.NewPath("spec", "engine")
	for i, arg := range kvr.Spec.Engine.ExtraArgs {
		if f := disaggregationFlag(arg); f != "" {
			errs = append(errs, field.Invalid(ep.Child("extraArgs").Index(i), arg,
				f+" is set by the operator from spec.disaggregation.connector"))
		}
		if dataParallelFlag.MatchString(arg) && !dataParallelOne.MatchString(arg) {
			errs = append(errs, field.Invalid(ep.Child("extraArgs").Index(i), arg, dataParallelRefusal))
		}
	}
	for i, env := range kvr.Spec.Engine.Env {
		if slices.Contains(DisaggregationEngineEnv, env.Name) {
			errs = append(errs, field.Invalid(ep.Child("env").Index(i).Child("name"), env.Name,
				"is set by the operator from spec.disaggregation (sideChannelPort, network.transport) with spec.disaggregation"))
		}
	}
	return errs
}

// lmcacheRefusal says why LMCacheConnectorV1 is refused (the CRD's rule on
// DisaggregationSpec says the same). LMCache's disaggregated prefill is not vLLM's pull
// protocol: the router would have to name the decode engine and its receiver ports in the
// prefill request (kv_transfer_params.disagg_spec) and wait for the prefill engine's ZMQ
// completion notice before the decode leg, and the two pools need different LMCache
// configurations (pd_role sender and receiver), none of which exists yet.
const lmcacheRefusal = "LMCacheConnectorV1 is not supported yet: its disaggregated prefill pushes the KV from the prefill engine " +
	"to a decode engine named in the prefill request and reports completion over ZMQ, with a sender configuration on the " +
	"prefill pool and a receiver configuration on the decode pool, and kvrouter drives only the pull protocol of NixlConnector; use NixlConnector"

// vllmMasterPort is vLLM's default --master-port, where a multi-node replica's leader listens
// for its workers' rendezvous (the operator does not set the flag).
const vllmMasterPort = 29501

// dataParallelFlag and dataParallelOne mirror the CRD's rule on data-parallel flags: vLLM's NIXL
// side channel listens on VLLM_NIXL_SIDE_CHANNEL_PORT + the data-parallel rank, one port per rank
// (older vLLM: one per tensor-parallel rank), and the router addresses one rank per pod.
// Opening a range would need the range in the NetworkPolicy, the container ports, the collision
// checks and the router's --dp-ranks, all parsed from free-form extraArgs (where the value may be
// the next argument), so a disaggregated KVRouter runs one rank per pod. "=1" is accepted; the
// value as a separate argument is not, because a rule on one argument cannot read the next.
var (
	dataParallelFlag = regexp.MustCompile(`^(--data[-_]parallel[-_]size([-_]local)?|-dpl?)(=.*)?$`)
	dataParallelOne  = regexp.MustCompile(`=0*1$`)
)

const dataParallelRefusal = "--data-parallel-size and --data-parallel-size-local (-dp, -dpl) other than =1 are refused with spec.disaggregation: " +
	"each data-parallel rank listens on its own side-channel port (spec.disaggregation.sideChannelPort + rank), which the operator does not open; " +
	"run the ranks as replicas (spec.engine.replicas) instead"

// networkAttachment and extendedResourceName mirror the schema's patterns.
var (
	networkAttachment    = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	extendedResourceName = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

// disaggregationFlag returns the flag of DisaggregationEngineFlags that arg sets, or "". vLLM
// also takes a JSON flag one field at a time (--kv-transfer-config.kv_role=kv_producer),
// which would change the rendered configuration as much as the whole flag.
func disaggregationFlag(arg string) string {
	name, _, _ := strings.Cut(arg, "=")
	name, _, _ = strings.Cut(name, ".")
	if !strings.HasPrefix(name, "--") {
		return ""
	}
	name = "--" + strings.ReplaceAll(strings.TrimPrefix(name, "--"), "_", "-")
	if slices.Contains(DisaggregationEngineFlags, name) {
		return name
	}
	return ""
}
