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

package routerstatus

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/routerapi"
)

// Condition types that come from the router's status document. All but RouterStatusAvailable
// are abnormal-true: True means something needs attention.
const (
	// ConditionRouterStatusAvailable is True when the last read of the router's /v1/status
	// succeeded; the cache fields and the conditions below are only as fresh as that read.
	ConditionRouterStatusAvailable = "RouterStatusAvailable"
	// ConditionCacheThrashing is True while engines preempt requests often although the hit rate
	// looks good: a preempted request's prompt is recomputed and counted as a hit again, so
	// the hit rate hides the thrashing.
	ConditionCacheThrashing = "CacheThrashing"
	// ConditionEventsDegraded is True while the router's KV-event view of some ready endpoint is
	// not current: disconnected, stale after an unrepaired gap, or no events at all from an
	// engine that serves prompts (its --kv-events-config is not in effect).
	ConditionEventsDegraded = "EventsDegraded"
	// ConditionTokenizerDegraded is True while the router cannot tokenize prompts and routes by
	// load alone.
	ConditionTokenizerDegraded = "TokenizerDegraded"
	// ConditionEngineConfigMismatch is True when an engine reports (vllm:cache_config_info) a
	// block size or prefix-caching hash algorithm other than the spec's: the router's index
	// cannot match its blocks.
	ConditionEngineConfigMismatch = "EngineConfigMismatch"
	// ConditionTokenizerMismatch is True once the router's in-process tokenizer disagreed with
	// an engine's /tokenize: the router then asks the engines for every prompt (correct, but a
	// round trip that waits in their queues) until it restarts. Its False reason says who
	// tokenizes and why.
	ConditionTokenizerMismatch = "TokenizerMismatch"
)

// Condition reasons.
const (
	ReasonPolled                     = "Polled"
	ReasonUnreachable                = "Unreachable"
	ReasonRouterNotReady             = "RouterNotReady"
	ReasonPreemptionsWithHighHitRate = "PreemptionsWithHighHitRate"
	ReasonPreemptionsLow             = "PreemptionsLow"
	ReasonEventsNotCurrent           = "EventsNotCurrent"
	ReasonEventsCurrent              = "EventsCurrent"
	ReasonTokenizeFailing            = "TokenizeFailing"
	ReasonTokenizeWorking            = "TokenizeWorking"
	ReasonConfigDiffers              = "ConfigDiffers"
	ReasonConfigMatches              = "ConfigMatches"
	ReasonDisagreesWithEngines       = "DisagreesWithEngines"
	ReasonTokenizesInProcess         = "TokenizesInProcess"
	ReasonEnginesTokenize            = "EnginesTokenize"
)

// DefaultWindow is the span of the router's rates when its document does not say.
const DefaultWindow = time.Minute

// Thresholds tune the conditions. The zero value is not useful; start from DefaultThresholds.
type Thresholds struct {
	// CacheThrashing turns True when preemptions per minute per engine reach ThrashingEnter
	// while the engines' hit rate is at least ThrashingHitRate, and False again only when
	// preemptions fall below ThrashingExit: the gap between the two keeps the condition from
	// flapping around one value.
	ThrashingEnter   float64
	ThrashingExit    float64
	ThrashingHitRate float64
	// EventsDegraded turns True after EnterAfter bad samples in a row, EventsDegraded and
	// TokenizerDegraded turn False after ClearAfter clean samples in a row: a reconnect or one
	// failed /tokenize call does not flap them.
	EnterAfter int
	ClearAfter int
	// RefreshEvery bounds how old status.cache.lastSampleTime gets while nothing changes.
	RefreshEvery time.Duration
	// MaxEndpoints caps status.endpoints (the CRD allows 64).
	MaxEndpoints int
}

// DefaultThresholds are the operator's defaults.
func DefaultThresholds() Thresholds {
	return Thresholds{ThrashingEnter: 2, ThrashingExit: 0.5, ThrashingHitRate: 0.5,
		EnterAfter: 2, ClearAfter: 2, RefreshEvery: 5 * time.Minute, MaxEndpoints: 64}
}

// Memo carries what the hysteresis needs between polls of one KVRouter. Losing it (an operator
// restart) only restarts the counts.
type Memo struct {
	eventsBad, eventsClean, tokenizerClean int
}

// Expect is the engine configuration the spec asks for.
type Expect struct {
	BlockSize int32
	HashAlgo  string
}

// Apply writes the router's status document into st: status.cache, status.endpoints and the
// conditions. gen is the KVRouter's generation, stamped on the conditions. Values are rounded
// for display, and a document that rounds to what st already shows leaves st unchanged (except
// to refresh lastSampleTime every th.RefreshEvery), so that a steady fleet causes no writes.
func Apply(st *v1alpha1.KVRouterStatus, gen int64, want Expect, doc *routerapi.Status, now time.Time, memo *Memo, th Thresholds) {
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	set(ConditionRouterStatusAvailable, metav1.ConditionTrue, ReasonPolled,
		fmt.Sprintf("the router reports %d of %d endpoint(s) ready", doc.ReadyEndpoints, len(doc.Endpoints)))

	engines := 0
	for _, e := range doc.Endpoints {
		// A data-parallel engine's ranks share one metrics page: count the engine once.
		if e.Engine != nil && e.Rank == 0 {
			engines++
		}
	}
	cache := v1alpha1.CacheStatus{Window: &metav1.Duration{Duration: DefaultWindow}}
	if doc.Fleet.HitRateValid {
		cache.HitRate = percent(doc.Fleet.HitRate)
	}
	switch w := doc.Router.Window; {
	case w != nil && w.PromptTokens > 0:
		cache.PredictedHitRate = percent(w.RoutedHitRate)
	case w == nil && doc.Router.PromptTokens > 0:
		// A router without the windowed counters: its whole life is the best it can say.
		cache.PredictedHitRate = percent(doc.Router.RoutedHitRate)
	}
	if engines > 0 {
		cache.PreemptionsPerMinute = perMinute(doc.Fleet.PreemptionsPerMinute)
	}
	rows, omitted := endpointRows(doc, th.MaxEndpoints)
	dis := disaggregation(st.Disaggregation, doc)

	old := st.Cache
	var oldCache v1alpha1.CacheStatus
	if old != nil {
		oldCache = *old
		oldCache.LastSampleTime = nil
	}
	changed := old == nil || !equality.Semantic.DeepEqual(oldCache, cache) ||
		!equality.Semantic.DeepEqual(st.Endpoints, rows) || st.EndpointsOmitted != omitted ||
		!equality.Semantic.DeepEqual(st.Disaggregation, dis)
	stale := old == nil || old.LastSampleTime == nil || now.Sub(old.LastSampleTime.Time) >= th.RefreshEvery
	if changed || stale {
		t := metav1.NewTime(now.Truncate(time.Second))
		cache.LastSampleTime = &t
		st.Cache = &cache
		st.Endpoints = rows
		st.EndpointsOmitted = omitted
		st.Disaggregation = dis
	}

	applyThrashing(st, set, doc, engines, th)
	applyEvents(st, set, doc, memo, th)
	applyTokenizer(st, set, doc, memo, th)
	applyTokenizerSource(set, doc)
	applyConfig(set, doc, want)
}

// Unavailable records that the router's status could not be read. The last values and
// conditions stay (stale but labelled so by this condition); nothing is retried here: the
// reconciler polls again on its schedule.
func Unavailable(st *v1alpha1.KVRouterStatus, gen int64, reason, msg string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionRouterStatusAvailable,
		Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: gen})
}

type setFunc func(t string, s metav1.ConditionStatus, reason, msg string)

func applyThrashing(st *v1alpha1.KVRouterStatus, set setFunc, doc *routerapi.Status, engines int, th Thresholds) {
	if engines == 0 {
		if meta.FindStatusCondition(st.Conditions, ConditionCacheThrashing) == nil {
			set(ConditionCacheThrashing, metav1.ConditionFalse, ReasonPreemptionsLow, "no engine metrics yet")
		}
		return
	}
	perEngine := doc.Fleet.PreemptionsPerMinute / float64(engines)
	was := meta.IsStatusConditionTrue(st.Conditions, ConditionCacheThrashing)
	hitRate := "unknown"
	if doc.Fleet.HitRateValid {
		hitRate = percent(doc.Fleet.HitRate)
	}
	thrashing := was
	switch {
	case perEngine < th.ThrashingExit:
		thrashing = false
	case !was && perEngine >= th.ThrashingEnter && doc.Fleet.HitRateValid && doc.Fleet.HitRate >= th.ThrashingHitRate:
		thrashing = true
	}
	if thrashing {
		set(ConditionCacheThrashing, metav1.ConditionTrue, ReasonPreemptionsWithHighHitRate, fmt.Sprintf(
			"engines preempt %s requests per minute each while the hit rate is %s: preempted prompts are recomputed and count as hits; add replicas or lower max-num-seqs",
			perMinute(perEngine), hitRate))
		return
	}
	// The message carries no live numbers: it would change on every poll and cause writes.
	set(ConditionCacheThrashing, metav1.ConditionFalse, ReasonPreemptionsLow,
		fmt.Sprintf("fewer than %s preemptions per minute per engine", perMinute(th.ThrashingEnter)))
}

func applyEvents(st *v1alpha1.KVRouterStatus, set setFunc, doc *routerapi.Status, memo *Memo, th Thresholds) {
	var bad []string
	for _, d := range doc.Degradations {
		if d.Type == "EventsDegraded" {
			bad = append(bad, d.Message)
		}
	}
	var missing []string
	for _, e := range doc.Endpoints {
		if !e.Ready {
			continue
		}
		if why := eventsProblem(e); why != "" && why != "not current" {
			missing = append(missing, e.Name+": "+why)
		}
	}
	if len(missing) > 0 {
		bad = append(bad, fmt.Sprintf("KV events missing from %d endpoint(s), e.g. %s", len(missing), missing[0]))
	}
	was := meta.IsStatusConditionTrue(st.Conditions, ConditionEventsDegraded)
	if len(bad) > 0 {
		memo.eventsClean = 0
		memo.eventsBad++
		if was || memo.eventsBad >= th.EnterAfter {
			set(ConditionEventsDegraded, metav1.ConditionTrue, ReasonEventsNotCurrent,
				strings.Join(bad, "; ")+": the router's index misses blocks and routes those prompts by load")
		} else if meta.FindStatusCondition(st.Conditions, ConditionEventsDegraded) == nil {
			set(ConditionEventsDegraded, metav1.ConditionFalse, ReasonEventsCurrent, eventsCurrent)
		}
		return
	}
	memo.eventsBad = 0
	memo.eventsClean++
	if !was || memo.eventsClean >= th.ClearAfter {
		set(ConditionEventsDegraded, metav1.ConditionFalse, ReasonEventsCurrent, eventsCurrent)
	}
}

const eventsCurrent = "the router receives current KV events from every ready endpoint"

// eventsProblem says what is wrong with an endpoint's KV events, or "".
func eventsProblem(e routerapi.Endpoint) string {
	switch ev := e.Events; {
	case ev == nil:
		return "no KV-event subscription"
	case ev.Connected && ev.Batches == 0 && e.Engine != nil && e.Engine.PrefixCacheQueries > 0:
		return "connected but no event received although the engine served prompts (is --kv-events-config in effect?)"
	case !ev.Connected || (ev.Stale && ev.StaleReason != "idle"):
		return "not current"
	}
	return ""
}

func applyTokenizer(st *v1alpha1.KVRouterStatus, set setFunc, doc *routerapi.Status, memo *Memo, th Thresholds) {
	for _, d := range doc.Degradations {
		if d.Type == "TokenizerUnavailable" {
			memo.tokenizerClean = 0
			set(ConditionTokenizerDegraded, metav1.ConditionTrue, ReasonTokenizeFailing, d.Message)
			return
		}
	}
	memo.tokenizerClean++
	if !meta.IsStatusConditionTrue(st.Conditions, ConditionTokenizerDegraded) || memo.tokenizerClean >= th.ClearAfter {
		set(ConditionTokenizerDegraded, metav1.ConditionFalse, ReasonTokenizeWorking, "the router tokenizes prompts")
	}
}

// applyTokenizerSource reports who tokenizes: the router in process, or the engines and why. Its
// messages carry no counters, which would change on every poll and cause writes.
func applyTokenizerSource(set setFunc, doc *routerapi.Status) {
	tk := doc.Tokenizer
	switch {
	case tk == nil:
		// A router from before the in-process tokenizer: it always asks the engines.
		set(ConditionTokenizerMismatch, metav1.ConditionFalse, ReasonEnginesTokenize,
			"the router asks the engines' /tokenize")
	case tk.Mismatches > 0:
		from := ""
		if tk.Origin != "" {
			from = " (from " + tk.Origin + ")"
		}
		set(ConditionTokenizerMismatch, metav1.ConditionTrue, ReasonDisagreesWithEngines,
			"the router's in-process tokenizer"+from+" disagreed with an engine's /tokenize, so the router asks the engines "+
				"until it restarts: check that spec.model.name's tokenizer is the one the engines load (revision, chat template)")
	case tk.Source == "local":
		msg := "the router tokenizes in process"
		if tk.Origin != "" {
			msg += " with " + tk.Origin
		}
		if tk.Verified {
			msg += ", checked against the engines' /tokenize"
		}
		set(ConditionTokenizerMismatch, metav1.ConditionFalse, ReasonTokenizesInProcess, msg)
	default:
		msg := "the router asks the engines' /tokenize"
		if tk.Reason != "" {
			msg += ": " + tk.Reason
		}
		set(ConditionTokenizerMismatch, metav1.ConditionFalse, ReasonEnginesTokenize, msg)
	}
}

func applyConfig(set setFunc, doc *routerapi.Status, want Expect) {
	var diffs []string
	blockSize := fmt.Sprint(want.BlockSize)
	for _, e := range doc.Endpoints {
		m := e.Engine
		if m == nil || e.Rank != 0 {
			continue
		}
		if m.BlockSize != "" && m.BlockSize != blockSize {
			diffs = append(diffs, fmt.Sprintf("%s reports block size %s", e.Name, m.BlockSize))
		}
		if m.HashAlgo != "" && want.HashAlgo != "" && m.HashAlgo != want.HashAlgo {
			diffs = append(diffs, fmt.Sprintf("%s reports prefix-caching hash algorithm %s", e.Name, m.HashAlgo))
		}
	}
	if len(diffs) == 0 {
		set(ConditionEngineConfigMismatch, metav1.ConditionFalse, ReasonConfigMatches,
			"every engine that reports vllm:cache_config_info matches the spec's block size and hash algorithm")
		return
	}
	more := ""
	if len(diffs) > 3 {
		more = fmt.Sprintf(" (and %d more)", len(diffs)-3)
		diffs = diffs[:3]
	}
	set(ConditionEngineConfigMismatch, metav1.ConditionTrue, ReasonConfigDiffers, fmt.Sprintf(
		"%s%s; the spec asks for block size %s and %s: check spec.engine.extraArgs and the engine image",
		strings.Join(diffs, ", "), more, blockSize, want.HashAlgo))
}

func endpointRows(doc *routerapi.Status, limit int) ([]v1alpha1.EndpointStatus, int32) {
	n := len(doc.Endpoints)
	if limit > 0 && n > limit {
		n = limit
	}
	rows := make([]v1alpha1.EndpointStatus, 0, n)
	for _, e := range doc.Endpoints[:n] {
		r := v1alpha1.EndpointStatus{Name: e.Name, Ready: e.Ready, NotReadyReason: e.NotReadyReason,
			EventsHealthy: eventsProblem(e) == "", Role: e.Role}
		if sus := e.Suspect; sus != nil {
			// Whole seconds, as the API server keeps it, so that an unchanged ejection compares
			// equal to what the status already shows and causes no write.
			since := metav1.NewTime(sus.Since.Truncate(time.Second))
			r.Suspect, r.SuspectSince = sus.Reason, &since
		}
		if m := e.Engine; m != nil {
			if m.HitRateValid {
				r.HitRate = percent(m.HitRate)
			}
			r.KVUsage = fmt.Sprintf("%.0f%%", m.KVUsage*100)
			r.PreemptionsPerMinute = perMinute(m.PreemptionsPerMinute)
		}
		if ev := e.Events; ev != nil {
			r.EventLag = lag(ev.LagSeconds)
			r.EventGaps = int64(min(ev.Gaps, uint64(1)<<62))
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		rows = nil
	}
	return rows, int32(len(doc.Endpoints) - n)
}

// percent shows a 0–1 fraction as a percentage with one decimal: finer steps would change the
// status on every poll without telling anyone anything.
func percent(f float64) string { return fmt.Sprintf("%.1f%%", clamp01(f)*100) }

func perMinute(f float64) string {
	if f < 0 {
		f = 0
	}
	return fmt.Sprintf("%.1f", f)
}

// lag is coarse for the same reason: sub-second lag is normal and its exact value is noise.
func lag(seconds float64) string {
	if seconds < 1 {
		return "<1s"
	}
	return fmt.Sprintf("%.0fs", seconds)
}

func clamp01(f float64) float64 {
	switch {
	case f < 0 || f != f:
		return 0
	case f > 1:
		return 1
	}
	return f
}

// Pool roles as the router reports them (internal/router/discovery's RolePrefill and RoleDecode).
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// disaggregation is status.disaggregation with the router's view of the split written over the
// poller's fields of cur. The pools' desired and ready replicas are the reconciler's (from the
// workloads) and are kept. Without a disaggregation section from the router, the poller's fields
// are cleared.
func disaggregation(cur *v1alpha1.DisaggregationStatus, doc *routerapi.Status) *v1alpha1.DisaggregationStatus {
	var out v1alpha1.DisaggregationStatus
	if cur != nil {
		out.Pools.Prefill.Desired, out.Pools.Prefill.Ready = cur.Pools.Prefill.Desired, cur.Pools.Prefill.Ready
		out.Pools.Decode.Desired, out.Pools.Decode.Ready = cur.Pools.Decode.Desired, cur.Pools.Decode.Ready
	}
	d := doc.Disaggregation
	if d == nil {
		if cur == nil {
			return nil
		}
		return &out
	}
	out.Mode = d.Mode
	out.SplitShare = percent(d.SplitShare)
	out.SplitRequests = int64(min(d.SplitRequests, uint64(1)<<62))
	out.WholeRequests = int64(min(d.WholeRequests, uint64(1)<<62))
	out.Fallbacks = int64(min(d.Fallbacks, uint64(1)<<62))
	for role, ps := range map[string]*v1alpha1.PoolStatus{RolePrefill: &out.Pools.Prefill, RoleDecode: &out.Pools.Decode} {
		p := d.Pools[role]
		ps.QueuedPrefillTokens = int64(p.QueuedPrefillTokens)
		ps.InFlight = int64(p.InFlight)
		ps.HitRate = poolHitRate(doc, role)
	}
	return &out
}

// poolHitRate is the mean hit rate of the pool's engines that had queries in the window: each
// engine counts once (a data-parallel engine's ranks share its metrics), whatever its traffic,
// so one busy engine does not hide a cold one.
func poolHitRate(doc *routerapi.Status, role string) string {
	sum, n := 0.0, 0
	for _, e := range doc.Endpoints {
		if e.Role != role || e.Engine == nil || e.Rank != 0 || !e.Engine.HitRateValid {
			continue
		}
		sum += e.Engine.HitRate
		n++
	}
	if n == 0 {
		return ""
	}
	return percent(sum / float64(n))
}
