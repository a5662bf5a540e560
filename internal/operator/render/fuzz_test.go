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
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// renderOnlyChecks are the spec fields Validate refuses although the CRD's schema accepts
// them: values the schema bounds only by length, but that end up as object names, node label
// values or environment variable names, where the API server would refuse the workload.
var renderOnlyChecks = []string{
	"spec.model.cachePVC", "spec.model.hfTokenSecret", "spec.engine.gpu.product",
	"spec.engine.env[", "spec.monitoring.labels",
}

// FuzzRender turns the fuzz input into a KVRouter, keeps it only if the generated CRD admits it
// (the API server's own schema validation, defaulting and CEL rules), renders what the API server
// stored, and requires that rendering never panics, refuses only with an error naming one of
// renderOnlyChecks, renders the file form (undefaulted, as `manager render` reads it) the same
// way, and produces objects that pass objectViolations.
func FuzzRender(f *testing.F) {
	crd := newCRDAdmission(f)
	for _, seed := range [][]byte{
		nil,
		[]byte("\x00plain single node"),
		{featSimulate, 3, 1, 4, 1, 5, 9, 2, 6},
		{featMultiNode | featAutoscaling, 7, 7, 7, 0, 0, 0, 1},
		{featGateway | featMonitoring | featOpenShift, 42, 17, 99, 3},
		{featRunAsUser | featCachePVC | featMultiNode | featSimulate, 200, 100, 50, 25},
		bytes.Repeat([]byte{0xff}, 64),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		kvr, opts := fuzzKVRouter(data)
		stored, ok := crd.admit(t, kvr)
		if !ok {
			return
		}
		objs, err := render.Objects(stored, opts)
		if err != nil {
			if !namesOneOf(err.Error(), renderOnlyChecks) {
				t.Fatalf("the CRD admits a spec Objects refuses without naming a render-only check: %v\n%s", err, specJSON(stored))
			}
			return
		}
		for _, v := range objectViolations(t, stored, opts, objs) {
			t.Errorf("%s", v)
		}
		if t.Failed() {
			t.Fatalf("spec:\n%s", specJSON(stored))
		}
		var fromServer, fromFile bytes.Buffer
		if err := render.WriteYAML(&fromServer, objs); err != nil {
			t.Fatal(err)
		}
		fileObjs, err := render.Objects(kvr, opts)
		if err != nil {
			t.Fatalf("the file form is refused but the stored form is not: %v", err)
		}
		if err := render.WriteYAML(&fromFile, fileObjs); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fromServer.Bytes(), fromFile.Bytes()) {
			t.Fatalf("rendering the manifest differs from rendering what the API server stores (Default and the CRD's defaults disagree)\n%s",
				lineDiff(fromServer.String(), fromFile.String()))
		}
	})
}

func namesOneOf(msg string, paths []string) bool {
	for _, p := range paths {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

func specJSON(kvr *v1alpha1.KVRouter) string {
	b, _ := json.MarshalIndent(kvr, "", "  ")
	return string(b)
}

// crdAdmission is what the API server does to a KVRouter on create: structural defaulting, the
// OpenAPI schema and the CEL rules of the generated CRD.
type crdAdmission struct {
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

func newCRDAdmission(t testing.TB) *crdAdmission {
	internal, structural := loadCRDSchema(t)
	schema, _, err := apiservervalidation.NewSchemaValidator(internal)
	if err != nil {
		t.Fatal(err)
	}
	return &crdAdmission{structural: structural, schema: schema, cel: cel.NewValidator(structural, true, celconfig.PerCallLimit)}
}

// admit returns the KVRouter as the API server would store it, or false if it would refuse it.
func (a *crdAdmission) admit(t testing.TB, kvr *v1alpha1.KVRouter) (*v1alpha1.KVRouter, bool) {
	obj := requestBody(t, kvr)
	structuraldefaulting.Default(obj, a.structural)
	errs := apiservervalidation.ValidateCustomResource(nil, obj, a.schema)
	celErrs, _ := a.cel.Validate(context.Background(), nil, a.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	if len(errs) > 0 || len(celErrs) > 0 {
		return nil, false
	}
	stored := &v1alpha1.KVRouter{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, stored); err != nil {
		t.Fatalf("the CRD admits what the Go type cannot hold: %v", err)
	}
	return stored, true
}

// Feature bits of the fuzz input's first byte, so that seeds can steer the generator.
const (
	featSimulate = 1 << iota
	featMultiNode
	featAutoscaling
	featGateway
	featMonitoring
	featOpenShift
	featRunAsUser
	featCachePVC
)

// fuzzInput hands out the fuzz bytes as small decisions; past the end every decision is 0.
type fuzzInput struct{ data []byte }

func (in *fuzzInput) byte() byte {
	if len(in.data) == 0 {
		return 0
	}
	b := in.data[0]
	in.data = in.data[1:]
	return b
}

// intn returns a number in [0, n).
func (in *fuzzInput) intn(n int) int {
	switch {
	case n <= 1:
		return 0
	case n <= 256:
		return int(in.byte()) % n
	}
	return (int(in.byte()) | int(in.byte())<<8) % n
}

// oneIn is true once in n; false past the end of the input, which keeps specs small there.
func (in *fuzzInput) oneIn(n int) bool { return in.intn(n) == n-1 }

func (in *fuzzInput) pick(options ...string) string { return options[in.intn(len(options))] }

// str returns a string of min to max characters: first from first, the rest from rest, the last
// from last (when non-empty).
func (in *fuzzInput) str(minLen, maxLen int, first, rest, last string) string {
	n := minLen + in.intn(maxLen-minLen+1)
	var b strings.Builder
	for i := range n {
		set := rest
		switch {
		case i == 0:
			set = first
		case i == n-1 && last != "":
			set = last
		}
		b.WriteByte(set[in.intn(len(set))])
	}
	return b.String()
}

const (
	lower    = "abcdefghijklmnopqrstuvwxyz"
	digits   = "0123456789"
	alnum    = lower + digits
	anyASCII = " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~"
)

// dnsLabel is a DNS-1123 label of up to max characters; sometimes not one at all (the schema
// still admits it where it only bounds the length).
func (in *fuzzInput) dnsLabel(maxLen int) string {
	if in.oneIn(16) {
		return in.str(1, maxLen, anyASCII, anyASCII, "")
	}
	return in.str(1, maxLen, alnum, alnum+"-", alnum)
}

func fuzzKVRouter(data []byte) (*v1alpha1.KVRouter, render.Options) {
	in := &fuzzInput{data: data}
	feat := in.byte()
	has := func(bit byte) bool { return feat&bit != 0 }

	kvr := &v1alpha1.KVRouter{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "KVRouter"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      in.str(1, render.MaxNameLength, lower, alnum+"-", alnum),
			Namespace: in.str(1, 63, lower, alnum+"-", alnum),
			UID:       types.UID("00000000-0000-4000-8000-" + strconv.Itoa(100000000000+in.intn(1<<16))),
		},
	}
	if in.oneIn(2) {
		kvr.Labels = map[string]string{
			in.pick("app.kubernetes.io/part-of", "app.kubernetes.io/version", "team", "app.kubernetes.io/instance"): in.str(1, 20, alnum, alnum+"-._", alnum),
		}
	}
	s := &kvr.Spec
	s.Model.Name = in.pick("Qwen/Qwen3-0.6B", "meta-llama/Llama-3.1-8B-Instruct", "/models/local")
	if in.oneIn(8) {
		s.Model.Name = in.str(1, 80, anyASCII, anyASCII, "")
	}
	if in.oneIn(2) {
		s.Model.ServedName = in.str(1, 60, alnum+"ABC", alnum+"._/:-", "")
	}
	if in.oneIn(3) {
		s.Model.MaxModelLen = ptr.To(int32(16 + in.intn(200000)))
	}
	if has(featCachePVC) {
		s.Model.CachePVC = in.dnsLabel(63)
	}
	if in.oneIn(2) {
		s.Model.HFTokenSecret = in.dnsLabel(63)
	}

	e := &s.Engine
	if in.oneIn(2) {
		e.Image = in.pick("vllm/vllm-openai:v0.26.0", "registry.example.com/vllm@sha256:0123", "vllm")
	}
	if in.oneIn(2) {
		e.Replicas = ptr.To(int32(in.intn(10)))
	}
	tps := []int32{1, 2, 4, 8, 16}
	if has(featMultiNode) {
		e.NodesPerReplica = int32(2 + in.intn(63))
		e.GPU.PerNode = tps[in.intn(len(tps))]
		e.TensorParallelSize = e.GPU.PerNode
	} else if in.oneIn(2) {
		e.GPU.PerNode = int32(1 + in.intn(16))
		e.TensorParallelSize = 1
		for _, tp := range tps {
			if tp <= e.GPU.PerNode && in.oneIn(2) {
				e.TensorParallelSize = tp
			}
		}
	}
	if in.oneIn(2) {
		e.GPU.Product = in.pick("NVIDIA-A100-SXM4-80GB", "NVIDIA-L4", "AMD Instinct MI300X")
	}
	if in.oneIn(2) {
		e.BlockSize = []int32{8, 16, 32, 64, 128}[in.intn(5)]
	}
	if in.oneIn(3) {
		e.PrefixCachingHashAlgo = in.pick("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")
	}
	for range in.intn(4) {
		e.ExtraArgs = append(e.ExtraArgs, in.pick("--enable-chunked-prefill", "--gpu-memory-utilization=0.9", "--max-num-seqs", "256",
			"--block-size=8", "-tp", "--tokenizer-mode", in.str(1, 30, anyASCII, anyASCII, "")))
	}
	for range in.intn(4) {
		name := in.pick("VLLM_LOGGING_LEVEL", "HF_HOME", "HOME", "USER", "PYTHONHASHSEED", "HF_HUB_OFFLINE", "NCCL_DEBUG", in.str(1, 12, anyASCII, anyASCII, ""))
		v := corev1.EnvVar{Name: name, Value: in.str(0, 20, anyASCII, anyASCII, "")}
		if in.oneIn(4) {
			v.Value = ""
			v.ValueFrom = &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}
		}
		e.Env = append(e.Env, v)
	}
	if in.oneIn(3) {
		e.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(int64(1+in.intn(512))<<30, resource.BinarySI)}
		if in.oneIn(2) {
			e.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(int64(100+in.intn(32000)), resource.DecimalSI)}
		}
		if in.oneIn(4) {
			e.Resources.Requests = corev1.ResourceList{render.GPUResource: resource.MustParse("1")}
		}
	}
	if in.oneIn(4) {
		q := resource.MustParse(in.pick("1Gi", "16Gi", "512Mi"))
		e.ShmSize = &q
	}
	if in.oneIn(4) {
		e.StartupTimeoutSeconds = int32(60 + in.intn(7200))
	}
	if in.oneIn(3) {
		e.Tolerations = []corev1.Toleration{{Key: in.pick("dedicated", "example.com/gpu-pool"), Operator: corev1.TolerationOpEqual,
			Value: in.str(1, 10, alnum, alnum, ""), Effect: corev1.TaintEffectNoSchedule}}
	}
	if has(featRunAsUser) {
		e.RunAsUser = ptr.To(int64(1 + in.intn(1<<16)))
	}
	secretRef := func() *v1alpha1.SecretKeyRef {
		ref := &v1alpha1.SecretKeyRef{Name: in.dnsLabel(40)}
		if in.oneIn(2) {
			ref.Key = in.pick("api-key", "keys.txt", "KEY")
		}
		return ref
	}
	if in.oneIn(4) {
		e.APIKeySecret = secretRef()
	}
	if in.oneIn(4) {
		s.Router.APIKeySecret = secretRef()
	}

	r := &s.Router
	if in.oneIn(2) {
		r.Replicas = ptr.To(int32(1 + in.intn(32)))
	}
	if in.oneIn(2) {
		r.Policy = v1alpha1.RoutingPolicy(in.pick("Auto", "PrefillBound", "DecodeBound", "RoundRobin", "LeastLoaded", "PrefixOnly"))
	}
	if in.oneIn(4) {
		r.Image = in.pick("my.registry/router:v2", "ghcr.io/kvrouter/router@sha256:abc")
	}
	if in.oneIn(3) {
		r.SessionHeader = in.pick("X-Session-Id", "x-user", in.str(1, 40, anyASCII, anyASCII, ""))
	}

	if has(featGateway) {
		gw := &v1alpha1.GatewaySpec{}
		for range 1 + in.intn(3) {
			ref := gwapiv1.ParentReference{Name: gwapiv1.ObjectName(in.str(1, 30, lower, alnum+"-", alnum))}
			if in.oneIn(2) {
				ns := gwapiv1.Namespace(in.str(1, 20, lower, alnum+"-", alnum))
				ref.Namespace = &ns
			}
			if in.oneIn(3) {
				sec := gwapiv1.SectionName(in.pick("https", "http"))
				ref.SectionName = &sec
			}
			gw.ParentRefs = append(gw.ParentRefs, ref)
		}
		for range in.intn(3) {
			gw.Hostnames = append(gw.Hostnames, gwapiv1.Hostname(in.pick("*.", "")+in.str(1, 20, lower, alnum+"-", alnum)+".example.com"))
		}
		s.Gateway = gw
	}
	if has(featAutoscaling) {
		a := &v1alpha1.AutoscalingSpec{MinReplicas: int32(in.intn(5))}
		a.MaxReplicas = max(a.MinReplicas, 1) + int32(in.intn(20))
		if in.oneIn(3) {
			a.TargetQueueDepth = int32(1 + in.intn(64))
		}
		if in.oneIn(2) {
			a.Prometheus = &v1alpha1.PrometheusSpec{ServerAddress: in.pick("http://prometheus.monitoring:9090", "https://thanos-querier.openshift-monitoring.svc:9091")}
		}
		s.Autoscaling = a
	}
	if has(featMonitoring) {
		m := &v1alpha1.MonitoringSpec{}
		for range in.intn(3) {
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}
			m.Labels[in.pick("release", "prometheus", "example.com/scrape", in.str(1, 10, anyASCII, anyASCII, ""))] = in.str(0, 20, alnum, alnum+"-._", alnum)
		}
		if in.oneIn(2) {
			m.Interval = in.pick("15s", "1m", "1m30s", "500ms", "2h")
		}
		s.Monitoring = m
	}
	s.Simulate = has(featSimulate)

	opts := render.Options{PlatformAssignsUID: has(featOpenShift)}
	if in.oneIn(4) {
		opts.EngineUID = int64(1 + in.intn(1<<20))
	}
	if in.oneIn(4) {
		opts.LabelAllowList = []string{"team"}
	}
	// Drawn last, so that the earlier decisions of the seeds written before the mode existed (the
	// features their names promise) stay what they were. The router's key is sometimes kept: the
	// CRD refuses it with an InferencePool that fails open, and Objects must agree.
	if s.Gateway != nil && in.oneIn(2) {
		s.Gateway.Mode = v1alpha1.GatewayModeInferencePool
		if in.oneIn(2) {
			s.Gateway.FailureMode = v1alpha1.EndpointPickerFailureMode(in.pick("FailOpen", "FailClose"))
		}
		if in.oneIn(2) {
			s.Router.APIKeySecret = nil
		}
	}
	return kvr, opts
}

// TestFuzzInputsReachRendering keeps FuzzRender from testing nothing: most random inputs must
// make KVRouters the CRD admits and Objects renders, in every mode the feature bits select.
func TestFuzzInputsReachRendering(t *testing.T) {
	crd := newCRDAdmission(t)
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 400
	admitted, rendered := 0, 0
	modes := map[string]int{}
	refusals := map[string]int{}
	for range n {
		data := make([]byte, 16+rng.IntN(600))
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		kvr, opts := fuzzKVRouter(data)
		stored, ok := crd.admit(t, kvr)
		if !ok {
			continue
		}
		admitted++
		objs, err := render.Objects(stored, opts)
		if err != nil {
			refusals[strings.SplitN(err.Error(), ":", 3)[1]]++
			continue
		}
		rendered++
		for _, o := range objs {
			modes[o.GetObjectKind().GroupVersionKind().Kind]++
		}
		if stored.Spec.Simulate {
			modes["simulate"]++
		}
		if opts.PlatformAssignsUID {
			modes["openshift"]++
		}
	}
	t.Logf("%d inputs: %d admitted by the CRD, %d rendered; objects and modes %v; refusals %v", n, admitted, rendered, modes, refusals)
	if admitted < n/2 || rendered < n/3 {
		t.Errorf("only %d of %d inputs admitted and %d rendered", admitted, n, rendered)
	}
	for _, want := range []string{"LeaderWorkerSet", "HTTPRoute", "InferencePool", "ScaledObject", "ServiceMonitor", "PodMonitor", "simulate", "openshift"} {
		if modes[want] == 0 {
			t.Errorf("no rendered input has %s", want)
		}
	}
}

// TestFuzzSeedCorpusRenders: each committed seed is admitted and rendered, in the modes its
// name says, so the corpus starts the fuzzer where the code is.
func TestFuzzSeedCorpusRenders(t *testing.T) {
	crd := newCRDAdmission(t)
	files, err := filepath.Glob("testdata/fuzz/FuzzRender/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no seed corpus: %v", err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("%s: not a one-value corpus file", file)
		}
		data, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		kvr, opts := fuzzKVRouter([]byte(data))
		stored, ok := crd.admit(t, kvr)
		if !ok {
			t.Errorf("%s: the CRD refuses it", file)
			continue
		}
		objs, err := render.Objects(stored, opts)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		name := filepath.Base(file)
		if strings.Contains(name, "lws") != (render.EngineWorkloadKind(stored) == "LeaderWorkerSet") ||
			strings.Contains(name, "simulate") && !stored.Spec.Simulate || strings.Contains(name, "openshift") && !opts.PlatformAssignsUID ||
			strings.Contains(name, "monitoring") && stored.Spec.Monitoring == nil ||
			strings.Contains(name, "inferencepool") && !render.UsesInferencePool(stored) {
			t.Errorf("%s renders %s, simulate=%v, openshift=%v, monitoring=%v, inferencepool=%v", name, render.EngineWorkloadKind(stored),
				stored.Spec.Simulate, opts.PlatformAssignsUID, stored.Spec.Monitoring != nil, render.UsesInferencePool(stored))
		}
		for _, v := range objectViolations(t, stored, opts, objs) {
			t.Errorf("%s: %s", file, v)
		}
	}
}
