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

package render_test

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/wrappers"
)

// A scaled-down engine must keep serving its open streams while the routers drop it: the
// preStop pause holds SIGTERM back, and the grace period leaves time after it.
func TestEnginePreStopDrains(t *testing.T) {
	for name, kvr := range map[string]*v1alpha1.KVRouter{
		"vllm":     wrappers.MakeKVRouter("m", "ns").Obj(),
		"simulate": wrappers.MakeKVRouter("m", "ns").Simulate().Obj(),
	} {
		t.Run(name, func(t *testing.T) {
			objs := mustObjects(t, kvr, render.Options{})
			spec := find[*appsv1.Deployment](t, objs, "m-engine").Spec.Template.Spec
			c := engineContainer(t, spec)
			if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
				t.Fatalf("no preStop sleep: %+v", c.Lifecycle)
			}
			pause := c.Lifecycle.PreStop.Sleep.Seconds
			if pause < 5 {
				t.Errorf("preStop pause %ds is too short for routers to notice the deletion", pause)
			}
			if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds < pause+30 {
				t.Errorf("grace period %v leaves under 30s after the %ds pause", spec.TerminationGracePeriodSeconds, pause)
			}
		})
	}
}

// The pd-sidecar takes the Gateway's requests to an engine pod: it must drain like the engine,
// and run no admin listener that could take the side channel's port.
func TestPDSidecarDrainsAndListensOnce(t *testing.T) {
	kvr := wrappers.MakeKVRouter("m", "ns").Gateway("gw", "", "").InferencePool("").Obj()
	kvr.Spec.Disaggregation = &v1alpha1.DisaggregationSpec{SideChannelPort: 9090}
	for _, name := range []string{"m-engine-prefill", "m-engine-decode"} {
		spec := find[*appsv1.Deployment](t, mustObjects(t, kvr, render.Options{}), name).Spec.Template.Spec
		i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == render.PDSidecarContainerName })
		if i < 0 {
			t.Fatalf("%s: no %s container", name, render.PDSidecarContainerName)
		}
		c := spec.Containers[i]
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 5 {
			t.Errorf("%s: pd-sidecar has no preStop pause: %+v", name, c.Lifecycle)
		}
		j := slices.Index(c.Args, "--admin-addr")
		if j < 0 || j+1 >= len(c.Args) || c.Args[j+1] != "" {
			t.Errorf("%s: pd-sidecar args %q keep the router's default admin listener (:9090, here the side channel's port)", name, c.Args)
		}
	}
}
