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

// Package helm tests the Helm chart charts/kvrouter with the Helm SDK: lint, rendering over a
// matrix of values, and the default rendering against `kustomize build config/default`, which
// the chart is generated from (hack/helmchart). A module of its own, so that Helm's dependency
// tree stays out of kvrouter's go.mod.
package helm
