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
	"testing"

	appsv1 "k8s.io/api/apps/v1"

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
