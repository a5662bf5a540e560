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

// Package routerapi holds the JSON the router serves on GET /v1/status and GET /v1/autoscale.
// It is the one package the router and the operator share: the router (internal/router/proxy)
// serves it and the operator (internal/operator/routerstatus) decodes it into the KVRouter's
// status. It has no dependencies so that the operator, kvbench and tests can decode it without
// pulling in the router; test/layout holds that shape.
package routerapi

import "time"

// Status is GET /v1/status.
type Status struct {
	// Policy and BlockSize the router runs with; Model is the served model name it accepts
	// (empty: whatever the engines list).
	Policy    string `json:"policy"`
	BlockSize int    `json:"blockSize"`
	Model     string `json:"model,omitempty"`
	// Endpoints, sorted by name. A data-parallel engine appears once per rank.
	Endpoints []Endpoint `json:"endpoints"`
	// ReadyEndpoints counts the endpoints that take traffic now.
	ReadyEndpoints int `json:"readyEndpoints"`
	// Fleet aggregates the engines' own counters over the last minute.
	Fleet Fleet `json:"fleet"`
	// Router is what this router replica did since it started.
	Router RouterStats `json:"router"`
	// Degradations lists what is currently not working as designed; empty when all is well.
	Degradations []Degradation `json:"degradations"`
	// Index describes the prefix index (absent when the router runs without one).
	Index *IndexStats `json:"index,omitempty"`
	// Admission is the admission control's bounds and what it shed (absent when it is off).
	Admission *Admission `json:"admission,omitempty"`
	// RouterQueue is the router queue's bounds and depth (absent when it is off).
	RouterQueue *RouterQueue `json:"routerQueue,omitempty"`
	// Tokenizer says where prompts are tokenized: in process or on the engines' /tokenize.
	Tokenizer *Tokenizer `json:"tokenizer,omitempty"`
	// Disaggregation is present when the fleet has a prefill pool (engines with role prefill).
	Disaggregation *Disaggregation `json:"disaggregation,omitempty"`
}

// Tokenizer is how the router tokenizes prompts (docs/tokenizer.md).
type Tokenizer struct {
	// Mode is the --tokenizer flag: auto, local or engine.
	Mode string `json:"mode"`
	// Source is what tokenizes requests now: "local" (in process, from the model's
	// tokenizer.json) or "engine" (a call to an engine's /tokenize).
	Source string `json:"source"`
	// Origin is where the in-process tokenizer was loaded from (a directory, or hub:REPO@REV);
	// empty while none is loaded.
	Origin string `json:"origin,omitempty"`
	// Reason says why Source is what it is (loading, start check pending or passed, mismatch).
	Reason string `json:"reason"`
	// Verified is true once the in-process tokenizer agreed with an engine on the start sample.
	Verified bool `json:"verified"`
	// LocalRequests counts requests tokenized in process; Verifications the ones an engine
	// also tokenized (a sample, off the request path) and that matched; VerifyErrors the
	// samples no engine answered.
	LocalRequests uint64 `json:"localRequests"`
	Verifications uint64 `json:"verifications"`
	VerifyErrors  uint64 `json:"verifyErrors"`
	// Mismatches counts disagreements with an engine (start check or samples); the first one
	// switches the router to the engines' /tokenize until it restarts.
	Mismatches   uint64     `json:"mismatches"`
	LastMismatch *time.Time `json:"lastMismatch,omitempty"`
}

// Admission is the state of the router's admission control (docs/router.md#admission-control).
type Admission struct {
	// TTFTBoundSeconds is the predicted time to first token past which interactive requests
	// are shed (0: no TTFT bound); batch requests get BatchFraction of every bound.
	TTFTBoundSeconds float64 `json:"ttftBoundSeconds"`
	BatchFraction    float64 `json:"batchFraction"`
	// QueueCap is the static cap on each engine's queued requests (0: the engine's batch
	// capacity, while its TTFT model is uncalibrated). FleetQueueCap is the cap on the ready
	// engines' queued requests together now (0: none), FleetQueued what they hold.
	QueueCap      int `json:"queueCap"`
	FleetQueueCap int `json:"fleetQueueCap"`
	FleetQueued   int `json:"fleetQueued"`
	// Shed counts the requests answered 429 since the router started, by "reason/priority"
	// (reason: ttft, queue, fleet-queue, and the router queue's router-queue-full and
	// router-queue-wait; priority: interactive, batch).
	Shed map[string]uint64 `json:"shed"`
	// RecentShed is the decaying count of shed requests (30 s time constant) that
	// /v1/autoscale adds to the waiting requests.
	RecentShed float64 `json:"recentShed"`
	// CompletionsPerSecond is the recent rate of requests leaving the engines, which prices
	// Retry-After for the queue caps.
	CompletionsPerSecond float64 `json:"completionsPerSecond"`
}

// RouterQueue is the state of the router queue (docs/router.md#router-queue).
type RouterQueue struct {
	// Capacity is the most requests that wait at once; MaxWaitSeconds the longest one waits.
	Capacity       int     `json:"capacity"`
	MaxWaitSeconds float64 `json:"maxWaitSeconds"`
	// Waiting is the requests in the queue now.
	Waiting int `json:"waiting"`
	// Shed counts the requests it answered 429 since the router started, by "reason/priority"
	// (reason: router-queue-full, router-queue-wait).
	Shed map[string]uint64 `json:"shed"`
}

// Endpoint is one engine (or one data-parallel rank of one).
type Endpoint struct {
	Name  string `json:"name"`
	URL   string `json:"url"`
	Rank  int    `json:"rank"`
	Ready bool   `json:"ready"`
	// Role is the engine's pool in a disaggregated fleet: prefill or decode; empty when the
	// fleet is not split.
	Role string `json:"role,omitempty"`
	// NotReadyReason says why Ready is false ("discovery", "connect-failures", "scrape-failures",
	// "suspect").
	NotReadyReason string `json:"notReadyReason,omitempty"`
	// Suspect is present while the router holds the endpoint out of routing as unresponsive
	// (it stays Ready only when every endpoint is suspect).
	Suspect *Suspect `json:"suspect,omitempty"`
	// Ejections counts the times the router took the endpoint out of routing as unresponsive.
	Ejections uint64 `json:"ejections,omitempty"`
	// Router-local load.
	InFlight            int `json:"inFlight"`
	QueuedPrefillTokens int `json:"queuedPrefillTokens"`
	TokensInFlight      int `json:"tokensInFlight"`
	// Scraped from the engine's /metrics (absent until the first successful scrape).
	Engine *EngineMetrics `json:"engine,omitempty"`
	// TTFTModel is the router's fitted latency model for this endpoint.
	TTFTModel *TTFTModel `json:"ttftModel,omitempty"`
	// ITLModel is the inter-token latency model fitted on this endpoint's streams alone (absent
	// until a stream through it has been timed): where an engine slower than the others shows.
	// The policy prices decode with the fleet's line (Fleet.ITLModel).
	ITLModel *ITLModel `json:"itlModel,omitempty"`
	// Events is the health of the endpoint's KV-event stream(s); absent when the endpoint
	// publishes no events.
	Events *EventHealth `json:"events,omitempty"`
	// LoRA is what the router knows of the engine's LoRA adapter slots; absent when the engine
	// reports none and no adapter request went there.
	LoRA *LoRAState `json:"lora,omitempty"`
}

// LoRAState is an engine's LoRA adapters as the router weighs them (docs/router.md).
type LoRAState struct {
	// Slots is the engine's --max-loras from vllm:lora_requests_info; 0 while unknown.
	Slots int `json:"slots"`
	// Running and Waiting are the adapters of its running and waiting requests, as scraped.
	Running []string `json:"running,omitempty"`
	Waiting []string `json:"waiting,omitempty"`
	// Loaded are the adapters the router believes in its GPU slots, most recent first: vLLM
	// keeps them loaded after their requests end, when its metric no longer lists them.
	Loaded []string `json:"loaded,omitempty"`
	// Error says why a vllm:lora_requests_info on the engine's page was not used.
	Error string `json:"error,omitempty"`
}

// Suspect is an endpoint's ejection as unresponsive.
type Suspect struct {
	// Reason is why: "ttfb-timeout" (a request had no first byte by its deadline while the
	// endpoint sent nothing to anyone), "stream-stall" (its streams all went silent), or
	// "consecutive-failures (...)" (connections reset after the request was sent, streams cut,
	// /tokenize timeouts, that many in a row).
	Reason string `json:"reason"`
	// Since is when it was ejected; ProbeAfter when the router starts probing it (GET /health)
	// to bring it back: the ejection lasts at least until then, and until a probe answers.
	Since      time.Time `json:"since"`
	ProbeAfter time.Time `json:"probeAfter"`
}

// EngineMetrics is one engine's scrape.
type EngineMetrics struct {
	Running float64 `json:"running"`
	Waiting float64 `json:"waiting"`
	// KVUsage is the fraction of KV blocks in use (0–1).
	KVUsage float64 `json:"kvUsage"`
	// HitRate is the engine's token-weighted prefix-cache hit rate over the last minute
	// (valid only when HitRateValid: there were queries in the window).
	HitRate      float64 `json:"hitRate"`
	HitRateValid bool    `json:"hitRateValid"`
	// Prefix-cache counters since the engine started.
	PrefixCacheQueries float64 `json:"prefixCacheQueries"`
	PrefixCacheHits    float64 `json:"prefixCacheHits"`
	// Preemptions since the engine started, and per minute over the last minute.
	Preemptions          float64 `json:"preemptions"`
	PreemptionsPerMinute float64 `json:"preemptionsPerMinute"`
	// From vllm:cache_config_info, for spec mismatch warnings.
	BlockSize string `json:"blockSize,omitempty"`
	HashAlgo  string `json:"hashAlgo,omitempty"`
	// ScrapedAt is when these numbers were read; ScrapeError the last scrape's failure, if any.
	ScrapedAt   time.Time `json:"scrapedAt"`
	ScrapeError string    `json:"scrapeError,omitempty"`
}

// TTFTModel is the online fit TTFT ≈ intercept + slope × (prefill tokens queued + own).
type TTFTModel struct {
	InterceptSeconds float64 `json:"interceptSeconds"`
	SecondsPerToken  float64 `json:"secondsPerToken"`
	Observations     int     `json:"observations"`
	Calibrated       bool    `json:"calibrated"`
}

// ITLModel is the online fit inter-token latency ≈ intercept + slope × active streams.
type ITLModel struct {
	InterceptSeconds float64 `json:"interceptSeconds"`
	SecondsPerStream float64 `json:"secondsPerStream"`
	Observations     int     `json:"observations"`
	Calibrated       bool    `json:"calibrated"`
}

// EventHealth summarises the KV-event subscription(s) of an endpoint.
type EventHealth struct {
	Connected      bool    `json:"connected"`
	Stale          bool    `json:"stale"`
	StaleReason    string  `json:"staleReason,omitempty"`
	LagSeconds     float64 `json:"lagSeconds"`
	Batches        uint64  `json:"batches"`
	Gaps           uint64  `json:"gaps"`
	Replays        uint64  `json:"replays"`
	ReplayFailures uint64  `json:"replayFailures"`
	Restarts       uint64  `json:"restarts"`
	DecodeErrors   uint64  `json:"decodeErrors"`
	// Partial: entries were dropped after a gap replay could not cover, and the index is
	// rebuilding from new events (it under-reports this engine's cache until then).
	Partial bool `json:"partial,omitempty"`
}

// Fleet aggregates all endpoints.
type Fleet struct {
	// HitRate is the engines' token-weighted prefix-cache hit rate over the last minute
	// (Σ Δhits / Σ Δqueries); HitRateValid is false when there were no queries.
	HitRate              float64 `json:"hitRate"`
	HitRateValid         bool    `json:"hitRateValid"`
	PreemptionsPerMinute float64 `json:"preemptionsPerMinute"`
	Waiting              float64 `json:"waiting"`
	Running              float64 `json:"running"`
	// ITLModel is the inter-token latency line fitted on every endpoint's timed streams
	// together, the one the routing policy prices decode load with (absent until a stream has
	// been timed).
	ITLModel *ITLModel `json:"itlModel,omitempty"`
}

// RouterStats counts this replica's routing.
type RouterStats struct {
	Requests uint64 `json:"requests"`
	// Tokenized requests: prompt tokens, and the tokens the index said the chosen endpoint
	// held. RoutedHitRate = CachedPromptTokens / PromptTokens is the hit rate the router
	// predicted, to compare with the engines' measured Fleet.HitRate.
	PromptTokens       uint64  `json:"promptTokens"`
	CachedPromptTokens uint64  `json:"cachedPromptTokens"`
	RoutedHitRate      float64 `json:"routedHitRate"`
	// Window is the same over the last minute (absent until the first snapshot of the counters),
	// to compare with the engines' Fleet.HitRate over the same span.
	Window *RoutedWindow `json:"window,omitempty"`
	// Decisions by reason (prefix, saturated, load, ...).
	Decisions map[string]uint64 `json:"decisions"`
	// TokenizeFailures counts requests routed by load alone because /tokenize failed.
	TokenizeFailures uint64 `json:"tokenizeFailures"`
	Retries          uint64 `json:"retries"`
	Rejected         uint64 `json:"rejected"`
}

// RoutedWindow is the routing counters' increase over the last minute (Seconds: the span covered,
// shorter right after the router starts). RoutedHitRate is 0 when PromptTokens is.
type RoutedWindow struct {
	Seconds            float64 `json:"seconds"`
	PromptTokens       uint64  `json:"promptTokens"`
	CachedPromptTokens uint64  `json:"cachedPromptTokens"`
	RoutedHitRate      float64 `json:"routedHitRate"`
}

// Degradation is one thing not working as designed.
type Degradation struct {
	// Type is one of "TokenizerUnavailable", "TokenizerMismatch", "EventsDegraded",
	// "NoReadyEndpoint".
	Type    string    `json:"type"`
	Message string    `json:"message"`
	Since   time.Time `json:"since,omitempty"`
}

// IndexStats describes the prefix index.
type IndexStats struct {
	Keys      int    `json:"keys"`
	Entries   int    `json:"entries"`
	Sources   int    `json:"sources"`
	Predicted int    `json:"predicted"`
	Evictions uint64 `json:"evictions"`
}

// Autoscale is GET /v1/autoscale, read by KEDA's metrics-api trigger.
type Autoscale struct {
	// WaitingRequests is the requests queued in the engines (scraped num_requests_waiting,
	// summed) and in the router queue, plus ShedRequests: the demand admission control turned
	// away is demand the fleet lacks capacity for, and an autoscaler reading the engines' capped
	// queues alone would not see it.
	WaitingRequests int `json:"waitingRequests"`
	// ShedRequests is this replica's decaying count of requests shed with 429 (30 s time
	// constant: at a steady shed rate r it reads r × 30 s).
	ShedRequests int `json:"shedRequests"`
	// TokensInFlight is prompt plus expected output tokens of this replica's requests in flight.
	TokensInFlight int `json:"tokensInFlight"`
	// Endpoints is the number of ready endpoints.
	Endpoints int `json:"endpoints"`
}

// Disaggregation is how the router splits requests into prefill and decode legs.
type Disaggregation struct {
	// Mode is Auto, Always, Never or Threshold (see docs/disaggregation.md).
	Mode string `json:"mode"`
	// ThresholdTokens is the pinned threshold of Threshold mode.
	ThresholdTokens int `json:"thresholdTokens,omitempty"`
	// SplitRequests and WholeRequests count the requests served split and whole since start;
	// SplitShare is the share split over the recent window (0 to 1).
	SplitRequests uint64  `json:"splitRequests"`
	WholeRequests uint64  `json:"wholeRequests"`
	SplitShare    float64 `json:"splitShare"`
	// Fallbacks counts split requests served whole after their prefill leg failed.
	Fallbacks uint64 `json:"fallbacks"`
	// TransferLatencySeconds and TransferSecondsPerBlock are the learned KV transfer cost.
	TransferLatencySeconds  float64 `json:"transferLatencySeconds"`
	TransferSecondsPerBlock float64 `json:"transferSecondsPerBlock"`
	// Pools are the ready engines and requests in flight of each pool, keyed by role.
	Pools map[string]Pool `json:"pools"`
}

// Pool is one pool of a disaggregated fleet as the router sees it.
type Pool struct {
	Engines      int `json:"engines"`
	ReadyEngines int `json:"readyEngines"`
	InFlight     int `json:"inFlight"`
	// QueuedPrefillTokens sums the pool's uncached prompt tokens waiting for a first token.
	QueuedPrefillTokens int `json:"queuedPrefillTokens"`
}
