package controller

import (
	"errors"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// NewScheme returns a scheme with every typed kind the operator reads or writes: Kubernetes'
// own, KVRouter, Gateway API v1 and LeaderWorkerSet. KEDA's ScaledObject and the Prometheus
// Operator's ServiceMonitor and PodMonitor are handled unstructured and need no registration.
// Registering a kind does not require its CRD in the cluster.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	err := errors.Join(
		clientgoscheme.AddToScheme(s),
		v1alpha1.AddToScheme(s),
		gwapiv1.Install(s),
		lwsv1.AddToScheme(s),
	)
	return s, err
}
