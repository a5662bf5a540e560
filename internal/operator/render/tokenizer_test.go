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
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/wrappers"
)

// TestRouterTokenizer: the router fetches the tokenizer the way the engines fetch the model (the
// Hub with their token, or their cache volume, read-only), and asks the engines where it could
// not read the same tokenizer they use.
func TestRouterTokenizer(t *testing.T) {
	type want struct {
		args   []string // the tokenizer flags, in order
		env    map[string]string
		secret string // HF_TOKEN's Secret
		volume bool   // the cache claim mounted read-only at the engines' path
	}
	cases := []struct {
		name string
		kvr  *v1alpha1.KVRouter
		want want
	}{
		{"hub repository", wrappers.MakeKVRouter("m", "ns").Model("org/model").Obj(),
			want{args: []string{"--tokenizer", "auto", "--tokenizer-model", "org/model"}}},
		{"hub repository with the engines' token", wrappers.MakeKVRouter("m", "ns").Model("org/gated").HFTokenSecret("hf").Obj(),
			want{args: []string{"--tokenizer", "auto", "--tokenizer-model", "org/gated"}, secret: "hf"}},
		{"hub cache on the volume", wrappers.MakeKVRouter("m", "ns").Model("org/model").CachePVC("models").Tokenizer(v1alpha1.TokenizerAuto, true).Obj(),
			want{args: []string{"--tokenizer", "auto", "--tokenizer-model", "org/model"}, env: map[string]string{"HF_HOME": "/models"}, volume: true}},
		{"model path on the volume", wrappers.MakeKVRouter("m", "ns").Model("/models/llama").CachePVC("models").HFTokenSecret("hf").Tokenizer(v1alpha1.TokenizerAuto, true).Obj(),
			want{args: []string{"--tokenizer", "auto", "--tokenizer-dir", "/models/llama"}, env: map[string]string{"HF_HOME": "/models"}, volume: true}},
		{"model path the router cannot read", wrappers.MakeKVRouter("m", "ns").Model("/models/llama").CachePVC("models").Obj(),
			want{args: []string{"--tokenizer", "engine"}}},
		{"engines tokenize", wrappers.MakeKVRouter("m", "ns").Model("org/model").HFTokenSecret("hf").Tokenizer(v1alpha1.TokenizerEngine, false).Obj(),
			want{args: []string{"--tokenizer", "engine"}}},
		{"engines given another tokenizer or revision", wrappers.MakeKVRouter("m", "ns").Model("org/model").ExtraArgs("--tokenizer_revision=v2").Obj(),
			want{args: []string{"--tokenizer", "engine"}}},
		{"engines' mirror and offline mode followed", wrappers.MakeKVRouter("m", "ns").Model("org/model").Env("HF_ENDPOINT", "https://mirror.example").Env("HF_HUB_OFFLINE", "1").Env("VLLM_LOGGING_LEVEL", "DEBUG").Obj(),
			want{args: []string{"--tokenizer", "auto", "--tokenizer-model", "org/model"}, env: map[string]string{"HF_ENDPOINT": "https://mirror.example", "HF_HUB_OFFLINE": "1"}}},
		{"simulated engines tokenize synthetically", wrappers.MakeKVRouter("m", "ns").Model("org/model").Simulate().Obj(),
			want{args: []string{"--tokenizer", "engine"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := mustObjects(t, tc.kvr, render.Options{})
			spec := find[*appsv1.Deployment](t, objs, "m-router").Spec.Template.Spec
			c := spec.Containers[0]
			i := slices.Index(c.Args, "--tokenizer")
			if i < 0 {
				t.Fatalf("no --tokenizer in %v", c.Args)
			}
			got := c.Args[i : i+len(tc.want.args)]
			if !slices.Equal(got, tc.want.args) || (len(c.Args) > i+len(got) && strings.HasPrefix(c.Args[i+len(got)], "--tokenizer")) {
				t.Errorf("tokenizer args %v, want %v", c.Args[i:], tc.want.args)
			}
			env := map[string]string{}
			secret := ""
			for _, e := range c.Env {
				if e.Name == "HF_TOKEN" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					secret = e.ValueFrom.SecretKeyRef.Name
					if e.ValueFrom.SecretKeyRef.Key != "token" {
						t.Errorf("HF_TOKEN from key %q, want the engines' key token", e.ValueFrom.SecretKeyRef.Key)
					}
					continue
				}
				env[e.Name] = e.Value
			}
			if secret != tc.want.secret {
				t.Errorf("HF_TOKEN from Secret %q, want %q", secret, tc.want.secret)
			}
			if len(env) != len(tc.want.env) {
				t.Errorf("env %v, want %v", env, tc.want.env)
			}
			for k, v := range tc.want.env {
				if env[k] != v {
					t.Errorf("env %s=%q, want %q", k, env[k], v)
				}
			}
			var claim *corev1.PersistentVolumeClaimVolumeSource
			for _, v := range spec.Volumes {
				if v.PersistentVolumeClaim != nil {
					claim = v.PersistentVolumeClaim
				}
			}
			mounted := false
			for _, m := range c.VolumeMounts {
				if m.MountPath == "/models" {
					mounted = true
					if !m.ReadOnly {
						t.Error("the cache volume is mounted writable in the router")
					}
				}
			}
			if tc.want.volume != (claim != nil) || tc.want.volume != mounted {
				t.Fatalf("claim %v mounted %v, want %v", claim, mounted, tc.want.volume)
			}
			if claim != nil && (!claim.ReadOnly || claim.ClaimName != tc.kvr.Spec.Model.CachePVC) {
				t.Errorf("claim %+v, want %s read-only", claim, tc.kvr.Spec.Model.CachePVC)
			}
		})
	}
}
