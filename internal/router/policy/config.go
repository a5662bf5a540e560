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

// Config tunes a Policy. The zero value of every field means "use the default", so
// Config{Kind: Auto, BlockSize: 16} is a complete configuration.
type Config struct {
	Kind Kind
	// BlockSize of the engines' KV cache, in tokens. A match shorter than one block is no match.
	BlockSize int
	// MaxInFlight is the admission limit: an endpoint with this many requests in flight (this
	// router's plus the others' estimated from the scrape) takes no more. 0 means no limit.
	MaxInFlight int
	// SaturationFactor: the prefix holder is saturated when its predicted TTFT for this request
	// exceeds this multiple of the best alternative's (which includes the recompute there) and
	// the time saved outweighs what the recompute costs the alternative's streams; or (Auto)
	// when the request costs the fleet this multiple more there, decode included (see
	// saturated). Default 1.5.
	SaturationFactor float64
	// TargetTTFT (seconds), optional: a holder predicted above it is released whenever another
	// endpoint predicts better, even by less than SaturationFactor and whatever the recompute
	// costs the fleet. 0 disables it.
	TargetTTFT float64
	// DecodeSlack: under DecodeBound, a holder is saturated when it has more than
	// max(SaturationFactor × fewest, fewest + DecodeSlack) active streams. Default 4. (Auto and
	// PrefillBound use the cost gates below instead: see saturated.)
	DecodeSlack int
	// LoadBound is the ε of consistent hashing with bounded loads: a released request (Auto,
	// PrefillBound) only goes to an endpoint whose active streams, with it, stay within
	// (1+ε) × the fleet's mean, so releases do not herd onto one endpoint whose latency model
	// has not caught up yet; and under Auto a holder past KVPressure is released when it is
	// over that cap. Default 0.25.
	LoadBound float64
	// PlacementLoadBound is the same bound for placing a new prefix: it goes to no endpoint
	// whose active streams, with it, exceed (1+ε) × the fleet's mean (unless every endpoint
	// does). Tighter than LoadBound (default 0.1) because a new prefix draws traffic for as long
	// as it lives, and prefixes are not moved once the requests that follow them are many. Where
	// keeping to it would cost the request's first token more than 50 ms, it is on inter-token
	// latency instead on an endpoint whose KV cache is less than half full: (1+ε) × the mean's
	// on the fleet's decode line, which allows ε × intercept / slope more streams (see
	// placementBound).
	PlacementLoadBound float64
	// PlacementTTFTSlack (seconds): below saturation a new prefix goes to no endpoint whose
	// predicted first token is more than this later than the best one's, on top of the
	// SaturationFactor ratio. The ratio alone let the placement's spreading (placement counts,
	// streams, interference) put a 40,000-token prompt whose best first token is 4 s on an
	// engine 2 s slower. Past saturation (every endpoint has more than HoldAfter queued) only
	// the ratio applies: first tokens are late everywhere and spreading is what drains the
	// backlogs. Default 0.5; negative disables it.
	PlacementTTFTSlack float64
	// ReleaseQueueSlack (seconds): below saturation (Auto) a holder is released on decode cost
	// only to an endpoint where the request would wait behind at most this much more queued
	// prefill than on the holder (as the TTFT model prices it; its own recompute not counted).
	// Decode cost counts every stream on the holder against one first token, so without the
	// bound a busy fleet sent every release to a replica just added, each queued behind the
	// recomputes of the ones before it (kvbench scale-up at 20 QPS: TTFT p90 2× llm-d's). With
	// it, a new replica takes a holder's requests about as fast as it computes their prefixes.
	// The TTFT and KV-pressure gates are not bounded by it, nor is any gate past saturation,
	// where first tokens are late everywhere. Default 0.25; negative disables it.
	ReleaseQueueSlack float64
	// KVPressure: the KV-cache usage (scraped, 0..1) above which an endpoint's decode load
	// costs other requests (new streams queue for memory or preempt running ones). Auto
	// releases a holder over the bounded-load cap on streams only when it is under this
	// pressure: below it, extra streams batch cheaply and moving would only recompute the
	// prefix elsewhere. Default 0.95: vLLM counts only blocks held by running requests (cached
	// blocks free to evict are not usage), so a cache at 85 % still admits new streams, and
	// releasing there recomputed shared prefixes for nothing (kvbench demo at 200 QPS: goodput
	// −6 % against SGLang's policy at 0.85, −0.2 % at 0.95; docs/benchmarks.md, issue 18). The
	// disaggregated plan reads the same threshold for a full decode engine.
	KVPressure float64
	// Tier credits: how much a cached token on a slower tier is worth relative to one on the GPU
	// (it still has to be loaded back). Defaults 0.75 (CPU), 0.25 (storage), 0.9 (predicted: the
	// router sent this prefix there moments ago and the engine has not reported it yet).
	CPUCredit, StorageCredit, PredictedCredit float64
	// PrefillRatio: a request is classified prefill-bound when its uncached prompt tokens (on the
	// endpoint holding most of it) are at least this many times its expected output. Default 4.
	// The shape is reported (Decision.Shape, a metric label); Auto's decisions are cost-based
	// and do not switch on it.
	PrefillRatio float64
	// MinPrefixShare: an endpoint is a prefix holder worth sticking to only if it holds more
	// than every other candidate by at least this share of the prompt (and one block). A chat
	// template header or a system prompt that every engine holds decides nothing. Default 0.05.
	MinPrefixShare float64
	// DefaultMaxTokens stands in for the expected output of a request that sets no max_tokens.
	// Default 256.
	DefaultMaxTokens int
	// TieTolerance: endpoints whose load score is within this fraction of the best are tied, and
	// the tie is broken by the session key (or the request's tie-break value) with rendezvous
	// hashing, so one session lands on one endpoint on every router replica. Default 0.05.
	TieTolerance float64
	// LoRALoad (seconds) is what loading a LoRA adapter into a free GPU slot adds to a request's
	// first token on an endpoint that does not have the adapter active (see loraCost). Default
	// 0.025: a rank-16 adapter of an 8-32B model copied from host memory takes tens of
	// milliseconds.
	LoRALoad float64
	// HoldAfter (seconds): when every ready endpoint has more than this much prefill queued
	// ahead of a new request (priced by its TTFT model), the router holds the request in its own
	// queue (ShouldHold). Negative disables holding. Default DefaultHoldAfter.
	HoldAfter float64
}

func (c Config) withDefaults() Config {
	if c.Kind == "" {
		c.Kind = Auto
	}
	if c.BlockSize <= 0 {
		c.BlockSize = 16
	}
	if c.SaturationFactor <= 1 {
		c.SaturationFactor = 1.5
	}
	if c.DecodeSlack <= 0 {
		c.DecodeSlack = 4
	}
	if c.LoadBound <= 0 {
		c.LoadBound = 0.25
	}
	if c.PlacementLoadBound <= 0 {
		c.PlacementLoadBound = 0.1
	}
	if c.PlacementTTFTSlack == 0 {
		c.PlacementTTFTSlack = 0.5
	}
	if c.ReleaseQueueSlack == 0 {
		c.ReleaseQueueSlack = 0.25
	}
	if c.KVPressure <= 0 {
		c.KVPressure = 0.95
	}
	if c.CPUCredit <= 0 {
		c.CPUCredit = 0.75
	}
	if c.StorageCredit <= 0 {
		c.StorageCredit = 0.25
	}
	if c.PredictedCredit <= 0 {
		c.PredictedCredit = 0.9
	}
	if c.PrefillRatio <= 0 {
		c.PrefillRatio = 4
	}
	if c.MinPrefixShare <= 0 {
		c.MinPrefixShare = 0.05
	}
	if c.DefaultMaxTokens <= 0 {
		c.DefaultMaxTokens = 256
	}
	if c.TieTolerance <= 0 {
		c.TieTolerance = 0.05
	}
	if c.LoRALoad <= 0 {
		c.LoRALoad = 0.025
	}
	if c.HoldAfter == 0 {
		c.HoldAfter = DefaultHoldAfter
	}
	return c
}
