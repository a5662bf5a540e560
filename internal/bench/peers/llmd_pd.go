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

// llmd-pd is llm-d's P/D well-lit path (llm-d/llm-d guides/pd-disaggregation/router/
// pd-disaggregation.values.yaml at commit 83bb7c18c881ab96e54eb5f12a9d7c7813ae3a19;
// docs/peer-policies.md §9.2): the disagg-profile-handler with the always-disagg-pd-decider
// (the guide's earlier pd-profile-handler configuration said the same with threshold 0: every
// request is split, whatever its uncached tokens), a prefill profile of prefill-filter +
// prefix-cache-affinity-filter + token-load-scorer (§1.4, llmdTokenPrefill) and a decode
// profile of decode-filter + active-request-scorer (llmdTokenDecode), max-score picker in both.
// The guide calibrates the affinity filter's peakPrefillThroughput to 33,821 tok/s on its
// reference fleet; the reimplementation keeps §1.4's 15,928, which only moves the 18 s
// saturation gate that no kvbench P/D workload reaches.
//
// Without a prefill pool only the decode profile runs, and llm-d's decode-filter admits
// endpoints without a role: active-request-scorer over every engine.
func newLLMDPD(e Env) Policy {
	return newPDPair(newLLMDTokenPrefill(e), newLLMDTokenDecode(e), newLLMDTokenDecode(e))
}
