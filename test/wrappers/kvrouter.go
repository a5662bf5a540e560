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

// Package wrappers builds API objects for tests with a fluent interface, so that a test states
// only the fields it is about: wrappers.MakeKVRouter("m", "ns").TensorParallel(2).Obj().
package wrappers

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// KVRouterWrapper wraps a KVRouter under construction.
type KVRouterWrapper struct{ v1alpha1.KVRouter }

// MakeKVRouter starts a KVRouter with the only required spec field set (model.name, to a small
// model) and a fixed UID, so that ownerReferences are predictable.
func MakeKVRouter(name, namespace string) *KVRouterWrapper {
	return &KVRouterWrapper{v1alpha1.KVRouter{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "KVRouter"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			UID:       types.UID("00000000-0000-0000-0000-000000000001"),
		},
		Spec: v1alpha1.KVRouterSpec{Model: v1alpha1.ModelSpec{Name: "Qwen/Qwen3-0.6B"}},
	}}
}

// Obj returns a copy of the KVRouter built so far.
func (w *KVRouterWrapper) Obj() *v1alpha1.KVRouter { return w.KVRouter.DeepCopy() }

// Label sets a label on the KVRouter itself.
func (w *KVRouterWrapper) Label(k, v string) *KVRouterWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[k] = v
	return w
}

// UID sets metadata.uid.
func (w *KVRouterWrapper) UID(uid string) *KVRouterWrapper {
	w.ObjectMeta.UID = types.UID(uid)
	return w
}

// Model sets spec.model.name.
func (w *KVRouterWrapper) Model(name string) *KVRouterWrapper {
	w.Spec.Model.Name = name
	return w
}

// ServedName sets spec.model.servedName.
func (w *KVRouterWrapper) ServedName(name string) *KVRouterWrapper {
	w.Spec.Model.ServedName = name
	return w
}

// MaxModelLen sets spec.model.maxModelLen.
func (w *KVRouterWrapper) MaxModelLen(n int32) *KVRouterWrapper {
	w.Spec.Model.MaxModelLen = ptr.To(n)
	return w
}

// CachePVC sets spec.model.cachePVC.
func (w *KVRouterWrapper) CachePVC(name string) *KVRouterWrapper {
	w.Spec.Model.CachePVC = name
	return w
}

// HFTokenSecret sets spec.model.hfTokenSecret.
func (w *KVRouterWrapper) HFTokenSecret(name string) *KVRouterWrapper {
	w.Spec.Model.HFTokenSecret = name
	return w
}

// EngineImage sets spec.engine.image.
func (w *KVRouterWrapper) EngineImage(image string) *KVRouterWrapper {
	w.Spec.Engine.Image = image
	return w
}

// Replicas sets spec.engine.replicas.
func (w *KVRouterWrapper) Replicas(n int32) *KVRouterWrapper {
	w.Spec.Engine.Replicas = ptr.To(n)
	return w
}

// TensorParallel sets spec.engine.tensorParallelSize.
func (w *KVRouterWrapper) TensorParallel(n int32) *KVRouterWrapper {
	w.Spec.Engine.TensorParallelSize = n
	return w
}

// NodesPerReplica sets spec.engine.nodesPerReplica.
func (w *KVRouterWrapper) NodesPerReplica(n int32) *KVRouterWrapper {
	w.Spec.Engine.NodesPerReplica = n
	return w
}

// GPU sets spec.engine.gpu.
func (w *KVRouterWrapper) GPU(product string, perNode int32) *KVRouterWrapper {
	w.Spec.Engine.GPU = v1alpha1.GPUSpec{Product: product, PerNode: perNode}
	return w
}

// BlockSize sets spec.engine.blockSize.
func (w *KVRouterWrapper) BlockSize(n int32) *KVRouterWrapper {
	w.Spec.Engine.BlockSize = n
	return w
}

// ExtraArgs appends to spec.engine.extraArgs.
func (w *KVRouterWrapper) ExtraArgs(args ...string) *KVRouterWrapper {
	w.Spec.Engine.ExtraArgs = append(w.Spec.Engine.ExtraArgs, args...)
	return w
}

// Env appends a plain variable to spec.engine.env.
func (w *KVRouterWrapper) Env(name, value string) *KVRouterWrapper {
	w.Spec.Engine.Env = append(w.Spec.Engine.Env, corev1.EnvVar{Name: name, Value: value})
	return w
}

// EngineResources sets spec.engine.resources.
func (w *KVRouterWrapper) EngineResources(r corev1.ResourceRequirements) *KVRouterWrapper {
	w.Spec.Engine.Resources = r
	return w
}

// Toleration appends to spec.engine.tolerations.
func (w *KVRouterWrapper) Toleration(t corev1.Toleration) *KVRouterWrapper {
	w.Spec.Engine.Tolerations = append(w.Spec.Engine.Tolerations, t)
	return w
}

// RouterReplicas sets spec.router.replicas.
func (w *KVRouterWrapper) RouterReplicas(n int32) *KVRouterWrapper {
	w.Spec.Router.Replicas = ptr.To(n)
	return w
}

// Policy sets spec.router.policy.
func (w *KVRouterWrapper) Policy(p v1alpha1.RoutingPolicy) *KVRouterWrapper {
	w.Spec.Router.Policy = p
	return w
}

// RouterImage sets spec.router.image.
func (w *KVRouterWrapper) RouterImage(image string) *KVRouterWrapper {
	w.Spec.Router.Image = image
	return w
}

// SessionHeader sets spec.router.sessionHeader.
func (w *KVRouterWrapper) SessionHeader(h string) *KVRouterWrapper {
	w.Spec.Router.SessionHeader = h
	return w
}

// Gateway attaches the KVRouter to one Gateway (namespace may be empty) with the given hostnames.
func (w *KVRouterWrapper) Gateway(name, namespace string, hostnames ...string) *KVRouterWrapper {
	ref := gwapiv1.ParentReference{Name: gwapiv1.ObjectName(name)}
	if namespace != "" {
		ref.Namespace = ptr.To(gwapiv1.Namespace(namespace))
	}
	gw := &v1alpha1.GatewaySpec{ParentRefs: []gwapiv1.ParentReference{ref}}
	for _, h := range hostnames {
		gw.Hostnames = append(gw.Hostnames, gwapiv1.Hostname(h))
	}
	w.Spec.Gateway = gw
	return w
}

// InferencePool puts the engines behind an InferencePool whose endpoint picker is the router
// (spec.gateway.mode: InferencePool), with failureMode ("" leaves the default). Gateway must be
// set first.
func (w *KVRouterWrapper) InferencePool(failureMode v1alpha1.EndpointPickerFailureMode) *KVRouterWrapper {
	w.Spec.Gateway.Mode = v1alpha1.GatewayModeInferencePool
	w.Spec.Gateway.FailureMode = failureMode
	return w
}

// Autoscaling sets spec.autoscaling with the router's signal.
func (w *KVRouterWrapper) Autoscaling(minReplicas, maxReplicas int32) *KVRouterWrapper {
	w.Spec.Autoscaling = &v1alpha1.AutoscalingSpec{MinReplicas: minReplicas, MaxReplicas: maxReplicas}
	return w
}

// Prometheus makes spec.autoscaling (which must be set) read its signal from Prometheus.
func (w *KVRouterWrapper) Prometheus(serverAddress string) *KVRouterWrapper {
	w.Spec.Autoscaling.Prometheus = &v1alpha1.PrometheusSpec{ServerAddress: serverAddress}
	return w
}

// Simulate sets spec.simulate.
func (w *KVRouterWrapper) Simulate() *KVRouterWrapper {
	w.Spec.Simulate = true
	return w
}

// RouterAPIKeySecret sets spec.router.apiKeySecret (key "" leaves the default).
func (w *KVRouterWrapper) RouterAPIKeySecret(name, key string) *KVRouterWrapper {
	w.Spec.Router.APIKeySecret = &v1alpha1.SecretKeyRef{Name: name, Key: key}
	return w
}

// EngineAPIKeySecret sets spec.engine.apiKeySecret (key "" leaves the default).
func (w *KVRouterWrapper) EngineAPIKeySecret(name, key string) *KVRouterWrapper {
	w.Spec.Engine.APIKeySecret = &v1alpha1.SecretKeyRef{Name: name, Key: key}
	return w
}

// Tokenizer sets spec.router.tokenizer.
func (w *KVRouterWrapper) Tokenizer(source v1alpha1.TokenizerSource, fromCacheVolume bool) *KVRouterWrapper {
	w.Spec.Router.Tokenizer = v1alpha1.RouterTokenizerSpec{Source: source, FromCacheVolume: fromCacheVolume}
	return w
}
