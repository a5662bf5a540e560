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

// Command router is kvrouter's data plane: an OpenAI-compatible proxy in front of a fleet of
// vLLM engines that routes each request on an exact index of the engines' KV caches and on load.
//
//	router --port 8080 --endpoints-file endpoints.yaml
//	router --port 8080 --discovery kubernetes --namespace NS --selector app.kubernetes.io/component=engine,...
//	router --mode epp --discovery inferencepool --namespace NS --pool-name POOL
//
// See docs/router.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	poolclient "sigs.k8s.io/gateway-api-inference-extension/client-go/clientset/versioned"

	"github.com/kvrouter/kvrouter/internal/router/admission"
	"github.com/kvrouter/kvrouter/internal/router/disagg"
	"github.com/kvrouter/kvrouter/internal/router/discovery"
	"github.com/kvrouter/kvrouter/internal/router/epp"
	"github.com/kvrouter/kvrouter/internal/router/epp/protocol"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/kvstream"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/router/proxy"
)

type options struct {
	host, discovery, namespace, selector, endpointsFile, poolName string
	port, enginePort, eventsPort, replayPort, dpRanks             int
	blockSize                                                     int
	policy, model, sessionHeader, reportMode, logLevel            string
	maxBody                                                       int64
	maxInFlight                                                   int
	saturationFactor, targetTTFT                                  float64
	scrapeInterval, tokenizeTimeout, shutdownGrace                time.Duration
	streamIdle, headerTimeout                                     time.Duration
	readHeaderTimeout, bodyReadTimeout                            time.Duration
	noEvents                                                      bool
	pprofAddr, adminAddr                                          string
	indexMaxKeys                                                  int
	predictTTL, predictHold                                       time.Duration
	apiKeyFile, engineAPIKeyFile                                  string
	kvMaxFrameBytes                                               int64
	readyReplayTimeout                                            time.Duration

	// Front ends: the HTTP proxy (--port) and the Inference Extension endpoint picker (ext_proc).
	mode                      string
	grpcPort, grpcHealthPort  int
	grpcTLS, eppFallbacks     bool
	eppDestinationPort        int
	grpcCertFile, grpcKeyFile string

	// Hung engines: the TTFB watchdog and outlier ejection (proxy: watchdog.go, outlier.go).
	ttfbFactor                float64
	ttfbFloor, ttfbCap        time.Duration
	outlierFailures           int
	ejectionBase, ejectionMax time.Duration

	// Admission control (package admission).
	admission                                 bool
	admissionTTFTBound                        time.Duration
	admissionQueueCap, admissionFleetQueueCap int
	admissionEngineCapacity                   int
	admissionBatchFraction                    float64
	admissionTailHeadroom                     float64

	// The router queue (proxy: queue.go).
	queueCapacity  int
	queueMaxWait   time.Duration
	queueHoldAfter float64

	tokenizer tokenizerOptions

	// Disaggregated prefill/decode (proxy: pd.go), and the sidecar in front of a decode engine.
	pdMode, pdWholeOn string
	pdThreshold       int
	engineURL         string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.host, "host", "", "address to listen on (empty: all interfaces)")
	fs.IntVar(&o.port, "port", 8080, "HTTP port (proxy and both modes)")
	fs.StringVar(&o.mode, "mode", modeProxy, "proxy: serve clients over HTTP on --port; epp: be a Gateway API Inference Extension endpoint picker over Envoy ext_proc on --grpc-port, with no HTTP inference listener; both: the two at once; sidecar: sit in front of one decode engine (--engine-url) on --port and run the prefill leg of the requests the endpoint picker split (x-prefiller-host-port)")
	fs.StringVar(&o.pdMode, "pd-mode", string(disagg.Auto), "in a fleet with prefill-role engines: Auto (split a request into a prefill and a decode leg when the measured costs say it pays), Always, Never or Threshold (split from --pd-threshold-tokens uncached prompt tokens)")
	fs.IntVar(&o.pdThreshold, "pd-threshold-tokens", 0, "--pd-mode Threshold: uncached prompt tokens from which a request is split")
	fs.StringVar(&o.pdWholeOn, "pd-whole-on", proxy.WholeOnAny, "engines a request served whole may run on in a split fleet: any (prefill-role engines too) or decode")
	fs.StringVar(&o.engineURL, "engine-url", "", "sidecar mode: the local engine's URL, e.g. http://127.0.0.1:8000")
	fs.IntVar(&o.grpcPort, "grpc-port", 9002, "epp and both modes: ext_proc port (gRPC health is served there too)")
	fs.BoolVar(&o.grpcTLS, "grpc-tls", true, "epp and both modes: serve TLS on --grpc-port, as gateways expect of an endpoint picker (a self-signed certificate they do not verify, unless --grpc-tls-cert-file is given; --grpc-health-port stays in clear text for the kubelet's probes); false: clear text (h2c)")
	fs.BoolVar(&o.eppFallbacks, "epp-fallbacks", false, "epp and both modes: name the policy's fallback engines after its choice in x-gateway-destination-endpoint (ip:port,ip:port), for gateways that retry down the list (Envoy's override_host load balancing); off: one address, which gateways routing with an ORIGINAL_DST cluster (kgateway, Envoy AI Gateway) need")
	fs.StringVar(&o.grpcCertFile, "grpc-tls-cert-file", "", "PEM certificate for --grpc-tls (with --grpc-tls-key-file; re-read when the files change)")
	fs.StringVar(&o.grpcKeyFile, "grpc-tls-key-file", "", "PEM private key of --grpc-tls-cert-file")
	fs.IntVar(&o.eppDestinationPort, "epp-destination-port", 0, "epp and both modes: the port the picker names each engine on in x-gateway-destination-endpoint (its pod IP), where the Gateway sends requests: the pd-sidecar's (8200) when the engine pods run one; 0: the engine's own port (--engine-port, or the endpoints file's URL). The prefill engine named in x-prefiller-host-port keeps its own port")
	fs.IntVar(&o.grpcHealthPort, "grpc-health-port", 9003, "epp and both modes: gRPC health port (services liveness, readiness, "+protocol.ExtProcService+")")
	fs.StringVar(&o.discovery, "discovery", "", "endpoint discovery: file, kubernetes (pods by --selector) or inferencepool (the pods and ports an InferencePool names; default: file when --endpoints-file is set)")
	fs.StringVar(&o.poolName, "pool-name", "", "name of the InferencePool whose selector and targetPorts name the engines (inferencepool discovery)")
	fs.StringVar(&o.endpointsFile, "endpoints-file", "", "YAML file listing the engines (watched for changes)")
	fs.StringVar(&o.namespace, "namespace", "", "namespace of the engine pods, and of the InferencePool (kubernetes and inferencepool discovery)")
	fs.StringVar(&o.selector, "selector", "", "label selector of the engine pods (kubernetes discovery)")
	fs.IntVar(&o.enginePort, "engine-port", 8000, "engine HTTP port when the pod does not name a port 'http'")
	fs.IntVar(&o.eventsPort, "kv-events-port", 5557, "engine KV-events port when the pod does not name a port 'kv-events' (0: none)")
	fs.IntVar(&o.replayPort, "kv-replay-port", 5558, "engine KV-replay port when the pod does not name a port 'kv-replay' (0: none)")
	fs.IntVar(&o.dpRanks, "dp-ranks", 1, "data-parallel ranks per engine pod (kubernetes discovery)")
	fs.IntVar(&o.blockSize, "block-size", 16, "engines' KV block size in tokens")
	fs.StringVar(&o.policy, "policy", string(policy.Auto), "routing policy: Auto, PrefillBound, DecodeBound, RoundRobin, LeastLoaded, PrefixOnly")
	fs.StringVar(&o.model, "model", "", "served model name to accept (empty: what the engines list)")
	fs.StringVar(&o.sessionHeader, "session-header", "", "request header whose value keeps a session on one engine among equals")
	fs.StringVar(&o.reportMode, "kv-cache-report-mode", "", `set to "full" to inject vllm_xargs.kv_cache_report_mode=full into requests`)
	fs.Int64Var(&o.maxBody, "max-body-bytes", 16<<20, "largest accepted request body")
	fs.IntVar(&o.maxInFlight, "max-inflight-per-endpoint", 0, "admission limit per endpoint (0: none); beyond it on every endpoint: 503")
	fs.BoolVar(&o.admission, "admission", true, "shed requests beyond the admission bounds with a fast 429 and Retry-After instead of queueing them in the engines (docs/router.md#admission-control)")
	fs.DurationVar(&o.admissionTTFTBound, "admission-ttft-bound", admission.DefaultTTFTBound, "admit a request while its predicted time to first token on the chosen engine, queue included, is within this (0: no TTFT bound, queue caps only)")
	fs.IntVar(&o.admissionQueueCap, "admission-queue-cap", 0, "static cap on each engine's requests waiting for a first token, enforced always (0: the engine's batch capacity, while its TTFT model is uncalibrated)")
	fs.IntVar(&o.admissionFleetQueueCap, "admission-fleet-queue-cap", 0, "cap on the ready engines' waiting requests together (0: the sum of their batch capacities; -1: none)")
	fs.IntVar(&o.admissionEngineCapacity, "admission-engine-capacity", 0, "requests an engine runs at once, its --max-num-seqs (0: 256, vLLM's default); raised to the most an engine is seen running")
	// 0.7: at 3x saturation, predictions held to the bound itself let the admitted requests'
	// TTFT p99 run ~1.25x the bound, held to 0.8 of it ~1.07x on a loaded machine; 0.7 kept the
	// p99 within the bound at the same throughput (docs/reliability.md, Overload).
	fs.Float64Var(&o.admissionTailHeadroom, "admission-tail-headroom", admission.RouterTailHeadroom, "hold predicted TTFTs to this fraction of --admission-ttft-bound, so that the slowest admitted requests (p99), not the typical one, stay within it")
	fs.Float64Var(&o.admissionBatchFraction, "admission-batch-fraction", admission.DefaultBatchFraction, "requests with "+proxy.PriorityHeader+": batch are admitted only within this fraction of every bound, so they are shed first")
	// Off by default: in kvbench the queue cost more TTFT on cache-heavy workloads than it saved
	// under overload (docs/router.md#router-queue). When on, 1024 bounds the requests (and
	// their bodies) held at once, not their latency, which --queue-max-wait bounds.
	fs.IntVar(&o.queueCapacity, "queue-capacity", 0, "turn the router queue on: most requests that wait in the router at once for an engine expected to start them soon, rather than in an engine's queue; beyond it a request is shed with a 429 (0: no router queue; 1024 suits a replica completing up to ~340 requests a second)")
	// 3 s: within the admission TTFT budget (10 s × 0.7), with as much again left for the
	// engine; the router caps it at half that budget whatever the flag says.
	fs.DurationVar(&o.queueMaxWait, "queue-max-wait", proxy.DefaultQueueMaxWait, "longest a request waits in the router queue before it is shed with a 429 (at most half of --admission-ttft-bound × --admission-tail-headroom); one expected to wait longer at the engines' completion rate is shed at once")
	fs.Float64Var(&o.queueHoldAfter, "queue-hold-after", policy.DefaultHoldAfter, "hold a request in the router queue while every ready engine has more than this many seconds of prefill queued ahead of it (0: never hold)")
	fs.Float64Var(&o.saturationFactor, "saturation-factor", 1.5, "prefix holder is saturated above this multiple of the best predicted TTFT")
	fs.Float64Var(&o.targetTTFT, "target-ttft", 0, "optional TTFT target in seconds: a holder predicted above it is released to any faster endpoint")
	fs.DurationVar(&o.scrapeInterval, "scrape-interval", time.Second, "interval of engine /metrics scrapes")
	fs.DurationVar(&o.tokenizeTimeout, "tokenize-timeout", 2*time.Second, "timeout of one /tokenize call")
	fs.Float64Var(&o.ttfbFactor, "ttfb-watchdog-factor", 4, "a request with no first byte within this multiple of its predicted time to first token (within floor and cap) has its engine ejected if the engine sent nothing to anyone meanwhile, and moves to the next-best engine (0: watchdog off)")
	fs.DurationVar(&o.ttfbFloor, "ttfb-watchdog-floor", 2*time.Second, "shortest TTFB watchdog deadline; also how long a started stream's engine may be silent before its stall is priced")
	fs.DurationVar(&o.ttfbCap, "ttfb-watchdog-cap", time.Minute, "longest TTFB watchdog deadline (a whole, non-streamed answer adds its expected decode time)")
	fs.IntVar(&o.outlierFailures, "outlier-consecutive-failures", 5, "eject an engine after this many failures in a row after it accepted the request (reset before the answer, stream cut, /tokenize timeout; 0: never)")
	fs.DurationVar(&o.ejectionBase, "outlier-ejection-base", 2*time.Second, "an ejected engine stays out this long, doubled for each ejection soon after the last, and then until GET /health answers")
	fs.DurationVar(&o.ejectionMax, "outlier-ejection-max", time.Minute, "longest ejection time before the engine is probed")
	fs.DurationVar(&o.streamIdle, "stream-idle-timeout", 5*time.Minute, "abort an engine response silent for this long")
	fs.DurationVar(&o.headerTimeout, "upstream-header-timeout", 10*time.Minute, "wait for an engine's response headers (non-streaming answers arrive whole)")
	fs.DurationVar(&o.readHeaderTimeout, "read-header-timeout", 10*time.Second, "close a client connection whose request headers take longer (slowloris)")
	fs.DurationVar(&o.bodyReadTimeout, "body-read-timeout", time.Minute, "answer 408 to a request whose body takes longer to arrive")
	fs.DurationVar(&o.shutdownGrace, "shutdown-grace", 30*time.Second, "on SIGTERM, how long in-flight requests may take to finish")
	fs.BoolVar(&o.noEvents, "no-kv-events", false, "do not subscribe to KV events (route by load only)")
	fs.Int64Var(&o.kvMaxFrameBytes, "kv-events-max-frame-bytes", kvstream.DefaultMaxFrameBytes, "largest ZMQ frame (and message) an engine's KV-event or replay connection may send; a larger one drops that connection and marks the source partial")
	fs.DurationVar(&o.readyReplayTimeout, "ready-replay-timeout", 20*time.Second, "at start, /ready waits this long at most for the KV-event catch-up replay, so that a restarted router takes no traffic with an empty index (0: do not wait)")
	fs.IntVar(&o.indexMaxKeys, "index-max-keys", 0, "cap on distinct prefix blocks in the index (0: the index's default)")
	fs.DurationVar(&o.predictTTL, "predict-ttl", 2*time.Second, "lifetime of predicted index entries once their request has started")
	fs.DurationVar(&o.predictHold, "predict-hold", 10*time.Minute, "longest a request's predicted index entries live while it waits for its first token")
	fs.StringVar(&o.apiKeyFile, "api-key-file", "", "file of the API keys clients must send as Authorization: Bearer <key> on /v1/ (one per line; re-read every second, so a rotated Secret applies without a restart); empty: no key required")
	fs.StringVar(&o.engineAPIKeyFile, "engine-api-key-file", "", "file holding the engines' API key (vLLM --api-key), sent to them in place of the client's Authorization; empty: the client's Authorization is passed through, unless --api-key-file is set")
	fs.StringVar(&o.adminAddr, "admin-addr", ":9090", "serve /metrics, /v1/status and /v1/autoscale (for Prometheus, the operator and KEDA; no client key) on this address, never on --port; off when empty")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	addTokenizerFlags(fs, &o.tokenizer, os.LookupEnv)
	fs.StringVar(&o.pprofAddr, "pprof-addr", "", "serve Go's /debug/pprof and the index dump /debug/kvindex on this address (e.g. 127.0.0.1:6060); off when empty")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.mode == modeSidecar {
		return o, checkSidecar(o)
	}
	if o.discovery == "" {
		o.discovery = "file"
		if o.endpointsFile == "" {
			return nil, errors.New("give --endpoints-file, or --discovery kubernetes with --namespace and --selector")
		}
	}
	switch o.discovery {
	case "file":
		if o.endpointsFile == "" {
			return nil, errors.New("--discovery file needs --endpoints-file")
		}
	case "kubernetes":
		if o.namespace == "" || o.selector == "" {
			return nil, errors.New("--discovery kubernetes needs --namespace and --selector")
		}
	case "inferencepool":
		if o.namespace == "" || o.poolName == "" {
			return nil, errors.New("--discovery inferencepool needs --namespace and --pool-name")
		}
		if o.selector != "" {
			// Two sources of truth for the same pods would disagree the day the pool changes.
			return nil, errors.New("--discovery inferencepool takes the pods from the pool's selector: drop --selector")
		}
	default:
		return nil, fmt.Errorf("--discovery %q: want file, kubernetes or inferencepool", o.discovery)
	}
	if _, err := policy.ParseKind(o.policy); err != nil {
		return nil, err
	}
	if o.reportMode != "" && o.reportMode != "full" && o.reportMode != "incremental" {
		return nil, fmt.Errorf("--kv-cache-report-mode %q: want full or incremental", o.reportMode)
	}
	if o.blockSize <= 0 {
		return nil, fmt.Errorf("--block-size %d: must be positive", o.blockSize)
	}
	if o.ttfbFactor < 0 || o.ttfbFloor <= 0 || o.ttfbCap < o.ttfbFloor || o.outlierFailures < 0 ||
		o.ejectionBase <= 0 || o.ejectionMax < o.ejectionBase {
		return nil, errors.New("--ttfb-watchdog-factor and --outlier-consecutive-failures must not be negative; --ttfb-watchdog-floor and --outlier-ejection-base must be positive, and the cap and max at least as long")
	}
	if o.admissionTTFTBound < 0 || o.admissionQueueCap < 0 || o.admissionFleetQueueCap < -1 || o.admissionEngineCapacity < 0 {
		return nil, errors.New("--admission-ttft-bound, --admission-queue-cap and --admission-engine-capacity must not be negative; --admission-fleet-queue-cap is -1 or more")
	}
	if !(o.admissionTailHeadroom > 0 && o.admissionTailHeadroom <= 1) {
		return nil, fmt.Errorf("--admission-tail-headroom %v: want more than 0 and at most 1", o.admissionTailHeadroom)
	}
	if !(o.admissionBatchFraction > 0 && o.admissionBatchFraction <= 1) {
		return nil, fmt.Errorf("--admission-batch-fraction %v: want more than 0 and at most 1", o.admissionBatchFraction)
	}
	if o.queueCapacity < 0 || o.queueMaxWait <= 0 || !(o.queueHoldAfter >= 0) {
		return nil, errors.New("--queue-capacity and --queue-hold-after must not be negative; --queue-max-wait must be positive")
	}
	if o.kvMaxFrameBytes <= 0 || o.kvMaxFrameBytes > 1<<40 {
		return nil, fmt.Errorf("--kv-events-max-frame-bytes %d: must be within 1 and 2^40", o.kvMaxFrameBytes)
	}
	if err := checkMode(o); err != nil {
		return nil, err
	}
	if err := checkPD(o); err != nil {
		return nil, err
	}
	if err := checkTokenizerFlags(&o.tokenizer, o.model); err != nil {
		return nil, err
	}
	return o, nil
}

// The front ends --mode selects.
const (
	modeProxy = "proxy"
	modeEPP   = "epp"
	modeBoth  = "both"
	// modeSidecar runs the prefill leg of split requests in front of one decode engine.
	modeSidecar = "sidecar"
)

func (o *options) serveHTTP() bool { return o.mode != modeEPP }
func (o *options) serveEPP() bool  { return o.mode == modeEPP || o.mode == modeBoth }

// checkMode validates --mode and the ports of the front ends it runs: each its own.
func checkMode(o *options) error {
	switch o.mode {
	case modeProxy, modeEPP, modeBoth:
	default:
		return fmt.Errorf("--mode %q: want proxy, epp, both or sidecar", o.mode)
	}
	if err := checkDestinationPort(o); err != nil {
		return err
	}
	if (o.grpcCertFile == "") != (o.grpcKeyFile == "") {
		return errors.New("--grpc-tls-cert-file and --grpc-tls-key-file go together")
	}
	if o.grpcCertFile != "" && !o.grpcTLS {
		return errors.New("--grpc-tls-cert-file is the certificate of --grpc-tls: set --grpc-tls too")
	}
	ports := map[int]string{}
	claim := func(flag string, port int) error {
		if port < 0 || port > 65535 {
			return fmt.Errorf("%s %d: want a port within 0 (any free one) and 65535", flag, port)
		}
		if port == 0 {
			return nil
		}
		if other, taken := ports[port]; taken {
			return fmt.Errorf("%s %d: %s uses that port already", flag, port, other)
		}
		ports[port] = flag
		return nil
	}
	if o.serveHTTP() {
		if err := claim("--port", o.port); err != nil {
			return err
		}
	}
	if o.serveEPP() {
		if err := claim("--grpc-port", o.grpcPort); err != nil {
			return err
		}
		if err := claim("--grpc-health-port", o.grpcHealthPort); err != nil {
			return err
		}
	}
	// The admin listener names its own host: it clashes only on a host the others listen on too.
	if h, p, err := net.SplitHostPort(o.adminAddr); err == nil && (h == "" || o.host == "" || h == o.host) {
		if n, err := strconv.Atoi(p); err == nil && n != 0 {
			if other, taken := ports[n]; taken {
				return fmt.Errorf("--admin-addr %s: %s uses that port already", o.adminAddr, other)
			}
		}
	}
	return nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "router:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		os.Exit(1)
	}
}

func newLogger(level string) logr.Logger { return newLoggerTo(os.Stderr, level) }

// newLoggerTo returns the router's logger: JSON lines on w. logr's V(n) lines reach slog at level
// -n, which slog would label "DEBUG+3" for V(1); they are labelled "DEBUG" instead and carry their
// verbosity as "v" (V(1) -> "v":1). With --log-level debug, V(1) to V(4) are printed.
func newLoggerTo(w io.Writer, level string) logr.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l, ReplaceAttr: debugLevelLabel})
	return logr.FromSlogHandler(verbosityHandler{h})
}

// debugLevelLabel labels every level below INFO (logr's V-levels) "DEBUG".
func debugLevelLabel(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.LevelKey {
		if lv, ok := a.Value.Any().(slog.Level); ok && lv < slog.LevelInfo {
			a.Value = slog.StringValue(slog.LevelDebug.String())
		}
	}
	return a
}

// verbosityHandler adds "v" (logr's verbosity) to records below INFO, whose level label
// debugLevelLabel no longer tells apart.
type verbosityHandler struct{ slog.Handler }

func (h verbosityHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelInfo {
		r = r.Clone()
		r.AddAttrs(slog.Int("v", int(slog.LevelInfo-r.Level)))
	}
	return h.Handler.Handle(ctx, r)
}

func (h verbosityHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return verbosityHandler{h.Handler.WithAttrs(attrs)}
}

func (h verbosityHandler) WithGroup(name string) slog.Handler {
	return verbosityHandler{h.Handler.WithGroup(name)}
}

func run(ctx context.Context, o *options) error {
	log := newLogger(o.logLevel)
	if o.mode == modeSidecar {
		return runSidecar(ctx, o, log)
	}
	kind, _ := policy.ParseKind(o.policy)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var index *kvindex.Index
	var streams *kvstream.Manager
	if !o.noEvents {
		index = kvindex.New(kvindex.Config{BlockSize: o.blockSize, MaxKeys: o.indexMaxKeys, PredictTTL: o.predictTTL, PredictHold: o.predictHold})
		streams = kvstream.NewManager(index, kvstream.Config{Logger: log.WithName("kvstream"), MaxFrameBytes: o.kvMaxFrameBytes})
		for _, c := range []any{index, streams} {
			if c, ok := c.(prometheus.Collector); ok {
				reg.MustRegister(c)
			}
		}
	}
	tracker := loadsignal.NewTracker()
	auth, err := proxy.LoadAuth(ctx, o.apiKeyFile, o.engineAPIKeyFile, time.Second, log.WithName("auth"))
	if err != nil {
		return err
	}
	cfg := proxy.Config{Auth: auth,
		Policy: policy.Config{Kind: kind, BlockSize: o.blockSize, MaxInFlight: o.maxInFlight,
			SaturationFactor: o.saturationFactor, TargetTTFT: o.targetTTFT},
		Model: o.model, SessionHeader: o.sessionHeader, MaxBodyBytes: o.maxBody,
		ReportModeFull: o.reportMode == "full", UpstreamHeaderTimeout: o.headerTimeout,
		StreamIdleTimeout: o.streamIdle, TokenizeTimeout: o.tokenizeTimeout, BodyReadTimeout: o.bodyReadTimeout,
		Tokenizer: o.tokenizer.mode, TokenizerVerifyFraction: o.tokenizer.configFraction(),
		PD: pdConfig(o), DestinationPort: o.eppDestinationPort,
	}
	cfg.TTFBWatchdogFactor, cfg.TTFBWatchdogFloor, cfg.TTFBWatchdogCap = o.ttfbFactor, o.ttfbFloor, o.ttfbCap
	if o.ttfbFactor == 0 {
		cfg.TTFBWatchdogFactor = -1 // off (0 is the default in proxy.Config)
	}
	cfg.OutlierConsecutiveFailures, cfg.OutlierEjectionBase, cfg.OutlierEjectionMax = o.outlierFailures, o.ejectionBase, o.ejectionMax
	if o.outlierFailures == 0 {
		cfg.OutlierConsecutiveFailures = -1
	}
	cfg.DisableAdmission, cfg.Admission = !o.admission, admissionConfig(o)
	applyQueueFlags(&cfg, o)
	var srvIndex proxy.Index
	var srvStreams proxy.StreamStatus
	if index != nil {
		srvIndex, srvStreams = index, streams
	}
	var gate *replayGate
	if streams != nil && o.readyReplayTimeout > 0 {
		gate = newReplayGate(streams, o.readyReplayTimeout, log.WithName("ready"), reg)
		cfg.ReadyGate = gate.ready
	}
	srv := proxy.New(cfg, log.WithName("proxy"), srvIndex, srvStreams, tracker, reg)

	source, err := discoverySource(o, log.WithName("discovery"))
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 8)
	update := func(eps []discovery.Endpoint) {
		srv.SetEndpoints(eps)
		if streams != nil {
			subs := make([]kvstream.Endpoint, 0, len(eps))
			for _, e := range eps {
				if e.KVEvents == "" {
					continue
				}
				subs = append(subs, kvstream.Endpoint{Name: e.Name, EventsURL: e.KVEvents, ReplayURL: e.KVReplay,
					DPRanks: e.Ranks()})
			}
			streams.SetEndpoints(subs)
		}
	}
	go func() {
		if err := source.Run(ctx, update); err != nil {
			errc <- fmt.Errorf("discovery: %w", err)
		}
	}()
	if streams != nil {
		go func() {
			if err := streams.Start(ctx); err != nil {
				errc <- fmt.Errorf("kv events: %w", err)
			}
		}()
	}
	if gate != nil {
		go gate.run(ctx)
	}
	scraper := &loadsignal.Scraper{Tracker: tracker, Client: srv.HTTPClient(), Targets: srv.ScrapeTargets,
		Interval: o.scrapeInterval}
	go scraper.Run(ctx)
	go srv.Run(ctx)
	go loadTokenizer(ctx, &o.tokenizer, o.model, srv, os.LookupEnv, log.WithName("tokenizer"))

	if o.pprofAddr != "" {
		// A separate listener, so profiling is never exposed on the serving port.
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		if index != nil {
			mux.Handle("GET /debug/kvindex", debugIndexHandler(index, streams))
		}
		go func() {
			if err := http.ListenAndServe(o.pprofAddr, mux); err != nil {
				log.Error(err, "pprof listener")
			}
		}()
	}
	var ln net.Listener
	var hs *http.Server
	if o.serveHTTP() {
		addr := net.JoinHostPort(o.host, strconv.Itoa(o.port))
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
		hs = &http.Server{
			Handler:           srv.Handler(),
			ReadHeaderTimeout: o.readHeaderTimeout,
			IdleTimeout:       2 * time.Minute,
			// No WriteTimeout: streams last minutes; the idle timer guards silent ones.
		}
	}
	var eppDone sync.WaitGroup
	if o.serveEPP() {
		if err := serveEPP(ctx, o, srv, reg, log, &eppDone, errc); err != nil {
			if ln != nil {
				ln.Close()
			}
			return err
		}
	}
	var admin *http.Server
	if o.adminAddr != "" {
		// Its own listener rather than paths on the public port, so that whatever exposes the
		// public port (a Gateway, a Service) cannot expose these too, and a NetworkPolicy can
		// open this port to its readers alone.
		aln, err := net.Listen("tcp", o.adminAddr)
		if err != nil {
			if ln != nil {
				ln.Close()
			}
			cancel()
			eppDone.Wait()
			return fmt.Errorf("listen %s (--admin-addr): %w", o.adminAddr, err)
		}
		admin = &http.Server{
			Handler:           srv.AdminHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})),
			ReadHeaderTimeout: o.readHeaderTimeout,
			IdleTimeout:       2 * time.Minute,
			// Its answers are small documents written at once.
			WriteTimeout: time.Minute,
		}
		go func() {
			if err := admin.Serve(aln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("admin listener: %w", err)
			}
		}()
		log.Info("admin listening", "addr", aln.Addr().String())
	}
	addr := ""
	if hs != nil {
		addr = ln.Addr().String()
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	log.Info("router listening", "mode", o.mode, "addr", addr, "policy", o.policy, "discovery", o.discovery,
		"blockSize", o.blockSize, "kvEvents", !o.noEvents, "clientKeyRequired", o.apiKeyFile != "", "engineKey", o.engineAPIKeyFile != "")

	select {
	case <-ctx.Done():
	case err := <-errc:
		cancel()
		shutdown(hs, admin, &eppDone, o.shutdownGrace, log)
		return err
	}
	shutdown(hs, admin, &eppDone, o.shutdownGrace, log)
	return nil
}

// serveEPP starts the endpoint picker: ext_proc (and health) on --grpc-port, health alone on
// --grpc-health-port, until ctx ends; done counts its servers until they have drained.
func serveEPP(ctx context.Context, o *options, srv *proxy.Server, reg prometheus.Registerer, log logr.Logger,
	done *sync.WaitGroup, errc chan<- error) error {
	addr := net.JoinHostPort(o.host, strconv.Itoa(o.grpcPort))
	gln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s (--grpc-port): %w", addr, err)
	}
	haddr := net.JoinHostPort(o.host, strconv.Itoa(o.grpcHealthPort))
	hln, err := net.Listen("tcp", haddr)
	if err != nil {
		gln.Close()
		return fmt.Errorf("listen %s (--grpc-health-port): %w", haddr, err)
	}
	tlsConfig, err := pickerTLS(o, log.WithName("epp"))
	if err != nil {
		gln.Close()
		hln.Close()
		return err
	}
	picker := epp.New(srv, log.WithName("epp"), reg, epp.Options{ShutdownGrace: o.shutdownGrace, TLS: tlsConfig, Fallbacks: o.eppFallbacks})
	for _, l := range []struct {
		what  string
		ln    net.Listener
		serve func(context.Context, net.Listener) error
	}{{"ext_proc listener", gln, picker.Serve}, {"gRPC health listener", hln, picker.ServeHealth}} {
		done.Add(1)
		go func() {
			defer done.Done()
			if err := l.serve(ctx, l.ln); err != nil {
				errc <- fmt.Errorf("%s: %w", l.what, err)
			}
		}()
	}
	log.Info("endpoint picker listening", "extProc", gln.Addr().String(), "tls", tlsConfig != nil, "health", hln.Addr().String())
	return nil
}

// admissionConfig maps the flags, whose 0 means "off" for the TTFT bound, onto admission.Config,
// whose 0 means its default.
func admissionConfig(o *options) admission.Config {
	c := admission.Config{TTFTBound: o.admissionTTFTBound, QueueCap: o.admissionQueueCap,
		FleetQueueCap: o.admissionFleetQueueCap, EngineCapacity: o.admissionEngineCapacity,
		BatchFraction: o.admissionBatchFraction, TailHeadroom: o.admissionTailHeadroom}
	if c.TTFTBound == 0 {
		c.TTFTBound = -1
	}
	return c
}

// applyQueueFlags sets the router queue's bounds and the policy's gate from the flags, whose 0
// means "never hold" where policy.Config's means its default.
func applyQueueFlags(cfg *proxy.Config, o *options) {
	cfg.QueueCapacity, cfg.QueueMaxWait = o.queueCapacity, o.queueMaxWait
	cfg.Policy.HoldAfter = o.queueHoldAfter
	if o.queueHoldAfter == 0 {
		cfg.Policy.HoldAfter = -1
	}
}

// shutdown lets in-flight requests finish within grace: the HTTP listener's (hs, nil in epp mode)
// and the endpoint picker's, whose servers drain on their own once the run's context ends
// (eppDone). The admin listener (may be nil) stays up until they have, so that metrics and status
// can still be read while the router drains.
func shutdown(hs, admin *http.Server, eppDone *sync.WaitGroup, grace time.Duration, log logr.Logger) {
	log.Info("shutting down; letting in-flight requests finish", "grace", grace.String())
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if hs != nil {
		if err := hs.Shutdown(sctx); err != nil {
			log.Error(err, "in-flight requests cut at the end of the grace period")
			_ = hs.Close()
		}
	}
	eppDone.Wait()
	if admin != nil {
		_ = admin.Close()
	}
}

// restConfig uses the pod's service account in a cluster, else $KUBECONFIG / ~/.kube/config.
func restConfig() (*rest.Config, error) {
	if c, err := rest.InClusterConfig(); err == nil {
		return c, nil
	}
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes config: %w", err)
	}
	return c, nil
}

// discoverySource is where the router learns its engines from, as the flags say.
func discoverySource(o *options, log logr.Logger) (discovery.Source, error) {
	if o.discovery == "file" {
		return &discovery.File{Path: o.endpointsFile, Log: log}, nil
	}
	rc, err := restConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if o.discovery == "inferencepool" {
		pools, err := poolclient.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("InferencePool client: %w", err)
		}
		return &discovery.InferencePool{Client: cs, Pools: pools, Namespace: o.namespace, Name: o.poolName,
			EventsPort: o.eventsPort, ReplayPort: o.replayPort, DPRanks: o.dpRanks, Log: log}, nil
	}
	sel, err := labels.Parse(o.selector)
	if err != nil {
		return nil, fmt.Errorf("--selector: %w", err)
	}
	return &discovery.Kubernetes{Client: cs, Namespace: o.namespace, Selector: sel, HTTPPort: o.enginePort,
		EventsPort: o.eventsPort, ReplayPort: o.replayPort, DPRanks: o.dpRanks, Log: log}, nil
}
