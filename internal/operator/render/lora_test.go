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
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/wrappers"
)

func withLoRAs(kvr *v1alpha1.KVRouter, adapters ...string) *v1alpha1.KVRouter {
	for _, a := range adapters {
		name, source, _ := strings.Cut(a, "=")
		kvr.Spec.Model.LoRAs = append(kvr.Spec.Model.LoRAs, v1alpha1.LoRAAdapter{Name: name, Source: source})
	}
	return kvr
}

// loraFlags returns the LoRA part of an engine command line: from --enable-lora through the
// value of --max-lora-rank, or nil without --enable-lora.
func loraFlags(t *testing.T, args []string) []string {
	t.Helper()
	start := slices.Index(args, "--enable-lora")
	if start < 0 {
		return nil
	}
	end := slices.Index(args, "--max-lora-rank")
	if end < start || end+1 >= len(args) {
		t.Fatalf("--max-lora-rank missing after --enable-lora in %v", args)
	}
	return args[start : end+2]
}

func TestLoRAFlags(t *testing.T) {
	base := func() *v1alpha1.KVRouter {
		return withLoRAs(wrappers.MakeKVRouter("m", "ns").ExtraArgs("--enable-chunked-prefill").Obj(),
			"sql=org/sql-lora", "chat=/models/adapters/chat")
	}
	args := func(kvr *v1alpha1.KVRouter) []string {
		objs := mustObjects(t, kvr, render.Options{})
		return engineContainer(t, find[*appsv1.Deployment](t, objs, "m-engine").Spec.Template.Spec).Args
	}

	// vLLM's syntax: one --lora-modules followed by every name=source, in the spec's order; the
	// slot settings written out with vLLM's defaults when the spec leaves them unset.
	got := args(base())
	want := []string{"--enable-lora", "--lora-modules", "sql=org/sql-lora", "chat=/models/adapters/chat",
		"--max-loras", fmt.Sprint(render.DefaultMaxLoRAs), "--max-lora-rank", fmt.Sprint(render.DefaultMaxLoRARank)}
	if f := loraFlags(t, got); !slices.Equal(f, want) {
		t.Errorf("LoRA flags %q, want %q", f, want)
	}
	// extraArgs still come last, so the user's flags keep their place after the operator's.
	if got[len(got)-1] != "--enable-chunked-prefill" {
		t.Errorf("extraArgs not last: %v", got)
	}

	kvr := base()
	kvr.Spec.Model.MaxLoRAs, kvr.Spec.Model.MaxLoRARank = ptr.To[int32](2), ptr.To[int32](64)
	if f := loraFlags(t, args(kvr)); argValue(t, f, "--max-loras") != "2" || argValue(t, f, "--max-lora-rank") != "64" {
		t.Errorf("slot settings not rendered: %q", f)
	}

	if f := loraFlags(t, args(wrappers.MakeKVRouter("m", "ns").Obj())); f != nil {
		t.Errorf("LoRA flags without spec.model.loras: %q", f)
	}
}

// vllm-sim reads vLLM's command line, LoRA flags included, so simulated engines get the same ones.
func TestLoRAFlagsForTheSimulator(t *testing.T) {
	vllm := withLoRAs(wrappers.MakeKVRouter("m", "ns").Obj(), "a=org/a", "b=org/b")
	sim := vllm.DeepCopy()
	sim.Spec.Simulate = true
	flags := func(kvr *v1alpha1.KVRouter) []string {
		objs := mustObjects(t, kvr, render.Options{})
		c := engineContainer(t, find[*appsv1.Deployment](t, objs, "m-engine").Spec.Template.Spec)
		return loraFlags(t, c.Args)
	}
	if r, s := flags(vllm), flags(sim); len(r) == 0 || !slices.Equal(r, s) {
		t.Errorf("simulator LoRA flags %q, vLLM's %q", s, r)
	}
}

// Every pod of a multi-node replica builds the same model, adapters included.
func TestLoRAFlagsOnEveryPodOfAMultiNodeReplica(t *testing.T) {
	kvr := withLoRAs(wrappers.MakeKVRouter("m", "ns").TensorParallel(8).NodesPerReplica(2).Obj(), "a=org/a")
	lws := find[*lwsv1.LeaderWorkerSet](t, mustObjects(t, kvr, render.Options{}), "m-engine")
	leader := loraFlags(t, engineContainer(t, lws.Spec.LeaderWorkerTemplate.LeaderTemplate.Spec).Args)
	worker := loraFlags(t, engineContainer(t, lws.Spec.LeaderWorkerTemplate.WorkerTemplate.Spec).Args)
	if len(leader) == 0 || !slices.Equal(leader, worker) {
		t.Errorf("leader LoRA flags %q, worker %q", leader, worker)
	}
}

func TestInvalidLoRAsAreRefused(t *testing.T) {
	m := func() *v1alpha1.KVRouter { return wrappers.MakeKVRouter("m", "ns").ServedName("base").Obj() }
	tooMany := m()
	for i := range render.MaxLoRAs + 1 {
		withLoRAs(tooMany, fmt.Sprintf("a%d=org/a%d", i, i))
	}
	slots := withLoRAs(m(), "a=org/a")
	slots.Spec.Model.MaxLoRAs = ptr.To[int32](0)
	rank := withLoRAs(m(), "a=org/a")
	rank.Spec.Model.MaxLoRARank = ptr.To[int32](24)
	orphanSlots := m()
	orphanSlots.Spec.Model.MaxLoRAs = ptr.To[int32](2)
	orphanRank := m()
	orphanRank.Spec.Model.MaxLoRARank = ptr.To[int32](32)
	for name, tc := range map[string]struct {
		kvr  *v1alpha1.KVRouter
		want string
	}{
		"duplicate name":              {withLoRAs(m(), "a=org/a", "a=org/b"), "spec.model.loras[1].name: Duplicate"},
		"name of the base model":      {withLoRAs(m(), "base=org/a"), "spec.model.loras[0].name"},
		"name of the KVRouter":        {withLoRAs(wrappers.MakeKVRouter("m", "ns").Obj(), "m=org/a"), "spec.model.loras[0].name"},
		"name with a space":           {withLoRAs(m(), "my lora=org/a"), "spec.model.loras[0].name"},
		"empty name":                  {withLoRAs(m(), "=org/a"), "spec.model.loras[0].name"},
		"empty source":                {withLoRAs(m(), "a="), "spec.model.loras[0].source"},
		"source with =":               {withLoRAs(m(), "a=/models/x=y"), "spec.model.loras[0].source"},
		"too many":                    {tooMany, "spec.model.loras"},
		"zero slots":                  {slots, "spec.model.maxLoras"},
		"rank vLLM does not offer":    {rank, "spec.model.maxLoraRank"},
		"slots without adapters":      {orphanSlots, "spec.model.maxLoras"},
		"rank without adapters":       {orphanRank, "spec.model.maxLoraRank"},
		"--lora-modules in extraArgs": {withLoRAs(wrappers.MakeKVRouter("m", "ns").ExtraArgs("--lora-modules", "x=y").Obj(), "a=org/a"), "spec.engine.extraArgs[0]"},
		"--max_loras= in extraArgs":   {withLoRAs(wrappers.MakeKVRouter("m", "ns").ExtraArgs("--max_loras=4").Obj(), "a=org/a"), "spec.engine.extraArgs[0]"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := render.Objects(tc.kvr, render.Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
	// Without adapters the LoRA flags are the user's: adapters loaded at run time need them.
	if _, err := render.Objects(wrappers.MakeKVRouter("m", "ns").ExtraArgs("--enable-lora", "--max-loras", "4").Obj(), render.Options{}); err != nil {
		t.Errorf("LoRA flags in extraArgs without spec.model.loras refused: %v", err)
	}
}
