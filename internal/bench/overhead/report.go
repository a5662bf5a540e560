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

package overhead

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// Markdown writes one table per rate: each proxy's added latency over the direct calls of the
// same round and its CPU per request, as the median (range) over the rounds, and each router's
// ratio to the plain proxy, computed round by round.
func (r *Result) Markdown(w io.Writer) {
	cfg := r.Config
	stream := "non-streaming"
	if cfg.Stream {
		stream = "streaming"
	}
	var rates []float64
	byRate := map[float64][]Round{}
	for _, rd := range r.Rounds {
		if _, ok := byRate[rd.Rate]; !ok {
			rates = append(rates, rd.Rate)
		}
		byRate[rd.Rate] = append(byRate[rd.Rate], rd)
	}
	for _, rate := range rates {
		rounds := byRate[rate]
		fmt.Fprintf(w, "\n%g req/s, %s prompts of %d tokens, %s, max_tokens %d, %d engines, %d connections, %d rounds of %s (median (min-max) over rounds)\n\n",
			rate, cfg.Prompt, cfg.PromptTokens, stream, cfg.MaxTokens, cfg.Engines, cfg.Conns, len(rounds), cfg.Duration)
		proxies := []string{"plain"}
		for _, rt := range cfg.Routers {
			proxies = append(proxies, rt.Name)
		}
		fmt.Fprint(w, "| |")
		for _, p := range proxies {
			fmt.Fprintf(w, " %s |", p)
		}
		for _, p := range proxies[1:] {
			fmt.Fprintf(w, " %s / plain |", p)
		}
		fmt.Fprint(w, "\n|---|")
		fmt.Fprint(w, strings.Repeat("---|", 2*len(proxies)-1))
		fmt.Fprintln(w)
		type fig struct {
			name string
			get  func(rd Round, target string) float64
		}
		added := func(pick func(Phase) time.Duration) func(Round, string) float64 {
			return func(rd Round, target string) float64 {
				return ms(pick(phase(rd, target)) - pick(phase(rd, "direct")))
			}
		}
		figs := []fig{
			{"added p50 (ms)", added(func(p Phase) time.Duration { return p.P50 })},
			{"added p90 (ms)", added(func(p Phase) time.Duration { return p.P90 })},
			{"added p99 (ms)", added(func(p Phase) time.Duration { return p.P99 })},
			{"CPU per request (ms)", func(rd Round, target string) float64 {
				p := phase(rd, target)
				if p.Requests == 0 {
					return math.NaN()
				}
				return ms(p.CPU) / float64(p.Requests)
			}},
		}
		for _, f := range figs {
			fmt.Fprintf(w, "| %s |", f.name)
			for _, p := range proxies {
				fmt.Fprintf(w, " %s |", spread(collect(rounds, func(rd Round) float64 { return f.get(rd, p) }), 2))
			}
			for _, p := range proxies[1:] {
				fmt.Fprintf(w, " **%s** |", spread(collect(rounds, func(rd Round) float64 {
					return f.get(rd, p) / f.get(rd, "plain")
				}), 2))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprint(w, "| requests (errors) |")
		for _, p := range proxies {
			n, e := 0, 0
			for _, rd := range rounds {
				n += phase(rd, p).Requests
				e += phase(rd, p).Errors
			}
			fmt.Fprintf(w, " %d (%d) |", n, e)
		}
		fmt.Fprint(w, strings.Repeat(" |", len(proxies)-1))
		fmt.Fprintln(w)
		d := func(pick func(Phase) time.Duration) string {
			return spread(collect(rounds, func(rd Round) float64 { return ms(pick(phase(rd, "direct"))) }), 2)
		}
		n, e := 0, 0
		for _, rd := range rounds {
			n += phase(rd, "direct").Requests
			e += phase(rd, "direct").Errors
		}
		fmt.Fprintf(w, "\ndirect to the engines: p50 %s ms, p90 %s ms, p99 %s ms, %d requests (%d errors); load average (1 min) %s\n",
			d(func(p Phase) time.Duration { return p.P50 }), d(func(p Phase) time.Duration { return p.P90 }),
			d(func(p Phase) time.Duration { return p.P99 }), n, e,
			spread(collect(rounds, func(rd Round) float64 { return rd.Phases[len(rd.Phases)-1].LoadAvg }), 1))
	}
}

func phase(rd Round, target string) Phase {
	for _, p := range rd.Phases {
		if p.Target == target {
			return p
		}
	}
	return Phase{}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func collect(rounds []Round, f func(Round) float64) []float64 {
	var v []float64
	for _, rd := range rounds {
		if x := f(rd); !math.IsNaN(x) && !math.IsInf(x, 0) {
			v = append(v, x)
		}
	}
	return v
}

// spread is "median (min-max)" of v with prec decimals ("-" for none).
func spread(v []float64, prec int) string {
	if len(v) == 0 {
		return "-"
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	if len(s) == 1 {
		return fmt.Sprintf("%.*f", prec, med)
	}
	return fmt.Sprintf("%.*f (%.*f to %.*f)", prec, med, prec, s[0], prec, s[len(s)-1])
}
