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

package render

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The alerting rules below are the one source of the alerts kvrouter ships: the operator renders
// them into each monitored KVRouter's PrometheusRule (scoped to that KVRouter's series), and
// hack/alertrules writes them, for every KVRouter of a cluster, into config/prometheus (a
// PrometheusRule and a plain rule file that promtool checks and test/alerts tests).

// Severities, as Alertmanager routes usually match them: critical pages, warning opens a ticket.
const (
	SeverityCritical = "critical"
	SeverityWarning  = "warning"
)

// AlertGroupName is the name of the rule group that holds the alerts.
const AlertGroupName = "kvrouter.alerts"

// RunbookBaseURL is where the runbooks of the alerts are published: one section of
// docs/troubleshooting.md per alert, whose anchor is the alert's name in lower case.
const RunbookBaseURL = "https://github.com/kvrouter/kvrouter/blob/main/docs/troubleshooting.md"

// The time-to-first-token objective the burn-rate alert measures: TTFTObjective of the requests
// get their first token within TTFTThresholdSeconds, as vLLM's histogram counts them.
// TTFTThresholdSeconds must be a bucket boundary of vllm:time_to_first_token_seconds (vLLM's
// and vllm-sim's buckets include 2.5); 2.5 is written alike by Python and Go clients and by
// Prometheus 2 and 3, unlike 1.0 or 5.0, so the le matcher needs no alternatives.
const (
	TTFTThresholdSeconds = "2.5"
	TTFTObjective        = 0.99
)

// AlertRule is one alerting rule.
type AlertRule struct {
	// Alert is the alert's name; Runbook derives its anchor from it.
	Alert string
	Expr  string
	// For is how long Expr must hold before the alert fires (a Prometheus duration).
	For      string
	Severity string
	// Summary is one line; Description says what happened and what it costs, with the
	// alert's labels and value filled in by Prometheus' templates.
	Summary     string
	Description string
}

// Runbook is the URL of the alert's section in docs/troubleshooting.md.
func (r AlertRule) Runbook() string {
	return RunbookBaseURL + "#" + strings.ToLower(r.Alert)
}

// AlertScope selects the series the rules read. The zero value reads every KVRouter of the
// cluster (every series with a kvrouter label); with Namespace and KVRouter set, the rules read
// only that KVRouter's, which its ServiceMonitor and PodMonitor label with namespace and
// kvrouter.
type AlertScope struct {
	Namespace string
	KVRouter  string
}

// matchers are the label matchers every selector of the rules carries.
func (s AlertScope) matchers() []string {
	if s.Namespace == "" && s.KVRouter == "" {
		// Other vLLM deployments of the cluster export the same vllm:* names without the label.
		return []string{MetricsLabelKVRouter + `!=""`}
	}
	return []string{"namespace=" + strconv.Quote(s.Namespace), MetricsLabelKVRouter + "=" + strconv.Quote(s.KVRouter)}
}

// series is a selector of metric in the scope, with extra matchers.
func (s AlertScope) series(metric string, extra ...string) string {
	return metric + "{" + strings.Join(append(s.matchers(), extra...), ",") + "}"
}

// byKVRouter is the grouping every alert keeps: one alert per KVRouter (or finer).
const byKVRouter = "namespace, " + MetricsLabelKVRouter

// sumRate is the rate of a counter summed per KVRouter.
func (s AlertScope) sumRate(metric, window string, extra ...string) string {
	return fmt.Sprintf("sum by (%s) (rate(%s[%s]))", byKVRouter, s.series(metric, extra...), window)
}

// hitRate is the engines' measured prefix-cache hit rate (tokens) over window.
func (s AlertScope) hitRate(window string) string {
	return s.sumRate("vllm:prefix_cache_hits_total", window) + "\n  /\n" + s.sumRate("vllm:prefix_cache_queries_total", window)
}

// slowTTFTRatio is the share of requests whose first token came later than the threshold.
func (s AlertScope) slowTTFTRatio(window string) string {
	return fmt.Sprintf("(\n  1 - %s\n    /\n  %s\n)",
		s.sumRate("vllm:time_to_first_token_seconds_bucket", window, `le="`+TTFTThresholdSeconds+`"`),
		s.sumRate("vllm:time_to_first_token_seconds_count", window))
}

// burnRule fires when the error budget of the TTFT objective burns factor times faster than
// it may, over both a long window (the budget really is going) and a short one (it still is).
func (s AlertScope) burnRule(factor float64, long, short, forDur, severity string) AlertRule {
	// Rounded: the products carry binary noise (0.14400000000000002) into the expression.
	limit := strconv.FormatFloat(math.Round(factor*(1-TTFTObjective)*1e6)/1e6, 'f', -1, 64)
	budget := strconv.FormatFloat(math.Round(100*(1-TTFTObjective)*1e6)/1e6, 'f', -1, 64)
	return AlertRule{
		Alert:    "KVRouterTTFTBudgetBurn",
		Expr:     s.slowTTFTRatio(long) + " > " + limit + "\nand\n" + s.slowTTFTRatio(short) + " > " + limit,
		For:      forDur,
		Severity: severity,
		Summary:  fmt.Sprintf("Time to first token misses its objective %g times faster than the budget allows (%s window)", factor, long),
		Description: fmt.Sprintf("{{ $value | humanizePercentage }} of the requests of KVRouter {{ $labels.namespace }}/{{ $labels.kvrouter }} "+
			"waited more than %ss for their first token over the last %s (and %s); the objective allows %s%%. "+
			"The error budget of a 30-day window burns at least %g times too fast: at that pace it is gone in %s.",
			TTFTThresholdSeconds, long, short, budget, factor, budgetLasts(factor)),
	}
}

// budgetLasts says how long a 30-day error budget lasts when it burns factor times too fast.
func budgetLasts(factor float64) string {
	hours := 30 * 24 / factor
	if hours < 72 {
		return fmt.Sprintf("%.0f hours", hours)
	}
	return fmt.Sprintf("%.0f days", hours/24)
}

// AlertRules are the alerting rules for the series of scope.
func AlertRules(scope AlertScope) []AlertRule {
	s := scope
	who := "KVRouter {{ $labels.namespace }}/{{ $labels.kvrouter }}"
	return []AlertRule{{
		// Compared with its own recent level rather than a fixed floor: what hit rate is good
		// depends wholly on how much the workload's prompts share. The third term keeps a
		// traffic drop (fewer, different requests) from reading as a collapse, and the second
		// one keeps a fleet that never had much reuse quiet.
		Alert: "KVRouterPrefixCacheHitRateCollapse",
		Expr: "(\n" + s.hitRate("10m") + "\n)\n< 0.5 * (\n" + s.hitRate("6h") + "\n)\n" +
			"and (\n" + s.hitRate("6h") + "\n) > 0.2\n" +
			"and " + s.sumRate("vllm:prefix_cache_queries_total", "10m") + "\n  > 0.5 * " + s.sumRate("vllm:prefix_cache_queries_total", "6h"),
		For:      "10m",
		Severity: SeverityWarning,
		Summary:  "The engines' prefix-cache hit rate fell below half of its 6-hour level while traffic continues",
		Description: "The prefix-cache hit rate of the engines of " + who + " is {{ $value | humanizePercentage }} over the last 10 minutes, " +
			"less than half of its level over the last 6 hours, although they still receive at least half as many prompt tokens. " +
			"Prompts are recomputed instead of reused: time to first token and GPU time per request go up.",
	}, {
		// The preemption rate at which the status's CacheThrashing condition turns on. The
		// condition also asks for a high hit rate (preempted prompts recomputed from cache look
		// like hits) and has hysteresis; the alert fires on the preemptions alone, since they
		// cost recomputation and latency whatever the hit rate.
		Alert:    "KVRouterCacheThrashing",
		Expr:     fmt.Sprintf("avg by (%s) (rate(%s[10m])) * 60 >= 2", byKVRouter, s.series("vllm:num_preemptions_total")),
		For:      "15m",
		Severity: SeverityWarning,
		Summary:  "Engines preempt requests for lack of KV cache",
		Description: "The engines of " + who + " preempt {{ $value | humanize }} requests per minute each (averaged over 10 minutes). " +
			"A preempted request loses its KV blocks and is recomputed: the fleet holds more concurrent requests than its KV cache, " +
			"and the hit rate counts the recomputed prompts as hits.",
	}, {
		// Per engine and rank: the router keeps one event stream per engine rank. min and max
		// over router replicas, because each replica subscribes on its own and one replica with a
		// broken stream already routes those prompts blind. A single unrepaired gap is left
		// alone: the index rebuilds from the next events.
		Alert: "KVRouterKVEventsDegraded",
		Expr: fmt.Sprintf("max by (%[1]s, endpoint, rank) (increase(%[2]s[30m])) >= 2\nor\nmin by (%[1]s, endpoint, rank) (%[3]s) == 0",
			byKVRouter, s.series("kvrouter_kvstream_replay_failures_total"), s.series("kvrouter_kvstream_connected")),
		For:      "10m",
		Severity: SeverityWarning,
		Summary:  "The router's KV-event stream from an engine is disconnected or loses events it cannot replay",
		Description: "The router of " + who + " has had no KV-event connection to engine {{ $labels.endpoint }} (rank {{ $labels.rank }}), " +
			"or could not repair repeated gaps in its events by replay, for 10 minutes. " +
			"Its prefix index misses or drops that engine's blocks, and prompts cached there are routed by load alone.",
	}, {
		Alert:    "KVRouterEngineSuspect",
		Expr:     fmt.Sprintf("max by (%s, endpoint) (%s) == 1", byKVRouter, s.series("kvrouter_endpoint_suspect")),
		For:      "5m",
		Severity: SeverityWarning,
		Summary:  "The router keeps an engine out of routing as unresponsive",
		Description: "The router of " + who + " has ejected engine {{ $labels.endpoint }} as unresponsive (no first byte in time, stalled streams " +
			"or consecutive failures) for 5 minutes. It gets no new requests, so the fleet serves with one engine less and loses that engine's cache.",
	}, {
		// Shed requests are answered 429 and counted in kvrouter_requests_total too.
		Alert: "KVRouterRequestsShed",
		Expr: s.sumRate("kvrouter_requests_shed_total", "5m") + "\n  /\n" + s.sumRate("kvrouter_requests_total", "5m") +
			"\n> 0.05",
		For:      "10m",
		Severity: SeverityWarning,
		Summary:  "Admission control turns away more than 5% of the requests",
		Description: "The router of " + who + " answered {{ $value | humanizePercentage }} of its requests with 429 over the last 5 minutes: " +
			"no engine could take them within the admission bounds. The fleet is short of capacity for its load.",
	},
		// Multi-window burn rates of a 30-day budget: 14.4 times (2% of the budget in an hour)
		// pages, 6 times (5% in 6 hours) opens a ticket.
		s.burnRule(14.4, "1h", "5m", "2m", SeverityCritical),
		s.burnRule(6, "6h", "30m", "15m", SeverityWarning),
	}
}

// AlertRuleGroups is the rules of scope as the groups of a Prometheus rule file, which is also
// what a PrometheusRule's spec.groups holds.
func AlertRuleGroups(scope AlertScope) []any {
	var rules []any
	for _, r := range AlertRules(scope) {
		rules = append(rules, map[string]any{
			"alert":  r.Alert,
			"expr":   r.Expr,
			"for":    r.For,
			"labels": map[string]any{"severity": r.Severity},
			"annotations": map[string]any{
				"summary":     r.Summary,
				"description": r.Description,
				"runbook_url": r.Runbook(),
			},
		})
	}
	return []any{map[string]any{"name": AlertGroupName, "rules": rules}}
}
