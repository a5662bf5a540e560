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

package controller

import (
	"context"
	"fmt"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

func withAdapters(names ...string) func(*v1alpha1.KVRouter) {
	return func(k *v1alpha1.KVRouter) {
		for _, n := range names {
			k.Spec.Model.LoRAs = append(k.Spec.Model.LoRAs, v1alpha1.LoRAAdapter{Name: n, Source: "org/" + n})
		}
	}
}

func withModelMatch(m v1alpha1.ModelMatch) func(*v1alpha1.KVRouter) {
	return func(k *v1alpha1.KVRouter) { k.Spec.Gateway.ModelMatch = m }
}

// LoRA adapters and several models on one Gateway: the API server refuses what the engines or the
// Gateway could not serve, and what it admits the operator applies (the HTTPRoute through the
// Gateway API CRD's own schema and rules).
var _ = Describe("LoRA adapters and model matching", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace(k8sClient) })

	DescribeTable("refuses invalid specs with a message naming the field",
		func(kvr *kvrWrapper, message string) {
			obj := kvr.Obj()
			obj.Namespace = ns
			err := k8sClient.Create(context.Background(), obj)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("two adapters of one name",
			makeKVRouter("", "lora-dup").With(withAdapters("sql", "sql")),
			"spec.model.loras: every name must be unique"),
		Entry("an adapter named like the served model",
			makeKVRouter("", "lora-served").With(func(k *v1alpha1.KVRouter) { k.Spec.Model.ServedName = "base" }).With(withAdapters("base")),
			"spec.model.loras: an adapter name must differ from the served model name"),
		Entry("an adapter named like the KVRouter, the served name by default",
			makeKVRouter("", "lora-self").With(withAdapters("lora-self")),
			"spec.model.loras: an adapter name must differ from the served model name"),
		Entry("an adapter name with a space",
			makeKVRouter("", "lora-space").With(func(k *v1alpha1.KVRouter) {
				k.Spec.Model.LoRAs = []v1alpha1.LoRAAdapter{{Name: "my lora", Source: "org/a"}}
			}),
			"spec.model.loras[0].name"),
		Entry("a source vLLM would split at =",
			makeKVRouter("", "lora-eq").With(func(k *v1alpha1.KVRouter) {
				k.Spec.Model.LoRAs = []v1alpha1.LoRAAdapter{{Name: "a", Source: "/models/a=b"}}
			}),
			"spec.model.loras[0].source"),
		Entry("more adapters than a header-matched route can hold",
			makeKVRouter("", "lora-many").With(func(k *v1alpha1.KVRouter) {
				for i := range render.MaxLoRAs + 1 {
					withAdapters(fmt.Sprintf("a%d", i))(k)
				}
			}),
			"spec.model.loras: Too many"),
		Entry("slots without adapters",
			makeKVRouter("", "lora-slots").With(func(k *v1alpha1.KVRouter) { k.Spec.Model.MaxLoRAs = ptr.To[int32](4) }),
			"spec.model.maxLoras and spec.model.maxLoraRank apply only with spec.model.loras"),
		Entry("a rank vLLM does not offer",
			makeKVRouter("", "lora-rank").With(withAdapters("a")).With(func(k *v1alpha1.KVRouter) { k.Spec.Model.MaxLoRARank = ptr.To[int32](24) }),
			"spec.model.maxLoraRank: Unsupported value: 24"),
		Entry("extraArgs setting --lora-modules next to spec.model.loras",
			makeKVRouter("", "lora-args").With(withAdapters("a")).ExtraArgs("--lora-modules", "b=org/b"),
			"with spec.model.loras, spec.engine.extraArgs must not set --enable-lora"),
		Entry("extraArgs setting --max_loras= next to spec.model.loras",
			makeKVRouter("", "lora-args-eq").With(withAdapters("a")).ExtraArgs("--max_loras=8"),
			"with spec.model.loras, spec.engine.extraArgs must not set --enable-lora"),
		Entry("an unknown model match",
			makeKVRouter("", "match-bad").Gateway("h.example.com").With(withModelMatch("Host")),
			`spec.gateway.modelMatch: Unsupported value: "Host"`),
	)

	It("defaults modelMatch to None, leaves the engine image to the operator, and keeps LoRA flags free without adapters", func() {
		kvr := makeKVRouter(ns, "plain").Gateway("h.example.com").ExtraArgs("--enable-lora", "--max-loras", "4").Obj()
		Expect(k8sClient.Create(context.Background(), kvr)).To(Succeed())
		Expect(kvr.Spec.Gateway.ModelMatch).To(Equal(v1alpha1.ModelMatchNone))
		Expect(kvr.Spec.Engine.Image).To(BeEmpty(), "the CRD has no image default: the operator's applies")
		Eventually(func(g Gomega) {
			d := child(g, k8sClient, kvr, render.EngineWorkloadName(kvr), &appsv1.Deployment{})
			// The suite starts the reconciler without an engine image: render's release default.
			g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(render.DefaultEngineImage))
		}).Should(Succeed())
	})

	It("loads the adapters on the engines and routes their names on a shared hostname", func() {
		adapters := []string{"sql", "chat"}
		kvr := makeKVRouter(ns, "llama").Gateway("shared.example.com").With(withModelMatch(v1alpha1.ModelMatchHeader)).
			With(withAdapters(adapters...)).With(func(k *v1alpha1.KVRouter) {
			k.Spec.Model.ServedName = "llama-8b"
			k.Spec.Model.MaxLoRAs, k.Spec.Model.MaxLoRARank = ptr.To[int32](2), ptr.To[int32](32)
		}).Obj()
		Expect(k8sClient.Create(context.Background(), kvr)).To(Succeed())
		Eventually(func(g Gomega) {
			d := child(g, k8sClient, kvr, render.EngineWorkloadName(kvr), &appsv1.Deployment{})
			args := d.Spec.Template.Spec.Containers[0].Args
			i := slices.Index(args, "--lora-modules")
			g.Expect(i).To(BeNumerically(">=", 0), "no --lora-modules in %v", args)
			g.Expect(args[i+1 : i+3]).To(Equal([]string{"sql=org/sql", "chat=org/chat"}))
			g.Expect(flagValue(args, "--max-loras")).To(Equal("2"))
			g.Expect(flagValue(args, "--max-lora-rank")).To(Equal("32"))

			route := child(g, k8sClient, kvr, render.RouteName(kvr), &gwapiv1.HTTPRoute{})
			g.Expect(route.Spec.Rules).To(HaveLen(1))
			var models []string
			for _, m := range route.Spec.Rules[0].Matches {
				g.Expect(m.Headers).To(HaveLen(1))
				g.Expect(string(m.Headers[0].Name)).To(Equal(v1alpha1.ModelHeader))
				models = append(models, m.Headers[0].Value)
			}
			for _, name := range append([]string{"llama-8b"}, adapters...) {
				g.Expect(models).To(ContainElement(name))
			}
			g.Expect(models).To(HaveLen(len(render.PublicPaths) * 3))
		}).Should(Succeed())
	})

	It("applies the largest header-matched route and a path-prefixed one through Gateway API's own validation", func() {
		big := makeKVRouter(ns, "many").Gateway("shared.example.com").With(withModelMatch(v1alpha1.ModelMatchHeader)).With(func(k *v1alpha1.KVRouter) {
			for i := range render.MaxLoRAs {
				withAdapters(fmt.Sprintf("adapter-%d", i))(k)
			}
		}).Obj()
		prefixed := makeKVRouter(ns, "qwen").Gateway("shared.example.com").With(withModelMatch(v1alpha1.ModelMatchPath)).Obj()
		Expect(k8sClient.Create(context.Background(), big)).To(Succeed())
		Expect(k8sClient.Create(context.Background(), prefixed)).To(Succeed())
		Eventually(func(g Gomega) {
			route := child(g, k8sClient, big, render.RouteName(big), &gwapiv1.HTTPRoute{})
			g.Expect(route.Spec.Rules[0].Matches).To(HaveLen(len(render.PublicPaths) * (render.MaxLoRAs + 1)))
			route = child(g, k8sClient, prefixed, render.RouteName(prefixed), &gwapiv1.HTTPRoute{})
			g.Expect(route.Spec.Rules).To(HaveLen(len(render.PublicPaths)))
			for i, rule := range route.Spec.Rules {
				g.Expect(rule.Matches[0].Path.Value).To(HaveValue(Equal("/qwen" + render.PublicPaths[i])))
				g.Expect(rule.Filters).To(ConsistOf(HaveField("URLRewrite.Path.ReplaceFullPath", HaveValue(Equal(render.PublicPaths[i])))))
			}
			g.Expect(reload(g, k8sClient, prefixed).Status.URL).To(Equal("http://shared.example.com/qwen"))
		}).Should(Succeed())
	})
})
