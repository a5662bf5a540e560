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
	"math"
	"sort"
	"strings"
)

// Per-run limits of the request charts: enough to read a distribution's shape and a run's
// queueing, few enough that a long run's page stays light.
const (
	cdfPoints    = 400
	timelineRows = 150
)

// failColour marks failed requests on the timeline; no run or engine is drawn in it.
const failColour = "#000"

// timeUnit names the unit of the report's times: simulated seconds when the runs drove vllm-sim
// at a time scale (kvbench live records it), else seconds.
func timeUnit(r *Report) string {
	for _, p := range r.Policies {
		if ts, ok := p.Extra["time_scale"]; ok && ts > 0 && ts != 1 {
			return fmt.Sprintf("simulated seconds (vllm-sim at --time-scale %g)", ts)
		}
	}
	return "seconds"
}

// runStyles gives each run the colour its policy has in the table's charts (the order of
// r.Policies) and kvrouter's runs a thicker line, as the throughput curve does.
type runStyles map[string]string

func newRunStyles(r *Report) runStyles {
	st := runStyles{}
	for i, p := range r.Policies {
		if _, ok := st[p.Policy]; !ok {
			st[p.Policy] = colour(i)
		}
	}
	for _, run := range r.Requests {
		if _, ok := st[run.Policy]; !ok {
			st[run.Policy] = colour(len(st))
		}
	}
	return st
}

func (st runStyles) of(policy string) (string, float64) {
	c, ok := st[policy]
	if !ok {
		c = "#555"
	}
	if strings.HasPrefix(policy, "kvrouter") {
		return c, 3
	}
	return c, 1.5
}

// niceStep is a round tick spacing (1, 2 or 5 times a power of ten) giving at most about
// ticks intervals over [0, span].
func niceStep(span float64, ticks int) float64 {
	if !(span > 0) || ticks < 1 {
		return 1
	}
	raw := span / float64(ticks)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// logAxis maps [lo, hi] decades onto a pixel range; values below 10^lo sit on the axis.
type logAxis struct{ lo, hi, from, to float64 }

func newLogAxis(vmin, vmax, from, to float64) logAxis {
	if !(vmin > 0) || !(vmax > 0) {
		vmin, vmax = 0.01, 1
	}
	lo, hi := math.Floor(math.Log10(vmin)), math.Ceil(math.Log10(vmax))
	if hi <= lo {
		hi = lo + 1
	}
	return logAxis{lo: lo, hi: hi, from: from, to: to}
}

func (a logAxis) at(v float64) float64 {
	v = math.Max(v, math.Pow(10, a.lo))
	return a.from + (math.Log10(v)-a.lo)/(a.hi-a.lo)*(a.to-a.from)
}

// cdfSVG draws each run's TTFT distribution as a step line (log x), one line per run.
func cdfSVG(runs []RunRequests, st runStyles, maxPoints int, unit string) string {
	const W, H, L, B, T, Rr = 900.0, 380.0, 70.0, 50.0, 20.0, 200.0
	pw, ph := W-L-Rr, H-T-B
	curves := make([][]cdfPoint, len(runs))
	vmin, vmax := math.Inf(1), 0.0
	for i, run := range runs {
		curves[i] = ttftCDF(run, maxPoints)
		for _, p := range curves[i] {
			if p.TTFT > 0 {
				vmin = math.Min(vmin, p.TTFT)
			}
			vmax = math.Max(vmax, p.TTFT)
		}
	}
	if vmax > 0 && math.IsInf(vmin, 1) {
		vmin = vmax
	}
	xa := newLogAxis(vmin, vmax, L, L+pw)
	y := func(f float64) float64 { return T + ph - f*ph }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" data-chart="ttft-cdf" width="%.0f" height="%.0f" font-size="11">`, W, H)
	for e := xa.lo; e <= xa.hi; e++ {
		xx := xa.at(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="middle">%gs</text>`, xx, T, xx, T+ph, xx, T+ph+15, math.Pow(10, e))
	}
	for _, f := range []float64{0, 0.25, 0.5, 0.75, 0.9, 1} {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="end">%.0f%%</text>`, L, y(f), L+pw, y(f), L-5, y(f)+4, 100*f)
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`, L, T, L, T+ph, L, T+ph, L+pw, T+ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">TTFT, %s</text>`, L+pw/2, H-10, template.HTMLEscapeString(unit))
	fmt.Fprintf(&b, `<text transform="translate(15,%.1f) rotate(-90)" text-anchor="middle">share of requests</text>`, T+ph/2)
	for i, run := range runs {
		c, width := st.of(run.Policy)
		pts := curves[i]
		if len(pts) > 0 {
			path := []string{fmt.Sprintf("%.1f,%.1f", xa.at(pts[0].TTFT), y(0))}
			prev := 0.0
			for _, p := range pts {
				xx := xa.at(p.TTFT)
				path = append(path, fmt.Sprintf("%.1f,%.1f", xx, y(prev)), fmt.Sprintf("%.1f,%.1f", xx, y(p.Frac)))
				prev = p.Frac
			}
			fmt.Fprintf(&b, `<polyline data-policy="%s" data-points="%d" fill="none" stroke="%s" stroke-width="%.1f" points="%s"><title>%s: %d requests</title></polyline>`,
				template.HTMLEscapeString(run.Policy), len(pts), c, width, strings.Join(path, " "), template.HTMLEscapeString(run.Policy), len(run.Requests))
		}
		ly := T + 14*float64(i)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"/><text x="%.1f" y="%.1f">%s</text>`,
			L+pw+15, ly, L+pw+35, ly, c, width, L+pw+40, ly+4, template.HTMLEscapeString(run.Policy))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// timeline is the request timeline chart and what the page says about it.
type timeline struct {
	svg, colourBy, note string
}

// timelineSVG draws one panel per run on a shared time axis: per request a grey segment from
// arrival to first token and a coloured one from first token to finish, coloured by the engine
// that served it when the run recorded engines, else by run; a failed request is a black tick.
func timelineSVG(runs []RunRequests, st runStyles, maxRows int, unit string) timeline {
	const W, L, Rr, T, B, gap = 900.0, 130.0, 150.0, 10.0, 40.0, 14.0
	pw := W - L - Rr
	samples := make([][]RequestTiming, len(runs))
	endpointSet := map[string]bool{}
	xmax := 0.0
	var notes []string
	for i, run := range runs {
		samples[i] = timelineSample(run, maxRows)
		for _, r := range samples[i] {
			if r.Endpoint != "" {
				endpointSet[r.Endpoint] = true
			}
			xmax = math.Max(xmax, math.Max(r.Arrival, math.Max(r.FirstToken, r.Finish)))
		}
		if len(samples[i]) < len(run.Requests) {
			notes = append(notes, fmt.Sprintf("%s: %d of %d requests, evenly spaced in arrival order", run.Policy, len(samples[i]), len(run.Requests)))
		} else {
			notes = append(notes, fmt.Sprintf("%s: all %d requests", run.Policy, len(run.Requests)))
		}
	}
	if xmax <= 0 {
		xmax = 1
	}
	var endpoints []string
	for e := range endpointSet {
		endpoints = append(endpoints, e)
	}
	sort.Strings(endpoints)
	byEndpoint := len(endpoints) > 0
	endpointColour := map[string]string{}
	for i, e := range endpoints {
		endpointColour[e] = colour(i)
	}
	rowH := func(n int) float64 { return math.Max(1.5, math.Min(6, 300/math.Max(1, float64(n)))) }
	H := T + B
	for i := range runs {
		H += rowH(len(samples[i]))*float64(len(samples[i])) + gap + 4
	}
	x := func(v float64) float64 { return L + v/xmax*pw }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" data-chart="timeline" width="%.0f" height="%.0f" font-size="11">`, W, H)
	step := niceStep(xmax, 6)
	for k := 0; float64(k)*step <= xmax*(1+1e-9); k++ {
		v := float64(k) * step
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="middle">%g</text>`, x(v), T, x(v), H-B, x(v), H-B+15, v)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">time since the run's start, %s</text>`, L+pw/2, H-10, template.HTMLEscapeString(unit))
	top := T
	for i, run := range runs {
		rows := samples[i]
		h := rowH(len(rows))
		runColour, _ := st.of(run.Policy)
		fmt.Fprintf(&b, `<g data-policy="%s" data-requests="%d"><text x="%.1f" y="%.1f" text-anchor="end" font-weight="600">%s</text>`,
			template.HTMLEscapeString(run.Policy), len(rows), L-8, top+gap, template.HTMLEscapeString(run.Policy))
		top += gap
		for j, r := range rows {
			yy := top + h*(float64(j)+0.5)
			if r.Failed {
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"><title>failed, arrived %.3f</title></line>`,
					x(r.Arrival), yy, x(r.Arrival)+4, yy, failColour, h, r.Arrival)
				continue
			}
			waitEnd := r.FirstToken
			if waitEnd <= 0 {
				waitEnd = r.Finish
			}
			if waitEnd > r.Arrival {
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#bbb" stroke-width="%.1f"/>`, x(r.Arrival), yy, x(waitEnd), yy, h)
			}
			if r.FirstToken > 0 && r.Finish >= r.FirstToken {
				c := runColour
				if byEndpoint {
					c = endpointColour[r.Endpoint]
					if c == "" {
						c = "#555"
					}
				}
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"><title>%s: arrived %.3f, first token %.3f, finished %.3f</title></line>`,
					x(r.FirstToken), yy, math.Max(x(r.Finish), x(r.FirstToken)+1), yy, c, h, template.HTMLEscapeString(r.Endpoint), r.Arrival, r.FirstToken, r.Finish)
			}
		}
		top += h*float64(len(rows)) + 4
		b.WriteString(`</g>`)
	}
	colourBy := "run"
	if byEndpoint {
		colourBy = "engine"
		for i, e := range endpoints {
			ly := T + gap + 14*float64(i)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="12" height="8" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`,
				L+pw+15, ly-7, endpointColour[e], L+pw+32, ly+1, template.HTMLEscapeString(e))
		}
	}
	b.WriteString(`</svg>`)
	return timeline{svg: b.String(), colourBy: colourBy, note: strings.Join(notes, "; ") + "."}
}
