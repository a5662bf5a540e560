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

package policy

// Cached is how much of this request's prompt an endpoint holds, in tokens, split by the best
// tier each token is on (the parts are disjoint and add up to at most the prompt).
type Cached struct {
	GPU, CPU, Storage int
	// Predicted: held according to routing decisions not yet confirmed by the engine's events.
	Predicted int
}

// Total is every cached token regardless of tier.
func (c Cached) Total() int { return c.GPU + c.CPU + c.Storage + c.Predicted }

// Load is what is known about an endpoint's load.
type Load struct {
	// Router-local accounting, exact and instant.
	InFlight            int // requests this router has in flight there
	QueuedPrefillTokens int // uncached prompt tokens of those requests that have not had a first token yet
	// PrefillElapsed is how long (seconds) the engine has been computing the head of that queue:
	// since the queue last became non-empty or a first token of it last came back (0: empty).
	PrefillElapsed float64
	// InFlightTokens is the prompt plus max_tokens (or the default cap) of the requests this
	// router has in flight there: a bound on the KV cache their decodes read at every step.
	InFlightTokens int
	// Estimated load from other clients of the engine (other router replicas, direct callers):
	// the engine's scraped queue minus what this router had in flight at scrape time. It
	// refreshes with the scrape (about once a second) while local changes show at once.
	RemoteInFlight      int
	RemotePrefillTokens int
	// Requests waiting for their first token: this router's (exact) and the others' (the
	// engine's scraped waiting queue beyond this router's, at the last scrape). Pick does not
	// read them; admission control bounds them (internal/router/admission).
	QueuedRequests, RemoteQueuedRequests int
	// PeakRunning is the most requests the engine was seen running at once since it started: a
	// floor under its batch capacity (--max-num-seqs). For admission control; Pick does not
	// read it.
	PeakRunning int
	// Running is the requests the engine ran at the last scrape (every client's). For
	// admission control, which reads an engine whose KV cache is full as running all it can;
	// Pick does not read it.
	Running int
	// Scraped engine state, informational for the policy (KV usage near 1 shows up as slower
	// TTFTs, which the latency model already sees).
	KVUsage float64
	// LoRA is the endpoint's adapter state with respect to the request's adapter (see
	// LoRAState); zero for a base-model request or an engine that does not report adapters.
	LoRA LoRAState
}

// LoRAState is what an endpoint's LoRA adapters mean for one request's adapter.
type LoRAState struct {
	// Slots is the engine's adapter slots (vLLM --max-loras, read from
	// vllm:lora_requests_info); 0 when unknown (not reported, or not since a failed scrape): the
	// policy then charges an adapter load unless Resident.
	Slots int
	// Active is the number of distinct adapters that have requests running or waiting there
	// (scraped), or that this router has requests in flight for.
	Active int
	// Resident is true when the request's adapter is one of them (with Slots 0: when this
	// router has requests of it in flight there).
	Resident bool
}

// Endpoint is one engine (or one data-parallel rank of one) as the policy sees it.
type Endpoint struct {
	Name   string
	Ready  bool
	Load   Load
	Cached Cached
}

// Request is the shape of one request.
type Request struct {
	// PromptTokens is the prompt length in tokens. When Tokenized is false it is an estimate and
	// Cached is ignored: the request is routed by load alone.
	PromptTokens int
	Tokenized    bool
	// MaxTokens is the request's max_tokens (0: not given).
	MaxTokens int
	// SessionKey, when set, breaks ties so that one session stays on one endpoint.
	SessionKey string
	// LoRA is the request's LoRA adapter ("" for the base model). Its prefix is cached under
	// the adapter's name, so Cached already counts only what was computed with it.
	LoRA string
	// TieBreak breaks ties when there is no session key: policyinput.TieBreak's hash of the whole
	// prompt, so identical cold prompts land together, or a counter when there are no tokens.
	TieBreak uint64
}

// Decision is the policy's answer.
type Decision struct {
	// Endpoint is the chosen endpoint's name; empty when none can take the request (see Reason).
	Endpoint string
	// Fallbacks are the other candidates, best first: where to retry when the chosen one fails
	// before answering.
	Fallbacks []string
	Reason    Reason
	Shape     Shape
	// CachedTokens is the credited prefix on the chosen endpoint; UncachedTokens the prompt
	// tokens it must compute. The router adds UncachedTokens to the endpoint's queued prefill.
	CachedTokens, UncachedTokens int
	// PrefillWork is the x of the latency model at dispatch (queued prefill there plus this
	// request's uncached tokens); hand it back with the measured TTFT to ObserveTTFT.
	PrefillWork int
	// PredictedTTFT (seconds) on the chosen endpoint.
	PredictedTTFT float64
	// AdapterCold is true for a LoRA request whose adapter was not known to be active on the
	// chosen endpoint: its first token may wait for an adapter slot and a load. Its TTFT must
	// not be fed to ObserveTTFT, whose model is the engine's prefill speed: fed, the waits make
	// an engine that serves adapters look slow for every request (base-model ones too).
	AdapterCold bool

	// commit is what Commit records when the decision is acted on.
	commit pendingCommit
}
