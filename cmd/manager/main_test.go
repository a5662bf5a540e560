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
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kvrouter/internal/operator/controller"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// clearImageEnv unsets every variable an image flag defaults from.
func clearImageEnv(t *testing.T) {
	for _, v := range []string{"RELATED_IMAGE_ROUTER", "RELATED_IMAGE_SIMULATOR", "RELATED_IMAGE_ENGINE", "KVROUTER_IMAGE", "WATCH_NAMESPACE", "POD_NAMESPACE"} {
		t.Setenv(v, "")
	}
}

func TestParseFlagsDefaults(t *testing.T) {
	clearImageEnv(t)
	c, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.metricsAddr != ":8443" || !c.metricsSecure || c.metricsCertDir != "" || c.probeAddr != ":8081" || c.leaderElect {
		t.Errorf("defaults = %+v", c)
	}
	if m := metricsOptions(c); !m.SecureServing || m.FilterProvider == nil || m.BindAddress != ":8443" {
		t.Errorf("metrics server %+v, want HTTPS with authentication and authorization on :8443", m)
	}
	// Render's defaults: the selectors stay nil, the namespace is the pod's, else the install's.
	if o := c.routerRenderOptions(); o.MonitoringNamespaces != nil || o.AutoscalerNamespaces != nil ||
		(o.OperatorNamespace != render.DefaultOperatorNamespace && o.OperatorNamespace != ownNamespace()) {
		t.Errorf("render options %+v", o)
	}
	if c.images.router != render.DefaultRouterImage || c.images.simulator != render.DefaultSimulatorImage || c.images.engine != render.DefaultEngineImage {
		t.Errorf("images = %+v, want the release images", *c.images)
	}
	if c.watchNamespaces != nil {
		t.Errorf("namespaces = %q, want all", c.watchNamespaces)
	}
	if c.labelAllowList != nil {
		t.Errorf("label allow-list = %#v, want nil (render's default)", c.labelAllowList)
	}
	if c.recheckInterval != controller.DefaultRecheckInterval {
		t.Errorf("recheck = %s", c.recheckInterval)
	}
}

func TestParseFlags(t *testing.T) {
	clearImageEnv(t)
	t.Setenv("RELATED_IMAGE_ROUTER", "registry.example.com/router:env")
	t.Setenv("RELATED_IMAGE_SIMULATOR", "registry.example.com/vllm-sim:env")
	t.Setenv("RELATED_IMAGE_ENGINE", "registry.example.com/vllm@sha256:0123")
	t.Setenv("WATCH_NAMESPACE", "not-used-when-the-flag-is-given")
	c, err := parseFlags([]string{
		"--leader-elect", "--metrics-bind-address=0", "--watch-namespaces", "a, b,,c",
		"--label-allow-list", "team,app.kubernetes.io/part-of", "--crd-recheck-interval", "5s", "--zap-log-level", "debug",
	}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.leaderElect || c.metricsAddr != "0" || c.recheckInterval != 5*time.Second {
		t.Errorf("parsed = %+v", c)
	}
	if c.images.router != "registry.example.com/router:env" || c.images.simulator != "registry.example.com/vllm-sim:env" {
		t.Errorf("images = %+v, want $RELATED_IMAGE_ROUTER and $RELATED_IMAGE_SIMULATOR", *c.images)
	}
	if c.images.engine != "registry.example.com/vllm@sha256:0123" || c.routerRenderOptions().EngineImage != c.images.engine {
		t.Errorf("engine image %q, render options %q, want $RELATED_IMAGE_ENGINE", c.images.engine, c.routerRenderOptions().EngineImage)
	}
	if !slices.Equal(c.watchNamespaces, []string{"a", "b", "c"}) {
		t.Errorf("namespaces = %q", c.watchNamespaces)
	}
	if !slices.Equal(c.labelAllowList, []string{"team", "app.kubernetes.io/part-of"}) {
		t.Errorf("allow-list = %q", c.labelAllowList)
	}

	c, err = parseFlags([]string{"--label-allow-list", "-"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.labelAllowList == nil || len(c.labelAllowList) != 0 {
		t.Errorf(`--label-allow-list - = %#v, want an empty, non-nil list (copy nothing)`, c.labelAllowList)
	}
}

func TestRunRefusesBadCommandLines(t *testing.T) {
	for _, args := range [][]string{
		{"--no-such-flag"},
		{"stray-argument"},
		{"--crd-recheck-interval", "0s"},
		{"render"}, // render without -f
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("run(%q) = %d, want 2; stderr: %s", args, code, stderr.String())
		}
		if stderr.Len() == 0 {
			t.Errorf("run(%q) explained nothing on stderr", args)
		}
	}
}

func TestRunHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--help = %d", code)
	}
	for _, want := range []string{"manager render -f FILE", "-kvrouter-image", "-leader-elect", "-watch-namespaces"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, stderr.String())
		}
	}
}

// OLM's OperatorGroup reaches the manager as WATCH_NAMESPACE: one namespace (OwnNamespace,
// SingleNamespace), several joined by commas (MultiNamespace), or empty (AllNamespaces).
func TestWatchNamespaceFromEnv(t *testing.T) {
	for env, want := range map[string][]string{"": nil, "team-a": {"team-a"}, "team-a,team-b": {"team-a", "team-b"}} {
		clearImageEnv(t)
		t.Setenv("WATCH_NAMESPACE", env)
		c, err := parseFlags(nil, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.watchNamespaces, want) {
			t.Errorf("WATCH_NAMESPACE=%q: namespaces = %q, want %q", env, c.watchNamespaces, want)
		}
	}
}

// Which image each pod gets, for every way of naming one: the specific flags beat the
// all-in-one alias whatever their order, flags beat the environment, RELATED_IMAGE_* beats the
// legacy KVROUTER_IMAGE.
func TestImageFlagPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name                string
		env                 map[string]string
		args                []string
		wantRouter, wantSim string
	}{
		{name: "legacy env fills both", env: map[string]string{"KVROUTER_IMAGE": "old/all:1"},
			wantRouter: "old/all:1", wantSim: "old/all:1"},
		{name: "related images beat the legacy env", env: map[string]string{"KVROUTER_IMAGE": "old/all:1", "RELATED_IMAGE_ROUTER": "r:env"},
			wantRouter: "r:env", wantSim: "old/all:1"},
		{name: "alias sets both", env: map[string]string{"RELATED_IMAGE_ROUTER": "r:env", "RELATED_IMAGE_SIMULATOR": "s:env"},
			args: []string{"--kvrouter-image", "all:flag"}, wantRouter: "all:flag", wantSim: "all:flag"},
		{name: "short alias", args: []string{"--image", "all:flag"}, wantRouter: "all:flag", wantSim: "all:flag"},
		{name: "specific flag after the alias", args: []string{"--kvrouter-image", "all:flag", "--router-image", "r:flag"},
			wantRouter: "r:flag", wantSim: "all:flag"},
		{name: "specific flag before the alias", args: []string{"--simulator-image", "s:flag", "--kvrouter-image", "all:flag"},
			wantRouter: "all:flag", wantSim: "s:flag"},
		{name: "both specific flags", env: map[string]string{"RELATED_IMAGE_ROUTER": "r:env"},
			args: []string{"--router-image", "r:flag", "--simulator-image", "s:flag"}, wantRouter: "r:flag", wantSim: "s:flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearImageEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := parseFlags(tc.args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if c.images.router != tc.wantRouter || c.images.simulator != tc.wantSim {
				t.Errorf("router %q simulator %q, want %q %q", c.images.router, c.images.simulator, tc.wantRouter, tc.wantSim)
			}
		})
	}
}

// `manager render` takes the same image flags as the manager and puts each image in its pods.
func TestRenderImageFlags(t *testing.T) {
	clearImageEnv(t)
	for _, tc := range []struct {
		args                []string
		wantRouter, wantSim string
	}{
		{[]string{"--router-image", "r.example.com/router:1", "--simulator-image", "r.example.com/sim:1"}, "r.example.com/router:1", "r.example.com/sim:1"},
		{[]string{"--kvrouter-image", "r.example.com/all:2"}, "r.example.com/all:2", "r.example.com/all:2"},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"-f", "../../config/samples/kvrouter_simulate.yaml"}, tc.args...)
		if rc := runRender(args, &out, &errOut); rc != 0 {
			t.Fatalf("manager render %q: exit %d: %s", tc.args, rc, errOut.String())
		}
		if !strings.Contains(out.String(), "image: "+tc.wantRouter+"\n") || !strings.Contains(out.String(), "image: "+tc.wantSim+"\n") {
			t.Errorf("manager render %q: want router image %s and simulator image %s in the output", tc.args, tc.wantRouter, tc.wantSim)
		}
	}
}

func TestMetricsAndAdminAccessFlags(t *testing.T) {
	clearImageEnv(t)
	t.Setenv("POD_NAMESPACE", "operators")
	c, err := parseFlags([]string{"--metrics-secure=false", "--metrics-bind-address", ":8080",
		"--monitoring-namespace-selector", "team=observability", "--autoscaler-namespace-selector", "kubernetes.io/metadata.name in (scalers)"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if m := metricsOptions(c); m.SecureServing || m.FilterProvider != nil || m.BindAddress != ":8080" {
		t.Errorf("--metrics-secure=false: %+v, want plain HTTP", m)
	}
	o := c.routerRenderOptions()
	if o.OperatorNamespace != "operators" {
		t.Errorf("operator namespace %q, want $POD_NAMESPACE", o.OperatorNamespace)
	}
	if got := metav1.FormatLabelSelector(o.MonitoringNamespaces); got != "team=observability" {
		t.Errorf("monitoring namespaces %s", got)
	}
	if got := metav1.FormatLabelSelector(o.AutoscalerNamespaces); got != "kubernetes.io/metadata.name in (scalers)" {
		t.Errorf("autoscaler namespaces %s", got)
	}
	for _, bad := range [][]string{
		{"--monitoring-namespace-selector", ""}, // every namespace
		{"--autoscaler-namespace-selector", "a in b"},
	} {
		var stderr bytes.Buffer
		if _, err := parseFlags(bad, &stderr); err == nil || stderr.Len() == 0 {
			t.Errorf("%q accepted (%v)", bad, err)
		}
	}
}
