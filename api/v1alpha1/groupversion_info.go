// Package v1alpha1 holds the KVRouter API: one resource that describes a model served by a fleet
// of vLLM replicas behind a KV-cache-aware router.
// +kubebuilder:object:generate=true
// +groupName=serving.kvrouter.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of the KVRouter kind.
	GroupVersion = schema.GroupVersion{Group: "serving.kvrouter.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a scheme. controller-runtime
	// deprecates its Builder for API packages (it drags controller-runtime into importers); this
	// API is only imported by the project's own programs, so the kubebuilder layout is kept.
	//lint:ignore SA1019 see above
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
