// Package render turns a KVRouter into the Kubernetes objects that serve it: the engine workload
// (a Deployment, or a LeaderWorkerSet for multi-node replicas), the router and its RBAC, an
// optional HTTPRoute, KEDA ScaledObject and Prometheus Operator ServiceMonitor and PodMonitor,
// and the NetworkPolicy that keeps KV events private.
//
// It is pure: no client, no cluster, no clock. The reconciler applies what Objects returns with
// server-side apply, and `manager render` prints the same objects, so a GitOps preview shows
// exactly what the operator would apply.
package render
