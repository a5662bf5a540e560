package render_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/render"
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
		b, err := json.Marshal(kvr)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := json.Unmarshal(b, &obj); err != nil {
			t.Fatal(err)
		}
		errs, _ := validator.Validate(context.Background(), nil, nil, obj, nil, celconfig.RuntimeCELCostBudget)
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
