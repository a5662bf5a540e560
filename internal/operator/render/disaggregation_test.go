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
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/test/wrappers"
)

// The router learns each engine's pool from the label render puts on the pod.
func TestRoleLabelIsTheRoutersDiscoveryLabel(t *testing.T) {
	if render.LabelRole != discovery.RoleLabel {
		t.Errorf("render labels pools %q, the router's discovery reads %q", render.LabelRole, discovery.RoleLabel)
	}
	if string(render.PoolPrefill) != discovery.RolePrefill || string(render.PoolDecode) != discovery.RoleDecode {
		t.Errorf("pool names %q/%q, the router's roles %q/%q", render.PoolPrefill, render.PoolDecode, discovery.RolePrefill, discovery.RoleDecode)
	}
}

func disaggregated(w *wrappers.KVRouterWrapper, d v1alpha1.DisaggregationSpec) *v1alpha1.KVRouter {
	kvr := w.Obj()
	kvr.Spec.Disaggregation = &d
	return kvr
}

func deploymentsByName(objs []client.Object) map[string]*appsv1.Deployment {
	out := map[string]*appsv1.Deployment{}
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			out[d.Name] = d
		}
	}
	return out
}

func TestDisaggregatedPools(t *testing.T) {
	kvr := disaggregated(wrappers.MakeKVRouter("m", "ns").Replicas(3).TensorParallel(2).
		EngineResources(corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: mustQuantity(t, "4")}}),
		v1alpha1.DisaggregationSpec{
			Prefill: v1alpha1.PrefillPoolSpec{Replicas: ptr.To[int32](2), PoolSpec: v1alpha1.PoolSpec{
				Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: mustQuantity(t, "12")}},
			}},
			SideChannelPort: 5601,
		})
	objs := mustObjects(t, kvr, render.Options{})
	ds := deploymentsByName(objs)
	if _, ok := ds[render.EngineWorkloadName(kvr)]; ok {
		t.Errorf("the aggregated workload %s is rendered next to the pools", render.EngineWorkloadName(kvr))
	}
	prefill, decode := ds["m-engine-prefill"], ds["m-engine-decode"]
	if prefill == nil || decode == nil {
		t.Fatalf("want Deployments m-engine-prefill and m-engine-decode, got %v", slices.Sorted(maps.Keys(ds)))
	}
	// spec.engine.replicas sizes the decode pool (the scale subresource), prefill its own.
	if got := ptr.Deref(decode.Spec.Replicas, -1); got != 3 {
		t.Errorf("decode replicas %d, want spec.engine.replicas 3", got)
	}
	if got := ptr.Deref(prefill.Spec.Replicas, -1); got != 2 {
		t.Errorf("prefill replicas %d, want 2", got)
	}
	routerSel, err := labels.Parse(render.EngineSelector(kvr))
	if err != nil {
		t.Fatal(err)
	}
	scaleSel, err := labels.Parse(render.ScaleSelector(kvr))
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]*appsv1.Deployment{"prefill": prefill, "decode": decode} {
		pod := d.Spec.Template
		if pod.Labels[render.LabelRole] != name {
			t.Errorf("%s pods labelled %v", name, pod.Labels)
		}
		if !routerSel.Matches(labels.Set(pod.Labels)) {
			t.Errorf("the router's selector %s misses the %s pods", routerSel, name)
		}
		if scaleSel.Matches(labels.Set(pod.Labels)) != (name == "decode") {
			t.Errorf("status.selector %s matches the %s pods: %v", scaleSel, name, scaleSel.Matches(labels.Set(pod.Labels)))
		}
		// Each Deployment must own only its pool's pods.
		other := prefill
		if d == prefill {
			other = decode
		}
		sel, _ := metav1Selector(d)
		if sel.Matches(labels.Set(other.Spec.Template.Labels)) {
			t.Errorf("the %s Deployment's selector also selects the other pool's pods", name)
		}
		c := pod.Spec.Containers[0]
		i := slices.Index(c.Args, "--kv-transfer-config")
		if i < 0 || i+1 >= len(c.Args) {
			t.Fatalf("%s: no --kv-transfer-config in %v", name, c.Args)
		}
		var cfg map[string]any
		if err := json.Unmarshal([]byte(c.Args[i+1]), &cfg); err != nil {
			t.Fatalf("%s: --kv-transfer-config %q: %v", name, c.Args[i+1], err)
		}
		if cfg["kv_connector"] != "NixlConnector" || cfg["kv_role"] != "kv_both" || cfg["kv_load_failure_policy"] != "recompute" {
			t.Errorf("%s: --kv-transfer-config %v", name, cfg)
		}
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		if env["VLLM_NIXL_SIDE_CHANNEL_HOST"] != "$(POD_IP)" || env["VLLM_NIXL_SIDE_CHANNEL_PORT"] != "5601" || env["UCX_TLS"] == "" {
			t.Errorf("%s: side-channel env %v", name, env)
		}
		// $(POD_IP) expands only from a variable defined earlier in the list.
		if slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_IP" }) >
			slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "VLLM_NIXL_SIDE_CHANNEL_HOST" }) {
			t.Errorf("%s: POD_IP is defined after VLLM_NIXL_SIDE_CHANNEL_HOST, which the kubelet would not expand", name)
		}
		wantCPU := map[string]string{"prefill": "12", "decode": "4"}[name]
		if got := c.Resources.Requests.Cpu().String(); got != wantCPU {
			t.Errorf("%s: cpu request %s, want %s (pool override, else spec.engine.resources)", name, got, wantCPU)
		}
		if got := c.Resources.Limits[render.GPUResource]; got.Value() != 2 {
			t.Errorf("%s: GPU limit %s, want the tensor-parallel size 2", name, got.String())
		}
	}
	router := ds[render.RouterName(kvr)].Spec.Template.Spec.Containers[0].Args
	if got := strings.Join(router, " "); !strings.Contains(got, "--pd-mode Auto") || !strings.Contains(got, "--pd-whole-on any") ||
		strings.Contains(got, "--pd-threshold-tokens") {
		t.Errorf("router args %q, want --pd-mode Auto --pd-whole-on any and no threshold", got)
	}

	// Without spec.disaggregation nothing of it shows.
	for _, o := range mustObjects(t, wrappers.MakeKVRouter("m", "ns").Obj(), render.Options{}) {
		if d, ok := o.(*appsv1.Deployment); ok {
			if strings.Contains(fmt.Sprint(d.Spec.Template.Spec.Containers[0].Args), "--pd-") ||
				slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--kv-transfer-config") || d.Spec.Template.Labels[render.LabelRole] != "" {
				t.Errorf("aggregated %s carries disaggregation settings", d.Name)
			}
		}
	}
}

// A pool may run on another GPU model than spec.engine.gpu.product (its own node selector wins).
func TestDisaggregatedPoolGPUProduct(t *testing.T) {
	kvr := disaggregated(wrappers.MakeKVRouter("m", "ns"), v1alpha1.DisaggregationSpec{
		Decode: v1alpha1.PoolSpec{NodeSelector: map[string]string{render.GPUProductLabel: "NVIDIA-H200", "pool": "decode"}}})
	ds := deploymentsByName(mustObjects(t, kvr, render.Options{}))
	if got := ds["m-engine-decode"].Spec.Template.Spec.NodeSelector; got[render.GPUProductLabel] != "NVIDIA-H200" || got["pool"] != "decode" {
		t.Errorf("decode node selector %v, want the pool's GPU product and label", got)
	}
	if got := ds["m-engine-prefill"].Spec.Template.Spec.NodeSelector[render.GPUProductLabel]; got != "NVIDIA-H100-80GB-HBM3" {
		t.Errorf("prefill GPU product %q, want spec.engine.gpu.product's", got)
	}
}

// A stopped KVRouter (spec.engine.replicas 0) stops both pools.
func TestDisaggregatedStopStopsBothPools(t *testing.T) {
	for name, prefill := range map[string]v1alpha1.PrefillPoolSpec{
		"fixed": {Replicas: ptr.To[int32](3)},
		// KEDA's floor would keep the prefill GPUs: no ScaledObject while stopped.
		"autoscaled": {Autoscaling: &v1alpha1.PoolAutoscalingSpec{MinReplicas: 2, MaxReplicas: 4}},
	} {
		kvr := disaggregated(wrappers.MakeKVRouter("m", "ns").Replicas(0), v1alpha1.DisaggregationSpec{Prefill: prefill})
		objs := mustObjects(t, kvr, render.Options{})
		ds := deploymentsByName(objs)
		for _, n := range []string{"m-engine-prefill", "m-engine-decode"} {
			if got := ptr.Deref(ds[n].Spec.Replicas, -1); got != 0 {
				t.Errorf("%s: %s replicas %d, want 0", name, n, got)
			}
		}
		for _, o := range objs {
			if o.GetObjectKind().GroupVersionKind().Kind == render.ScaledObjectKind {
				t.Errorf("%s: a stopped KVRouter renders ScaledObject %s", name, o.GetName())
			}
		}
	}
}

func TestDisaggregationRouterFlags(t *testing.T) {
	for _, tc := range []struct {
		d    v1alpha1.DisaggregationSpec
		want string
	}{
		{v1alpha1.DisaggregationSpec{Mode: v1alpha1.DisaggregationThreshold, ThresholdTokens: ptr.To[int32](1024)},
			"--pd-mode Threshold --pd-threshold-tokens 1024 --pd-whole-on any"},
		{v1alpha1.DisaggregationSpec{Mode: v1alpha1.DisaggregationAlways, WholeRequestsOn: v1alpha1.WholeOnDecode},
			"--pd-mode Always --pd-whole-on decode"},
		{v1alpha1.DisaggregationSpec{Mode: v1alpha1.DisaggregationNever}, "--pd-mode Never --pd-whole-on any"},
	} {
		kvr := disaggregated(wrappers.MakeKVRouter("m", "ns"), tc.d)
		args := strings.Join(deploymentsByName(mustObjects(t, kvr, render.Options{}))[render.RouterName(kvr)].Spec.Template.Spec.Containers[0].Args, " ")
		if !strings.Contains(args, tc.want) {
			t.Errorf("mode %s: router args %q lack %q", tc.d.Mode, args, tc.want)
		}
	}
}

func TestDisaggregationUCXTransports(t *testing.T) {
	for transport, want := range map[v1alpha1.KVTransport]string{
		v1alpha1.TransportRDMA: "rc,cuda_copy,cuda_ipc", v1alpha1.TransportRoCE: "rc,cuda_copy,cuda_ipc",
		v1alpha1.TransportNVLink: "cuda_ipc,cuda_copy,tcp", v1alpha1.TransportTCP: "tcp,cuda_copy",
	} {
		kvr := disaggregated(wrappers.MakeKVRouter("m", "ns"), v1alpha1.DisaggregationSpec{Network: v1alpha1.KVNetworkSpec{Transport: transport}})
		for _, n := range []string{"m-engine-prefill", "m-engine-decode"} {
			c := deploymentsByName(mustObjects(t, kvr, render.Options{}))[n].Spec.Template.Spec.Containers[0]
			i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "UCX_TLS" })
			if i < 0 || c.Env[i].Value != want {
				t.Errorf("%s %s: UCX_TLS %v, want %q", transport, n, c.Env, want)
			}
		}
	}
}

// Validate refuses what the CRD refuses, each with a message naming the field.
func TestValidateDisaggregation(t *testing.T) {
	for name, tc := range map[string]struct {
		kvr   *v1alpha1.KVRouter
		field string
	}{
		"threshold without tokens": {disaggregated(wrappers.MakeKVRouter("m", "ns"), v1alpha1.DisaggregationSpec{Mode: v1alpha1.DisaggregationThreshold}),
			"spec.disaggregation.thresholdTokens"},
		"tokens without threshold": {disaggregated(wrappers.MakeKVRouter("m", "ns"), v1alpha1.DisaggregationSpec{ThresholdTokens: ptr.To[int32](10)}),
			"spec.disaggregation.thresholdTokens"},
		"side channel on the HTTP port": {disaggregated(wrappers.MakeKVRouter("m", "ns"), v1alpha1.DisaggregationSpec{SideChannelPort: 8000}),
			"spec.disaggregation.sideChannelPort"},
		"side channel on the KV-event port": {disaggregated(wrappers.MakeKVRouter("m", "ns"), v1alpha1.DisaggregationSpec{SideChannelPort: 5557}),
			"spec.disaggregation.sideChannelPort"},
		"prefill autoscaling min above max": {disaggregated(wrappers.MakeKVRouter("m", "ns"), v1alpha1.DisaggregationSpec{
			Prefill: v1alpha1.PrefillPoolSpec{Autoscaling: &v1alpha1.PoolAutoscalingSpec{MinReplicas: 4, MaxReplicas: 2}}}),
			"spec.disaggregation.prefill.autoscaling.maxReplicas"},
		"extraArgs sets the connector": {disaggregated(wrappers.MakeKVRouter("m", "ns").ExtraArgs("--kv_transfer_config={}"), v1alpha1.DisaggregationSpec{}),
			"spec.engine.extraArgs[0]"},
		"env sets the side-channel port": {disaggregated(wrappers.MakeKVRouter("m", "ns").Env("VLLM_NIXL_SIDE_CHANNEL_PORT", "1"), v1alpha1.DisaggregationSpec{}),
			"spec.engine.env[0].name"},
		"unknown connector": {disaggregated(wrappers.MakeKVRouter("m", "ns"), v1alpha1.DisaggregationSpec{Connector: "P2pNcclConnector"}),
			"spec.disaggregation.connector"},
		"LMCache connector (push protocol not implemented)": {disaggregated(wrappers.MakeKVRouter("m", "ns"), v1alpha1.DisaggregationSpec{Connector: v1alpha1.ConnectorLMCache}),
			"spec.disaggregation.connector: Forbidden: LMCacheConnectorV1 is not supported yet"},
		"extraArgs sets one field of the connector": {disaggregated(wrappers.MakeKVRouter("m", "ns").ExtraArgs("--max-num-seqs=8", "--kv-transfer-config.kv_role=kv_producer"), v1alpha1.DisaggregationSpec{}),
			"spec.engine.extraArgs[1]: Invalid value: \"--kv-transfer-config.kv_role=kv_producer\": --kv-transfer-config is set by the operator"},
		"mode Never with whole requests on decode only": {disaggregated(wrappers.MakeKVRouter("m", "ns"),
			v1alpha1.DisaggregationSpec{Mode: v1alpha1.DisaggregationNever, WholeRequestsOn: v1alpha1.WholeOnDecode}),
			"spec.disaggregation.wholeRequestsOn: Invalid value: \"Decode\""},
		"data-parallel size 2": {disaggregated(wrappers.MakeKVRouter("m", "ns").ExtraArgs("--data-parallel-size=2"), v1alpha1.DisaggregationSpec{}),
			"spec.engine.extraArgs[0]: Invalid value: \"--data-parallel-size=2\": --data-parallel-size"},
		"data-parallel size as the next argument": {disaggregated(wrappers.MakeKVRouter("m", "ns").ExtraArgs("-dp", "4"), v1alpha1.DisaggregationSpec{}),
			"spec.engine.extraArgs[0]"},
		"local data-parallel size": {disaggregated(wrappers.MakeKVRouter("m", "ns").ExtraArgs("--data_parallel_size_local=2"), v1alpha1.DisaggregationSpec{}),
			"spec.engine.extraArgs[0]"},
		"side channel on vLLM's master port, multi-node": {disaggregated(wrappers.MakeKVRouter("m", "ns").TensorParallel(8).NodesPerReplica(2),
			v1alpha1.DisaggregationSpec{SideChannelPort: 29501}),
			"spec.disaggregation.sideChannelPort: Invalid value: 29501"},
	} {
		kvr := tc.kvr.DeepCopy()
		render.Default(kvr)
		err := render.Validate(kvr)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Validate = %v, want an error naming %s", name, err, tc.field)
		}
	}
	// Aggregated, the connector flag and the variables are the user's.
	kvr := wrappers.MakeKVRouter("m", "ns").ExtraArgs("--kv-transfer-config", "{}").Env("UCX_TLS", "tcp").Obj()
	render.Default(kvr)
	if err := render.Validate(kvr); err != nil {
		t.Errorf("aggregated KVRouter with its own connector: %v", err)
	}
	// Accepted next to disaggregation: one data-parallel rank, UCX tuning, mode Never serving on
	// both pools, and 29501 on a single-node replica (no rendezvous there).
	for name, kvr := range map[string]*v1alpha1.KVRouter{
		"data-parallel size 1": disaggregated(wrappers.MakeKVRouter("m", "ns").ExtraArgs("--data-parallel-size=1", "-dp=01"), v1alpha1.DisaggregationSpec{}),
		"UCX_TLS":              disaggregated(wrappers.MakeKVRouter("m", "ns").Env("UCX_TLS", "dc_x,cuda_copy"), v1alpha1.DisaggregationSpec{}),
		"mode Never on any":    disaggregated(wrappers.MakeKVRouter("m", "ns"), v1alpha1.DisaggregationSpec{Mode: v1alpha1.DisaggregationNever}),
		"29501, single node":   disaggregated(wrappers.MakeKVRouter("m", "ns"), v1alpha1.DisaggregationSpec{SideChannelPort: 29501}),
	} {
		kvr := kvr.DeepCopy()
		render.Default(kvr)
		if err := render.Validate(kvr); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A user UCX_TLS replaces the one rendered from the transport, once, in both pools.
func TestDisaggregationUserUCXTransports(t *testing.T) {
	kvr := disaggregated(wrappers.MakeKVRouter("m", "ns").Env("UCX_TLS", "rc,^cuda_ipc"),
		v1alpha1.DisaggregationSpec{Network: v1alpha1.KVNetworkSpec{Transport: v1alpha1.TransportRDMA}})
	for _, n := range []string{"m-engine-prefill", "m-engine-decode"} {
		c := deploymentsByName(mustObjects(t, kvr, render.Options{}))[n].Spec.Template.Spec.Containers[0]
		var values []string
		for _, e := range c.Env {
			if e.Name == "UCX_TLS" {
				values = append(values, e.Value)
			}
		}
		if !slices.Equal(values, []string{"rc,^cuda_ipc"}) {
			t.Errorf("%s: UCX_TLS %q, want the user's value once", n, values)
		}
	}
}

// As the InferencePool's endpoint picker, the router names the pd-sidecar port as the
// destination, so that split requests pass through the sidecar; in proxy mode it has none.
func TestDisaggregationEPPDestinationPort(t *testing.T) {
	for name, tc := range map[string]struct {
		w    *wrappers.KVRouterWrapper
		want bool
	}{
		"InferencePool": {wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "h.example.com").InferencePool(v1alpha1.FailClose), true},
		"HTTPRoute":     {wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "h.example.com"), false},
		"no gateway":    {wrappers.MakeKVRouter("m", "ns"), false},
	} {
		kvr := disaggregated(tc.w, v1alpha1.DisaggregationSpec{})
		args := deploymentsByName(mustObjects(t, kvr, render.Options{}))[render.RouterName(kvr)].Spec.Template.Spec.Containers[0].Args
		i := slices.Index(args, "--epp-destination-port")
		if got := i >= 0; got != tc.want {
			t.Fatalf("%s: --epp-destination-port rendered %v, want %v (args %q)", name, got, tc.want, args)
		}
		if i >= 0 && (i+1 >= len(args) || args[i+1] != strconv.Itoa(render.PDSidecarPort)) {
			t.Errorf("%s: --epp-destination-port not followed by %d: %q", name, render.PDSidecarPort, args)
		}
	}
	// Aggregated behind an InferencePool the engines have no sidecar, so no destination port.
	kvr := wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "h.example.com").InferencePool(v1alpha1.FailClose).Obj()
	args := deploymentsByName(mustObjects(t, kvr, render.Options{}))[render.RouterName(kvr)].Spec.Template.Spec.Containers[0].Args
	if slices.Contains(args, "--epp-destination-port") {
		t.Errorf("aggregated InferencePool router args %q name a destination port", args)
	}
}

func metav1Selector(d *appsv1.Deployment) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(d.Spec.Selector)
}
