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

package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// The Kubernetes version whose kube-apiserver and etcd `make envtest` builds into bin/k8s.
const envtestK8sVersion = "v1.36.3"

// Versions of the third-party CRDs installed into the control plane. Gateway API, its Inference
// Extension and LWS are dependencies of the module (their Go types are used) and resolve through
// go.mod; KEDA is not, so its version is pinned here.
const kedaModule = "github.com/kedacore/keda/v2@v2.21.0"

// The Prometheus Operator's CRDs (ServiceMonitor, PodMonitor) come from its main module, which
// is not a dependency either (only pkg/apis/monitoring is a module of its own, and it requires
// newer k8s.io modules).
const prometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

// testRecheck is how often the operator under test rediscovers optional CRDs.
const testRecheck = time.Second

// testStatusPoll is how often the operator under test reads a router's /v1/status.
const testStatusPoll = 300 * time.Millisecond

// routerStubs maps "namespace/name" of a KVRouter to the base URL of a stub router status server
// (envtest has no Service networking). KVRouters without a stub get a closed loopback port: an
// unreachable router.
var routerStubs sync.Map

func stubRouterURL(kvr *v1alpha1.KVRouter) string {
	if u, ok := routerStubs.Load(kvr.Namespace + "/" + kvr.Name); ok {
		return u.(string)
	}
	return "http://127.0.0.1:1"
}

var (
	// A cluster admin's client of the control plane with every CRD installed, shared by the
	// specs of this package.
	k8sClient client.Client
)

func TestEnvtestController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "KVRouter controller (envtest)")
}

var _ = BeforeSuite(func() {
	// Debug level, so that the check that no Secret value reaches the log covers every level.
	logf.SetLogger(zap.New(zap.WriteTo(io.MultiWriter(GinkgoWriter, operatorLog)), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(20 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)

	env, cfg := startControlPlane(crdPaths(true))
	adminConfig = cfg
	k8sClient = newClient(cfg)
	startOperator(operatorConfig(env, k8sClient))
})

// repoRoot finds the module root from the package directory tests run in.
func repoRoot() string {
	dir, err := os.Getwd()
	Expect(err).NotTo(HaveOccurred())
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		Expect(parent).NotTo(Equal(dir), "go.mod not found above the test directory")
		dir = parent
	}
}

// envtestAssets returns the directory that holds kube-apiserver and etcd: KUBEBUILDER_ASSETS
// when set, else what `make envtest` builds.
func envtestAssets() string {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(repoRoot(), "bin", "k8s", envtestK8sVersion)
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			Fail(fmt.Sprintf("envtest binary %s not found in %s: run `make envtest` (it builds kube-apiserver and etcd from the Go module proxy), or set KUBEBUILDER_ASSETS", b, dir))
		}
	}
	return dir
}

// crdPaths lists the CRDs to install: the KVRouter CRD, and with thirdParty the real CRDs of
// Gateway API (standard channel), the Inference Extension's InferencePool, LeaderWorkerSet,
// KEDA's ScaledObject and the Prometheus Operator's ServiceMonitor, PodMonitor and
// PrometheusRule, read from the Go module cache.
func crdPaths(thirdParty bool) []string {
	root := repoRoot()
	paths := []string{filepath.Join(root, "config", "crd", "bases")}
	if !thirdParty {
		return paths
	}
	return append(append(paths,
		gatewayAPICRDs(),
		inferencePoolCRD(),
		filepath.Join(moduleDir(root, "sigs.k8s.io/lws"), "config", "crd", "bases"),
		filepath.Join(downloadModule(kedaModule), "config", "crd", "bases", "keda.sh_scaledobjects.yaml"),
	), monitoringCRDs()...)
}

func monitoringCRDs() []string {
	dir := filepath.Join(downloadModule(prometheusOperatorModule), "example", "prometheus-operator-crd")
	return []string{
		filepath.Join(dir, "monitoring.coreos.com_servicemonitors.yaml"),
		filepath.Join(dir, "monitoring.coreos.com_podmonitors.yaml"),
		filepath.Join(dir, "monitoring.coreos.com_prometheusrules.yaml"),
	}
}

// inferencePoolCRD is the InferencePool CRD (inference.networking.k8s.io/v1) of the Inference
// Extension module whose Go types the operator renders, so the two cannot disagree.
func inferencePoolCRD() string {
	return filepath.Join(moduleDir(repoRoot(), "sigs.k8s.io/gateway-api-inference-extension"),
		"config", "crd", "bases", "inference.networking.k8s.io_inferencepools.yaml")
}

func gatewayAPICRDs() string {
	return filepath.Join(moduleDir(repoRoot(), "sigs.k8s.io/gateway-api"), "config", "crd", "standard")
}

// moduleDir is the module cache directory of a module the project depends on.
func moduleDir(root, module string) string {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = root
	out, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "go list -m %s: %s", module, stderrOf(err))
	dir := strings.TrimSpace(string(out))
	Expect(dir).NotTo(BeEmpty(), "module %s is not in the module cache: run `go mod download %s`", module, module)
	return dir
}

// downloadModule fetches a module that is not a dependency (from the module cache when it is
// there, else from the Go module proxy) without touching go.mod.
func downloadModule(modAtVersion string) string {
	cmd := exec.Command("go", "mod", "download", "-json", modAtVersion)
	cmd.Dir = os.TempDir() // outside the module: go.mod and go.sum stay as they are
	out, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "go mod download %s: %s %s", modAtVersion, stderrOf(err), out)
	var info struct{ Dir, Error string }
	Expect(json.Unmarshal(out, &info)).To(Succeed())
	Expect(info.Error).To(BeEmpty(), "go mod download %s", modAtVersion)
	return info.Dir
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// startControlPlane starts kube-apiserver and etcd with the given CRDs, and stops them when the
// enclosing node (suite or Ordered container) ends. The config it returns is a cluster admin's.
func startControlPlane(crds []string) (*envtest.Environment, *rest.Config) {
	env := &envtest.Environment{
		BinaryAssetsDirectory: envtestAssets(),
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true},
	}
	auditControlPlane(env) // rbac_test.go
	start := time.Now()
	cfg, err := env.Start()
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("control plane with %d CRD paths up in %s\n", len(crds), time.Since(start).Round(time.Millisecond))
	DeferCleanup(env.Stop)
	return env, cfg
}

// operatorConfig returns credentials that hold exactly the operator's ClusterRole from
// config/rbac/role.yaml (generated from the +kubebuilder:rbac markers), so that a marker missing
// for something the reconciler does fails these tests instead of a cluster install. It covers
// RBAC escalation prevention too: the router's Role can only be created by a user that holds
// what it grants.
func operatorConfig(env *envtest.Environment, admin client.Client) *rest.Config {
	data, err := os.ReadFile(filepath.Join(repoRoot(), "config", "rbac", "role.yaml"))
	Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	Expect(yaml.Unmarshal(data, role)).To(Succeed())
	Expect(role.Rules).NotTo(BeEmpty())
	const user = operatorUser
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	ctx := context.Background()
	Expect(admin.Create(ctx, role)).To(Succeed())
	Expect(admin.Create(ctx, binding)).To(Succeed())
	u, err := env.AddUser(envtest.User{Name: user}, nil)
	Expect(err).NotTo(HaveOccurred())
	cfg := u.Config()
	// The credentials really are restricted: the operator has no business reading Secrets.
	err = newClient(cfg).List(ctx, &corev1.SecretList{})
	Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing Secrets as the operator: %v", err)
	return cfg
}

func newClient(cfg *rest.Config) client.Client {
	scheme, err := NewScheme()
	Expect(err).NotTo(HaveOccurred())
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// startOperator runs the manager the way cmd/manager does (same scheme, cache restrictions and
// reconciler) until the enclosing node ends; its cleanup runs before the control plane's.
func startOperator(cfg *rest.Config) {
	// The audit log tells the operator's requests from the test's own as the same user.
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = operatorUserAgent
	scheme, err := NewScheme()
	Expect(err).NotTo(HaveOccurred())
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Two managers (one per control plane) register the same controller name in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	r := &KVRouterReconciler{
		Client:             mgr.GetClient(),
		Scheme:             mgr.GetScheme(),
		Recorder:           mgr.GetEventRecorder("kvrouter-operator"),
		RenderOptions:      render.Options{RouterImage: "kvrouter:test", SimulatorImage: "kvrouter:test"},
		RecheckInterval:    testRecheck,
		RouterURL:          stubRouterURL,
		StatusPollInterval: testStatusPoll,
		StatusTimeout:      time.Second,
	}
	Expect(r.SetupWithManager(mgr)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		defer GinkgoRecover()
		done <- mgr.Start(ctx)
	}()
	DeferCleanup(func() {
		cancel()
		Eventually(done).WithTimeout(30 * time.Second).Should(Receive(BeNil()))
	})
}
