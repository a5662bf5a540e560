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
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// Default fills the fields a KVRouter left empty with the defaults of the CRD schema, in place.
//
// The API server applies the schema's defaults to objects it stores, so the reconciler sees them
// already filled; a manifest read from a file (manager render -f) has not been through an API
// server. Default mirrors the `+kubebuilder:default` markers of api/v1alpha1; a test checks it
// against the generated CRD so the two cannot drift apart. It leaves spec.model.servedName alone:
// that default (metadata.name) is not a schema default, see ServedName.
func Default(kvr *v1alpha1.KVRouter) {
	// spec.engine.image has no schema default: empty means Options.EngineImage (EngineImage).
	e := &kvr.Spec.Engine
	if e.Replicas == nil {
		e.Replicas = ptr.To[int32](1)
	}
	if e.TensorParallelSize == 0 {
		e.TensorParallelSize = 1
	}
	if e.NodesPerReplica == 0 {
		e.NodesPerReplica = 1
	}
	if e.GPU.Product == "" {
		e.GPU.Product = "NVIDIA-H100-80GB-HBM3"
	}
	if e.GPU.PerNode == 0 {
		e.GPU.PerNode = 8
	}
	if e.BlockSize == 0 {
		e.BlockSize = 16
	}
	if e.PrefixCachingHashAlgo == "" {
		e.PrefixCachingHashAlgo = "sha256_cbor"
	}
	if e.ShmSize == nil {
		q := resource.MustParse("8Gi")
		e.ShmSize = &q
	}
	if e.StartupTimeoutSeconds == 0 {
		e.StartupTimeoutSeconds = 1800
	}

	r := &kvr.Spec.Router
	if r.Replicas == nil {
		r.Replicas = ptr.To[int32](2)
	}
	if r.Policy == "" {
		r.Policy = v1alpha1.PolicyAuto
	}
	if r.Tokenizer.Source == "" {
		r.Tokenizer.Source = v1alpha1.TokenizerAuto
	}

	if gw := kvr.Spec.Gateway; gw != nil {
		if gw.Mode == "" {
			gw.Mode = v1alpha1.GatewayModeHTTPRoute
		}
		if gw.ModelMatch == "" {
			gw.ModelMatch = v1alpha1.ModelMatchNone
		}
		// Gateway API's own schema defaults, which the CRD embeds for parentRefs.
		for i := range gw.ParentRefs {
			p := &gw.ParentRefs[i]
			if p.Group == nil {
				p.Group = ptr.To(gwapiv1.Group(gwapiv1.GroupName))
			}
			if p.Kind == nil {
				p.Kind = ptr.To(gwapiv1.Kind("Gateway"))
			}
		}
	}

	if a := kvr.Spec.Autoscaling; a != nil {
		if a.MinReplicas == 0 {
			a.MinReplicas = 1
		}
		if a.TargetQueueDepth == 0 {
			a.TargetQueueDepth = 4
		}
	}
	defaultAPIKeys(kvr)
	defaultDisaggregation(kvr)
}

func defaultDisaggregation(kvr *v1alpha1.KVRouter) {
	d := kvr.Spec.Disaggregation
	if d == nil {
		return
	}
	if d.Prefill.Replicas == nil {
		d.Prefill.Replicas = ptr.To[int32](1)
	}
	if a := d.Prefill.Autoscaling; a != nil && a.MinReplicas == 0 {
		a.MinReplicas = 1
	}
	if d.Connector == "" {
		d.Connector = v1alpha1.ConnectorNixl
	}
	if d.SideChannelPort == 0 {
		d.SideChannelPort = DefaultSideChannelPort
	}
	if d.Network.Transport == "" {
		d.Network.Transport = v1alpha1.TransportRDMA
	}
	if r := d.Network.RDMAResource; r != nil && r.Count == 0 {
		r.Count = 1
	}
	if d.Mode == "" {
		d.Mode = v1alpha1.DisaggregationAuto
	}
	if d.WholeRequestsOn == "" {
		d.WholeRequestsOn = v1alpha1.WholeOnAny
	}
}
