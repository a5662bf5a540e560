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
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/controller"
	"github.com/kvrouter/kvrouter/test/fleettest"
)

// TestEnvtestManager runs the manager binary's code path (flags, kubeconfig, scheme, cache,
// probes, controller) against a bare control plane that has only the KVRouter CRD, and checks
// it reconciles a KVRouter, serves its health probe and exits cleanly.
func TestEnvtestManager(t *testing.T) {
	_, env := bareControlPlane(t) // rbac_envtest_test.go
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigPath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}

	probeAddr := freeAddr(t)
	var stderr fleettest.SyncBuffer
	c, err := parseFlags([]string{
		"--kubeconfig", kubeconfigPath, "--metrics-bind-address", "0",
		"--health-probe-bind-address", probeAddr, "--kvrouter-image", "kvrouter:smoke",
	}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() { exit <- runManager(ctx, c, &stderr) }()
	defer func() {
		cancel()
		select {
		case code := <-exit:
			if code != 0 {
				t.Errorf("manager exited with %d:\n%s", code, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("manager did not stop within 30s of cancellation")
		}
	}()

	scheme, err := controller.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	k, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	kvr := &v1alpha1.KVRouter{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "smoke"},
		Spec:       v1alpha1.KVRouterSpec{Model: v1alpha1.ModelSpec{Name: "Qwen/Qwen3-0.6B"}, Simulate: true},
	}
	if err := k.Create(ctx, kvr); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "the router Deployment with the flag's image", func() error {
		d := &appsv1.Deployment{}
		if err := k.Get(ctx, types.NamespacedName{Namespace: "default", Name: "smoke-router"}, d); err != nil {
			return err
		}
		if img := d.Spec.Template.Spec.Containers[0].Image; img != "kvrouter:smoke" {
			return fmt.Errorf("router image %q", img)
		}
		return nil
	})
	waitFor(t, "the engine Deployment", func() error {
		return k.Get(ctx, types.NamespacedName{Namespace: "default", Name: "smoke-engine"}, &appsv1.Deployment{})
	})
	waitFor(t, "status with the observed generation", func() error {
		cur := &v1alpha1.KVRouter{}
		if err := k.Get(ctx, client.ObjectKeyFromObject(kvr), cur); err != nil {
			return err
		}
		if cur.Status.ObservedGeneration != cur.Generation || meta.FindStatusCondition(cur.Status.Conditions, controller.ConditionReady) == nil {
			return fmt.Errorf("status %+v", cur.Status)
		}
		return nil
	})
	waitFor(t, "the health probe", func() error {
		resp, err := http.Get("http://" + probeAddr + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz: %s", resp.Status)
		}
		return nil
	})
	// A bare cluster: the operator says so in its log instead of failing.
	if out := stderr.String(); !strings.Contains(out, "leaderworkersets.leaderworkerset.x-k8s.io") {
		t.Errorf("the log does not name the missing LeaderWorkerSet CRD:\n%s", out)
	}
}

// freeAddr never repeats an address within the process (fleettest.FreePort remembers them), so
// two listeners of one manager cannot be handed the same port.
func freeAddr(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", fleettest.FreePort(t))
}

func waitFor(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
