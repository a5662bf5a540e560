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

package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
)

// The verdict compares kvrouter, on every workload and rate of a matrix run, with the best
// variant of each peer router (a peer's documented options are separate policies of one family,
// and a user of that peer would turn on whichever helps). Figures are medians over seeds, not
// means: one chaotic overloaded seed should not decide a row, and the range shows how far the
// seeds disagree.

// Families that are not peers: kvrouter's own variants, the plain baselines (round-robin is
// the reference of the shared-prefix ratio) and the oracles.
const (
	FamilyKVRouter = "kvrouter"
	FamilyBaseline = "baseline"
	FamilyOracle   = "oracle"
)

// Criteria are the thresholds.
type Criteria struct {
	// GoodputSlack: kvrouter's goodput must be >= (1 - GoodputSlack) x the best peer variant's.
	GoodputSlack float64 `json:"goodput_slack"`
	// ITLFactor: kvrouter's ITL p90 must be <= ITLFactor x the lowest peer variant's.
	ITLFactor float64 `json:"itl_factor"`
	// SharedPrefixTarget: kvrouter's output throughput on the shared-prefix workload must be
	// >= this many times round-robin's.
	SharedPrefixTarget float64 `json:"shared_prefix_target"`
}

// The three tests, shared by kvrouter's marks (judgeRow) and every policy's (meetingTheBar).
func (c Criteria) goodputOK(v, best float64) bool { return v >= (1-c.GoodputSlack)*best }
func (c Criteria) itlOK(v, best float64) bool     { return v <= c.ITLFactor*best }
func (c Criteria) ttftOK(v, best float64) bool    { return v <= best }

// DefaultCriteria are issue 18's.
func DefaultCriteria() Criteria {
	return Criteria{GoodputSlack: 0.01, ITLFactor: 1.1, SharedPrefixTarget: 2.1}
}

// VerdictOptions choose what is compared.
type VerdictOptions struct {
	Criteria Criteria
	// KVRouter is the policy judged (default "kvrouter", the Auto kind).
	KVRouter string
	// Baseline is the policy of the shared-prefix ratio and the x round-robin column (default
	// "round-robin").
	Baseline string
	// SharedPrefix is the workload of the shared-prefix headline (default "shared-prefix").
	SharedPrefix string
	// Family resolves the family of a policy that a report does not record (reports written
	// before families were); nil: the guesses of FamilyOf only.
	Family func(policy string) string
}

func (o *VerdictOptions) defaults() {
	if o.Criteria == (Criteria{}) {
		o.Criteria = DefaultCriteria()
	}
	if o.KVRouter == "" {
		o.KVRouter = "kvrouter"
	}
	if o.Baseline == "" {
		o.Baseline = "round-robin"
	}
	if o.SharedPrefix == "" {
		o.SharedPrefix = "shared-prefix"
	}
}

// Stat is a figure over seeds.
type Stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// StatOf summarises v (the zero Stat for no values).
func StatOf(v []float64) Stat {
	if len(v) == 0 {
		return Stat{}
	}
	s := slices.Clone(v)
	m := metrics.Percentile(s, 50) // sorts s
	return Stat{Median: m, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// Mark is a criterion's outcome on one row.
type Mark string

const (
	Pass Mark = "pass"
	Fail Mark = "fail"
	// NA: the criterion does not apply (TTFT where kvrouter's goodput is 0) or cannot be
	// judged (no peer ran, a report without ITL p90).
	NA Mark = "n/a"
)

func markOf(ok bool) Mark {
	if ok {
		return Pass
	}
	return Fail
}

// FamilyBest is the best variant of one peer family on one row, by median goodput.
type FamilyBest struct {
	Family  string `json:"family"`
	Policy  string `json:"policy"`
	Goodput Stat   `json:"goodput_tok_s"`
}

// Compared is kvrouter's median of one latency figure against the lowest peer variant's.
type Compared struct {
	KVRouter Stat    `json:"kvrouter_s"`
	Peer     string  `json:"peer,omitempty"`
	Best     Stat    `json:"best_s"`
	Ratio    float64 `json:"ratio,omitempty"`
	Mark     Mark    `json:"mark"`
	// Overlap: kvrouter's range over seeds overlaps the reference's. Behind of Paired: the
	// seeds, paired by seed with the reference's runs, on which kvrouter's figure is worse.
	// A fail with overlapping ranges and kvrouter behind on only some seeds may be the seeds'
	// noise; behind on every seed, it is unlikely to be, however close the figures (a true tie
	// falls behind on all of five seeds 1 time in 32).
	Overlap bool `json:"ranges_overlap,omitempty"`
	Behind  int  `json:"seeds_behind"`
	Paired  int  `json:"seeds_paired"`
}

// Row is the verdict on one workload at one rate.
type Row struct {
	Workload string  `json:"workload"`
	Rate     float64 `json:"rate"`
	// Headline is true at the report's headline rate.
	Headline bool `json:"headline,omitempty"`
	Seeds    int  `json:"seeds"`

	Goodput     Stat    `json:"kvrouter_goodput_tok_s"`
	BestPeer    string  `json:"best_peer,omitempty"`
	BestFamily  string  `json:"best_family,omitempty"`
	PeerGoodput Stat    `json:"best_peer_goodput_tok_s"`
	Ratio       float64 `json:"goodput_ratio,omitempty"`
	GoodputMark Mark    `json:"goodput_mark"`
	// GoodputOverlap, GoodputBehind of GoodputPaired: as Compared's, against the best peer.
	GoodputOverlap bool         `json:"goodput_ranges_overlap,omitempty"`
	GoodputBehind  int          `json:"goodput_seeds_behind"`
	GoodputPaired  int          `json:"goodput_seeds_paired"`
	Families       []FamilyBest `json:"families,omitempty"`

	ITL  Compared `json:"itl_p90"`
	TTFT Compared `json:"ttft_p90"`

	// MetBy are the policies (kvrouter and every peer variant) that meet every criterion on
	// this row against all the others of that set, each held to the bar kvrouter is held to
	// against the peers. Empty: no policy in the run meets the bar here, which tells a row
	// where the criteria pull against each other from one where kvrouter falls short.
	MetBy []string `json:"met_by"`

	// Shed is the median share of kvrouter's requests shed (turned away with a fast 429 by
	// admission control or a router queue): failed in goodput, and outside its TTFT p90, which
	// is over the requests served. TTFTPeerShed is the same for the TTFT reference.
	Shed         float64 `json:"kvrouter_shed_share,omitempty"`
	TTFTPeerShed float64 `json:"ttft_peer_shed_share,omitempty"`

	// VsBaseline is kvrouter's median goodput over round-robin's (0: no round-robin run).
	VsBaseline float64 `json:"vs_round_robin,omitempty"`

	// Before is the same row of the -before run, when one was given and has it.
	Before *BeforeRow `json:"before,omitempty"`
}

// BeforeRow is a row of the earlier run, for the before/after columns.
type BeforeRow struct {
	Goodput     Stat    `json:"kvrouter_goodput_tok_s"`
	BestPeer    string  `json:"best_peer,omitempty"`
	Ratio       float64 `json:"goodput_ratio,omitempty"`
	GoodputMark Mark    `json:"goodput_mark"`
	ITLMark     Mark    `json:"itl_mark"`
	TTFTMark    Mark    `json:"ttft_mark"`
}

// Fails says which criteria the row fails.
func (r *Row) Fails() []string {
	var out []string
	if r.GoodputMark == Fail {
		out = append(out, "goodput")
	}
	if r.ITL.Mark == Fail {
		out = append(out, "ITL p90")
	}
	if r.TTFT.Mark == Fail {
		out = append(out, "TTFT p90")
	}
	return out
}

// SharedPrefixRatio is kvrouter's output throughput over round-robin's at one rate of the
// shared-prefix workload (medians over seeds).
type SharedPrefixRatio struct {
	Rate       float64 `json:"rate"`
	Headline   bool    `json:"headline,omitempty"`
	KVRouter   float64 `json:"kvrouter_output_tok_s"`
	RoundRobin float64 `json:"round_robin_output_tok_s"`
	Ratio      float64 `json:"ratio"`
	Mark       Mark    `json:"mark"`
	// BalancedRatio is kvrouter's output over round-robin's had every engine of kvrouter's runs
	// finished together, each at the output rate it kept (metrics.Result.BalancedDurationS):
	// what the most even end of the drain would have given, round-robin's run left as it was.
	// 0 when the runs predate the figure.
	BalancedRatio float64 `json:"balanced_ratio,omitempty"`
	// HitRate is kvrouter's token hit rate, HitCeiling the most of the same prompts any
	// placement could have served from cache (hit_rate_ceiling; 0 when the runs predate it).
	HitRate    float64 `json:"kvrouter_hit_rate,omitempty"`
	HitCeiling float64 `json:"hit_rate_ceiling,omitempty"`
}

// Count is how many rows pass, fail and cannot be judged on one criterion.
type Count struct {
	Pass int `json:"pass"`
	Fail int `json:"fail"`
	NA   int `json:"n_a"`
	// FailOverlap is the fails where kvrouter's range over seeds overlaps the reference's,
	// FailEverySeed those where kvrouter is behind on every seed paired with the reference's.
	FailOverlap   int `json:"fail_ranges_overlap"`
	FailEverySeed int `json:"fail_behind_every_seed"`
}

func (c *Count) add(m Mark, overlap bool, behind, paired int) {
	switch m {
	case Pass:
		c.Pass++
	case Fail:
		c.Fail++
		if overlap {
			c.FailOverlap++
		}
		if paired > 0 && behind == paired {
			c.FailEverySeed++
		}
	default:
		c.NA++
	}
}

// Summary counts the rows per criterion.
type Summary struct {
	Rows    int   `json:"rows"`
	Goodput Count `json:"goodput"`
	ITL     Count `json:"itl_p90"`
	TTFT    Count `json:"ttft_p90"`
	// AllPass is the rows that pass every criterion that applies to them.
	AllPass int `json:"all_pass"`
	// MetBy counts, per policy, the rows whose MetBy names it; Unmet counts the rows no
	// policy meets.
	MetBy map[string]int `json:"met_by,omitempty"`
	Unmet int            `json:"unmet"`
}

// Verdict is the whole comparison.
type Verdict struct {
	Criteria     Criteria            `json:"criteria"`
	KVRouter     string              `json:"kvrouter"`
	Rows         []Row               `json:"rows"`
	SharedPrefix []SharedPrefixRatio `json:"shared_prefix,omitempty"`
	Summary      Summary             `json:"summary"`
	// BeforeSummary counts the -before run's rows (all of them, matched or not).
	BeforeSummary *Summary `json:"before_summary,omitempty"`
	// Skipped names workloads without a kvrouter run, or without any peer variant.
	Skipped []string `json:"skipped,omitempty"`
}

// FamilyOf returns policy's family as the report records it. A report written before families
// were recorded (or a factory without one) gives the policy's own name, which would make a
// baseline or a kvrouter variant look like a peer of its own: those names are recognised here.
func FamilyOf(r *Report, policy string, resolve func(string) string) string {
	f := r.Families[policy]
	if (f == "" || f == policy) && resolve != nil {
		f = resolve(policy)
	}
	if f != "" && f != policy {
		return f
	}
	switch {
	case strings.HasPrefix(policy, "kvrouter"):
		return FamilyKVRouter
	case strings.HasPrefix(policy, "oracle"):
		return FamilyOracle
	case policy == "round-robin" || policy == "random" || policy == "least-loaded" || policy == "session-affinity":
		return FamilyBaseline
	}
	return policy
}

// IsPeer reports whether family is a peer router's (not kvrouter's, a baseline or an oracle).
func IsPeer(family string) bool {
	return family != FamilyKVRouter && family != FamilyBaseline && family != FamilyOracle
}

// seedRun is one run of one policy at one rate; seeded when the report recorded its seed (the
// per-seed runs of a multi-seed report), which lets two policies be compared seed by seed.
type seedRun struct {
	seed   uint64
	seeded bool
	res    metrics.Result
}

// samples is one policy's per-seed runs at one rate.
type samples []seedRun

func (s samples) stat(f func(*metrics.Result) float64) Stat {
	v := make([]float64, len(s))
	for i := range s {
		v[i] = f(&s[i].res)
	}
	return StatOf(v)
}

// behind pairs s with ref by seed and counts the seeds on which s's figure is worse (higher
// when lowerBetter, lower otherwise), and the seeds paired. Why paired: every policy runs the
// same requests on a seed, so a difference that holds seed by seed is likely the policy's, even
// where the ranges over seeds overlap because the seeds differ more from each other than the
// policies do.
func (s samples) behind(ref samples, f func(*metrics.Result) float64, lowerBetter bool) (worse, paired int) {
	refBy := map[uint64]float64{}
	for i := range ref {
		if ref[i].seeded {
			refBy[ref[i].seed] = f(&ref[i].res)
		}
	}
	for i := range s {
		r, ok := refBy[s[i].seed]
		if !s[i].seeded || !ok {
			continue
		}
		paired++
		if v := f(&s[i].res); (lowerBetter && v > r) || (!lowerBetter && v < r) {
			worse++
		}
	}
	return worse, paired
}

func goodput(r *metrics.Result) float64 { return r.Goodput }
func itlP90(r *metrics.Result) float64  { return r.ITLP90 }
func ttftP90(r *metrics.Result) float64 { return r.TTFTP90 }
func output(r *metrics.Result) float64  { return r.OutputThroughput }
func hitRate(r *metrics.Result) float64 { return r.HitRate }

// balancedOutput is a run's output throughput had it lasted its balanced duration; 0 without one.
func balancedOutput(r *metrics.Result) float64 {
	if r.BalancedDurationS <= 0 {
		return 0
	}
	return r.OutputThroughput * r.DurationS / r.BalancedDurationS
}

func hitCeiling(r *metrics.Result) float64 { return r.Extra["hit_rate_ceiling"] }

// shedShare is the share of a run's requests that were shed.
func shedShare(r *metrics.Result) float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Shed) / float64(r.Requests)
}

// workloadRuns gathers one workload's runs by rate and policy, from several reports of it.
type workloadRuns struct {
	name     string
	headline float64
	runs     map[float64]map[string]samples
	family   map[string]string
}

// collect groups the reports by workload. A report with per-seed Runs contributes those; one
// without (one seed, or written before Runs existed) contributes its Sweep (or Policies) entries
// as one sample each.
func collect(reports []*Report, resolve func(string) string) (map[string]*workloadRuns, error) {
	out := map[string]*workloadRuns{}
	for _, r := range reports {
		w := out[r.Workload]
		if w == nil {
			w = &workloadRuns{name: r.Workload, headline: r.Rate, runs: map[float64]map[string]samples{}, family: map[string]string{}}
			out[r.Workload] = w
		}
		var rs []seedRun
		if len(r.Runs) > 0 {
			for _, s := range r.Runs {
				rs = append(rs, seedRun{seed: s.Seed, seeded: true, res: s.Result})
			}
		} else {
			plain := r.Sweep
			if len(plain) == 0 {
				plain = r.Policies
			}
			for _, res := range plain {
				rs = append(rs, seedRun{res: res})
			}
		}
		seen := map[float64]map[string]bool{}
		for _, sm := range rs {
			res := sm.res
			byPol := w.runs[res.Rate]
			if byPol == nil {
				byPol = map[string]samples{}
				w.runs[res.Rate] = byPol
			}
			if seen[res.Rate] == nil {
				seen[res.Rate] = map[string]bool{}
			}
			if !seen[res.Rate][res.Policy] && len(byPol[res.Policy]) > 0 {
				return nil, fmt.Errorf("workload %s: policy %s at rate %g is in two reports", r.Workload, res.Policy, res.Rate)
			}
			seen[res.Rate][res.Policy] = true
			byPol[res.Policy] = append(byPol[res.Policy], sm)
			w.family[res.Policy] = FamilyOf(r, res.Policy, resolve)
		}
	}
	return out, nil
}

// ComputeVerdict judges the reports of one matrix run; before, when not empty, is the earlier
// run whose kvrouter goodput and marks are shown beside each row.
func ComputeVerdict(reports, before []*Report, o VerdictOptions) (*Verdict, error) {
	o.defaults()
	v, err := verdictOf(reports, o)
	if err != nil {
		return nil, err
	}
	if len(before) == 0 {
		return v, nil
	}
	b, err := verdictOf(before, o)
	if err != nil {
		return nil, fmt.Errorf("before: %w", err)
	}
	v.BeforeSummary = &b.Summary
	type key struct {
		w string
		r float64
	}
	idx := map[key]*Row{}
	for i := range b.Rows {
		idx[key{b.Rows[i].Workload, b.Rows[i].Rate}] = &b.Rows[i]
	}
	for i := range v.Rows {
		if br := idx[key{v.Rows[i].Workload, v.Rows[i].Rate}]; br != nil {
			v.Rows[i].Before = &BeforeRow{Goodput: br.Goodput, BestPeer: br.BestPeer, Ratio: br.Ratio,
				GoodputMark: br.GoodputMark, ITLMark: br.ITL.Mark, TTFTMark: br.TTFT.Mark}
		}
	}
	return v, nil
}

func verdictOf(reports []*Report, o VerdictOptions) (*Verdict, error) {
	byWorkload, err := collect(reports, o.Family)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(byWorkload))
	for n := range byWorkload {
		names = append(names, n)
	}
	sort.Strings(names)
	v := &Verdict{Criteria: o.Criteria, KVRouter: o.KVRouter}
	for _, n := range names {
		w := byWorkload[n]
		rates := make([]float64, 0, len(w.runs))
		for r := range w.runs {
			rates = append(rates, r)
		}
		sort.Float64s(rates)
		judged := 0
		for _, rate := range rates {
			row, ok := judgeRow(w, rate, o)
			if !ok {
				continue
			}
			judged++
			v.Rows = append(v.Rows, row)
			v.Summary.Rows++
			v.Summary.Goodput.add(row.GoodputMark, row.GoodputOverlap, row.GoodputBehind, row.GoodputPaired)
			v.Summary.ITL.add(row.ITL.Mark, row.ITL.Overlap, row.ITL.Behind, row.ITL.Paired)
			v.Summary.TTFT.add(row.TTFT.Mark, row.TTFT.Overlap, row.TTFT.Behind, row.TTFT.Paired)
			if len(row.Fails()) == 0 {
				v.Summary.AllPass++
			}
			if len(row.MetBy) == 0 {
				v.Summary.Unmet++
			}
			for _, p := range row.MetBy {
				if v.Summary.MetBy == nil {
					v.Summary.MetBy = map[string]int{}
				}
				v.Summary.MetBy[p]++
			}
		}
		if judged == 0 {
			v.Skipped = append(v.Skipped, n)
		}
		if n == o.SharedPrefix {
			for _, rate := range rates {
				k, b := w.runs[rate][o.KVRouter], w.runs[rate][o.Baseline]
				if len(k) == 0 || len(b) == 0 {
					continue
				}
				sp := SharedPrefixRatio{Rate: rate, Headline: rate == w.headline,
					KVRouter: k.stat(output).Median, RoundRobin: b.stat(output).Median}
				sp.Ratio = ratio(sp.KVRouter, sp.RoundRobin)
				sp.Mark = markOf(sp.Ratio >= o.Criteria.SharedPrefixTarget)
				if bal := k.stat(balancedOutput); bal.Min > 0 {
					sp.BalancedRatio = ratio(bal.Median, sp.RoundRobin)
				}
				if c := k.stat(hitCeiling); c.Min > 0 {
					sp.HitRate, sp.HitCeiling = k.stat(hitRate).Median, c.Median
				}
				v.SharedPrefix = append(v.SharedPrefix, sp)
			}
		}
	}
	return v, nil
}

// judgeRow compares kvrouter with the peers at one rate; false when kvrouter or every peer
// is missing there.
func judgeRow(w *workloadRuns, rate float64, o VerdictOptions) (Row, bool) {
	byPol := w.runs[rate]
	k := byPol[o.KVRouter]
	if len(k) == 0 {
		return Row{}, false
	}
	row := Row{Workload: w.name, Rate: rate, Headline: rate == w.headline, Seeds: len(k),
		Goodput: k.stat(goodput)}
	pols := make([]string, 0, len(byPol))
	for p := range byPol {
		if IsPeer(w.family[p]) {
			pols = append(pols, p)
		}
	}
	if len(pols) == 0 {
		return Row{}, false
	}
	// Sorted names make ties (equal medians) resolve the same way on every run.
	sort.Strings(pols)
	best := map[string]FamilyBest{}
	var itlBest, ttftBest Compared
	itlBest.Best.Median, ttftBest.Best.Median = math.Inf(1), math.Inf(1)
	for _, p := range pols {
		s := byPol[p]
		row.Seeds = min(row.Seeds, len(s))
		g := s.stat(goodput)
		fam := w.family[p]
		if b, ok := best[fam]; !ok || g.Median > b.Goodput.Median {
			best[fam] = FamilyBest{Family: fam, Policy: p, Goodput: g}
		}
		// A report without ITL p90 (written before it existed) or a run that finished nothing
		// has 0 there: not a low ITL.
		if it := s.stat(itlP90); it.Median > 0 && it.Median < itlBest.Best.Median {
			itlBest.Peer, itlBest.Best = p, it
		}
		if g.Median > 0 {
			if tt := s.stat(ttftP90); tt.Median < ttftBest.Best.Median {
				ttftBest.Peer, ttftBest.Best = p, tt
			}
		}
	}
	fams := make([]string, 0, len(best))
	for f := range best {
		fams = append(fams, f)
	}
	sort.Strings(fams)
	for _, f := range fams {
		b := best[f]
		row.Families = append(row.Families, b)
		if row.BestPeer == "" || b.Goodput.Median > row.PeerGoodput.Median {
			row.BestPeer, row.BestFamily, row.PeerGoodput = b.Policy, b.Family, b.Goodput
		}
	}
	row.Ratio = ratio(row.Goodput.Median, row.PeerGoodput.Median)
	row.GoodputMark = markOf(o.Criteria.goodputOK(row.Goodput.Median, row.PeerGoodput.Median))
	row.GoodputOverlap = overlaps(row.Goodput, row.PeerGoodput)
	if row.BestPeer != "" {
		row.GoodputBehind, row.GoodputPaired = k.behind(byPol[row.BestPeer], goodput, false)
	}

	row.ITL = itlBest
	row.ITL.KVRouter = k.stat(itlP90)
	switch {
	case row.ITL.Peer == "" || row.ITL.KVRouter.Median <= 0:
		row.ITL.Mark = NA
	default:
		row.ITL.Ratio = ratio(row.ITL.KVRouter.Median, row.ITL.Best.Median)
		row.ITL.Mark = markOf(o.Criteria.itlOK(row.ITL.KVRouter.Median, row.ITL.Best.Median))
		row.ITL.Overlap = overlaps(row.ITL.KVRouter, row.ITL.Best)
		row.ITL.Behind, row.ITL.Paired = k.behind(byPol[row.ITL.Peer], itlP90, true)
	}
	if row.ITL.Peer == "" {
		row.ITL.Best = Stat{}
	}

	row.TTFT = ttftBest
	row.TTFT.KVRouter = k.stat(ttftP90)
	switch {
	case row.TTFT.Peer == "" || row.Goodput.Median <= 0:
		row.TTFT.Mark = NA
	default:
		row.TTFT.Ratio = ratio(row.TTFT.KVRouter.Median, row.TTFT.Best.Median)
		row.TTFT.Mark = markOf(o.Criteria.ttftOK(row.TTFT.KVRouter.Median, row.TTFT.Best.Median))
		row.TTFT.Overlap = overlaps(row.TTFT.KVRouter, row.TTFT.Best)
		row.TTFT.Behind, row.TTFT.Paired = k.behind(byPol[row.TTFT.Peer], ttftP90, true)
	}
	if row.TTFT.Peer == "" {
		row.TTFT.Best = Stat{}
	}

	row.MetBy = meetingTheBar(byPol, append([]string{o.KVRouter}, pols...), o.Criteria)
	row.Shed = k.stat(shedShare).Median
	if row.TTFT.Peer != "" {
		row.TTFTPeerShed = byPol[row.TTFT.Peer].stat(shedShare).Median
	}

	if b := byPol[o.Baseline]; len(b) > 0 {
		row.VsBaseline = ratio(row.Goodput.Median, b.stat(goodput).Median)
	}
	return row, true
}

// meetingTheBar returns the policies of set (sorted, kvrouter first) that meet every criterion
// against all the others of set, with the marks judgeRow gives: the best goodput within the
// slack, an ITL p90 within the factor of the lowest (where both are measured), a TTFT p90 at or
// below the lowest among those with goodput (where the policy's own goodput is non-zero).
func meetingTheBar(byPol map[string]samples, set []string, c Criteria) []string {
	type med struct{ goodput, itl, ttft float64 }
	m := make([]med, len(set))
	for i, p := range set {
		s := byPol[p]
		m[i] = med{s.stat(goodput).Median, s.stat(itlP90).Median, s.stat(ttftP90).Median}
	}
	met := []string{}
	for i, p := range set {
		bestGoodput, bestITL, bestTTFT := 0.0, math.Inf(1), math.Inf(1)
		for j := range set {
			if j == i {
				continue
			}
			bestGoodput = math.Max(bestGoodput, m[j].goodput)
			if m[j].itl > 0 {
				bestITL = math.Min(bestITL, m[j].itl)
			}
			if m[j].goodput > 0 {
				bestTTFT = math.Min(bestTTFT, m[j].ttft)
			}
		}
		me := m[i]
		if !c.goodputOK(me.goodput, bestGoodput) ||
			(me.itl > 0 && !c.itlOK(me.itl, bestITL)) ||
			(me.goodput > 0 && !c.ttftOK(me.ttft, bestTTFT)) {
			continue
		}
		met = append(met, p)
	}
	return met
}

// overlaps reports whether two figures' ranges over seeds overlap.
func overlaps(a, b Stat) bool {
	return a.N > 0 && b.N > 0 && a.Min <= b.Max && b.Min <= a.Max
}

// LoadReports reads report.json files. Each path is a report.json, a directory holding one, or
// a directory whose subdirectories hold one each (what `kvbench simulate --out DIR` writes).
func LoadReports(paths []string) ([]*Report, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		if one := filepath.Join(p, "report.json"); isFile(one) {
			files = append(files, one)
			continue
		}
		sub, err := filepath.Glob(filepath.Join(p, "*", "report.json"))
		if err != nil {
			return nil, err
		}
		if len(sub) == 0 {
			return nil, fmt.Errorf("%s: no report.json in it or in its subdirectories", p)
		}
		files = append(files, sub...)
	}
	out := make([]*Report, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r Report
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, &r)
	}
	return out, nil
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// WriteVerdictMarkdown writes the verdict as Markdown (for docs/benchmarks.md): the table of
// rows, the shared-prefix ratio, the per-criterion counts and the rows that fail.
func WriteVerdictMarkdown(w io.Writer, v *Verdict) error {
	before := v.BeforeSummary != nil
	c := v.Criteria
	fmt.Fprintf(w, "%s against the best variant of each peer family, per workload and rate: medians over seeds, [min–max] over seeds; "+
		"the best peer is the variant with the highest median goodput, the ITL and TTFT references are the lowest median p90 among "+
		"peer variants (TTFT among those with non-zero goodput). Marks: goodput ≥ best − %.0f %%, ITL p90 ≤ %.2g × best, TTFT p90 ≤ best "+
		"(where %s's goodput is non-zero). Rate in bold: the workload's headline rate.\n\n",
		v.KVRouter, 100*c.GoodputSlack, c.ITLFactor, v.KVRouter)
	fmt.Fprint(w, "| workload | rate | seeds | kvrouter goodput tok/s | best peer | its goodput | ratio | ✓ | ITL p90 | best peer ITL p90 | ratio | ✓ | TTFT p90 | best peer TTFT p90 | ratio | ✓ | × round-robin |")
	if before {
		fmt.Fprint(w, " before: goodput | before: ✓ |")
	}
	fmt.Fprint(w, "\n|---|---:|---:|---:|---|---:|---:|:-:|---:|---:|---:|:-:|---:|---:|---:|:-:|---:|")
	if before {
		fmt.Fprint(w, "---:|:-:|")
	}
	fmt.Fprintln(w)
	for i := range v.Rows {
		r := &v.Rows[i]
		rate := fmt.Sprintf("%g", r.Rate)
		if r.Headline {
			rate = "**" + rate + "**"
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |",
			r.Workload, rate, r.Seeds, statTok(r.Goodput), r.BestPeer, statTok(r.PeerGoodput), ratioCell(r.Ratio), markCell(r.GoodputMark),
			statSecs(r.ITL.KVRouter), peerSecs(r.ITL), ratioCell(r.ITL.Ratio), markCell(r.ITL.Mark),
			statSecs(r.TTFT.KVRouter), peerSecs(r.TTFT), ratioCell(r.TTFT.Ratio), markCell(r.TTFT.Mark), ratioCell(r.VsBaseline))
		if before {
			if b := r.Before; b != nil {
				fmt.Fprintf(w, " %s | %s%s%s |", statTok(b.Goodput), markCell(b.GoodputMark), markCell(b.ITLMark), markCell(b.TTFTMark))
			} else {
				fmt.Fprint(w, " – | – |")
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	if len(v.SharedPrefix) > 0 {
		fmt.Fprintf(w, "Shared-prefix output throughput, %s over round-robin (target ≥ %.2g×):", v.KVRouter, c.SharedPrefixTarget)
		for i, s := range v.SharedPrefix {
			sep := ","
			if i == 0 {
				sep = ""
			}
			head := ""
			if s.Headline {
				head = " (headline)"
			}
			fmt.Fprintf(w, "%s %g QPS%s %.0f vs %.0f tok/s = **%.2f×** %s", sep, s.Rate, head, s.KVRouter, s.RoundRobin, s.Ratio, markCell(s.Mark))
		}
		fmt.Fprint(w, ".")
		writeSharedPrefixLimits(w, v.KVRouter, v.SharedPrefix)
		fmt.Fprint(w, "\n\n")
	}
	fmt.Fprintln(w, "| criterion | pass | fail | n/a |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	line := func(name string, c Count, b *Count) {
		if b != nil {
			fmt.Fprintf(w, "| %s | %d (before %d) | %d (before %d) | %d (before %d) |\n", name, c.Pass, b.Pass, c.Fail, b.Fail, c.NA, b.NA)
			return
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d |\n", name, c.Pass, c.Fail, c.NA)
	}
	var bg, bi, bt *Count
	if before {
		bg, bi, bt = &v.BeforeSummary.Goodput, &v.BeforeSummary.ITL, &v.BeforeSummary.TTFT
	}
	line(fmt.Sprintf("goodput ≥ best peer − %.0f %%", 100*c.GoodputSlack), v.Summary.Goodput, bg)
	line(fmt.Sprintf("ITL p90 ≤ %.2g × best peer", c.ITLFactor), v.Summary.ITL, bi)
	line("TTFT p90 ≤ best peer", v.Summary.TTFT, bt)
	if before {
		fmt.Fprintf(w, "| every criterion | %d of %d rows (before %d of %d) | | |\n", v.Summary.AllPass, v.Summary.Rows, v.BeforeSummary.AllPass, v.BeforeSummary.Rows)
	} else {
		fmt.Fprintf(w, "| every criterion | %d of %d rows | | |\n", v.Summary.AllPass, v.Summary.Rows)
	}
	fmt.Fprintln(w)
	sum := v.Summary
	fmt.Fprintf(w, "Of the fails, those where %s's range over seeds overlaps the reference's: goodput %d of %d, ITL p90 %d of %d, "+
		"TTFT p90 %d of %d; those where it is behind the reference on every seed, the runs paired by seed (a difference that "+
		"holds seed by seed, however small, and unlikely to be chance): goodput %d, ITL p90 %d, TTFT p90 %d.\n\n", v.KVRouter,
		sum.Goodput.FailOverlap, sum.Goodput.Fail, sum.ITL.FailOverlap, sum.ITL.Fail, sum.TTFT.FailOverlap, sum.TTFT.Fail,
		sum.Goodput.FailEverySeed, sum.ITL.FailEverySeed, sum.TTFT.FailEverySeed)
	writeMetBy(w, v)
	var fails []string
	for i := range v.Rows {
		r := &v.Rows[i]
		var why []string
		if r.GoodputMark == Fail {
			why = append(why, fmt.Sprintf("goodput %+.1f %% vs %s%s", 100*(r.Ratio-1), r.BestPeer, seedsNote(r.GoodputOverlap, r.GoodputBehind, r.GoodputPaired)))
		}
		if r.ITL.Mark == Fail {
			why = append(why, fmt.Sprintf("ITL p90 %.2f× %s%s", r.ITL.Ratio, r.ITL.Peer, seedsNote(r.ITL.Overlap, r.ITL.Behind, r.ITL.Paired)))
		}
		if r.TTFT.Mark == Fail {
			why = append(why, fmt.Sprintf("TTFT p90 %.2f× %s%s", r.TTFT.Ratio, r.TTFT.Peer, seedsNote(r.TTFT.Overlap, r.TTFT.Behind, r.TTFT.Paired)))
		}
		if len(why) > 0 {
			unmet := ""
			if len(r.MetBy) == 0 {
				unmet = " — no policy meets every criterion here"
			}
			fails = append(fails, fmt.Sprintf("- %s at %g: %s%s", r.Workload, r.Rate, strings.Join(why, "; "), unmet))
		}
	}
	if len(fails) > 0 {
		fmt.Fprintf(w, "Rows where %s loses:\n\n%s\n\n", v.KVRouter, strings.Join(fails, "\n"))
	}
	var shed []string
	for i := range v.Rows {
		if r := &v.Rows[i]; r.Shed > 0 {
			ref := ""
			if r.TTFT.Peer != "" {
				ref = fmt.Sprintf(" (TTFT reference %s: %.1f %%)", r.TTFT.Peer, 100*r.TTFTPeerShed)
			}
			shed = append(shed, fmt.Sprintf("%s at %g: %.1f %%%s", r.Workload, r.Rate, 100*r.Shed, ref))
		}
	}
	if len(shed) > 0 {
		fmt.Fprintf(w, "Rows where %s shed requests (a fast 429: failed in its goodput, outside its TTFT p90, which is "+
			"over the requests served), median share over seeds: %s.\n\n", v.KVRouter, strings.Join(shed, "; "))
	}
	if len(v.Skipped) > 0 {
		fmt.Fprintf(w, "Not judged (no %s run or no peer variant): %s.\n\n", v.KVRouter, strings.Join(v.Skipped, ", "))
	}
	return nil
}

// writeMetBy writes how many rows each policy meets every criterion on against all the others,
// and how many rows no policy does.
func writeMetBy(w io.Writer, v *Verdict) {
	if v.Summary.Rows == 0 {
		return
	}
	pols := make([]string, 0, len(v.Summary.MetBy))
	for p := range v.Summary.MetBy {
		pols = append(pols, p)
	}
	sort.Slice(pols, func(i, j int) bool {
		a, b := v.Summary.MetBy[pols[i]], v.Summary.MetBy[pols[j]]
		if a != b {
			return a > b
		}
		return pols[i] < pols[j]
	})
	parts := make([]string, len(pols))
	for i, p := range pols {
		parts[i] = fmt.Sprintf("%s %d", p, v.Summary.MetBy[p])
	}
	met := "none"
	if len(parts) > 0 {
		met = strings.Join(parts, ", ")
	}
	fmt.Fprintf(w, "Every policy held to the same bar against all the others (%s and every peer variant), rows of %d on which "+
		"each meets every criterion: %s; rows on which none does: %d.\n\n", v.KVRouter, v.Summary.Rows, met, v.Summary.Unmet)
}

// seedsNote says how far the seeds settle a fail: behind on how many of the paired seeds, and
// whether the ranges overlap.
func seedsNote(overlap bool, behind, paired int) string {
	var parts []string
	if paired > 0 {
		parts = append(parts, fmt.Sprintf("behind on %d of %d seeds", behind, paired))
	}
	if overlap {
		parts = append(parts, "ranges overlap")
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func statTok(s Stat) string {
	if s.N == 0 {
		return "–"
	}
	if s.N == 1 || s.Min == s.Max {
		return fmt.Sprintf("%.0f", s.Median)
	}
	return fmt.Sprintf("%.0f [%.0f–%.0f]", s.Median, s.Min, s.Max)
}

func statSecs(s Stat) string {
	if s.N == 0 || s.Median == 0 && s.Max == 0 {
		return "–"
	}
	lo, hi := fineSecs(s.Min), fineSecs(s.Max)
	if s.N == 1 || lo == hi {
		return fineSecs(s.Median)
	}
	return fmt.Sprintf("%s [%s–%s]", fineSecs(s.Median), lo, hi)
}

func peerSecs(c Compared) string {
	if c.Peer == "" {
		return "–"
	}
	return fmt.Sprintf("%s (%s)", fineSecs(c.Best.Median), c.Peer)
}

// fineSecs is secs with a tenth of a millisecond below 100 ms: ITL p90s of a few milliseconds
// are compared at 10 %.
func fineSecs(s float64) string {
	if s < 0.1 {
		return fmt.Sprintf("%.1fms", s*1000)
	}
	return secs(s)
}

// writeSharedPrefixLimits adds what bounds the shared-prefix ratio, where the runs carry it:
// the ratio had kvrouter's engines all finished together, and its hit rate against the most any
// placement could serve from cache.
func writeSharedPrefixLimits(w io.Writer, kvrouter string, sps []SharedPrefixRatio) {
	var bal, hit []string
	for _, s := range sps {
		if s.BalancedRatio > 0 {
			bal = append(bal, fmt.Sprintf("%g QPS %.2f×", s.Rate, s.BalancedRatio))
		}
		if s.HitCeiling > 0 {
			hit = append(hit, fmt.Sprintf("%g QPS %.3f of %.3f", s.Rate, s.HitRate, s.HitCeiling))
		}
	}
	if len(bal) > 0 {
		fmt.Fprintf(w, " Had %s's engines all finished together, each at the output rate it kept (round-robin's runs as they were): %s.",
			kvrouter, strings.Join(bal, ", "))
	}
	if len(hit) > 0 {
		fmt.Fprintf(w, " %s's hit rate against the most any placement could serve from cache: %s.", kvrouter, strings.Join(hit, ", "))
	}
}

func ratioCell(x float64) string {
	if x == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f", x)
}

func markCell(m Mark) string {
	switch m {
	case Pass:
		return "✓"
	case Fail:
		return "✗"
	}
	return "–"
}
