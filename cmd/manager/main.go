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

// Command manager is the kvrouter operator. `manager` runs the controller; `manager render -f
// FILE` prints the objects of a KVRouter manifest without a cluster.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kvrouter/kvrouter/internal/operator/controller"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "render" {
		return runRender(args[1:], stdout, stderr)
	}
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	return runManager(ctrl.SetupSignalHandler(), cfg, stderr)
}

// managerConfig is the manager's command line.
type managerConfig struct {
	kubeconfig        string
	metricsAddr       string
	metricsSecure     bool
	metricsCertDir    string
	probeAddr         string
	leaderElect       bool
	leaderElectionID  string
	leaderElectionNS  string
	images            *imageFlags
	platform          *platformFlags
	access            *adminAccessFlags
	watchNamespaces   []string
	labelAllowList    []string
	labelAllowListSet bool
	recheckInterval   time.Duration
	statusInterval    time.Duration
	zap               zap.Options
	// renderOptions holds what the flags set of render.Options besides images and platform.
	renderOptions render.Options
}

func parseFlags(args []string, stderr io.Writer) (*managerConfig, error) {
	c := &managerConfig{}
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage:\n  manager [flags]           run the operator\n  manager render -f FILE    print the objects of a KVRouter manifest\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "path to a kubeconfig; empty: in-cluster config, then $KUBECONFIG, then ~/.kube/config")
	fs.StringVar(&c.metricsAddr, "metrics-bind-address", ":8443", `address of the Prometheus metrics endpoint; "0" disables it`)
	fs.BoolVar(&c.metricsSecure, "metrics-secure", true, "serve metrics over HTTPS to authenticated callers allowed to get /metrics (TokenReview and SubjectAccessReview); false: plain HTTP to anyone")
	fs.StringVar(&c.metricsCertDir, "metrics-cert-dir", "", "directory holding tls.crt and tls.key for the metrics endpoint (e.g. a cert-manager Secret); empty: a self-signed certificate made at start")
	fs.StringVar(&c.probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	fs.BoolVar(&c.leaderElect, "leader-elect", false, "elect a leader, so that only one of several replicas reconciles")
	fs.StringVar(&c.leaderElectionID, "leader-election-id", "kvrouter-operator.serving.kvrouter.dev", "name of the leader election Lease")
	fs.StringVar(&c.leaderElectionNS, "leader-election-namespace", "", "namespace of the leader election Lease; empty: the manager's own namespace")
	c.images = bindImageFlags(fs)
	c.platform = bindPlatformFlags(fs, platformAuto)
	c.access = bindAdminAccessFlags(fs)
	// OLM puts the OperatorGroup's target namespaces in WATCH_NAMESPACE (config/manager maps the
	// olm.targetNamespaces annotation onto it): empty for AllNamespaces, so one default serves
	// both kustomize and OLM installs.
	watch := fs.String("watch-namespaces", os.Getenv("WATCH_NAMESPACE"), "comma-separated namespaces to reconcile KVRouters in; empty: all (default $WATCH_NAMESPACE)")
	allow := fs.String("label-allow-list", "", "comma-separated label keys copied from a KVRouter to its children (default "+strings.Join(render.DefaultLabelAllowList, ",")+"); \"-\" copies none")
	fs.DurationVar(&c.recheckInterval, "crd-recheck-interval", controller.DefaultRecheckInterval, "how often optional CRDs (Gateway API, KEDA, LeaderWorkerSet) are rediscovered")
	fs.DurationVar(&c.statusInterval, "router-status-interval", controller.DefaultStatusPollInterval, "how often each KVRouter's router is read (GET /v1/status) for the cache status and conditions")
	c.zap.BindFlags(fs)

	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c.images.resolve(fs)
	c.watchNamespaces = splitList(*watch)
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "label-allow-list" {
			c.labelAllowListSet = true
		}
	})
	if c.labelAllowListSet {
		c.labelAllowList = []string{} // non-nil: exactly this list, possibly empty
		if *allow != "-" {
			c.labelAllowList = append(c.labelAllowList, splitList(*allow)...)
		}
	}
	if err := c.platform.validate(true); err != nil {
		fmt.Fprintln(stderr, err)
		return nil, err
	}
	c.renderOptions = render.Options{LabelAllowList: c.labelAllowList}
	if err := c.access.apply(fs, &c.renderOptions); err != nil {
		fmt.Fprintln(stderr, err)
		return nil, err
	}
	if c.statusInterval <= 0 {
		fmt.Fprintln(stderr, "--router-status-interval must be positive")
		return nil, errors.New("--router-status-interval must be positive")
	}
	if c.recheckInterval <= 0 {
		fmt.Fprintln(stderr, "--crd-recheck-interval must be positive")
		return nil, errors.New("--crd-recheck-interval must be positive")
	}
	return c, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return ctrl.GetConfig()
}

// runManager runs the operator until ctx ends (SIGTERM in production) and returns the exit code.
func runManager(ctx context.Context, c *managerConfig, stderr io.Writer) int {
	c.zap.DestWriter = stderr
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&c.zap)))
	log := ctrl.Log.WithName("setup")

	cfg, err := restConfig(c.kubeconfig)
	if err != nil {
		log.Error(err, "loading the cluster configuration")
		return 1
	}
	scheme, err := controller.NewScheme()
	if err != nil {
		log.Error(err, "building the scheme")
		return 1
	}
	cacheOpts := controller.CacheOptions()
	if len(c.watchNamespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range c.watchNamespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		Metrics:                 metricsOptions(c),
		HealthProbeBindAddress:  c.probeAddr,
		LeaderElection:          c.leaderElect,
		LeaderElectionID:        c.leaderElectionID,
		LeaderElectionNamespace: c.leaderElectionNS,
		// The manager exits right after it loses the lease; a new leader starts faster when
		// the old one hands the lease back on shutdown.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		log.Error(err, "creating the manager")
		return 1
	}
	r := &controller.KVRouterReconciler{
		Client:             mgr.GetClient(),
		Scheme:             mgr.GetScheme(),
		Recorder:           mgr.GetEventRecorder("kvrouter-operator"),
		RenderOptions:      c.routerRenderOptions(),
		StatusPollInterval: c.statusInterval,
		RecheckInterval:    c.recheckInterval,
	}
	platform, err := c.platform.apply(&r.RenderOptions, mgr.GetRESTMapper())
	if err != nil {
		log.Error(err, "detecting the platform")
		return 1
	}
	log.Info("engine pod UIDs", "platform", platform, "platformAssignsUID", r.RenderOptions.PlatformAssignsUID, "engineUID", r.RenderOptions.EngineUID)
	if err := r.SetupWithManager(mgr); err != nil {
		log.Error(err, "setting up the KVRouter controller")
		return 1
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "adding the health check")
		return 1
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "adding the readiness check")
		return 1
	}
	log.Info("starting the manager", "routerImage", c.images.router, "simulatorImage", c.images.simulator, "engineImage", c.images.engine, "leaderElection", c.leaderElect, "watchNamespaces", c.watchNamespaces)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "running the manager")
		return 1
	}
	return 0
}

// The metrics endpoint authenticates each scraper's bearer token with a TokenReview and asks a
// SubjectAccessReview whether it may get the non-resource URL /metrics
// (filters.WithAuthenticationAndAuthorization); the kvrouter-metrics-reader ClusterRole grants
// that to scrapers.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// metricsOptions is the manager's metrics server: HTTPS for callers the API server vouches for,
// unless --metrics-secure=false.
func metricsOptions(c *managerConfig) metricsserver.Options {
	o := metricsserver.Options{BindAddress: c.metricsAddr}
	if !c.metricsSecure {
		return o
	}
	o.SecureServing = true
	o.FilterProvider = filters.WithAuthenticationAndAuthorization
	o.CertDir = c.metricsCertDir
	// HTTP/1.1 only: Prometheus needs nothing more, and HTTP/2's stream reset and cancellation
	// floods (CVE-2023-44487, CVE-2023-39325) are then not this server's to handle.
	o.TLSOpts = []func(*tls.Config){func(t *tls.Config) { t.NextProtos = []string{"http/1.1"} }}
	return o
}

// routerRenderOptions are the render options of the flags, platform aside (set at start).
func (c *managerConfig) routerRenderOptions() render.Options {
	o := c.renderOptions
	o.RouterImage, o.SimulatorImage, o.EngineImage = c.images.router, c.images.simulator, c.images.engine
	return o
}

// imageFlags are the images of the pods the operator renders: --router-image, --simulator-image
// and --engine-image (vLLM's, for KVRouters whose spec.engine.image is empty), shared by the
// manager and `manager render`.
type imageFlags struct {
	router, simulator, engine string
	// both is --kvrouter-image (alias --image): one image holding both binaries, the single
	// image earlier manifests used. It fills whichever of the two was not given itself.
	both string
}

// bindImageFlags binds the image flags. Their defaults are the RELATED_IMAGE_* variables that
// config/manager sets (and OLM's tooling reads for relatedImages), then $KVROUTER_IMAGE, which
// earlier manifests set to the one image holding both binaries, then the release images.
func bindImageFlags(fs *flag.FlagSet) *imageFlags {
	f := &imageFlags{}
	legacy := os.Getenv("KVROUTER_IMAGE")
	fs.StringVar(&f.router, "router-image", firstSet(os.Getenv("RELATED_IMAGE_ROUTER"), legacy, render.DefaultRouterImage),
		"image of the router pods (/router); default $RELATED_IMAGE_ROUTER, else "+render.DefaultRouterImage)
	fs.StringVar(&f.simulator, "simulator-image", firstSet(os.Getenv("RELATED_IMAGE_SIMULATOR"), legacy, render.DefaultSimulatorImage),
		"image of the vllm-sim pods (/vllm-sim) of KVRouters with spec.simulate; default $RELATED_IMAGE_SIMULATOR, else "+render.DefaultSimulatorImage)
	fs.StringVar(&f.engine, "engine-image", firstSet(os.Getenv("RELATED_IMAGE_ENGINE"), render.DefaultEngineImage),
		"vLLM image of the engines of KVRouters that set no spec.engine.image; default $RELATED_IMAGE_ENGINE, else "+render.DefaultEngineImage)
	const alias = "one image holding /router and /vllm-sim: sets --router-image and --simulator-image where those are not given"
	fs.StringVar(&f.both, "kvrouter-image", "", alias)
	fs.StringVar(&f.both, "image", "", "alias of --kvrouter-image")
	return f
}

// resolve applies --kvrouter-image after fs is parsed, so that the specific flags win whatever
// their order on the command line.
func (f *imageFlags) resolve(fs *flag.FlagSet) {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if !given["kvrouter-image"] && !given["image"] {
		return
	}
	if !given["router-image"] {
		f.router = f.both
	}
	if !given["simulator-image"] {
		f.simulator = f.both
	}
}

func firstSet(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
