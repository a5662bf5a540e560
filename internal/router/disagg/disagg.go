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

// Package disagg decides, per request, whether a request is served whole on one engine or split
// into a prefill leg on one engine and a decode leg on another, with the KV cache moved between
// them by vLLM's KV connector. It is pure (no I/O, no clock): the router's proxy, its endpoint
// picker and kvbench's simulated kvrouter all call the same Decide.
//
// The rule is the published break-even one, priced with measured costs: splitting pays when the
// KV transfer costs less than the wait it saves. Served whole, the request's prefill runs on an
// engine whose streams are decoding, and chunked prefill shares every step's token budget with
// them: each of those streams waits about the prefill's compute time (the stall), which is what
// pushes their inter-token latency over an SLO. Split, the request's first token pays the prefill
// engine's queue, the transfer and the decode engine's first step instead, and the decode
// engine's streams only see one recomputed token. Each option is priced as the request's own
// latency plus the delay it imposes on the streams already running, weighed by how visible that
// delay is to them. See docs/disaggregation.md, "How the split is decided".
package disagg

import (
	"fmt"
	"math"
	"strings"

	"github.com/kvrouter/kvrouter/internal/router/policy"
)

// Mode selects how requests are split.
type Mode string

const (
	// Auto splits a request when its predicted cost is lower split than whole (learned online).
	Auto Mode = "Auto"
	// Always splits every request when a prefill engine is available (Dynamo's and
	// production-stack's behaviour).
	Always Mode = "Always"
	// Never serves every request whole; prefill engines then serve whole requests too.
	Never Mode = "Never"
	// Threshold splits a request when its uncached prompt tokens reach Config.ThresholdTokens
	// (llm-d's pd-profile-handler behaviour), pinning the decision.
	Threshold Mode = "Threshold"
)

// ParseMode accepts a mode name in any case.
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{Auto, Always, Never, Threshold} {
		if strings.EqualFold(s, string(m)) {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown disaggregation mode %q (want Auto, Always, Never or Threshold)", s)
}

// Config tunes the decision.
type Config struct {
	Mode Mode
	// ThresholdTokens is the uncached prompt length from which Threshold mode splits.
	ThresholdTokens int
	// BlockSize is the engines' KV block size in tokens.
	BlockSize int
	// StallWeight (Auto) is what one second of delay imposed on one stream already decoding
	// costs, in seconds of the request's own latency. Default DefaultStallWeight.
	StallWeight float64
}

// DefaultStallWeight prices a delay imposed on a running stream above the request's own wait:
// the request chose to arrive, the streams it stalls did not, and a stall lands on their
// inter-token latency, the objective a decode-heavy service is held to. Tuned in kvbench on the
// P/D workloads (docs/disaggregation.md): 1 splits too little where P/D pays, beyond 3 nothing
// changes.
const DefaultStallWeight = 3.0

// Visibility and tolerance of the Auto rule (docs/disaggregation.md, "How the split is
// decided"): a delay counts fully on a stream once it adds visibleShare of the stream's
// expected decode time, and proportionally less below (a 10 ms stall on a 10-second answer
// does not endanger it); two engines' inter-token latencies within itlTolerance of each other
// are the same (the difference is noise of two online fits, not a reason to move a request).
const (
	visibleShare = 0.1
	itlTolerance = 0.1
	// shortPrefillSteps is the gate for short prefills: one computing in fewer decode steps'
	// time stays whole, unless the prefill engine spends busyDuty of its time on legs.
	shortPrefillSteps = 4
	busyDuty          = 0.03
)

// Validate reports a configuration that cannot decide.
func (c Config) Validate() error {
	switch c.Mode {
	case Auto, Always, Never:
	case Threshold:
		if c.ThresholdTokens <= 0 {
			return fmt.Errorf("disaggregation mode Threshold needs a positive threshold in tokens, got %d", c.ThresholdTokens)
		}
	default:
		return fmt.Errorf("unknown disaggregation mode %q (want Auto, Always, Never or Threshold)", c.Mode)
	}
	if c.BlockSize < 0 {
		return fmt.Errorf("disaggregation block size must not be negative, got %d", c.BlockSize)
	}
	if c.StallWeight < 0 || math.IsNaN(c.StallWeight) || math.IsInf(c.StallWeight, 0) {
		return fmt.Errorf("disaggregation stall weight must be a non-negative number, got %v", c.StallWeight)
	}
	return nil
}

// Costs are one request's two options as the router predicts them, in seconds and tokens.
type Costs struct {
	// Whole: the engine the policy picked for the whole request.
	WholeTTFT     float64 // predicted time to first token there (queue and own prefill)
	WholeUncached int     // prompt tokens it does not hold
	WholeDecodes  int     // streams decoding there, which wait while the prefill runs
	// Split: the prefill engine and decode engine picked for the two legs.
	PrefillTTFT    float64 // predicted prefill-leg latency on the prefill engine
	TransferBlocks int     // blocks the decode engine lacks and must pull
	// DecodeStep is the decode engine's own share of the decode leg's first token: one step,
	// or (better, when the caller has it) the policy's TTFT prediction there for the prefill
	// queued ahead plus the one recomputed token.
	DecodeStep float64
	// PrefillUncached and PrefillDecodes (optional, zero when the prefill engine serves no
	// whole requests) are the prompt tokens the prefill engine computes and the streams
	// decoding there: a prefill engine that also serves whole requests stalls them in turn.
	PrefillUncached int
	PrefillDecodes  int
	// OutputTokens, WholeITL and SplitITL (optional: zero leaves the decode out of the
	// comparison) are the request's expected output and the predicted inter-token latency, with
	// the request added, on the whole engine and on the split's decode engine: a request that
	// splits onto a crowded decode pool decodes slower than it would whole on a quiet engine.
	OutputTokens       int
	WholeITL, SplitITL float64
	// WholeITLPerStream and SplitITLPerStream (optional) are the slopes of those engines'
	// inter-token latency lines, seconds per token per stream, and SplitDecodes the streams
	// decoding on the decode engine: one more stream slows every stream already there by that
	// much for as long as it decodes.
	WholeITLPerStream, SplitITLPerStream float64
	SplitDecodes                         int
	// DecodeFull is true when the decode engine is out of room (its KV cache past the policy's
	// pressure mark, or requests waiting there with the cache past 80 %; see decodeFull): a
	// decode leg would queue for memory, which no latency line predicts, so Auto keeps the
	// request whole.
	DecodeFull bool
	// PrefillDuty (optional) is the share of its time the prefill engine spends on the prefill
	// legs already sent to it (Estimator.PrefillDuty): P/D is paying on this fleet now.
	PrefillDuty float64
}

// Verdict is the decision and what it weighed.
type Verdict struct {
	Split bool
	// Reason is a short, metric-label-safe word: split, whole, short (the prefill saves less than
	// the split costs), threshold, always, never, invalid, decode-full.
	Reason string
	// WholeCost and SplitCost are the two sides of the comparison in Auto mode (seconds).
	WholeCost, SplitCost float64
}

// Estimator learns the one cost the policy's own models do not cover: the KV transfer, as a line
// in the blocks moved, from the decode legs' measured first-token times. Not safe for concurrent
// use.
type Estimator struct {
	transfer *policy.LatencyModel
	// legs is, per prefill-pool engine, the prefill-leg compute the router committed there
	// (seconds), decayed over dutyWindow: how much of its time that engine spends on prefills
	// that stall whatever it decodes.
	legs map[string]*decayed
}

// dutyWindow is the memory of the prefill-leg duty (seconds): long enough to span a few bursts
// of long prompts, short enough to follow a change of traffic within a minute.
const dutyWindow = 30.0

// decayed is a sum that decays exponentially with time.
type decayed struct{ v, at float64 }

func (d *decayed) value(now float64) float64 {
	if now > d.at {
		d.v *= math.Exp(-(now - d.at) / dutyWindow)
		d.at = now
	}
	return d.v
}

// notePrefillLeg records seconds of prefill-leg compute committed to engine at now.
func (e *Estimator) notePrefillLeg(engine string, now, seconds float64) {
	if !(seconds > 0) || math.IsInf(seconds, 0) || !(now > 0) || math.IsInf(now, 0) {
		return
	}
	if e.legs == nil {
		e.legs = map[string]*decayed{}
	}
	d := e.legs[engine]
	if d == nil {
		d = &decayed{at: now}
		e.legs[engine] = d
	}
	d.v = d.value(now) + seconds
}

// PrefillDuty is the share of its time engine spends on the prefill legs the router sends it
// (0 to 1, over about the last dutyWindow seconds; 0 without a clock).
func (e *Estimator) PrefillDuty(engine string, now float64) float64 {
	d := e.legs[engine]
	if d == nil || !(now > 0) || math.IsInf(now, 0) {
		return 0
	}
	return min(1, d.value(now)/dutyWindow)
}

// Forget drops what the estimator holds of an engine that left the fleet (a namesake that comes
// back is a new engine, with no legs).
func (e *Estimator) Forget(engine string) { delete(e.legs, engine) }

// Priors before any split request was measured: 2 ms fixed, 0.1 ms per block (a 16-token block of
// an 8B model is 2 MiB; 20 GB/s). A few measurements replace them.
const (
	priorTransferLatency  = 0.002
	priorTransferPerBlock = 0.0001
)

// NewEstimator returns an estimator starting from the priors.
func NewEstimator() *Estimator {
	// The same online line as the policy's models; the decode model's x scale (a hundred) suits
	// block counts, which run from a few to a few thousand (the TTFT model's scale, ten
	// thousand, would leave the slope barely excited by transfers of tens of blocks).
	return &Estimator{transfer: policy.NewDecodeModel(priorTransferLatency, priorTransferPerBlock)}
}

// ObserveTransfer feeds one measured transfer: the decode leg's time to first token minus the
// decode engine's own predicted share (DecodeStep), for blocks pulled. A negative time (the
// prediction overshot a transfer that cost almost nothing) counts as zero; NaN, infinities and
// negative block counts are dropped, so a broken clock cannot poison the line.
func (e *Estimator) ObserveTransfer(blocks int, seconds float64) {
	if blocks < 0 || math.IsNaN(seconds) || math.IsInf(seconds, 0) {
		return
	}
	e.transfer.Observe(float64(blocks), max(seconds, 0))
}

// TransferSeconds predicts the transfer of blocks blocks.
func (e *Estimator) TransferSeconds(blocks int) float64 {
	if blocks <= 0 {
		return 0
	}
	return e.transfer.Predict(float64(blocks))
}

// Line returns the learned transfer line: fixed seconds per transfer and seconds per block.
func (e *Estimator) Line() (latency, perBlock float64) { return e.transfer.Params() }

// Observations is the number of transfers measured so far.
func (e *Estimator) Observations() int { return e.transfer.Observations() }

// Decide splits or not. prefillSeconds is the pure prefill time of a number of tokens (the
// policy's TTFT model slope times the tokens, without queue or fixed cost), which is what the
// streams decoding on the engine that computes them wait.
func (c Config) Decide(e *Estimator, k Costs, prefillSeconds func(tokens int) float64) Verdict {
	switch c.Mode {
	case Never:
		return Verdict{Reason: "never"}
	case Always:
		return Verdict{Split: true, Reason: "always"}
	case Threshold:
		return Verdict{Split: k.WholeUncached >= c.ThresholdTokens && k.WholeUncached > 0, Reason: "threshold"}
	}
	if !finite(k.WholeTTFT, k.PrefillTTFT, k.DecodeStep) || prefillSeconds == nil || e == nil {
		// Without a prediction there is nothing to weigh; whole is what an aggregated router does.
		return Verdict{Reason: "invalid"}
	}
	if k.DecodeFull {
		return Verdict{Reason: "decode-full"}
	}
	// The gate for short prefills: chunked prefill spreads a prefill over the steps it shares
	// with the running streams, so one that computes within a couple of decode steps (a short
	// prompt, or a long one mostly cached) delays each stream by about a step, which is noise
	// on its inter-token latency and never worth a transfer and a second hop. The step is the
	// whole engine's predicted inter-token latency (the decode engine's first step until a
	// decode model is calibrated).
	step := k.WholeITL
	if !(step > 0) || math.IsInf(step, 0) {
		step = max(k.DecodeStep, 0)
	}
	saved := 0.0
	if k.WholeUncached > 0 {
		saved = prefillSeconds(k.WholeUncached)
	}
	// The gate holds only while the prefill pool is not busy with legs: once long prompts are
	// being split, the whole engines are where every short prompt's prefill lands, and many
	// stalls of a step each add up on their streams; the costs below then decide alone.
	short := !(saved > shortPrefillSteps*step) && !(k.PrefillDuty >= busyDuty)
	w := c.StallWeight
	if w <= 0 {
		w = DefaultStallWeight
	}
	// decode is the request's decode time at an inter-token latency (0 when unknown).
	decode := func(itl float64) float64 {
		if k.OutputTokens <= 1 || !(itl > 0) || math.IsInf(itl, 0) {
			return 0
		}
		return float64(k.OutputTokens-1) * itl
	}
	// span is a running stream's decode, for how visible a delay is to it: the request's own
	// expected decode stands for the streams already there.
	span := decode(k.WholeITL)
	if span == 0 {
		span = decode(k.SplitITL)
	}
	// harm is what delaying each of decodes streams by d seconds costs.
	harm := func(decodes int, d float64) float64 {
		if decodes <= 0 || !(d > 0) || math.IsInf(d, 0) {
			return 0
		}
		visible := 1.0
		if span > 0 {
			visible = min(1, d/(visibleShare*span))
		}
		return w * float64(decodes) * d * visible
	}
	// stall: the streams decoding on the engine that computes tokens sit through the prefill.
	stall := func(tokens, decodes int) float64 {
		if tokens <= 0 {
			return 0
		}
		return harm(decodes, prefillSeconds(tokens))
	}
	// crowd: one more stream slows each stream there by the ITL line's slope while it decodes.
	crowd := func(decodes int, perStream float64) float64 { return harm(decodes, decode(perStream)) }
	// The request's own decode counts only where the two engines' latencies really differ.
	wholeDecode, splitDecode := decode(k.WholeITL), decode(k.SplitITL)
	if k.WholeITL > 0 && k.SplitITL > 0 && math.Abs(k.WholeITL-k.SplitITL) <= itlTolerance*min(k.WholeITL, k.SplitITL) {
		wholeDecode, splitDecode = 0, 0
	}
	v := Verdict{
		WholeCost: max(k.WholeTTFT, 0) + wholeDecode +
			stall(k.WholeUncached, k.WholeDecodes) + crowd(k.WholeDecodes, k.WholeITLPerStream),
		SplitCost: max(k.PrefillTTFT, 0) + e.TransferSeconds(k.TransferBlocks) + max(k.DecodeStep, 0) + splitDecode +
			stall(k.PrefillUncached, k.PrefillDecodes) + crowd(k.SplitDecodes, k.SplitITLPerStream),
	}
	v.Split = v.SplitCost < v.WholeCost && !short
	switch {
	case v.Split:
		v.Reason = "split"
	case short:
		v.Reason = "short"
	default:
		v.Reason = "whole"
	}
	return v
}

func finite(xs ...float64) bool {
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// DecodeOption is one decode-pool engine as a candidate for a split request's decode leg.
type DecodeOption struct {
	// LackingBlocks is the prompt's blocks the engine does not hold: what it must pull.
	LackingBlocks int
	// FirstStep is the engine's own share of the first token (seconds): the policy's TTFT
	// prediction there for its queued prefill plus the one recomputed token.
	FirstStep float64
	// ITL is the predicted inter-token latency there with the request added (seconds; 0 when
	// no decode model is calibrated yet).
	ITL float64
	// Streams is the requests in flight there.
	Streams int
	// Full is true when the engine is out of room (see Costs.DecodeFull).
	Full bool
}

// PickDecode returns the index of the decode engine that gives the split request its earliest
// finish: transfer of the blocks it lacks, its own first step, then outputTokens tokens at its
// inter-token latency. Options within 2 % of the best are tied and the one with the fewest
// streams wins, which spreads decodes while the latency models are still learning. -1 when
// opts is empty.
func PickDecode(e *Estimator, opts []DecodeOption, outputTokens int) int {
	best, bestCost := -1, math.Inf(1)
	costs := make([]float64, len(opts))
	allFull := true
	for _, o := range opts {
		allFull = allFull && o.Full
	}
	for i, o := range opts {
		if o.Full && !allFull {
			costs[i] = math.Inf(1)
			continue
		}
		c := e.TransferSeconds(o.LackingBlocks) + max(o.FirstStep, 0) + float64(max(outputTokens, 1))*max(o.ITL, 0)
		if math.IsNaN(c) {
			c = math.Inf(1)
		}
		costs[i] = c
		if best < 0 || c < bestCost || math.IsInf(bestCost, 1) {
			best, bestCost = i, c
		}
	}
	for i, o := range opts {
		if !math.IsInf(costs[i], 1) && costs[i] <= bestCost*1.02+1e-9 && o.Streams < opts[best].Streams {
			best = i
		}
	}
	return best
}
