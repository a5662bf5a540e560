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

// prodstack-pd is vLLM production-stack's disaggregated_prefill_orchestrated routing logic, the
// one that drives vLLM's native kv_transfer_params (NIXL) handoff (vllm-project/production-stack
// src/vllm_router/routers/routing_logic.py, DisaggregatedPrefillOrchestratedRouter, at commit
// a6c01db05f65f556235413ba8dbcfb0c01132fff; docs/peer-policies.md §9.3): the prefill endpoint
// is a round-robin cursor over the prefill-labelled endpoints sorted by URL, the decode endpoint
// another cursor over the decode-labelled ones, and every request is split (a missing pool is
// a 503). Its older disaggregated_prefill logic (LMCache) always picks the first endpoint of
// each pool, which the orchestrated logic supersedes. Without both pools the router falls back
// to round-robin over every endpoint.
func newProdstackPD(e Env) Policy {
	return newPDPair(newRoundRobin(e), newRoundRobin(e), newRoundRobin(e))
}
