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
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/kvrouter/kvrouter/internal/bench/metrics"
)

var palette = []string{
	"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
	"#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#31a354",
}

func colour(i int) string { return palette[i%len(palette)] }

var page = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>kvbench: {{.R.Workload}}</title>
<style>
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.4em} h2{font-size:1.1em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em} th,td{padding:.25em .6em;text-align:right;border-bottom:1px solid #ddd}
th:first-child,td:first-child{text-align:left} tr.kv td{font-weight:600}
.note{color:#555;font-size:.85em} svg{background:#fff;border:1px solid #eee}
</style></head><body>
<h1>kvbench — {{.R.Workload}}</h1>
<p>{{.R.Description}}</p>
<p class="note">mode {{.R.Mode}} · {{.R.SeedNote}} · {{.R.Fleet}} · headline rate {{.R.Rate}} · SLO: TTFT ≤ {{.R.SLO.TTFT}} s and mean ITL ≤ {{.R.SLO.ITL}} s per request{{if .R.Command}} · <code>{{.R.Command}}</code>{{end}}</p>
<h2>Headline (rate {{.R.Rate}})</h2>
<table><tr><th>policy</th><th>output tok/s</th><th>goodput tok/s</th><th>TTFT p50</th><th>TTFT p90</th><th>TTFT p99</th><th>ITL p50</th><th>E2E p50</th><th>E2E p99</th><th>hit rate</th><th>preemptions</th><th>imbalance CoV</th><th>scaled-up share</th><th>completed</th></tr>
{{range .Rows}}<tr{{if .KV}} class="kv"{{end}}><td>{{.P.Policy}}</td><td>{{printf "%.0f" .P.OutputThroughput}}</td><td>{{printf "%.0f" .P.Goodput}}</td><td>{{printf "%.3f" .P.TTFTP50}}</td><td>{{printf "%.3f" .P.TTFTP90}}</td><td>{{printf "%.3f" .P.TTFTP99}}</td><td>{{printf "%.4f" .P.ITLP50}}</td><td>{{printf "%.2f" .P.E2EP50}}</td><td>{{printf "%.2f" .P.E2EP99}}</td><td>{{printf "%.1f%%" .Hit}}</td><td>{{.P.Preemptions}}</td><td>{{printf "%.2f" .P.ImbalanceCoV}}</td><td>{{.Share}}</td><td>{{.P.Completed}}/{{.P.Requests}}</td></tr>
{{end}}</table>
<h2>Latency against throughput (TTFT p90, log scale, one point per rate)</h2>
{{.Curve}}
<h2>Token hit rate per policy</h2>
{{.Hits}}
<h2>Goodput per policy</h2>
{{.Goodput}}
{{if .R.Requests}}<h2>TTFT distribution (share of each run's requests with their first token within x, log scale)</h2>
{{.CDF}}
<h2>Per-request timeline: arrival → first token (grey) → finish (coloured by {{.TimelineBy}})</h2>
<p class="note">{{.TimelineNote}}</p>
{{.Timeline}}
{{else}}<p class="note">This report holds no per-request times, so it has no TTFT distribution or request timeline (kvbench live records them).</p>
{{end}}<p class="note">Times in {{.Unit}}. Hit rate is token-weighted: prompt tokens served from the prefix cache over all prompt tokens of completed requests.</p>
</body></html>
`))

type row struct {
	P     metrics.Result
	KV    bool
	Hit   float64
	Share string
}

// WriteHTML renders the report page.
func WriteHTML(w io.Writer, r *Report) error {
	var rows []row
	for _, p := range r.Policies {
		s := "-"
		if p.ScaledUpShare != nil {
			s = fmt.Sprintf("%.2f (fair %.2f)", *p.ScaledUpShare, *p.ScaledUpFairShare)
		}
		rows = append(rows, row{P: p, KV: strings.HasPrefix(p.Policy, "kvrouter"), Hit: 100 * p.HitRate, Share: s})
	}
	styles := newRunStyles(r)
	tl := timelineSVG(r.Requests, styles, timelineRows, timeUnit(r))
	return page.Execute(w, map[string]any{
		"R": r, "Rows": rows, "Unit": timeUnit(r),
		"CDF":      template.HTML(cdfSVG(r.Requests, styles, cdfPoints, timeUnit(r))),
		"Timeline": template.HTML(tl.svg), "TimelineBy": tl.colourBy, "TimelineNote": tl.note,
		"Curve":   template.HTML(curveSVG(r)),
		"Hits":    template.HTML(barsSVG(r.Policies, func(p metrics.Result) float64 { return 100 * p.HitRate }, "%.1f%%", 100)),
		"Goodput": template.HTML(barsSVG(r.Policies, func(p metrics.Result) float64 { return p.Goodput }, "%.0f tok/s", 0)),
	})
}

// curveSVG draws TTFT p90 (log y) against output throughput, one line per policy.
func curveSVG(r *Report) string {
	const W, H, L, B, T, Rr = 900.0, 420.0, 70.0, 50.0, 20.0, 200.0
	series := map[string][]metrics.Result{}
	var order []string
	runs := r.Sweep
	if len(runs) == 0 {
		runs = r.Policies
	}
	for _, p := range runs {
		if _, ok := series[p.Policy]; !ok {
			order = append(order, p.Policy)
		}
		series[p.Policy] = append(series[p.Policy], p)
	}
	xmax, ymin, ymax := 1.0, math.Inf(1), 0.0
	for _, p := range runs {
		xmax = math.Max(xmax, p.OutputThroughput)
		if p.TTFTP90 > 0 {
			ymin, ymax = math.Min(ymin, p.TTFTP90), math.Max(ymax, p.TTFTP90)
		}
	}
	if math.IsInf(ymin, 1) {
		ymin, ymax = 0.01, 1
	}
	lo, hi := math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
	if hi <= lo {
		hi = lo + 1
	}
	pw, ph := W-L-Rr, H-T-B
	x := func(v float64) float64 { return L + v/xmax*pw }
	y := func(v float64) float64 {
		v = math.Max(v, math.Pow(10, lo))
		return T + ph - (math.Log10(v)-lo)/(hi-lo)*ph
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-size="11">`, W, H)
	for e := lo; e <= hi; e++ {
		yy := y(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="end">%gs</text>`, L, yy, L+pw, yy, L-5, yy+4, math.Pow(10, e))
	}
	for i := 0; i <= 5; i++ {
		v := xmax * float64(i) / 5
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%.0f</text>`, x(v), T+ph+15, v)
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`, L, T, L, T+ph, L, T+ph, L+pw, T+ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">output throughput (tok/s)</text>`, L+pw/2, H-10)
	fmt.Fprintf(&b, `<text transform="translate(15,%.1f) rotate(-90)" text-anchor="middle">TTFT p90</text>`, T+ph/2)
	for k, name := range order {
		pts := series[name]
		sort.Slice(pts, func(a, b int) bool { return pts[a].Rate < pts[b].Rate })
		c := colour(k)
		width := 1.5
		if strings.HasPrefix(name, "kvrouter") {
			width = 3
		}
		var path []string
		for _, p := range pts {
			path = append(path, fmt.Sprintf("%.1f,%.1f", x(p.OutputThroughput), y(p.TTFTP90)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" points="%s"/>`, c, width, strings.Join(path, " "))
		for _, p := range pts {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s @ %g: %.0f tok/s, TTFT p90 %.3fs</title></circle>`,
				x(p.OutputThroughput), y(p.TTFTP90), c, template.HTMLEscapeString(name), p.Rate, p.OutputThroughput, p.TTFTP90)
		}
		ly := T + 14*float64(k)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"/><text x="%.1f" y="%.1f">%s</text>`,
			L+pw+15, ly, L+pw+35, ly, c, width, L+pw+40, ly+4, template.HTMLEscapeString(name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// barsSVG draws one horizontal bar per policy. full is the axis maximum (0: the largest value).
func barsSVG(ps []metrics.Result, val func(metrics.Result) float64, format string, full float64) string {
	const L, barH, W = 170.0, 18.0, 900.0
	H := 20 + barH*1.3*float64(len(ps))
	if full <= 0 {
		for _, p := range ps {
			full = math.Max(full, val(p))
		}
		if full <= 0 {
			full = 1
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-size="11">`, W, H)
	for i, p := range ps {
		yy := 10 + barH*1.3*float64(i)
		v := val(p)
		wd := (W - L - 120) * math.Max(0, v) / full
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`,
			L-6, yy+barH*0.7, template.HTMLEscapeString(p.Policy), L, yy, wd, barH, colour(i), L+wd+5, yy+barH*0.7, fmt.Sprintf(format, v))
	}
	b.WriteString(`</svg>`)
	return b.String()
}
