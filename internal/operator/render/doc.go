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

// Package render turns a KVRouter into the Kubernetes objects that serve it: the engine workload
// (a Deployment, or a LeaderWorkerSet for multi-node replicas), the router and its RBAC, an
// optional HTTPRoute, KEDA ScaledObject and Prometheus Operator ServiceMonitor and PodMonitor,
// and the NetworkPolicy that keeps KV events private.
//
// It is pure: no client, no cluster, no clock. The reconciler applies what Objects returns with
// server-side apply, and `manager render` prints the same objects, so a GitOps preview shows
// exactly what the operator would apply.
package render
