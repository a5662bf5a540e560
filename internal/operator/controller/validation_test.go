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
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// The CRD's schema and CEL rules refuse bad specs at the API server, with messages that name the
// field, before the operator ever sees them.
var _ = Describe("KVRouter validation", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace(k8sClient) })

	DescribeTable("refuses invalid specs with a message naming the field",
		func(kvr *kvrWrapper, message string) {
			obj := kvr.Obj()
			obj.Namespace = ns // entries are built before the namespace exists
			err := k8sClient.Create(context.Background(), obj)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("maxReplicas below minReplicas",
			makeKVRouter("", "bad-bounds").Autoscaling(4, 2),
			"spec.autoscaling.maxReplicas must be greater than or equal to spec.autoscaling.minReplicas"),
		Entry("tensor parallelism wider than a node",
			makeKVRouter("", "bad-tp").TP(16),
			"spec.engine.tensorParallelSize must not exceed spec.engine.gpu.perNode"),
		Entry("a multi-node replica whose nodes tensor parallelism does not fill",
			makeKVRouter("", "bad-multinode").MultiNode(2, 8).TP(4),
			"spec.engine.nodesPerReplica > 1 needs spec.engine.tensorParallelSize equal to spec.engine.gpu.perNode"),
		Entry("an unknown routing policy",
			makeKVRouter("", "bad-policy").Policy("Fastest"),
			`spec.router.policy: Unsupported value: "Fastest"`),
		Entry("a tensor parallel size that is not a power of two",
			makeKVRouter("", "bad-tp-enum").TP(3),
			"spec.engine.tensorParallelSize: Unsupported value: 3"),
		Entry("a name too long for the router Service",
			makeKVRouter("", strings.Repeat("n", render.MaxNameLength+1)),
			"metadata.name must be a DNS-1035 label"),
		Entry("a name that is not a DNS-1035 label",
			makeKVRouter("", "1-starts-with-a-digit"),
			"metadata.name must be a DNS-1035 label"),
		Entry("extraArgs repeating --block-size",
			makeKVRouter("", "bad-args").ExtraArgs("--enable-chunked-prefill", "--block-size", "32"),
			"spec.engine.extraArgs must not set a flag the operator manages"),
		Entry("extraArgs setting a managed flag with = and underscores",
			makeKVRouter("", "bad-args-eq").ExtraArgs("--prefix_caching_hash-algo=sha256"),
			"spec.engine.extraArgs must not set a flag the operator manages"),
		Entry("extraArgs using the short alias -tp",
			makeKVRouter("", "bad-args-short").ExtraArgs("-tp", "4"),
			"spec.engine.extraArgs must not set a flag the operator manages"),
		Entry("a cache PVC that cannot name a claim",
			makeKVRouter("", "bad-pvc").With(func(k *v1alpha1.KVRouter) { k.Spec.Model.CachePVC = "Model_Cache" }),
			"spec.model.cachePVC: Invalid value"),
		Entry("an HF token Secret that cannot name a Secret",
			makeKVRouter("", "bad-token").With(func(k *v1alpha1.KVRouter) { k.Spec.Model.HFTokenSecret = "hf token" }),
			"spec.model.hfTokenSecret: Invalid value"),
		Entry("a GPU product that is not a label value",
			makeKVRouter("", "bad-gpu").With(func(k *v1alpha1.KVRouter) { k.Spec.Engine.GPU.Product = "NVIDIA H100" }),
			"spec.engine.gpu.product: Invalid value"),
		Entry("env overriding PYTHONHASHSEED",
			makeKVRouter("", "bad-env").Env("PYTHONHASHSEED", "1"),
			"spec.engine.env must not set PYTHONHASHSEED, POD_NAME or POD_IP"),
		Entry("a failure mode without an InferencePool",
			makeKVRouter("", "bad-failure-mode").Gateway("h.example.com").With(func(k *v1alpha1.KVRouter) { k.Spec.Gateway.FailureMode = v1alpha1.FailClose }),
			"spec.gateway.failureMode applies only to spec.gateway.mode: InferencePool"),
		Entry("an unknown gateway mode",
			makeKVRouter("", "bad-mode").Gateway("h.example.com").With(func(k *v1alpha1.KVRouter) { k.Spec.Gateway.Mode = "Service" }),
			`spec.gateway.mode: Unsupported value: "Service"`),
		Entry("an unknown failure mode",
			makeKVRouter("", "bad-failure-enum").Gateway("h.example.com").InferencePool("FailSometimes"),
			`spec.gateway.failureMode: Unsupported value: "FailSometimes"`),
		Entry("the router's API key with an InferencePool that fails open, skipping the router's check",
			makeKVRouter("", "bad-pool-key").Gateway("h.example.com").InferencePool(v1alpha1.FailOpen).With(func(k *v1alpha1.KVRouter) {
				k.Spec.Router.APIKeySecret = &v1alpha1.SecretKeyRef{Name: "keys"}
			}),
			"spec.router.apiKeySecret with spec.gateway.mode: InferencePool needs spec.gateway.failureMode: FailClose"),
	)

	It("accepts the longest name and flags that only share a prefix with managed ones", func() {
		kvr := makeKVRouter(ns, strings.Repeat("n", render.MaxNameLength)).
			ExtraArgs("--model-impl", "vllm", "--port-range=1", "--max-model-len-hint", "-tpx").
			Env("POD_NAMESPACE", "x").Obj()
		Expect(k8sClient.Create(context.Background(), kvr)).To(Succeed())
	})

	It("accepts an InferencePool that fails closed with both API keys, and defaults the mode of a route", func() {
		pooled := makeKVRouter(ns, "good-pool").Gateway("h.example.com").InferencePool(v1alpha1.FailClose).With(func(k *v1alpha1.KVRouter) {
			k.Spec.Router.APIKeySecret = &v1alpha1.SecretKeyRef{Name: "client-keys"}
			k.Spec.Engine.APIKeySecret = &v1alpha1.SecretKeyRef{Name: "engine-key"}
		}).Obj()
		Expect(k8sClient.Create(context.Background(), pooled)).To(Succeed())
		routed := makeKVRouter(ns, "good-route").Gateway("h.example.com").Obj()
		Expect(k8sClient.Create(context.Background(), routed)).To(Succeed())
		Expect(routed.Spec.Gateway.Mode).To(Equal(v1alpha1.GatewayModeHTTPRoute))
		Expect(routed.Spec.Gateway.FailureMode).To(BeEmpty())
	})

	It("accepts a valid multi-node spec", func() {
		kvr := makeKVRouter(ns, "good-multinode").MultiNode(2, 8).Obj()
		Expect(k8sClient.Create(context.Background(), kvr)).To(Succeed())
	})
})
