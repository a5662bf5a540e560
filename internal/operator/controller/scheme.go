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
	"errors"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// NewScheme returns a scheme with every typed kind the operator reads or writes: Kubernetes'
// own, KVRouter, Gateway API v1, the Inference Extension's InferencePool and LeaderWorkerSet. KEDA's ScaledObject and the Prometheus
// Operator's ServiceMonitor and PodMonitor are handled unstructured and need no registration.
// Registering a kind does not require its CRD in the cluster.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	err := errors.Join(
		clientgoscheme.AddToScheme(s),
		v1alpha1.AddToScheme(s),
		gwapiv1.Install(s),
		infv1.Install(s),
		lwsv1.AddToScheme(s),
	)
	return s, err
}
