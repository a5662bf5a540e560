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
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/utils/ptr"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/wrappers"
)

// TestCRDRulesAgreeWithValidate runs the CRD's CEL rules (with the API server's own evaluator) and
// Validate on the same specs. The rules on metadata.name, spec.engine.extraArgs and
// spec.engine.env are hand-written copies of Validate's checks; a flag added to
// ManagedEngineFlags without the marker in api/v1alpha1 fails here.
func TestCRDRulesAgreeWithValidate(t *testing.T) {
	validator := cel.NewValidator(loadStructuralSchema(t), true, celconfig.PerCallLimit)
	if validator == nil {
		t.Fatal("the CRD has no CEL rules")
	}
	celErrors := func(kvr *v1alpha1.KVRouter) string {
		t.Helper()
		errs, _ := validator.Validate(context.Background(), nil, nil, requestBody(t, kvr), nil, celconfig.RuntimeCELCostBudget)
		if len(errs) == 0 {
			return ""
		}
		return errs.ToAggregate().Error()
	}

	var args [][]string
	for _, f := range render.ManagedEngineFlags {
		under := "--" + strings.ReplaceAll(strings.TrimPrefix(f, "--"), "-", "_")
		args = append(args, []string{f, "x"}, []string{f + "=x"}, []string{under, "x"}, []string{"--ok", under + "=1"})
	}
	args = append(args, []string{"-tp", "2"}, []string{"-pp=2"}, []string{"--model-impl", "vllm"},
		[]string{"--port-range", "1"}, []string{"-tpx"}, []string{"--enable-chunked-prefill"}, []string{"--tokenizer-mode", "model"})
	for _, a := range args {
		kvr := wrappers.MakeKVRouter("m", "ns").ExtraArgs(a...).Obj()
		render.Default(kvr)
		goRefuses := render.Validate(kvr) != nil
		celRefuses := strings.Contains(celErrors(kvr), "spec.engine.extraArgs must not set")
		if goRefuses != celRefuses {
			t.Errorf("extraArgs %q: Validate refuses=%v, CRD rule refuses=%v", a, goRefuses, celRefuses)
		}
	}

	// The LoRA flags: refused in extraArgs only while spec.model.loras is set.
	var loraArgs [][]string
	for _, f := range render.LoRAEngineFlags {
		under := "--" + strings.ReplaceAll(strings.TrimPrefix(f, "--"), "-", "_")
		loraArgs = append(loraArgs, []string{f}, []string{f + "=4"}, []string{under, "4"}, []string{"--ok", under + "=1"})
	}
	loraArgs = append(loraArgs, []string{"--max-lora"}, []string{"--lora-extra-vocab-size", "256"}, []string{"--max-cpu-loras", "8"},
		[]string{"--enable-lora-bias"}, []string{"--fully-sharded-loras"})
	for _, a := range loraArgs {
		for _, adapters := range []bool{false, true} {
			kvr := wrappers.MakeKVRouter("m", "ns").ExtraArgs(a...).Obj()
			if adapters {
				kvr.Spec.Model.LoRAs = []v1alpha1.LoRAAdapter{{Name: "a", Source: "org/a"}}
			}
			render.Default(kvr)
			goRefuses := render.Validate(kvr) != nil
			celRefuses := strings.Contains(celErrors(kvr), "spec.engine.extraArgs must not set --enable-lora")
			if goRefuses != celRefuses {
				t.Errorf("extraArgs %q with adapters %v: Validate refuses=%v, CRD rule refuses=%v", a, adapters, goRefuses, celRefuses)
			}
		}
	}

	for _, name := range append(render.ReservedEngineEnv, "POD_NAMESPACE", "PYTHONPATH") {
		kvr := wrappers.MakeKVRouter("m", "ns").Env(name, "1").Obj()
		render.Default(kvr)
		goRefuses := render.Validate(kvr) != nil
		celRefuses := strings.Contains(celErrors(kvr), "spec.engine.env must not set")
		if goRefuses != celRefuses {
			t.Errorf("env %s: Validate refuses=%v, CRD rule refuses=%v", name, goRefuses, celRefuses)
		}
	}

	for _, name := range []string{"m", "a-b-1", strings.Repeat("a", render.MaxNameLength), strings.Repeat("a", render.MaxNameLength+1),
		"llama-3.1", "1abc", "abc-", "Upper", "a_b"} {
		kvr := wrappers.MakeKVRouter(name, "ns").Obj()
		render.Default(kvr)
		goRefuses := render.Validate(kvr) != nil
		celRefuses := strings.Contains(celErrors(kvr), "metadata.name must be a DNS-1035 label")
		if goRefuses != celRefuses {
			t.Errorf("name %q: Validate refuses=%v, CRD rule refuses=%v", name, goRefuses, celRefuses)
		}
	}
}

// TestSchemaAgreesWithValidate: for the fields whose schema Validate copies (the scrape interval's
// pattern, the engine UID's range, spec.gateway's modes and their CEL rules), the CRD admits
// exactly what Validate accepts.
func TestSchemaAgreesWithValidate(t *testing.T) {
	crd := newCRDAdmission(t)
	agree := func(what string, kvr *v1alpha1.KVRouter) {
		t.Helper()
		_, admitted := crd.admit(t, kvr)
		defaulted := kvr.DeepCopy()
		render.Default(defaulted)
		if accepted := render.Validate(defaulted) == nil; accepted != admitted {
			t.Errorf("%s: CRD admits=%v, Validate accepts=%v", what, admitted, accepted)
		}
	}
	for _, interval := range []string{"15s", "1m30s", "2h", "500ms", "1h2m3s4ms", "30s1m", "1d", "5", "1.5s", "15 s", strings.Repeat("1", 31) + "s", strings.Repeat("1", 32) + "s"} {
		kvr := wrappers.MakeKVRouter("m", "ns").Obj()
		kvr.Spec.Monitoring = &v1alpha1.MonitoringSpec{Interval: interval}
		agree("interval "+interval, kvr)
	}
	// spec.gateway's mode and failure mode, and the router's key, which no mode but HTTPRoute can
	// check: the CRD's enums and CEL rules against Validate.
	for _, mode := range []v1alpha1.GatewayMode{"", v1alpha1.GatewayModeHTTPRoute, v1alpha1.GatewayModeInferencePool, "Service"} {
		for _, failure := range []v1alpha1.EndpointPickerFailureMode{"", v1alpha1.FailOpen, v1alpha1.FailClose, "Retry"} {
			for _, routerKey := range []bool{false, true} {
				for _, engineKey := range []bool{false, true} {
					kvr := wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "h.example.com").Obj()
					kvr.Spec.Gateway.Mode, kvr.Spec.Gateway.FailureMode = mode, failure
					if routerKey {
						kvr.Spec.Router.APIKeySecret = &v1alpha1.SecretKeyRef{Name: "keys"}
					}
					if engineKey {
						kvr.Spec.Engine.APIKeySecret = &v1alpha1.SecretKeyRef{Name: "engine-key"}
					}
					agree(fmt.Sprintf("gateway mode %q failureMode %q router key %v engine key %v", mode, failure, routerKey, engineKey), kvr)
				}
			}
		}
	}
	// spec.router.tokenizer: its enum and the two rules on fromCacheVolume.
	for _, source := range []v1alpha1.TokenizerSource{"", v1alpha1.TokenizerAuto, v1alpha1.TokenizerEngine, "Local"} {
		for _, fromVolume := range []bool{false, true} {
			for _, pvc := range []string{"", "models"} {
				kvr := wrappers.MakeKVRouter("m", "ns").Tokenizer(source, fromVolume).CachePVC(pvc).Obj()
				agree(fmt.Sprintf("tokenizer source %q fromCacheVolume %v cachePVC %q", source, fromVolume, pvc), kvr)
			}
		}
	}
	// spec.model.loras: names (pattern, uniqueness, the served name), sources, and the slot
	// settings, which apply only with adapters.
	adapter := func(name, source string) v1alpha1.LoRAAdapter {
		return v1alpha1.LoRAAdapter{Name: name, Source: source}
	}
	for what, loras := range map[string][]v1alpha1.LoRAAdapter{
		"none":                 nil,
		"two":                  {adapter("sql", "org/sql"), adapter("chat", "/models/adapters/chat")},
		"duplicate":            {adapter("sql", "org/sql"), adapter("sql", "org/other")},
		"served name":          {adapter("base", "org/a")},
		"KVRouter name":        {adapter("m", "org/a")},
		"name with a space":    {adapter("my lora", "org/a")},
		"name starting with /": {adapter("/a", "org/a")},
		"empty name":           {adapter("", "org/a")},
		"empty source":         {adapter("a", "")},
		"source with =":        {adapter("a", "/models/a=b")},
		"source with a space":  {adapter("a", "/models/a b")},
		"long name":            {adapter(strings.Repeat("a", 254), "org/a")},
		"long source":          {adapter("a", strings.Repeat("a", 513))},
	} {
		for _, servedName := range []string{"", "base"} {
			for _, slots := range []*int32{nil, ptr.To[int32](0), ptr.To[int32](4), ptr.To[int32](17)} {
				for _, rank := range []*int32{nil, ptr.To[int32](1), ptr.To[int32](24), ptr.To[int32](320)} {
					kvr := wrappers.MakeKVRouter("m", "ns").ServedName(servedName).Obj()
					kvr.Spec.Model.LoRAs = loras
					kvr.Spec.Model.MaxLoRAs, kvr.Spec.Model.MaxLoRARank = slots, rank
					agree(fmt.Sprintf("loras %s servedName %q maxLoras %v maxLoraRank %v", what, servedName, ptr.Deref(slots, -1), ptr.Deref(rank, -1)), kvr)
				}
			}
		}
	}
	tooMany := wrappers.MakeKVRouter("m", "ns").Obj()
	for i := range render.MaxLoRAs + 1 {
		tooMany.Spec.Model.LoRAs = append(tooMany.Spec.Model.LoRAs, adapter(fmt.Sprintf("a%d", i), "org/a"))
	}
	agree("too many loras", tooMany)
	for _, match := range []v1alpha1.ModelMatch{"", v1alpha1.ModelMatchNone, v1alpha1.ModelMatchHeader, v1alpha1.ModelMatchPath, "Host"} {
		kvr := wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "h.example.com").Obj()
		kvr.Spec.Gateway.ModelMatch = match
		agree(fmt.Sprintf("modelMatch %q", match), kvr)
	}
	// spec.disaggregation: its enums, bounds and CEL rules, and the rules that keep its flag and
	// variables out of spec.engine.extraArgs and env.
	for _, mode := range []v1alpha1.DisaggregationMode{"", v1alpha1.DisaggregationAuto, v1alpha1.DisaggregationThreshold, v1alpha1.DisaggregationNever, "Sometimes"} {
		for _, tokens := range []*int32{nil, ptr.To[int32](0), ptr.To[int32](512), ptr.To[int32](10000001)} {
			kvr := wrappers.MakeKVRouter("m", "ns").Obj()
			kvr.Spec.Disaggregation = &v1alpha1.DisaggregationSpec{Mode: mode, ThresholdTokens: tokens}
			agree(fmt.Sprintf("disaggregation mode %q thresholdTokens %v", mode, ptr.Deref(tokens, -1)), kvr)
		}
	}
	for _, port := range []int32{0, 80, 1023, 1024, 5557, 5558, 5600, 8000, 8200, 9002, 29501, 65535, 65536} {
		for _, nodes := range []int32{1, 2} {
			kvr := wrappers.MakeKVRouter("m", "ns").TensorParallel(8).NodesPerReplica(nodes).Obj()
			kvr.Spec.Disaggregation = &v1alpha1.DisaggregationSpec{SideChannelPort: port}
			agree(fmt.Sprintf("sideChannelPort %d nodesPerReplica %d", port, nodes), kvr)
		}
	}
	for _, mode := range []v1alpha1.DisaggregationMode{"", v1alpha1.DisaggregationAuto, v1alpha1.DisaggregationAlways, v1alpha1.DisaggregationNever} {
		for _, whole := range []v1alpha1.WholeRequestsOn{"", v1alpha1.WholeOnAny, v1alpha1.WholeOnDecode} {
			kvr := wrappers.MakeKVRouter("m", "ns").Obj()
			kvr.Spec.Disaggregation = &v1alpha1.DisaggregationSpec{Mode: mode, WholeRequestsOn: whole}
			agree(fmt.Sprintf("disaggregation mode %q wholeRequestsOn %q", mode, whole), kvr)
		}
	}
	for _, mm := range [][2]int32{{0, 1}, {1, 1}, {2, 1}, {1, 1000}, {1, 1001}, {3, 0}} {
		for _, replicas := range []*int32{nil, ptr.To[int32](0), ptr.To[int32](2), ptr.To[int32](1001)} {
			kvr := wrappers.MakeKVRouter("m", "ns").Obj()
			kvr.Spec.Disaggregation = &v1alpha1.DisaggregationSpec{Prefill: v1alpha1.PrefillPoolSpec{Replicas: replicas,
				Autoscaling: &v1alpha1.PoolAutoscalingSpec{MinReplicas: mm[0], MaxReplicas: mm[1]}}}
			agree(fmt.Sprintf("prefill replicas %v autoscaling %v", ptr.Deref(replicas, -1), mm), kvr)
		}
	}
	for _, c := range []v1alpha1.KVConnector{"", v1alpha1.ConnectorNixl, v1alpha1.ConnectorLMCache, "P2pNcclConnector"} {
		for _, tr := range []v1alpha1.KVTransport{"", v1alpha1.TransportRDMA, v1alpha1.TransportRoCE, v1alpha1.TransportNVLink, v1alpha1.TransportTCP, "EFA"} {
			for _, whole := range []v1alpha1.WholeRequestsOn{"", v1alpha1.WholeOnAny, v1alpha1.WholeOnDecode, "Prefill"} {
				kvr := wrappers.MakeKVRouter("m", "ns").Obj()
				kvr.Spec.Disaggregation = &v1alpha1.DisaggregationSpec{Connector: c, WholeRequestsOn: whole, Network: v1alpha1.KVNetworkSpec{Transport: tr}}
				agree(fmt.Sprintf("connector %q transport %q wholeRequestsOn %q", c, tr, whole), kvr)
			}
		}
	}
	for _, att := range []string{"rdma-net", "fabric/ib-b", "net.v1", "Upper", "a/b/c", "-x", strings.Repeat("a", 254)} {
		for _, res := range []string{"rdma/ib", "nvidia.com/sriov_rdma_vf", "rdma", "bad name", "", "nvidia.com/gpu"} {
			kvr := wrappers.MakeKVRouter("m", "ns").Obj()
			kvr.Spec.Disaggregation = &v1alpha1.DisaggregationSpec{Network: v1alpha1.KVNetworkSpec{Attachments: []string{att},
				RDMAResource: &v1alpha1.ExtendedResource{Name: res}}}
			agree(fmt.Sprintf("attachment %q rdmaResource %q", att, res), kvr)
		}
	}
	for _, withPools := range []bool{false, true} {
		for _, args := range [][]string{nil, {"--kv-transfer-config", "{}"}, {"--kv_transfer_config={}"}, {"--kv-transfer-configs"}, {"--kv-events-config={}"},
			{"--kv-transfer-config.kv_role=kv_producer"}, {"--kv_transfer_config.kv_connector", "X"},
			{"--data-parallel-size=2"}, {"--data-parallel-size=1"}, {"--data_parallel_size=01"}, {"-dp", "2"}, {"-dp=1"}, {"-dpl=4"},
			{"--data-parallel-size-local", "1"}, {"--data-parallel-rank=1"}, {"--data-parallel-sizes=2"}} {
			for _, env := range []string{"", "VLLM_NIXL_SIDE_CHANNEL_HOST", "VLLM_NIXL_SIDE_CHANNEL_PORT", "UCX_TLS", "UCX_NET_DEVICES"} {
				w := wrappers.MakeKVRouter("m", "ns").ExtraArgs(args...)
				if env != "" {
					w = w.Env(env, "x")
				}
				kvr := w.Obj()
				if withPools {
					kvr.Spec.Disaggregation = &v1alpha1.DisaggregationSpec{}
				}
				agree(fmt.Sprintf("disaggregation %v extraArgs %q env %q", withPools, args, env), kvr)
			}
		}
	}
	for _, uid := range []int64{-1, 0, 1, 2000, 2147483647, 2147483648} {
		kvr := wrappers.MakeKVRouter("m", "ns").Obj()
		kvr.Spec.Engine.RunAsUser = &uid
		agree(fmt.Sprintf("runAsUser %d", uid), kvr)
	}
}
