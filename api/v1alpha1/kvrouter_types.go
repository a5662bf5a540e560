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

package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The CEL rules on KVRouterSpec and GatewaySpec mirror internal/operator/render.Validate;
// TestCRDRulesAgreeWithValidate keeps them in step.

// KVRouterSpec describes the model, its engines, the router in front of them, and how traffic and
// scaling reach them. Defaults live in the schema so that `kubectl get -o yaml` shows what runs.
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || !has(self.gateway.mode) || self.gateway.mode != 'InferencePool' || !has(self.router) || !has(self.router.apiKeySecret) || (has(self.gateway.failureMode) && self.gateway.failureMode == 'FailClose')",message="spec.router.apiKeySecret with spec.gateway.mode: InferencePool needs spec.gateway.failureMode: FailClose: with FailOpen the Gateway forwards requests to the engines without asking the router whenever it cannot reach it, skipping the router's key check; set FailClose, or authenticate at the Gateway or with spec.engine.apiKeySecret instead"
// +kubebuilder:validation:XValidation:rule="!has(self.model.loras) || size(self.model.loras) == 0 || !has(self.engine.extraArgs) || !self.engine.extraArgs.exists(a, a.matches('^--((no[-_])?enable[-_]lora|lora[-_]modules|max[-_]loras|max[-_]lora[-_]rank)(=.*)?$'))",message="with spec.model.loras, spec.engine.extraArgs must not set --enable-lora, --lora-modules, --max-loras or --max-lora-rank: the operator sets them from spec.model.loras, maxLoras and maxLoraRank"
// +kubebuilder:validation:XValidation:rule="!has(self.router) || !has(self.router.tokenizer) || !has(self.router.tokenizer.fromCacheVolume) || !self.router.tokenizer.fromCacheVolume || (has(self.model.cachePVC) && size(self.model.cachePVC) > 0)",message="spec.router.tokenizer.fromCacheVolume needs spec.model.cachePVC: it mounts that claim in the router pods; set cachePVC, or let the router fetch the tokenizer from the Hub"
// +kubebuilder:validation:XValidation:rule="!has(self.disaggregation) || !has(self.engine.extraArgs) || !self.engine.extraArgs.exists(a, a.matches('^--kv[-_]transfer[-_]config([.=].*)?$'))",message="with spec.disaggregation, spec.engine.extraArgs must not set --kv-transfer-config, nor one of its fields (--kv-transfer-config.KEY): the operator sets it from spec.disaggregation.connector"
// +kubebuilder:validation:XValidation:rule="!has(self.disaggregation) || !has(self.engine.extraArgs) || !self.engine.extraArgs.exists(a, a.matches('^(--data[-_]parallel[-_]size([-_]local)?|-dpl?)(=.*)?$') && !a.matches('=0*1$'))",message="with spec.disaggregation, spec.engine.extraArgs must not set --data-parallel-size or --data-parallel-size-local (-dp, -dpl) other than =1: each data-parallel rank listens on its own side-channel port (spec.disaggregation.sideChannelPort + rank), which the operator does not open; run the ranks as replicas (spec.engine.replicas) instead"
// +kubebuilder:validation:XValidation:rule="!has(self.disaggregation) || !has(self.disaggregation.sideChannelPort) || !has(self.engine.nodesPerReplica) || self.engine.nodesPerReplica <= 1 || self.disaggregation.sideChannelPort != 29501",message="spec.disaggregation.sideChannelPort must not be 29501 when spec.engine.nodesPerReplica > 1: vLLM's multi-node rendezvous (--master-port) listens there on the leader"
// +kubebuilder:validation:XValidation:rule="!has(self.disaggregation) || !has(self.engine.env) || !self.engine.env.exists(e, e.name in ['VLLM_NIXL_SIDE_CHANNEL_HOST', 'VLLM_NIXL_SIDE_CHANNEL_PORT'])",message="with spec.disaggregation, spec.engine.env must not set VLLM_NIXL_SIDE_CHANNEL_HOST or VLLM_NIXL_SIDE_CHANNEL_PORT: the operator sets them from the pod IP and spec.disaggregation.sideChannelPort"
type KVRouterSpec struct {
	// Model is what the engines load and the name clients use.
	Model ModelSpec `json:"model"`

	// Engine configures the vLLM replicas.
	// +kubebuilder:default={}
	// +optional
	Engine EngineSpec `json:"engine,omitempty"`

	// Router configures the KV-cache-aware router in front of the engines.
	// +kubebuilder:default={}
	// +optional
	Router RouterSpec `json:"router,omitempty"`

	// Gateway attaches an HTTPRoute to existing Gateways, in front of the router (mode
	// HTTPRoute) or of an InferencePool whose endpoint picker is the router (mode
	// InferencePool). Without it, clients reach the router Service directly.
	// +optional
	Gateway *GatewaySpec `json:"gateway,omitempty"`

	// Autoscaling hands the engine replica count to a KEDA ScaledObject. When set,
	// spec.engine.replicas is ignored and the engine workload is applied without a replica count.
	// +optional
	Autoscaling *AutoscalingSpec `json:"autoscaling,omitempty"`

	// Simulate runs vllm-sim instead of vLLM: same HTTP API, metrics and KV events, no GPU request.
	// For trying the router on a cluster without GPUs, and for CI.
	// +kubebuilder:default=false
	// +optional
	Simulate bool `json:"simulate,omitempty"`

	// Monitoring asks for a Prometheus Operator ServiceMonitor (the router), PodMonitor (the
	// engines) and PrometheusRule (kvrouter's alerts on this KVRouter's series). Without it,
	// nothing is rendered for Prometheus.
	// +optional
	Monitoring *MonitoringSpec `json:"monitoring,omitempty"`

	// Disaggregation splits the engines into a prefill pool and a decode pool that pass KV
	// blocks through a vLLM KV connector; the router decides per request whether to split it
	// (docs/disaggregation.md). The decode pool is sized by spec.engine.replicas (and scaled by
	// spec.autoscaling, and by the scale subresource), the prefill pool by
	// spec.disaggregation.prefill. Absent: one aggregated engine pool, as before.
	// +optional
	Disaggregation *DisaggregationSpec `json:"disaggregation,omitempty"`
}

// KVConnector is the vLLM KV connector the two pools pass KV blocks with.
// +kubebuilder:validation:Enum=NixlConnector;LMCacheConnectorV1
type KVConnector string

const (
	// ConnectorNixl is vLLM's NixlConnector: the decode engine pulls the prefill engine's blocks
	// over NIXL (UCX underneath), after a handshake on the side-channel port.
	ConnectorNixl KVConnector = "NixlConnector"
	// ConnectorLMCache is LMCache's connector for vLLM v1 (LMCacheConnectorV1). Refused for now:
	// its disaggregated prefill is a push (the prefill engine writes the KV into a decode engine
	// named in the prefill request, then notifies the proxy over ZMQ) with a sender configuration
	// on the prefill pool and a receiver configuration on the decode pool, and neither the router
	// nor the operator implements that yet. The value stays in the enum so that the refusal says
	// why instead of listing the supported values.
	ConnectorLMCache KVConnector = "LMCacheConnectorV1"
)

// DisaggregationMode says when the router splits a request into a prefill and a decode leg.
// +kubebuilder:validation:Enum=Auto;Always;Never;Threshold
type DisaggregationMode string

const (
	// DisaggregationAuto splits a request when the measured costs say it pays: the KV transfer
	// costs less than the decode wait it saves.
	DisaggregationAuto DisaggregationMode = "Auto"
	// DisaggregationAlways splits every request a prefill engine can take.
	DisaggregationAlways DisaggregationMode = "Always"
	// DisaggregationNever serves every request whole (both pools serve whole requests).
	DisaggregationNever DisaggregationMode = "Never"
	// DisaggregationThreshold splits a request whose uncached prompt is at least thresholdTokens.
	DisaggregationThreshold DisaggregationMode = "Threshold"
)

// WholeRequestsOn says which pools serve the requests the router does not split.
// +kubebuilder:validation:Enum=Any;Decode
type WholeRequestsOn string

const (
	// WholeOnAny: any engine, prefill pool included, so a split fleet is never worse than an
	// aggregated fleet of the same GPUs.
	WholeOnAny WholeRequestsOn = "Any"
	// WholeOnDecode: decode-pool engines only (what llm-d and Dynamo do).
	WholeOnDecode WholeRequestsOn = "Decode"
)

// KVTransport is the network the KV blocks cross between the pools.
// +kubebuilder:validation:Enum=RDMA;RoCE;NVLink;TCP
type KVTransport string

const (
	// TransportRDMA is InfiniBand (or another RDMA fabric) between nodes.
	TransportRDMA KVTransport = "RDMA"
	// TransportRoCE is RDMA over Converged Ethernet.
	TransportRoCE KVTransport = "RoCE"
	// TransportNVLink is GPUs of one NVLink domain (one node, or a multi-node NVLink rack).
	TransportNVLink KVTransport = "NVLink"
	// TransportTCP is plain TCP: works everywhere, the slowest.
	TransportTCP KVTransport = "TCP"
)

// DisaggregationSpec configures the prefill and decode pools and how the router uses them.
// +kubebuilder:validation:XValidation:rule="has(self.mode) && self.mode == 'Threshold' ? has(self.thresholdTokens) : !has(self.thresholdTokens)",message="spec.disaggregation.thresholdTokens is required with spec.disaggregation.mode: Threshold and applies only to it: set both, or neither"
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'Never' || !has(self.wholeRequestsOn) || self.wholeRequestsOn != 'Decode'",message="spec.disaggregation.wholeRequestsOn: Decode with spec.disaggregation.mode: Never would leave the prefill pool serving nothing: every request is served whole, and only on decode engines; use wholeRequestsOn: Any, or another mode"
// +kubebuilder:validation:XValidation:rule="!has(self.connector) || self.connector != 'LMCacheConnectorV1'",message="spec.disaggregation.connector: LMCacheConnectorV1 is not supported yet: its disaggregated prefill pushes the KV from the prefill engine to a decode engine named in the prefill request and reports completion over ZMQ, with a sender configuration on the prefill pool and a receiver configuration on the decode pool, and kvrouter drives only the pull protocol of NixlConnector; use NixlConnector"
// +kubebuilder:validation:XValidation:rule="!has(self.sideChannelPort) || !(self.sideChannelPort in [8000, 5557, 5558, 8200])",message="spec.disaggregation.sideChannelPort must not be one of the engine pods' other ports (8000 http, 5557 kv-events, 5558 kv-replay, 8200 pd-sidecar)"
type DisaggregationSpec struct {
	// Prefill is the prefill pool: its replica count, and what differs from spec.engine.
	// +kubebuilder:default={}
	// +optional
	Prefill PrefillPoolSpec `json:"prefill,omitempty"`

	// Decode is what differs from spec.engine in the decode pool. Its replica count is
	// spec.engine.replicas (the scale subresource), its autoscaling spec.autoscaling.
	// +kubebuilder:default={}
	// +optional
	Decode PoolSpec `json:"decode,omitempty"`

	// Connector is the vLLM KV connector both pools start with (--kv-transfer-config, role
	// kv_both: any engine can serve a whole request, the role is the pool it sits in). Only
	// NixlConnector is accepted for now (LMCacheConnectorV1 is refused, docs/disaggregation.md).
	// +kubebuilder:default=NixlConnector
	// +optional
	Connector KVConnector `json:"connector,omitempty"`

	// SideChannelPort is the port the connector's handshake listens on in every engine pod
	// (VLLM_NIXL_SIDE_CHANNEL_PORT), open to the KVRouter's other engines only.
	// +kubebuilder:default=5600
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=65535
	// +optional
	SideChannelPort int32 `json:"sideChannelPort,omitempty"`

	// Network is how the KV blocks travel between the pools.
	// +kubebuilder:default={}
	// +optional
	Network KVNetworkSpec `json:"network,omitempty"`

	// Mode says when the router splits a request (its --pd-mode).
	// +kubebuilder:default=Auto
	// +optional
	Mode DisaggregationMode `json:"mode,omitempty"`

	// ThresholdTokens is the uncached prompt length from which the router splits a request;
	// only with mode Threshold, where it is required (the router's --pd-threshold-tokens).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000000
	// +optional
	ThresholdTokens *int32 `json:"thresholdTokens,omitempty"`

	// WholeRequestsOn says which pools serve the requests that are not split (the router's
	// --pd-whole-on): Any (prefill-pool engines too, so that idle prefill GPUs serve) or
	// Decode.
	// +kubebuilder:default=Any
	// +optional
	WholeRequestsOn WholeRequestsOn `json:"wholeRequestsOn,omitempty"`
}

// PoolSpec is what one engine pool changes from spec.engine.
type PoolSpec struct {
	// Resources replaces spec.engine.resources for this pool's engine container (the GPU
	// limit is still set from spec.engine.tensorParallelSize).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// NodeSelector is added to this pool's pods, next to the GPU product label.
	// +kubebuilder:validation:MaxProperties=16
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations are added to this pool's pods, after spec.engine.tolerations.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// PrefillPoolSpec is the prefill pool.
type PrefillPoolSpec struct {
	PoolSpec `json:",inline"`

	// Replicas of the prefill pool. Ignored when autoscaling is set. When spec.engine.replicas
	// is 0 (the KVRouter is stopped), the prefill pool is stopped too.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Autoscaling hands the prefill pool's replica count to a KEDA ScaledObject of its own,
	// on the prefill pool's waiting requests (the router's /v1/autoscale?role=prefill, or
	// Prometheus with spec.autoscaling.prometheus). The target per replica is
	// spec.autoscaling.targetQueueDepth when set, else 4.
	// +optional
	Autoscaling *PoolAutoscalingSpec `json:"autoscaling,omitempty"`
}

// PoolAutoscalingSpec bounds a pool's replica count under KEDA.
// +kubebuilder:validation:XValidation:rule="self.maxReplicas >= self.minReplicas",message="spec.disaggregation.prefill.autoscaling.maxReplicas must be greater than or equal to minReplicas"
type PoolAutoscalingSpec struct {
	// MinReplicas is the floor (always rendered: KEDA's default of 0 would unload the model).
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinReplicas int32 `json:"minReplicas,omitempty"`

	// MaxReplicas is the ceiling.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxReplicas int32 `json:"maxReplicas"`
}

// KVNetworkSpec is the network the KV transfer uses.
// +kubebuilder:validation:XValidation:rule="!has(self.rdmaResource) || self.rdmaResource.name != 'nvidia.com/gpu'",message="spec.disaggregation.network.rdmaResource must not be nvidia.com/gpu: the GPU limit is set from spec.engine.tensorParallelSize"
type KVNetworkSpec struct {
	// Transport selects the UCX transports the connector may use (UCX_TLS). A UCX_TLS in
	// spec.engine.env replaces the rendered value (UCX tuning such as dc_x, ^cuda_ipc or srd).
	// +kubebuilder:default=RDMA
	// +optional
	Transport KVTransport `json:"transport,omitempty"`

	// Attachments are Multus NetworkAttachmentDefinitions (name, or namespace/name) the engine
	// pods join for the transfer: the k8s.v1.cni.cncf.io/networks annotation.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +listType=atomic
	// +optional
	Attachments []string `json:"attachments,omitempty"`

	// RDMAResource is an extended resource each engine container requests for its RDMA
	// device (for instance rdma/ib from an RDMA shared device plugin, or a SR-IOV VF pool).
	// +optional
	RDMAResource *ExtendedResource `json:"rdmaResource,omitempty"`
}

// ExtendedResource is a count of a device plugin's resource.
type ExtendedResource struct {
	// Name of the resource, such as rdma/ib or nvidia.com/sriov_rdma_vf.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Name string `json:"name"`

	// Count per engine container.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	Count int32 `json:"count,omitempty"`
}

// MonitoringSpec configures the Prometheus Operator objects that scrape the router and engines
// and hold their alerts.
type MonitoringSpec struct {
	// Labels are added to the ServiceMonitor, PodMonitor and PrometheusRule so that a Prometheus
	// whose serviceMonitorSelector, podMonitorSelector and ruleSelector require them selects them
	// (the Prometheus of kube-prometheus-stack requires `release: <its release name>` by
	// default). OpenShift's user-workload monitoring needs none.
	// +kubebuilder:validation:MaxProperties=16
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Interval between scrapes, e.g. 15s or 1m30s (units in the order h, m, s, ms, as the
	// Prometheus Operator requires). Empty: the Prometheus's own scrape interval.
	// +kubebuilder:validation:Pattern=`^(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?$`
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Interval string `json:"interval,omitempty"`
}

// ModelSpec names the model and its LoRA adapters.
// +kubebuilder:validation:XValidation:rule="(!has(self.maxLoras) && !has(self.maxLoraRank)) || (has(self.loras) && size(self.loras) > 0)",message="spec.model.maxLoras and spec.model.maxLoraRank apply only with spec.model.loras: remove them, or list the adapters"
type ModelSpec struct {
	// Name is what vLLM loads: a Hugging Face repository id or a path inside the cache volume.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Name string `json:"name"`

	// ServedName is the model name clients send in requests. Defaults to metadata.name.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._/:-]*$`
	// +optional
	ServedName string `json:"servedName,omitempty"`

	// MaxModelLen caps the context length (prompt plus output) in tokens. Unset: the model's own.
	// +kubebuilder:validation:Minimum=16
	// +optional
	MaxModelLen *int32 `json:"maxModelLen,omitempty"`

	// CachePVC is an existing PersistentVolumeClaim that holds model weights; it is mounted as
	// HF_HOME so replicas do not download the model each time they start.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	CachePVC string `json:"cachePVC,omitempty"`

	// HFTokenSecret is a Secret in the same namespace whose key "token" becomes HF_TOKEN.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	HFTokenSecret string `json:"hfTokenSecret,omitempty"`

	// LoRAs are adapters every engine loads at start next to the base model (vLLM's
	// --enable-lora and --lora-modules). Clients select one by sending its name as the request's
	// "model"; the router keeps the adapters' prefix caches apart and sends each request to an
	// engine that holds its prefix under that adapter. At most 16: with
	// spec.gateway.modelMatch Header, each name is matched on each public path of the HTTPRoute,
	// and Gateway API allows 64 matches in a rule.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, b.name == a.name))",message="spec.model.loras: every name must be unique: clients select an adapter by its name"
	// +listType=atomic
	// +optional
	LoRAs []LoRAAdapter `json:"loras,omitempty"`

	// MaxLoRAs is the number of adapters one batch can hold (vLLM's --max-loras): each takes a
	// GPU slot sized by maxLoraRank, so requests for more distinct adapters than slots wait for
	// one to free. Only with loras. Unset: vLLM's default, 1.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +optional
	MaxLoRAs *int32 `json:"maxLoras,omitempty"`

	// MaxLoRARank is the largest adapter rank the slots hold (vLLM's --max-lora-rank); an
	// adapter of a higher rank fails to load. Only with loras. Unset: vLLM's default, 16.
	// +kubebuilder:validation:Enum=1;8;16;32;64;128;256;320;512
	// +optional
	MaxLoRARank *int32 `json:"maxLoraRank,omitempty"`
}

// LoRAAdapter is one LoRA adapter of the base model.
type LoRAAdapter struct {
	// Name is the model name clients send to use the adapter. It must differ from the served
	// name of the base model.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._/:-]*$`
	Name string `json:"name"`

	// Source is what vLLM loads: a Hugging Face repository id (fetched like the base model,
	// with spec.model.hfTokenSecret) or an absolute path in spec.model.cachePVC, which the
	// engines mount at /models.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[^=\s]+$`
	Source string `json:"source"`
}

// EngineSpec configures the vLLM engine replicas.
// The rules guard with has(): the API server checks them against the schema default of
// spec.engine ({}) before nested defaults fill it, and would refuse the CRD otherwise.
// +kubebuilder:validation:XValidation:rule="!has(self.tensorParallelSize) || !has(self.gpu) || !has(self.gpu.perNode) || self.tensorParallelSize <= self.gpu.perNode",message="spec.engine.tensorParallelSize must not exceed spec.engine.gpu.perNode (the GPUs one node has): split larger models across nodes with nodesPerReplica"
// +kubebuilder:validation:XValidation:rule="!has(self.nodesPerReplica) || self.nodesPerReplica == 1 || !has(self.tensorParallelSize) || !has(self.gpu) || !has(self.gpu.perNode) || self.tensorParallelSize == self.gpu.perNode",message="spec.engine.nodesPerReplica > 1 needs spec.engine.tensorParallelSize equal to spec.engine.gpu.perNode: each node of a multi-node replica must be filled by tensor parallelism (pipeline parallelism spans the nodes)"
// +kubebuilder:validation:XValidation:rule="!has(self.apiKeySecret) || ((!has(self.env) || !self.env.exists(e, e.name == 'VLLM_API_KEY')) && (!has(self.extraArgs) || !self.extraArgs.exists(a, a.matches('^--api[-_]key(=.*)?$'))))",message="with spec.engine.apiKeySecret, spec.engine.env must not set VLLM_API_KEY and spec.engine.extraArgs must not set --api-key: the engines would check a key the router does not send"
type EngineSpec struct {
	// Image is the vLLM image. It must publish KV events (vLLM v0.9 or newer). Empty: the
	// operator's engine image (its --engine-image flag, set from RELATED_IMAGE_ENGINE by
	// config/manager and the OLM bundle), so that a disconnected install that mirrors and pins
	// the operator's images by digest pins the engines' too, and upgrading the operator upgrades
	// the engines of KVRouters that name no image. KVRouters created before v0.1.0 stored the
	// then schema default here and keep it until the field is removed.
	// +optional
	Image string `json:"image,omitempty"`

	// Replicas is the number of engine replicas. Ignored when spec.autoscaling is set.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// TensorParallelSize is the number of GPUs one model shard spans inside a node.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Enum=1;2;4;8;16
	// +optional
	TensorParallelSize int32 `json:"tensorParallelSize,omitempty"`

	// NodesPerReplica > 1 spreads one replica over several nodes with pipeline parallelism,
	// one LeaderWorkerSet group per replica.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	NodesPerReplica int32 `json:"nodesPerReplica,omitempty"`

	// GPU selects the GPU nodes.
	// +kubebuilder:default={}
	// +optional
	GPU GPUSpec `json:"gpu,omitempty"`

	// BlockSize is the KV-cache block size in tokens. The router's index uses the same value.
	// +kubebuilder:default=16
	// +kubebuilder:validation:Enum=8;16;32;64;128
	// +optional
	BlockSize int32 `json:"blockSize,omitempty"`

	// PrefixCachingHashAlgo is passed as --prefix-caching-hash-algo. sha256_cbor gives hashes
	// that are stable across processes and languages.
	// +kubebuilder:default=sha256_cbor
	// +kubebuilder:validation:Enum=sha256;sha256_cbor;xxhash;xxhash_cbor
	// +optional
	PrefixCachingHashAlgo string `json:"prefixCachingHashAlgo,omitempty"`

	// The CEL rule below mirrors internal/operator/render.ManagedEngineFlags;
	// TestCRDRulesAgreeWithValidate keeps them in step.

	// ExtraArgs are appended to the vLLM command line. They may not repeat a flag the operator
	// sets from the spec (vLLM keeps the last occurrence, so a second --block-size or
	// --prefix-caching-hash-algo would make the engines' block hashes disagree with the
	// router's index).
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.all(a, !a.matches('^(--(model|served[-_]model[-_]name|port|tensor[-_]parallel[-_]size|pipeline[-_]parallel[-_]size|block[-_]size|max[-_]model[-_]len|prefix[-_]caching[-_]hash[-_]algo|kv[-_]events[-_]config|nnodes|node[-_]rank|master[-_]addr|headless|distributed[-_]executor[-_]backend)|-tp|-pp)(=.*)?$'))",message="spec.engine.extraArgs must not set a flag the operator manages (--model, --served-model-name, --port, --tensor-parallel-size/-tp, --pipeline-parallel-size/-pp, --block-size, --max-model-len, --prefix-caching-hash-algo, --kv-events-config, --nnodes, --node-rank, --master-addr, --headless, --distributed-executor-backend): use the matching spec field"
	// +optional
	ExtraArgs []string `json:"extraArgs,omitempty"`

	// Env adds environment variables to the engine container. PYTHONHASHSEED, POD_NAME and
	// POD_IP are the operator's: the hash seed keeps vLLM's block hashes the same on every
	// engine and across restarts, and the KV-event topic names the pod.
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:XValidation:rule="self.all(e, !(e.name in ['PYTHONHASHSEED', 'POD_NAME', 'POD_IP']))",message="spec.engine.env must not set PYTHONHASHSEED, POD_NAME or POD_IP: the operator sets them (one hash seed for every engine, the pod in the KV-event topic)"
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`

	// Resources adds CPU and memory requests and limits to the engine container; the GPU limit
	// is set from tensorParallelSize.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// ShmSize sizes /dev/shm (a memory emptyDir) for NCCL.
	// +kubebuilder:default="8Gi"
	// +optional
	ShmSize *resource.Quantity `json:"shmSize,omitempty"`

	// StartupTimeoutSeconds is how long a replica may take to load the model before it is
	// restarted.
	// +kubebuilder:default=1800
	// +kubebuilder:validation:Minimum=60
	// +optional
	StartupTimeoutSeconds int32 `json:"startupTimeoutSeconds,omitempty"`

	// Tolerations are added to the engine pods, after the nvidia.com/gpu toleration.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// APIKeySecret is the engines' own API key (vLLM's --api-key): the engines get it as
	// VLLM_API_KEY from the Secret, and the router, which mounts the same key as a file, sends
	// it on every request it makes to them in place of the client's Authorization. vLLM reads
	// the key at start: after changing it, restart the engines (kubectl rollout restart).
	// +optional
	APIKeySecret *SecretKeyRef `json:"apiKeySecret,omitempty"`

	// RunAsUser is the UID the engine containers run as. Unset: none on OpenShift (the
	// restricted-v2 SCC assigns one from the namespace's range), elsewhere the vllm user of the
	// vLLM image (2000) or the operator's --engine-uid. On OpenShift a UID outside the
	// namespace's range needs an SCC that allows it, such as nonroot-v2.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2147483647
	// +optional
	RunAsUser *int64 `json:"runAsUser,omitempty"`
}

// GPUSpec selects the GPU nodes.
type GPUSpec struct {
	// Product is the value of the node label nvidia.com/gpu.product that engine pods require.
	// +kubebuilder:default="NVIDIA-H100-80GB-HBM3"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`
	// +optional
	Product string `json:"product,omitempty"`

	// PerNode is the number of GPUs one node has.
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +optional
	PerNode int32 `json:"perNode,omitempty"`
}

// RoutingPolicy selects how the router picks an engine for a request.
// +kubebuilder:validation:Enum=Auto;PrefillBound;DecodeBound;RoundRobin;LeastLoaded;PrefixOnly
type RoutingPolicy string

const (
	// PolicyAuto keeps a request on the engine that holds its longest prefix unless that engine is
	// saturated, and balances by the load signal that matches the request's shape.
	PolicyAuto RoutingPolicy = "Auto"
	// PolicyPrefillBound is Auto with load measured as uncached prefill tokens in flight.
	PolicyPrefillBound RoutingPolicy = "PrefillBound"
	// PolicyDecodeBound is Auto with load measured as active streams.
	PolicyDecodeBound RoutingPolicy = "DecodeBound"
	// PolicyRoundRobin ignores the cache, for A/B comparisons.
	PolicyRoundRobin RoutingPolicy = "RoundRobin"
	// PolicyLeastLoaded ignores the cache and picks the least loaded engine.
	PolicyLeastLoaded RoutingPolicy = "LeastLoaded"
	// PolicyPrefixOnly follows the longest prefix and ignores load.
	PolicyPrefixOnly RoutingPolicy = "PrefixOnly"
)

// RouterSpec configures the router Deployment.
type RouterSpec struct {
	// Replicas of the router. Each replica subscribes to every engine, so each index is exact.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Policy is the routing policy.
	// +kubebuilder:default=Auto
	// +optional
	Policy RoutingPolicy `json:"policy,omitempty"`

	// Image overrides the router image the operator was started with.
	// +optional
	Image string `json:"image,omitempty"`

	// SessionHeader names a request header whose value keeps a session on one engine when the
	// cache does not decide (a tie-breaker, never an override of saturation).
	// +kubebuilder:validation:MaxLength=128
	// +optional
	SessionHeader string `json:"sessionHeader,omitempty"`

	// Resources of the router container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// APIKeySecret makes the router require "Authorization: Bearer <key>" on the OpenAI API
	// (every /v1/ path of its public port; /health and /ready stay open for the probes). The
	// admin port (/metrics, /v1/status, /v1/autoscale) asks for no key: its NetworkPolicy admits
	// only the operator, Prometheus and KEDA. The Secret's key holds one API key per line and is
	// mounted as a file the router re-reads, so keys rotate without a restart: add the new key
	// as a line, move clients to it, then remove the old one.
	// +optional
	APIKeySecret *SecretKeyRef `json:"apiKeySecret,omitempty"`

	// Tokenizer says where the router gets a prompt's token ids, which its index lookups need.
	// +kubebuilder:default={}
	// +optional
	Tokenizer RouterTokenizerSpec `json:"tokenizer,omitempty"`
}

// TokenizerSource says who tokenizes prompts for the router.
// +kubebuilder:validation:Enum=Auto;Engine
type TokenizerSource string

const (
	// TokenizerAuto: the router tokenizes in its own process with the model's tokenizer.json and
	// chat template (read from the cache volume with fromCacheVolume, otherwise fetched from the
	// Hugging Face Hub with spec.model.hfTokenSecret), once they agree with an engine's /tokenize
	// on a sample. It keeps comparing a small share of requests with the engines', and asks the
	// engines whenever its tokenizer cannot be loaded or has disagreed once. With
	// spec.simulate (whose engines tokenize synthetically) and with a model given as a path the
	// router cannot read, Auto is Engine.
	TokenizerAuto TokenizerSource = "Auto"
	// TokenizerEngine: every text prompt is tokenized by an engine's /tokenize, a round trip that
	// waits in the engine's queue when the engine is busy.
	TokenizerEngine TokenizerSource = "Engine"
)

// RouterTokenizerSpec configures the router's tokenizer.
// +kubebuilder:validation:XValidation:rule="!has(self.fromCacheVolume) || !self.fromCacheVolume || !has(self.source) || self.source == 'Auto'",message="spec.router.tokenizer.fromCacheVolume applies only to spec.router.tokenizer.source: Auto (with Engine the router reads no tokenizer files): remove it, or set source to Auto"
type RouterTokenizerSpec struct {
	// Source: Auto (in process, checked against the engines) or Engine (each prompt sent to an
	// engine's /tokenize).
	// +kubebuilder:default=Auto
	// +optional
	Source TokenizerSource `json:"source,omitempty"`

	// FromCacheVolume mounts spec.model.cachePVC read-only in the router pods and reads the
	// tokenizer from it (the Hugging Face cache layout under HF_HOME, or the model's directory
	// when spec.model.name is a path), for clusters that cannot reach the Hub. The routers run
	// on other nodes than the engines, so the claim must allow that (ReadOnlyMany or
	// ReadWriteMany); with ReadWriteOnce the router pods would not start.
	// +optional
	FromCacheVolume bool `json:"fromCacheVolume,omitempty"`
}

// SecretKeyRef names one key of a Secret in the KVRouter's namespace. The operator never reads
// the Secret: it only points the pods at it.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// Key of the Secret's data that holds the API key.
	// +kubebuilder:default=api-key
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// GatewayMode says what the HTTPRoute sends requests to.
// +kubebuilder:validation:Enum=HTTPRoute;InferencePool
type GatewayMode string

const (
	// GatewayModeHTTPRoute: the HTTPRoute's backend is the router Service; the router picks an
	// engine and forwards the request to it.
	GatewayModeHTTPRoute GatewayMode = "HTTPRoute"
	// GatewayModeInferencePool: the HTTPRoute's backend is an InferencePool of the engines whose
	// endpoint picker is the router; the Gateway asks the router which engine to use and forwards
	// the request itself.
	GatewayModeInferencePool GatewayMode = "InferencePool"
)

// ModelMatch says how the HTTPRoute of a KVRouter tells its requests from those of other models
// served on the same Gateway hostname.
// +kubebuilder:validation:Enum=None;Header;Path
type ModelMatch string

const (
	// ModelMatchNone matches the public paths alone: one model per hostname.
	ModelMatchNone ModelMatch = "None"
	// ModelMatchHeader matches the public paths with the model header (ModelHeader) equal to the
	// served name or an adapter name; a body-based router in front sets it from the body.
	ModelMatchHeader ModelMatch = "Header"
	// ModelMatchPath matches the public paths under /<metadata.name> and strips that prefix.
	ModelMatchPath ModelMatch = "Path"
)

// ModelHeader is the request header the Gateway API Inference Extension's body-based router
// sets from the "model" field of an OpenAI request's JSON body.
const ModelHeader = "X-Gateway-Model-Name"

// EndpointPickerFailureMode is what the Gateway does when it cannot reach the endpoint picker.
// +kubebuilder:validation:Enum=FailOpen;FailClose
type EndpointPickerFailureMode string

const (
	// FailOpen: the Gateway picks an engine of the pool itself.
	FailOpen EndpointPickerFailureMode = "FailOpen"
	// FailClose: the Gateway refuses the request.
	FailClose EndpointPickerFailureMode = "FailClose"
)

// GatewaySpec attaches the KVRouter to Gateways with an HTTPRoute.
// +kubebuilder:validation:XValidation:rule="!has(self.failureMode) || (has(self.mode) && self.mode == 'InferencePool')",message="spec.gateway.failureMode applies only to spec.gateway.mode: InferencePool (it is the InferencePool's endpoint-picker failure mode): remove it, or set spec.gateway.mode to InferencePool"
type GatewaySpec struct {
	// ParentRefs are the Gateways (or listeners) the HTTPRoute attaches to.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	ParentRefs []gwapiv1.ParentReference `json:"parentRefs"`

	// Hostnames the route matches. Empty: every hostname of the listeners.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Hostnames []gwapiv1.Hostname `json:"hostnames,omitempty"`

	// Mode says what the HTTPRoute sends requests to. HTTPRoute: the router Service; the router
	// picks the engine and forwards the request, retrying another engine when one is unreachable
	// or hangs before its first byte. InferencePool: an InferencePool of the engines
	// (inference.networking.k8s.io/v1, Gateway API Inference Extension) whose endpoint picker is
	// the router (ext_proc over gRPC, port 9002); the Gateway asks the router which engine holds
	// the request's prefix and forwards the request to that engine itself, so the Gateway's
	// retries and timeouts apply and the router's do not. InferencePool needs a Gateway
	// that supports InferencePool backends and the InferencePool CRD; without the CRD the
	// operator keeps HTTPRoute mode and says so in the CRDsInstalled condition.
	// +kubebuilder:default=HTTPRoute
	// +optional
	Mode GatewayMode `json:"mode,omitempty"`

	// FailureMode is what the Gateway does when it cannot reach the router (every replica down,
	// or no answer in the Gateway's ext_proc timeout); only with mode InferencePool. FailOpen
	// (the default): the Gateway keeps serving and picks an engine of the pool itself, by its
	// own load balancing and blind to the prefix cache, so losing the routers costs cache hits
	// and latency, not availability. FailClose: the Gateway refuses the request (a 5xx), so every
	// request that reaches an engine was placed by the router (its cache-aware choice and its
	// overload control); choose it when a request placed blindly costs more than a refused one,
	// for instance engines that must never queue past what the router admits. The Inference
	// Extension's own default is FailClose; kvrouter's is FailOpen because its routers are
	// replicated and a routing outage should degrade serving, not stop it.
	// +optional
	FailureMode EndpointPickerFailureMode `json:"failureMode,omitempty"`

	// ModelMatch lets several KVRouters (several models) share a Gateway hostname: without it
	// their HTTPRoutes match the same paths and the Gateway sends each path to one of them.
	// None (the default): the paths alone, one model per hostname, as before this field
	// existed. Header: each path only with the header X-Gateway-Model-Name equal to
	// spec.model.servedName or one of spec.model.loras; the Inference Extension's body-based
	// router (BBR), deployed as the Gateway's ext_proc filter, sets that header from the
	// request body's "model", so clients change nothing. GET /v1/models has no body: clients
	// send the header themselves to list a model. Path: the paths under /<metadata.name>
	// (/<name>/v1/chat/completions), which the Gateway strips before forwarding; clients
	// change their base URL, and no BBR is needed (the Gateway must support HTTPRoute's
	// URLRewrite filter). None stays the default because Header needs BBR, which the operator
	// cannot see: a Gateway without it would answer 404 to every request of a route that
	// worked before.
	// +kubebuilder:default=None
	// +optional
	ModelMatch ModelMatch `json:"modelMatch,omitempty"`
}

// AutoscalingSpec hands the engine replica count to KEDA.
// +kubebuilder:validation:XValidation:rule="self.maxReplicas >= self.minReplicas",message="spec.autoscaling.maxReplicas must be greater than or equal to spec.autoscaling.minReplicas"
type AutoscalingSpec struct {
	// MinReplicas is the floor. Always rendered (KEDA's own default is 0, which would idle the
	// model and fail requests while it reloads).
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinReplicas int32 `json:"minReplicas,omitempty"`

	// MaxReplicas is the ceiling.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxReplicas int32 `json:"maxReplicas"`

	// TargetQueueDepth is the number of requests waiting per engine replica that KEDA aims for.
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +optional
	TargetQueueDepth int32 `json:"targetQueueDepth,omitempty"`

	// Prometheus reads the signal from a Prometheus server instead of from the router.
	// +optional
	Prometheus *PrometheusSpec `json:"prometheus,omitempty"`
}

// PrometheusSpec points KEDA at a Prometheus server that scrapes the engines.
type PrometheusSpec struct {
	// ServerAddress of the Prometheus HTTP API, e.g. http://prometheus.monitoring:9090.
	// +kubebuilder:validation:Pattern=`^https?://`
	ServerAddress string `json:"serverAddress"`
}

// KVRouterStatus is what the operator observed. Numbers that are not integers are strings: CRDs
// have no portable float type.
type KVRouterStatus struct {
	// ObservedGeneration is the generation the status describes, set after a successful reconcile.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready (summary), Progressing, Degraded, CRDsInstalled, InferencePoolReady (with
	// spec.gateway.mode InferencePool: the Gateways' verdict on the pool), and from the router's
	// /v1/status: RouterStatusAvailable, CacheThrashing, EventsDegraded, TokenizerDegraded,
	// EngineConfigMismatch and TokenizerMismatch.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Replicas is the number of engine replicas that are ready (the scale subresource reads it).
	// +optional
	Replicas int32 `json:"replicas"`

	// Selector selects the engine pods (leaders only for multi-node), for the scale subresource.
	// +optional
	Selector string `json:"selector,omitempty"`

	// Engines counts engine replicas.
	// +optional
	Engines ReplicaStatus `json:"engines,omitempty"`

	// Router counts router replicas.
	// +optional
	Router ReplicaStatus `json:"router,omitempty"`

	// URL is where clients send requests: the Gateway hostname when a route is attached, else the
	// router Service.
	// +optional
	URL string `json:"url,omitempty"`

	// Cache is the fleet's prefix-cache and preemption picture, read from the router's
	// /v1/status. Absent until the router has answered once.
	// +optional
	Cache *CacheStatus `json:"cache,omitempty"`

	// Endpoints has one row per engine endpoint the router routes to, sorted by name (at most
	// 64 rows; EndpointsOmitted counts the rest).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Endpoints []EndpointStatus `json:"endpoints,omitempty"`

	// EndpointsOmitted is the number of endpoints beyond the rows in Endpoints.
	// +optional
	EndpointsOmitted int32 `json:"endpointsOmitted,omitempty"`

	// Disaggregation shows the two pools and how the router splits requests, with
	// spec.disaggregation. The replica counts come from the workloads; the rest from the
	// router's /v1/status once it has answered.
	// +optional
	Disaggregation *DisaggregationStatus `json:"disaggregation,omitempty"`
}

// DisaggregationStatus is a disaggregated KVRouter's pools and split decisions.
type DisaggregationStatus struct {
	// Mode the router decides with (Auto, Always, Never or Threshold).
	// +optional
	Mode string `json:"mode,omitempty"`
	// SplitShare is the share of requests the router split into a prefill and a decode leg
	// over its recent window, such as "35.0%".
	// +optional
	SplitShare string `json:"splitShare,omitempty"`
	// SplitRequests and WholeRequests count requests served split and whole since the router
	// replica that answered started.
	// +optional
	SplitRequests int64 `json:"splitRequests,omitempty"`
	// +optional
	WholeRequests int64 `json:"wholeRequests,omitempty"`
	// Fallbacks counts split requests served whole after their prefill leg failed.
	// +optional
	Fallbacks int64 `json:"fallbacks,omitempty"`
	// Pools are the prefill and the decode pool.
	// +optional
	Pools DisaggregationPools `json:"pools,omitempty"`
}

// DisaggregationPools holds the two pools.
type DisaggregationPools struct {
	// +optional
	Prefill PoolStatus `json:"prefill,omitempty"`
	// +optional
	Decode PoolStatus `json:"decode,omitempty"`
}

// PoolStatus is one engine pool.
type PoolStatus struct {
	// Desired and Ready replicas of the pool's workload.
	Desired int32 `json:"desired"`
	Ready   int32 `json:"ready"`
	// HitRate is the pool's prefix-cache hit rate: the mean of its endpoints' rates ("" when
	// none had queries).
	// +optional
	HitRate string `json:"hitRate,omitempty"`
	// QueuedPrefillTokens sums the pool's uncached prompt tokens waiting for a first token.
	// +optional
	QueuedPrefillTokens int64 `json:"queuedPrefillTokens,omitempty"`
	// InFlight is the pool's requests in flight, as the router counts them.
	// +optional
	InFlight int64 `json:"inFlight,omitempty"`
}

// CacheStatus is the fleet's prefix-cache behaviour over a recent window. Rates are strings:
// percentages such as "87.5%", and per-minute rates such as "1.5".
type CacheStatus struct {
	// HitRate is the prefix-cache hit rate the engines measured over Window, token-weighted:
	// the increase of vllm:prefix_cache_hits_total over that of vllm:prefix_cache_queries_total,
	// summed over the engines. Empty when no prompt reached an engine in the window. A prompt
	// recomputed after its request was preempted counts as a hit again, so a high rate next to
	// a high preemption rate means thrashing (see the CacheThrashing condition).
	// +optional
	HitRate string `json:"hitRate,omitempty"`

	// PredictedHitRate is the share of prompt tokens the router expected the chosen engine to
	// hold when it routed them (from its KV-event index), over the last minute, as reported by
	// the router replica that answered. Well below HitRate: the index misses events; well
	// above: engines evict before requests arrive.
	// +optional
	PredictedHitRate string `json:"predictedHitRate,omitempty"`

	// PreemptionsPerMinute is the rate of vllm:num_preemptions_total over Window, summed over
	// the engines.
	// +optional
	PreemptionsPerMinute string `json:"preemptionsPerMinute,omitempty"`

	// Window is the span the rates are measured over.
	// +optional
	Window *metav1.Duration `json:"window,omitempty"`

	// LastSampleTime is when the router reported the values shown. The operator reads the router
	// every 30 seconds but writes only when a value changes, and at least every 5 minutes.
	// +optional
	LastSampleTime *metav1.Time `json:"lastSampleTime,omitempty"`
}

// EndpointStatus is one engine endpoint as the router sees it.
type EndpointStatus struct {
	// Name is the endpoint's name in the router (the pod name, with "#rank" for a data-parallel
	// rank).
	Name string `json:"name"`
	// Ready is true when the router sends it new requests.
	Ready bool `json:"ready"`
	// NotReadyReason says why the router does not route to it ("discovery", "connect-failures",
	// "scrape-failures", "suspect", "probation").
	// +optional
	NotReadyReason string `json:"notReadyReason,omitempty"`
	// Suspect is set while the router holds the endpoint out of routing as unresponsive: it
	// accepted requests and then sent nothing ("ttfb-timeout", "stream-stall"), or failed
	// several in a row ("consecutive-failures (...)"). The router probes it (GET /health) and
	// sends it traffic again once it answers.
	// +optional
	Suspect string `json:"suspect,omitempty"`
	// SuspectSince is when the router took it out of routing.
	// +optional
	SuspectSince *metav1.Time `json:"suspectSince,omitempty"`
	// HitRate is the engine's own prefix-cache hit rate over the window ("" without queries).
	// +optional
	HitRate string `json:"hitRate,omitempty"`
	// KVUsage is the share of its KV-cache blocks in use.
	// +optional
	KVUsage string `json:"kvUsage,omitempty"`
	// PreemptionsPerMinute over the window.
	// +optional
	PreemptionsPerMinute string `json:"preemptionsPerMinute,omitempty"`
	// EventLag is how far the router's view of its KV events trails the engine, e.g. "0.2s".
	// +optional
	EventLag string `json:"eventLag,omitempty"`
	// EventGaps counts sequence gaps in its KV-event stream since the router started.
	// +optional
	EventGaps int64 `json:"eventGaps,omitempty"`
	// EventsHealthy is false when its KV events are not current (disconnected, stale, or missing).
	// +optional
	EventsHealthy bool `json:"eventsHealthy"`
	// Role is the endpoint's pool with spec.disaggregation: prefill or decode.
	// +optional
	Role string `json:"role,omitempty"`
}

// ReplicaStatus counts the replicas of one workload.
type ReplicaStatus struct {
	// Desired replicas.
	Desired int32 `json:"desired"`
	// Ready replicas.
	Ready int32 `json:"ready"`
}

// KVRouter serves one model on a fleet of vLLM replicas behind a KV-cache-aware router.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.engine.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=kvr,categories=all
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="HitRate",type=string,JSONPath=`.status.cache.hitRate`,description="Prefix-cache hit rate the engines measured over status.cache.window"
// +kubebuilder:printcolumn:name="Preemptions",type=string,JSONPath=`.status.cache.preemptionsPerMinute`,description="Engine preemptions per minute over status.cache.window"
// +kubebuilder:printcolumn:name="Split",type=string,JSONPath=`.status.disaggregation.splitShare`,priority=1,description="Share of requests split into prefill and decode legs"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Predicted",type=string,JSONPath=`.status.cache.predictedHitRate`,priority=1,description="Hit rate the router predicted"
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.status.url`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// metadata.name must be a DNS-1035 label of at most 56 characters: it names the router Service
// ("<name>-router").
// +kubebuilder:validation:XValidation:rule="!has(self.spec.model.loras) || !self.spec.model.loras.exists(a, a.name == (has(self.spec.model.servedName) && size(self.spec.model.servedName) > 0 ? self.spec.model.servedName : self.metadata.name))",message="spec.model.loras: an adapter name must differ from the served model name (spec.model.servedName, else metadata.name): clients would not be able to reach the base model"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 56 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter and ending with a letter or digit) of at most 56 characters: it names the KVRouter's Services"
type KVRouter struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KVRouterSpec   `json:"spec,omitempty"`
	Status KVRouterStatus `json:"status,omitempty"`
}

// KVRouterList is a list of KVRouters.
// +kubebuilder:object:root=true
type KVRouterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KVRouter `json:"items"`
}

func init() {
	SchemeBuilder.Register(&KVRouter{}, &KVRouterList{})
}
