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

package peers

// llm-d's flow control (docs/peer-policies.md §1.0, llm-d-router pkg/epp/flowcontrol and the
// utilization-detector plugin): requests enter the EPP's flow controller, which dispatches the
// head of the queue to the scheduling profile only while the saturation detector says the pool
// is below its usage limit (1.0 for the single default priority band), one dispatch per 1 ms
// tick, and sheds a request still queued after the default request TTL (60 s) with a retryable
// error. Every kvbench request has the same priority and flow, so the queue is one FIFO (the
// default FCFS ordering). The band's capacity (1 GB of request bytes; no request-count limit) is
// never reached by kvbench's workloads and is not modelled.
const (
	llmdQueueDepthThreshold = 5   // utilization-detector queueDepthThreshold
	llmdKVCacheThreshold    = 0.8 // utilization-detector kvCacheUtilThreshold
	llmdFlowRequestTTL      = 60  // flow controller defaultRequestTTL, seconds
	llmdDispatchTick        = 0.001
)

// llmdSaturation is the utilization detector's pool saturation: the mean over endpoints of
// max(waiting/5, kvUsage/0.8), from the scraped gauges. Metrics older than 200 ms count as fully
// saturated upstream; kvbench's harness scrapes every 50 ms, so none is ever that stale here. The
// scrape-lag correction by in-flight counts applies only when an inflight-load-producer is
// configured, which neither the default nor the precise configuration does.
func llmdSaturation(eps []Endpoint) float64 {
	if len(eps) == 0 {
		return 0
	}
	var sum float64
	for _, e := range eps {
		sum += max(float64(e.Waiting)/llmdQueueDepthThreshold, e.KVUsage/llmdKVCacheThreshold)
	}
	return sum / float64(len(eps))
}

// newLLMDFlowControl puts llm-d's flow controller in front of an EPP scheduling profile.
func newLLMDFlowControl(inner Policy, e Env) Policy {
	return newGatedQueue(inner, e.Now, func(eps []Endpoint) bool { return llmdSaturation(eps) >= 1 },
		llmdFlowRequestTTL, llmdDispatchTick, "flow_control")
}
