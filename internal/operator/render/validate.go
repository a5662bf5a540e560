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
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// ManagedEngineFlags are the vLLM flags render sets itself. spec.engine.extraArgs may not repeat
// them: vLLM keeps the last occurrence, so a repeated --block-size or --prefix-caching-hash-algo
// would silently make the engines' block hashes disagree with the router's index.
var ManagedEngineFlags = []string{
	"--model", "--served-model-name", "--port", "--tensor-parallel-size", "--pipeline-parallel-size",
	"--block-size", "--max-model-len", "--prefix-caching-hash-algo", "--kv-events-config",
	"--nnodes", "--node-rank", "--master-addr", "--headless", "--distributed-executor-backend",
}

// LoRAEngineFlags are the vLLM flags render sets from spec.model.loras, maxLoras and maxLoraRank.
// spec.engine.extraArgs may not repeat them while loras is set: a second --lora-modules or
// --max-lora-rank would replace the spec's, and the HTTPRoute would route adapter names the
// engines do not serve. Without loras they are the user's (for adapters loaded at run time).
var LoRAEngineFlags = []string{"--enable-lora", "--no-enable-lora", "--lora-modules", "--max-loras", "--max-lora-rank"}

// MaxLoRAs bounds spec.model.loras (the schema's MaxItems): with spec.gateway.modelMatch Header
// the HTTPRoute matches each public path once per model name, and Gateway API allows 64 matches
// in a rule: 3 paths times (1 + 16) names is 51.
const MaxLoRAs = 16

// loraName mirrors the schema's pattern of spec.model.loras[].name (that of servedName), and
// loraSource that of their sources: vLLM splits each name=source at "=".
var (
	loraName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:-]*$`)
	loraSource = regexp.MustCompile(`^[^=\s]+$`)
)

// shortFlags are vLLM's single-dash aliases of managed flags.
var shortFlags = map[string]string{"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size"}

// ReservedEngineEnv are environment variables render sets itself and spec.engine.env may not
// override: the hash seed keeps block hashes reproducible across engines and restarts, and the
// KV-event topic names the pod.
var ReservedEngineEnv = []string{"PYTHONHASHSEED", "POD_NAME", "POD_IP"}

// Validate checks what the CRD's schema and CEL rules check and what Objects relies on, for
// manifests that have not been through an API server. It expects a defaulted KVRouter (Default).
func Validate(kvr *v1alpha1.KVRouter) error {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if kvr.Name == "" {
		errs = append(errs, field.Required(meta.Child("name"), ""))
	} else {
		if len(kvr.Name) > MaxNameLength {
			errs = append(errs, field.TooLong(meta.Child("name"), kvr.Name, MaxNameLength))
		}
		for _, msg := range validation.IsDNS1035Label(kvr.Name) {
			errs = append(errs, field.Invalid(meta.Child("name"), kvr.Name,
				"must be usable as a Service name: "+msg))
		}
	}
	if kvr.Namespace == "" {
		errs = append(errs, field.Required(meta.Child("namespace"), ""))
	}

	spec := field.NewPath("spec")
	if kvr.Spec.Model.Name == "" {
		errs = append(errs, field.Required(spec.Child("model", "name"), ""))
	}
	// The schema bounds these names' lengths only; the API server would refuse the workload
	// that carries an invalid one, after the operator applied the rest.
	for _, ref := range []struct{ field, value string }{
		{"cachePVC", kvr.Spec.Model.CachePVC}, {"hfTokenSecret", kvr.Spec.Model.HFTokenSecret},
	} {
		if ref.value == "" {
			continue
		}
		for _, msg := range validation.IsDNS1123Subdomain(ref.value) {
			errs = append(errs, field.Invalid(spec.Child("model", ref.field), ref.value, "must be an object name: "+msg))
		}
	}

	errs = append(errs, validateLoRAs(kvr)...)

	e := kvr.Spec.Engine
	ep := spec.Child("engine")
	if !oneOf(e.TensorParallelSize, 1, 2, 4, 8, 16) {
		errs = append(errs, field.NotSupported(ep.Child("tensorParallelSize"), e.TensorParallelSize,
			[]string{"1", "2", "4", "8", "16"}))
	}
	if !oneOf(e.BlockSize, 8, 16, 32, 64, 128) {
		errs = append(errs, field.NotSupported(ep.Child("blockSize"), e.BlockSize,
			[]string{"8", "16", "32", "64", "128"}))
	}
	if e.NodesPerReplica < 1 {
		errs = append(errs, field.Invalid(ep.Child("nodesPerReplica"), e.NodesPerReplica, "must be at least 1"))
	}
	if e.GPU.PerNode < 1 {
		errs = append(errs, field.Invalid(ep.Child("gpu", "perNode"), e.GPU.PerNode, "must be at least 1"))
	}
	if e.TensorParallelSize > e.GPU.PerNode {
		errs = append(errs, field.Invalid(ep.Child("tensorParallelSize"), e.TensorParallelSize,
			fmt.Sprintf("must not exceed spec.engine.gpu.perNode (%d): split larger models across nodes with nodesPerReplica", e.GPU.PerNode)))
	}
	if e.NodesPerReplica > 1 && e.TensorParallelSize != e.GPU.PerNode {
		errs = append(errs, field.Invalid(ep.Child("tensorParallelSize"), e.TensorParallelSize,
			fmt.Sprintf("must equal spec.engine.gpu.perNode (%d) when nodesPerReplica > 1: tensor parallelism fills each node, pipeline parallelism spans them", e.GPU.PerNode)))
	}
	if e.Replicas != nil && *e.Replicas < 0 {
		errs = append(errs, field.Invalid(ep.Child("replicas"), *e.Replicas, "must not be negative"))
	}
	for i, arg := range e.ExtraArgs {
		if f := managedFlag(arg); f != "" {
			errs = append(errs, field.Invalid(ep.Child("extraArgs").Index(i), arg,
				f+" is set by the operator from the spec; use the matching spec field"))
		}
	}
	for _, msg := range validation.IsValidLabelValue(e.GPU.Product) {
		errs = append(errs, field.Invalid(ep.Child("gpu", "product"), e.GPU.Product, "must be a node label value: "+msg))
	}
	for i, env := range e.Env {
		for _, msg := range validation.IsEnvVarName(env.Name) {
			errs = append(errs, field.Invalid(ep.Child("env").Index(i).Child("name"), env.Name, msg))
		}
		for _, r := range ReservedEngineEnv {
			if env.Name == r {
				errs = append(errs, field.Invalid(ep.Child("env").Index(i).Child("name"), env.Name,
					"is set by the operator and must match the router"))
			}
		}
	}

	if u := e.RunAsUser; u != nil && (*u < 1 || *u > math.MaxInt32) {
		errs = append(errs, field.Invalid(ep.Child("runAsUser"), *u, "must be between 1 and 2147483647: engines never run as root"))
	}

	errs = append(errs, validateAPIKeys(kvr)...)

	if r := kvr.Spec.Router; r.Replicas != nil && *r.Replicas < 1 {
		errs = append(errs, field.Invalid(spec.Child("router", "replicas"), *r.Replicas, "must be at least 1"))
	}
	errs = append(errs, validateTokenizer(kvr)...)
	if gw := kvr.Spec.Gateway; gw != nil {
		errs = append(errs, validateGateway(kvr)...)
	}
	if a := kvr.Spec.Autoscaling; a != nil {
		ap := spec.Child("autoscaling")
		if a.MinReplicas < 1 {
			errs = append(errs, field.Invalid(ap.Child("minReplicas"), a.MinReplicas, "must be at least 1"))
		}
		if a.MaxReplicas < a.MinReplicas {
			errs = append(errs, field.Invalid(ap.Child("maxReplicas"), a.MaxReplicas,
				"must be greater than or equal to spec.autoscaling.minReplicas"))
		}
		if a.Prometheus != nil && !strings.HasPrefix(a.Prometheus.ServerAddress, "http://") &&
			!strings.HasPrefix(a.Prometheus.ServerAddress, "https://") {
			errs = append(errs, field.Invalid(ap.Child("prometheus", "serverAddress"), a.Prometheus.ServerAddress,
				"must be an http:// or https:// URL"))
		}
	}
	errs = append(errs, validateDisaggregation(kvr)...)
	if m := kvr.Spec.Monitoring; m != nil {
		mp := spec.Child("monitoring")
		errs = append(errs, metav1validation.ValidateLabels(m.Labels, mp.Child("labels"))...)
		for _, k := range slices.Sorted(maps.Keys(m.Labels)) {
			if reservedLabels[k] {
				errs = append(errs, field.Invalid(mp.Child("labels").Key(k), k, "is set by the operator (selectors depend on it)"))
			}
		}
		if len(m.Labels) > maxMonitoringLabels {
			errs = append(errs, field.TooMany(mp.Child("labels"), len(m.Labels), maxMonitoringLabels))
		}
		if m.Interval != "" && (len(m.Interval) > maxIntervalLength || !scrapeInterval.MatchString(m.Interval)) {
			errs = append(errs, field.Invalid(mp.Child("interval"), m.Interval, "must be a duration such as 30s or 1m30s, units in the order h, m, s, ms"))
		}
	}
	return errs.ToAggregate()
}

// validateLoRAs mirrors the schema and CEL rules of spec.model.loras, maxLoras and maxLoraRank,
// and the rule that keeps the LoRA flags out of spec.engine.extraArgs while loras is set.
func validateLoRAs(kvr *v1alpha1.KVRouter) field.ErrorList {
	var errs field.ErrorList
	m := kvr.Spec.Model
	mp := field.NewPath("spec", "model")
	lp := mp.Child("loras")
	if len(m.LoRAs) > MaxLoRAs {
		errs = append(errs, field.TooMany(lp, len(m.LoRAs), MaxLoRAs))
	}
	served := ServedName(kvr)
	seen := map[string]bool{}
	for i, l := range m.LoRAs {
		np := lp.Index(i).Child("name")
		switch {
		case l.Name == "":
			errs = append(errs, field.Required(np, "the model name clients send to use the adapter"))
		case len(l.Name) > 253:
			errs = append(errs, field.TooLong(np, l.Name, 253))
		case !loraName.MatchString(l.Name):
			errs = append(errs, field.Invalid(np, l.Name, "must match "+loraName.String()))
		case seen[l.Name]:
			errs = append(errs, field.Duplicate(np, l.Name))
		case l.Name == served:
			errs = append(errs, field.Invalid(np, l.Name,
				"must differ from the served model name (spec.model.servedName, else metadata.name): clients would not be able to reach the base model"))
		}
		seen[l.Name] = true
		sp := lp.Index(i).Child("source")
		switch {
		case l.Source == "":
			errs = append(errs, field.Required(sp, "a Hugging Face repository id or a path in spec.model.cachePVC"))
		case len(l.Source) > 512:
			errs = append(errs, field.TooLong(sp, l.Source, 512))
		case !loraSource.MatchString(l.Source):
			errs = append(errs, field.Invalid(sp, l.Source, "must not contain \"=\" or white space (vLLM reads name=source)"))
		}
	}
	if len(m.LoRAs) == 0 {
		if m.MaxLoRAs != nil {
			errs = append(errs, field.Invalid(mp.Child("maxLoras"), *m.MaxLoRAs, "applies only with spec.model.loras"))
		}
		if m.MaxLoRARank != nil {
			errs = append(errs, field.Invalid(mp.Child("maxLoraRank"), *m.MaxLoRARank, "applies only with spec.model.loras"))
		}
		return errs
	}
	if n := m.MaxLoRAs; n != nil && (*n < 1 || *n > MaxLoRAs) {
		errs = append(errs, field.Invalid(mp.Child("maxLoras"), *n, fmt.Sprintf("must be between 1 and %d", MaxLoRAs)))
	}
	if r := m.MaxLoRARank; r != nil && !oneOf(*r, 1, 8, 16, 32, 64, 128, 256, 320, 512) {
		errs = append(errs, field.NotSupported(mp.Child("maxLoraRank"), *r,
			[]string{"1", "8", "16", "32", "64", "128", "256", "320", "512"}))
	}
	for i, arg := range kvr.Spec.Engine.ExtraArgs {
		if f := loraFlag(arg); f != "" {
			errs = append(errs, field.Invalid(field.NewPath("spec", "engine", "extraArgs").Index(i), arg,
				f+" is set by the operator from spec.model.loras, maxLoras and maxLoraRank"))
		}
	}
	return errs
}

// loraFlag returns the LoRA flag that arg sets ("--max-loras" for "--max_loras=4"), or "".
func loraFlag(arg string) string {
	name, _, _ := strings.Cut(arg, "=")
	if !strings.HasPrefix(name, "--") {
		return ""
	}
	name = "--" + strings.ReplaceAll(strings.TrimPrefix(name, "--"), "_", "-")
	if slices.Contains(LoRAEngineFlags, name) {
		return name
	}
	return ""
}

// validateGateway mirrors the schema and CEL rules of spec.gateway, and the rule on the spec that
// keeps the router's API key from an InferencePool that fails open, where the Gateway would
// skip the router, and its key check, while it cannot reach it.
func validateGateway(kvr *v1alpha1.KVRouter) field.ErrorList {
	var errs field.ErrorList
	gw := kvr.Spec.Gateway
	gp := field.NewPath("spec", "gateway")
	if len(gw.ParentRefs) == 0 {
		errs = append(errs, field.Required(gp.Child("parentRefs"), "name at least one Gateway"))
	}
	modes := []string{string(v1alpha1.GatewayModeHTTPRoute), string(v1alpha1.GatewayModeInferencePool)}
	if !slices.Contains(modes, string(gw.Mode)) {
		errs = append(errs, field.NotSupported(gp.Child("mode"), gw.Mode, modes))
	}
	failureModes := []string{string(v1alpha1.FailOpen), string(v1alpha1.FailClose)}
	switch {
	case gw.FailureMode == "":
	case !slices.Contains(failureModes, string(gw.FailureMode)):
		errs = append(errs, field.NotSupported(gp.Child("failureMode"), gw.FailureMode, failureModes))
	case gw.Mode != v1alpha1.GatewayModeInferencePool:
		errs = append(errs, field.Invalid(gp.Child("failureMode"), gw.FailureMode,
			"applies only to spec.gateway.mode: InferencePool (it is the InferencePool's endpoint-picker failure mode)"))
	}
	matches := []string{string(v1alpha1.ModelMatchNone), string(v1alpha1.ModelMatchHeader), string(v1alpha1.ModelMatchPath)}
	if !slices.Contains(matches, string(gw.ModelMatch)) {
		errs = append(errs, field.NotSupported(gp.Child("modelMatch"), gw.ModelMatch, matches))
	}
	if UsesInferencePool(kvr) && kvr.Spec.Router.APIKeySecret != nil && gw.FailureMode != v1alpha1.FailClose {
		errs = append(errs, field.Invalid(field.NewPath("spec", "router", "apiKeySecret"), kvr.Spec.Router.APIKeySecret.Name,
			"needs spec.gateway.failureMode: FailClose with spec.gateway.mode: InferencePool: with FailOpen the Gateway forwards "+
				"requests to the engines without asking the router whenever it cannot reach it, skipping the router's key check"))
	}
	return errs
}

// validateTokenizer mirrors the schema and CEL rules of spec.router.tokenizer.
func validateTokenizer(kvr *v1alpha1.KVRouter) field.ErrorList {
	var errs field.ErrorList
	tk := kvr.Spec.Router.Tokenizer
	tp := field.NewPath("spec", "router", "tokenizer")
	sources := []string{string(v1alpha1.TokenizerAuto), string(v1alpha1.TokenizerEngine)}
	if !slices.Contains(sources, string(tk.Source)) {
		errs = append(errs, field.NotSupported(tp.Child("source"), tk.Source, sources))
	}
	if tk.FromCacheVolume && tk.Source != v1alpha1.TokenizerAuto {
		errs = append(errs, field.Invalid(tp.Child("fromCacheVolume"), tk.FromCacheVolume,
			"applies only to spec.router.tokenizer.source: Auto (with Engine the router reads no tokenizer files)"))
	}
	if tk.FromCacheVolume && kvr.Spec.Model.CachePVC == "" {
		errs = append(errs, field.Invalid(tp.Child("fromCacheVolume"), tk.FromCacheVolume,
			"needs spec.model.cachePVC: it mounts that claim in the router pods"))
	}
	return errs
}

// maxMonitoringLabels, maxIntervalLength and scrapeInterval mirror the schema of spec.monitoring.
const (
	maxMonitoringLabels = 16
	maxIntervalLength   = 32
)

var scrapeInterval = regexp.MustCompile(`^(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?$`)

// managedFlag returns the managed flag that arg sets ("--block-size" for "--block-size=32"), or "".
func managedFlag(arg string) string {
	name, _, _ := strings.Cut(arg, "=")
	if !strings.HasPrefix(name, "--") {
		// argparse takes "-tp=4" as well as "-tp 4".
		return shortFlags[name]
	}
	// vLLM's argument parser accepts underscores for dashes (--block_size).
	name = "--" + strings.ReplaceAll(strings.TrimPrefix(name, "--"), "_", "-")
	for _, f := range ManagedEngineFlags {
		if name == f {
			return f
		}
	}
	return ""
}

func oneOf(v int32, allowed ...int32) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}
