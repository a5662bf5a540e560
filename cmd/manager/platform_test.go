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

package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// failingMapper answers every lookup with a discovery error that is not "no such kind".
type failingMapper struct{ meta.RESTMapper }

func (failingMapper) RESTMapping(schema.GroupKind, ...string) (*meta.RESTMapping, error) {
	return nil, errors.New("the server is currently unable to handle the request")
}

func TestPlatformDetection(t *testing.T) {
	// The preferred versions stand in for discovery's, as the manager's mapper has them.
	openShift := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Group: "security.openshift.io", Version: "v1"}})
	openShift.Add(schema.GroupVersionKind{Group: "security.openshift.io", Version: "v1", Kind: "SecurityContextConstraints"}, meta.RESTScopeRoot)
	vanilla := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Group: "apps", Version: "v1"}})
	vanilla.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)

	for _, tc := range []struct {
		name, flag   string
		uid          int64
		mapper       meta.RESTMapper
		wantPlatform string
		wantAssigns  bool
	}{
		{"auto on OpenShift", platformAuto, render.DefaultEngineUID, openShift, platformOpenShift, true},
		{"auto elsewhere", platformAuto, 1234, vanilla, platformKubernetes, false},
		{"forced kubernetes on OpenShift", platformKubernetes, render.DefaultEngineUID, openShift, platformKubernetes, false},
		{"forced openshift without a cluster", platformOpenShift, render.DefaultEngineUID, nil, platformOpenShift, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &platformFlags{platform: tc.flag, engineUID: tc.uid}
			var opts render.Options
			got, err := p.apply(&opts, tc.mapper)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.wantPlatform || opts.PlatformAssignsUID != tc.wantAssigns || opts.EngineUID != tc.uid {
				t.Errorf("platform %s, options %+v; want %s, PlatformAssignsUID %v, EngineUID %d", got, opts, tc.wantPlatform, tc.wantAssigns, tc.uid)
			}
		})
	}

	// A flaky API server must not be read as "not OpenShift".
	if _, err := (&platformFlags{platform: platformAuto, engineUID: 1}).apply(&render.Options{}, failingMapper{}); err == nil ||
		!strings.Contains(err.Error(), "SecurityContextConstraints") {
		t.Errorf("discovery error = %v, want one naming SecurityContextConstraints", err)
	}
}

func TestPlatformFlags(t *testing.T) {
	parse := func(def string, args ...string) (*platformFlags, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(&bytes.Buffer{})
		p := bindPlatformFlags(fs, def)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		return p, p.validate(def == platformAuto)
	}
	if p, err := parse(platformAuto); err != nil || p.platform != platformAuto || p.engineUID != render.DefaultEngineUID {
		t.Errorf("defaults %+v, %v", p, err)
	}
	for _, args := range [][]string{{"--platform", "eks"}, {"--engine-uid", "0"}, {"--engine-uid", "-5"}} {
		if _, err := parse(platformAuto, args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	if _, err := parse(platformKubernetes, "--platform", platformAuto); err == nil {
		t.Error("manager render accepted --platform auto, which needs a cluster")
	}
}

func TestRenderPlatformFlag(t *testing.T) {
	clearImageEnv(t)
	var out, errOut bytes.Buffer
	if code := run([]string{"render", "-f", "../../config/samples/serving_v1alpha1_kvrouter.yaml", "--platform", "openshift"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if strings.Contains(out.String(), "runAsUser") || strings.Contains(out.String(), "fsGroup") {
		t.Error("--platform openshift rendered a fixed UID or fsGroup")
	}
	out.Reset()
	if code := run([]string{"render", "-f", "../../config/samples/serving_v1alpha1_kvrouter.yaml", "--engine-uid", "4242"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "runAsUser: 4242") {
		t.Error("--engine-uid not used on the default kubernetes platform")
	}
}
