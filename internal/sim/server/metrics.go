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

package server

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/sim/engine"
)

// metrics mirrors the vLLM v1 Prometheus names and labels (model_name, engine) that routers and
// autoscalers read; see docs/vllm-contract.md §5.
type metrics struct {
	reg *prometheus.Registry

	running, waiting, kvUsage *prometheus.GaugeVec
	prefixQueries, prefixHits *prometheus.CounterVec
	preemptions               *prometheus.CounterVec
	promptTokens, genTokens   *prometheus.CounterVec
	success                   *prometheus.CounterVec
	ttft, itl, e2e, queue     *prometheus.HistogramVec
	promptLen, genLen         *prometheus.HistogramVec
	labels                    prometheus.Labels
	// loraInfo is vllm:lora_requests_info, nil unless LoRA is on.
	loraInfo *prometheus.GaugeVec
	maxLoRA  string
	now      func() time.Time
}

// vLLM's bucket boundaries.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets  = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	e2eBuckets  = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

func tokenBuckets(maxLen int) []float64 {
	var out []float64
	for v := 1; v <= maxLen; v *= 10 {
		for _, m := range []int{1, 2, 5} {
			if v*m <= maxLen {
				out = append(out, float64(v*m))
			}
		}
	}
	return out
}

func newMetrics(model string, cfg engine.Config, hashAlgo string, prefixCaching bool) *metrics {
	l := []string{"model_name", "engine"}
	m := &metrics{
		reg:    prometheus.NewRegistry(),
		labels: prometheus.Labels{"model_name": model, "engine": "0"},
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vllm:num_requests_running",
			Help: "Number of requests in model execution batches."}, l),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vllm:num_requests_waiting",
			Help: "Number of requests waiting to be processed."}, l),
		kvUsage: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vllm:kv_cache_usage_perc",
			Help: "KV-cache usage. 1 means 100 percent usage."}, l),
		prefixQueries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:prefix_cache_queries_total",
			Help: "Prefix cache queries, in terms of number of queried tokens."}, l),
		prefixHits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:prefix_cache_hits_total",
			Help: "Prefix cache hits, in terms of number of cached tokens."}, l),
		preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:num_preemptions_total",
			Help: "Cumulative number of preemption from the engine."}, l),
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:prompt_tokens_total",
			Help: "Number of prefill tokens processed."}, l),
		genTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:generation_tokens_total",
			Help: "Number of generation tokens processed."}, l),
		success: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total",
			Help: "Count of successfully processed requests."}, append(l, "finished_reason")),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vllm:time_to_first_token_seconds",
			Help: "Histogram of time to first token in seconds.", Buckets: ttftBuckets}, l),
		itl: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vllm:inter_token_latency_seconds",
			Help: "Histogram of inter-token latency in seconds.", Buckets: itlBuckets}, l),
		e2e: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vllm:e2e_request_latency_seconds",
			Help: "Histogram of e2e request latency in seconds.", Buckets: e2eBuckets}, l),
		queue: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vllm:request_queue_time_seconds",
			Help: "Histogram of time spent in WAITING phase for request.", Buckets: e2eBuckets}, l),
		promptLen: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vllm:request_prompt_tokens",
			Help: "Number of prefill tokens processed.", Buckets: tokenBuckets(cfg.MaxModelLen)}, l),
		genLen: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vllm:request_generation_tokens",
			Help: "Number of generation tokens processed.", Buckets: tokenBuckets(cfg.MaxModelLen)}, l),
	}
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig"},
		[]string{"block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization", "num_gpu_blocks", "prefix_caching_hash_algo", "engine"})
	info.WithLabelValues(strconv.Itoa(cfg.BlockSize), "auto", pyBool(prefixCaching),
		strconv.FormatFloat(cfg.GPUMemoryUtilization, 'f', -1, 64), strconv.Itoa(cfg.NumBlocks), hashAlgo, "0").Set(1)
	if cfg.MaxLoRAs > 0 {
		// As vLLM: one series per combination of adapters, whose value is the time it was last
		// set (prometheus_client's set_to_current_time); series of old combinations stay, so a
		// reader takes the newest.
		m.loraInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vllm:lora_requests_info", Help: "Running stats on lora requests."},
			[]string{"max_lora", "waiting_lora_adapters", "running_lora_adapters"})
		m.maxLoRA, m.now = strconv.Itoa(cfg.MaxLoRAs), time.Now
		m.reg.MustRegister(m.loraInfo)
		m.observeLoRA(nil, nil)
	}
	m.reg.MustRegister(m.running, m.waiting, m.kvUsage, m.prefixQueries, m.prefixHits, m.preemptions,
		m.promptTokens, m.genTokens, m.success, m.ttft, m.itl, m.e2e, m.queue, m.promptLen, m.genLen, info)
	// Create the series up front so that scrapers see zeros before the first request.
	for _, v := range []*prometheus.GaugeVec{m.running, m.waiting, m.kvUsage} {
		v.With(m.labels)
	}
	for _, v := range []*prometheus.CounterVec{m.prefixQueries, m.prefixHits, m.preemptions, m.promptTokens, m.genTokens} {
		v.With(m.labels)
	}
	for _, v := range []*prometheus.HistogramVec{m.ttft, m.itl, m.e2e, m.queue, m.promptLen, m.genLen} {
		v.With(m.labels)
	}
	return m
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// observeStep updates counters and gauges after a step; called with the engine lock held.
func (m *metrics) observeStep(res engine.StepResult, st engine.Stats) {
	m.running.With(m.labels).Set(float64(st.Running))
	m.waiting.With(m.labels).Set(float64(st.Waiting))
	m.kvUsage.With(m.labels).Set(st.KVUsage)
	if res.PrefixQueries > 0 {
		m.prefixQueries.With(m.labels).Add(float64(res.PrefixQueries))
		m.prefixHits.With(m.labels).Add(float64(res.PrefixHits))
	}
	if n := len(res.Preempted); n > 0 {
		m.preemptions.With(m.labels).Add(float64(n))
	}
	if m.loraInfo != nil {
		m.observeLoRA(st.RunningLoRAs, st.WaitingLoRAs)
	}
}

// observeLoRA sets the series of the current adapter sets to the current time and, as vLLM
// does, leaves the series of earlier sets on the page: vLLM's PrometheusStatLogger only calls
// labels(...).set_to_current_time() on its lora_requests_info gauge and never removes a label
// set, so a long-running engine's page grows with every new set (tens of bytes per request).
// The simulator keeps that growth on purpose: the router must cope with the pages real engines
// serve (loadsignal reads the newest series and bounds what it keeps, not what it reads).
func (m *metrics) observeLoRA(running, waiting []string) {
	m.loraInfo.WithLabelValues(m.maxLoRA, strings.Join(waiting, ","), strings.Join(running, ",")).
		Set(float64(m.now().UnixNano()) / 1e9)
}

func (m *metrics) observeFinished(r *engine.Request, reason string) {
	m.promptTokens.With(m.labels).Add(float64(len(r.Prompt)))
	m.genTokens.With(m.labels).Add(float64(len(r.Output)))
	m.success.With(prometheus.Labels{"model_name": m.labels["model_name"], "engine": "0", "finished_reason": reason}).Inc()
	m.e2e.With(m.labels).Observe(r.FinishedAt - r.Arrival)
	m.promptLen.With(m.labels).Observe(float64(len(r.Prompt)))
	m.genLen.With(m.labels).Observe(float64(len(r.Output)))
}

// kvMetrics are the disaggregation metrics, registered only with a KV connector (as vLLM
// registers its NIXL metrics): vLLM's own names for what it measures, kvrouter_sim_ for what only
// the simulator knows.
type kvMetrics struct {
	nixlSeconds, nixlBytes *prometheus.HistogramVec
	nixlFailed, expired    *prometheus.CounterVec
	transfers, failures    *prometheus.CounterVec
	seconds                prometheus.Histogram
	blocks                 prometheus.Counter
	heldBlocks             prometheus.Gauge
	heldRequests           prometheus.Gauge
}

// vLLM's NIXL bucket boundaries: seconds, and bytes from 2 KiB to 8 GiB in powers of four.
var (
	nixlSecondsBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0}
	nixlBytesBuckets   = func() []float64 {
		var out []float64
		for i := 1; i < 25; i += 2 {
			out = append(out, float64(uint64(1)<<(10+i)))
		}
		return out
	}()
)

func newKVMetrics(m *metrics) *kvMetrics {
	l := []string{"model_name", "engine"}
	k := &kvMetrics{
		nixlSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vllm:nixl_xfer_time_seconds",
			Help: "Histogram of transfer duration for NIXL KV Cache transfers.", Buckets: nixlSecondsBuckets}, l),
		nixlBytes: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vllm:nixl_bytes_transferred",
			Help: "Histogram of bytes transferred per NIXL KV Cache transfers.", Buckets: nixlBytesBuckets}, l),
		nixlFailed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:nixl_num_failed_transfers_total",
			Help: "Number of failed NIXL KV Cache transfers."}, l),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:nixl_num_kv_expired_reqs_total",
			Help: "Number of requests that had their KV expire."}, l),
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_sim_kv_transfers_total",
			Help: "Decode legs by the outcome of their KV pull: ok, recomputed (the pull failed and the prompt was recomputed), failed (kv_load_failure_policy fail)."},
			[]string{"result"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_sim_kv_transfer_failures_total",
			Help: "Failed KV pulls by reason: unreachable, not_found, engine_mismatch, block_size_mismatch, refused, injected."},
			[]string{"reason"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvrouter_sim_kv_transfer_seconds",
			Help: "Simulated seconds of each successful KV pull (transfer model plus the delay fault).", Buckets: nixlSecondsBuckets}),
		blocks: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_sim_kv_transfer_blocks_total",
			Help: "KV blocks pulled from prefill engines."}),
		heldBlocks: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvrouter_sim_kv_held_blocks",
			Help: "KV blocks of finished prefill legs kept for decode engines to pull."}),
		heldRequests: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvrouter_sim_kv_held_requests",
			Help: "Finished prefill legs whose KV blocks wait for a decode engine."}),
	}
	m.reg.MustRegister(k.nixlSeconds, k.nixlBytes, k.nixlFailed, k.expired, k.transfers, k.failures, k.seconds, k.blocks,
		k.heldBlocks, k.heldRequests)
	for _, v := range []*prometheus.HistogramVec{k.nixlSeconds, k.nixlBytes} {
		v.With(m.labels)
	}
	for _, v := range []*prometheus.CounterVec{k.nixlFailed, k.expired} {
		v.With(m.labels)
	}
	for _, r := range []string{"ok", "recomputed", "failed"} {
		k.transfers.WithLabelValues(r)
	}
	return k
}
