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

package render

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// Objects returns every child object the KVRouter should have, in a fixed order (identities and
// RBAC first, then workloads, then the objects that point at them). Each carries apiVersion and
// kind, the KVRouter's namespace, render's labels and a controller ownerReference to the KVRouter.
//
// The KVRouter is not modified: Objects defaults and validates a copy, so it accepts both an
// object read from the API server and a manifest read from a file. Optional kinds are included
// whenever the spec asks for them (the HTTPRoute with spec.gateway, the InferencePool with
// spec.gateway.mode InferencePool, a ScaledObject per autoscaled engine pool (spec.autoscaling,
// spec.disaggregation.prefill.autoscaling), a LeaderWorkerSet per pool with nodesPerReplica > 1, the ServiceMonitor, PodMonitor
// and PrometheusRule with spec.monitoring); whether their CRDs are installed is for the caller to check.
func Objects(in *v1alpha1.KVRouter, opts Options) ([]client.Object, error) {
	kvr := in.DeepCopy()
	Default(kvr)
	if err := Validate(kvr); err != nil {
		return nil, fmt.Errorf("invalid KVRouter %s/%s: %w", in.Namespace, in.Name, err)
	}

	objs := []client.Object{
		routerServiceAccount(kvr, opts),
		routerRole(kvr, opts),
		routerRoleBinding(kvr, opts),
	}
	for _, pool := range EnginePools(kvr) {
		var engine client.Object
		var err error
		if isMultiNode(kvr) {
			engine, err = engineLeaderWorkerSet(kvr, opts, pool)
		} else {
			engine, err = engineDeployment(kvr, opts, pool)
		}
		if err != nil {
			return nil, fmt.Errorf("rendering engine workload of %s/%s: %w", kvr.Namespace, kvr.Name, err)
		}
		objs = append(objs, engine)
	}
	objs = append(objs,
		engineNetworkPolicy(kvr, opts),
		routerDeployment(kvr, opts),
		routerNetworkPolicy(kvr, opts),
		routerService(kvr, opts),
		routerPDB(kvr, opts),
	)
	if UsesInferencePool(kvr) {
		objs = append(objs, inferencePool(kvr, opts))
	}
	if kvr.Spec.Gateway != nil {
		objs = append(objs, httpRoute(kvr, opts))
	}
	for _, pool := range EnginePools(kvr) {
		if poolAutoscaled(kvr, pool) {
			objs = append(objs, scaledObject(kvr, opts, pool))
		}
	}
	if kvr.Spec.Monitoring != nil {
		objs = append(objs, serviceMonitor(kvr, opts), podMonitor(kvr, opts), prometheusRule(kvr, opts))
	}
	return objs, nil
}

// childMeta is the metadata of a child: its name, the KVRouter's namespace, labels and the
// controller reference that lets garbage collection delete it with the KVRouter and lets the
// reconciler find the owner of an event.
func childMeta(kvr *v1alpha1.KVRouter, opts Options, name, appName, component string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:      name,
		Namespace: kvr.Namespace,
		Labels:    objectLabels(kvr, opts, appName, component),
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion:         v1alpha1.GroupVersion.String(),
			Kind:               "KVRouter",
			Name:               kvr.Name,
			UID:                kvr.UID,
			Controller:         ptr.To(true),
			BlockOwnerDeletion: ptr.To(true),
		}},
	}
}
