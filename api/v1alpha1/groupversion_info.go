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
