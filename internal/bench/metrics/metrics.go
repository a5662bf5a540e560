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

// Package metrics turns per-request measurements of one run (simulated or live) into the figures
// kvbench reports: throughput, goodput at an SLO, latency percentiles, token hit rate,
// preemptions, load imbalance and the share of traffic a scaled-up replica gets. Field names are
// the ones report.json promises.
package metrics

import (
	"math"
	"sort"
)

// Record is one request's measurements. Times are seconds from the start of the run.
type Record struct {
	Endpoint     string
	Arrival      float64
	FirstToken   float64 // 0 with no token
	Finish       float64 // 0 when unfinished
	PromptTokens int
	CachedTokens int
	OutputTokens int
	Preemptions  int
	Failed       bool
	// Shed: failed because the router turned it away with a fast 429 (admission control or its
	// queue bound), not because an engine failed it or the run ended first.
	Shed bool
}

// Done reports whether the request completed.
func (r *Record) Done() bool { return !r.Failed && r.Finish > 0 }

// TTFT is the time to first token.
func (r *Record) TTFT() float64 { return r.FirstToken - r.Arrival }

// MeanITL is the mean inter-token latency after the first token (0 for one-token answers).
func (r *Record) MeanITL() float64 {
	if r.OutputTokens < 2 {
		return 0
	}
	return (r.Finish - r.FirstToken) / float64(r.OutputTokens-1)
}

// SLO is the per-request objective goodput counts against.
type SLO struct {
	TTFT float64 `json:"ttft_s"`
	ITL  float64 `json:"itl_s"`
}

// Result is one policy's figures for one run.
type Result struct {
	Policy string  `json:"policy"`
	Source string  `json:"source,omitempty"`
	Rate   float64 `json:"rate"`

	Requests  int `json:"requests"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Shed is the failed requests the router turned away (admission control or its queue bound).
	Shed      int     `json:"shed,omitempty"`
	DurationS float64 `json:"duration_s"`
	// BalancedDurationS is what the run would have lasted had every endpoint that served
	// output finished together, each at the output rate it kept from the first arrival to its
	// own last finish: the total output over the sum of those rates. DurationS over it is what
	// the uneven end of the run cost. Past saturation most of a run is the drain of the
	// engines' backlogs, and one engine left with the longest answers sets the duration, so
	// output throughput and goodput (both per second of the whole run) measure the drain's
	// balance as much as the fleet's speed. An estimate, not a bound: an engine given more
	// work might have run it in larger batches. 0 without output.
	BalancedDurationS float64 `json:"balanced_duration_s,omitempty"`

	OutputThroughput float64 `json:"output_throughput_tok_s"`
	InputThroughput  float64 `json:"input_throughput_tok_s"`
	Goodput          float64 `json:"goodput_tok_s"`
	SLOAttainment    float64 `json:"slo_attainment"`
	RequestRate      float64 `json:"request_throughput_req_s"`

	TTFTP50 float64 `json:"ttft_p50_s"`
	TTFTP90 float64 `json:"ttft_p90_s"`
	TTFTP99 float64 `json:"ttft_p99_s"`
	ITLP50  float64 `json:"itl_p50_s"`
	// ITLP90 is the 90th percentile of every inter-token gap: decode stalls (a long prefill
	// sharing the steps of running decodes) show in the tail.
	ITLP90 float64 `json:"itl_p90_s"`
	E2EP50 float64 `json:"e2e_p50_s"`
	E2EP99 float64 `json:"e2e_p99_s"`

	HitRate      float64 `json:"hit_rate"`
	Preemptions  int     `json:"preemptions"`
	ImbalanceCoV float64 `json:"imbalance_cov"`
	// ScaledUpShare is the share of requests arriving after a scale-up that the added replicas
	// got; ScaledUpFairShare is what an even spread would give them.
	ScaledUpShare     *float64 `json:"scaled_up_share,omitempty"`
	ScaledUpFairShare *float64 `json:"scaled_up_fair_share,omitempty"`

	PerEndpoint map[string]int `json:"requests_per_endpoint,omitempty"`
	// Extra holds mode-specific figures (simulation wall time, engine steps, ...).
	Extra map[string]float64 `json:"extra,omitempty"`
}

// ScaleUp says which endpoints were added and when, for ScaledUpShare.
type ScaleUp struct {
	At    float64
	Added []string
	// Total is the endpoint count after the scale-up.
	Total int
}

// Summarize computes a Result. itl holds every inter-token gap observed (seconds); endpoints
// lists every endpoint that was in the fleet (so idle ones count in the imbalance). duration is
// the run's measured span; when 0 it is taken from the records (first arrival to last finish).
func Summarize(recs []Record, itl []float64, endpoints []string, slo SLO, duration float64, su *ScaleUp) Result {
	var res Result
	res.Requests = len(recs)
	var ttft, e2e []float64
	var prompt, cached, out, goodOut, inTok int
	good := 0
	first, last := math.Inf(1), 0.0
	per := map[string]int{}
	drain := map[string]*endpointDrain{}
	for _, e := range endpoints {
		per[e] = 0
	}
	for i := range recs {
		r := &recs[i]
		first = math.Min(first, r.Arrival)
		if r.Endpoint != "" {
			per[r.Endpoint]++
		}
		res.Preemptions += r.Preemptions
		if !r.Done() {
			res.Failed++
			if r.Shed {
				res.Shed++
			}
			continue
		}
		res.Completed++
		last = math.Max(last, r.Finish)
		ttft = append(ttft, r.TTFT())
		e2e = append(e2e, r.Finish-r.Arrival)
		prompt += r.PromptTokens
		cached += min(r.CachedTokens, r.PromptTokens)
		out += r.OutputTokens
		inTok += r.PromptTokens
		if r.OutputTokens > 0 {
			d := drain[r.Endpoint]
			if d == nil {
				d = &endpointDrain{}
				drain[r.Endpoint] = d
			}
			d.output += r.OutputTokens
			d.last = math.Max(d.last, r.Finish)
		}
		if r.TTFT() <= slo.TTFT && r.MeanITL() <= slo.ITL {
			good++
			goodOut += r.OutputTokens
		}
	}
	if duration <= 0 && res.Completed > 0 {
		duration = last - first
	}
	res.DurationS = duration
	res.BalancedDurationS = balancedDuration(drain, first)
	if duration > 0 {
		res.OutputThroughput = float64(out) / duration
		res.InputThroughput = float64(inTok) / duration
		res.Goodput = float64(goodOut) / duration
		res.RequestRate = float64(res.Completed) / duration
	}
	if res.Requests > 0 {
		res.SLOAttainment = float64(good) / float64(res.Requests)
	}
	res.TTFTP50, res.TTFTP90, res.TTFTP99 = Percentile(ttft, 50), Percentile(ttft, 90), Percentile(ttft, 99)
	res.E2EP50, res.E2EP99 = Percentile(e2e, 50), Percentile(e2e, 99)
	res.ITLP50, res.ITLP90 = Percentile(itl, 50), Percentile(itl, 90)
	if prompt > 0 {
		res.HitRate = float64(cached) / float64(prompt)
	}
	counts := make([]float64, 0, len(per))
	for _, n := range per {
		counts = append(counts, float64(n))
	}
	res.ImbalanceCoV = CoV(counts)
	res.PerEndpoint = per
	if su != nil && len(su.Added) > 0 {
		added := map[string]bool{}
		for _, a := range su.Added {
			added[a] = true
		}
		n, got := 0, 0
		for i := range recs {
			if recs[i].Arrival >= su.At && recs[i].Endpoint != "" {
				n++
				if added[recs[i].Endpoint] {
					got++
				}
			}
		}
		fair := float64(len(su.Added)) / float64(max(1, su.Total))
		share := 0.0
		if n > 0 {
			share = float64(got) / float64(n)
		}
		res.ScaledUpShare, res.ScaledUpFairShare = &share, &fair
	}
	return res
}

// endpointDrain is what one endpoint served of a run: its output tokens and its last finish.
type endpointDrain struct {
	output int
	last   float64
}

// balancedDuration is BalancedDurationS: the endpoints' output over the sum of their output
// rates, each rate taken from first (the run's first arrival) to the endpoint's last finish.
func balancedDuration(drain map[string]*endpointDrain, first float64) float64 {
	total, rate := 0, 0.0
	for _, d := range drain {
		span := d.last - first
		if span <= 0 {
			continue
		}
		total += d.output
		rate += float64(d.output) / span
	}
	if rate <= 0 {
		return 0
	}
	return float64(total) / rate
}

// Percentile returns the p-th percentile (0-100) with linear interpolation; 0 for no data. It
// sorts v in place.
func Percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	pos := p / 100 * float64(len(v)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(v)-1)
	f := pos - float64(lo)
	return v[lo]*(1-f) + v[hi]*f
}

// CoV is the coefficient of variation (population standard deviation over mean); 0 for no data
// or a zero mean.
func CoV(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var sum float64
	for _, x := range v {
		sum += x
	}
	mean := sum / float64(len(v))
	if mean == 0 {
		return 0
	}
	var ss float64
	for _, x := range v {
		ss += (x - mean) * (x - mean)
	}
	return math.Sqrt(ss/float64(len(v))) / mean
}

// Mean summarises runs of one policy at one rate over several seeds: every figure is the mean of
// the runs' figures (percentiles included: the mean of each run's percentile, not a percentile
// of the pooled requests), counts are rounded means, and Extra gains the spread of the output
// throughput (output_tok_s_min, output_tok_s_max) and the number of seeds. One run is returned
// as it is.
func Mean(runs []Result) Result {
	if len(runs) <= 1 {
		if len(runs) == 1 {
			return runs[0]
		}
		return Result{}
	}
	n := float64(len(runs))
	out := Result{Policy: runs[0].Policy, Source: runs[0].Source, Rate: runs[0].Rate,
		PerEndpoint: map[string]int{}, Extra: map[string]float64{}}
	var req, done, failed, pre, shed float64
	lo, hi := math.Inf(1), math.Inf(-1)
	var share, fair float64
	shares := 0
	per := map[string]float64{}
	for _, r := range runs {
		req += float64(r.Requests)
		done += float64(r.Completed)
		failed += float64(r.Failed)
		pre += float64(r.Preemptions)
		out.DurationS += r.DurationS / n
		out.BalancedDurationS += r.BalancedDurationS / n
		out.OutputThroughput += r.OutputThroughput / n
		out.InputThroughput += r.InputThroughput / n
		out.Goodput += r.Goodput / n
		out.SLOAttainment += r.SLOAttainment / n
		out.RequestRate += r.RequestRate / n
		out.TTFTP50 += r.TTFTP50 / n
		out.TTFTP90 += r.TTFTP90 / n
		out.TTFTP99 += r.TTFTP99 / n
		out.ITLP50 += r.ITLP50 / n
		out.ITLP90 += r.ITLP90 / n
		shed += float64(r.Shed)
		out.E2EP50 += r.E2EP50 / n
		out.E2EP99 += r.E2EP99 / n
		out.HitRate += r.HitRate / n
		out.ImbalanceCoV += r.ImbalanceCoV / n
		lo, hi = math.Min(lo, r.OutputThroughput), math.Max(hi, r.OutputThroughput)
		if r.ScaledUpShare != nil {
			share += *r.ScaledUpShare
			fair += *r.ScaledUpFairShare
			shares++
		}
		for k, v := range r.PerEndpoint {
			per[k] += float64(v) / n
		}
		for k, v := range r.Extra {
			out.Extra[k] += v / n
		}
	}
	out.Requests, out.Completed, out.Failed = int(math.Round(req/n)), int(math.Round(done/n)), int(math.Round(failed/n))
	out.Preemptions = int(math.Round(pre / n))
	out.Shed = int(math.Round(shed / n))
	if shares > 0 {
		s, f := share/float64(shares), fair/float64(shares)
		out.ScaledUpShare, out.ScaledUpFairShare = &s, &f
	}
	for k, v := range per {
		out.PerEndpoint[k] = int(math.Round(v))
	}
	out.Extra["seeds"] = n
	out.Extra["output_tok_s_min"], out.Extra["output_tok_s_max"] = lo, hi
	return out
}
