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

// Command compare runs the same KV events and lookups through kvrouter's prefix index
// (internal/router/kvindex) and llm-d's in-memory kvblock index (llm-d-kv-cache v0.5.0), in one
// process, interleaved round by round, and prints a markdown table of medians, ranges and
// ratios. `make bench-compare` runs it; docs/benchmarks.md has the figures and what they mean.
//
// It is a module of its own so that llm-d and its dependencies stay out of kvrouter's go.mod;
// its import path sits under kvrouter's internal/ so that it may import the index.
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/test/cputime"
)

type options struct {
	quick      bool
	rounds     int
	procs      int
	endpoints  int
	blockSizes []int
	workloads  []string
	lookupTime time.Duration
}

func main() {
	var o options
	var bs, wl string
	flag.BoolVar(&o.quick, "quick", false, "small workloads, 2 rounds: checks that it builds, runs and agrees (CI)")
	flag.IntVar(&o.rounds, "rounds", 5, "interleaved rounds per configuration")
	flag.IntVar(&o.procs, "procs", 1, "GOMAXPROCS: 1 measures one core, like the kvindex benchmarks (-cpu 1)")
	flag.IntVar(&o.endpoints, "endpoints", 100, "engines in the fleet")
	flag.StringVar(&bs, "block-sizes", "16,64", "engine block sizes (vLLM's default 16; llm-d precise's shipped 64)")
	flag.StringVar(&wl, "workloads", "shared,disjoint,hot", "comma-separated workloads to run: shared, disjoint, hot (see workloads in main.go)")
	flag.BoolVar(&useWall, "wall", false, "measure wall-clock time instead of the process's CPU time")
	flag.DurationVar(&o.lookupTime, "lookup-time", 300*time.Millisecond, "minimum time spent on each lookup figure per round")
	flag.Parse()
	for _, f := range strings.Split(bs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "bad -block-sizes %q\n", bs)
			os.Exit(2)
		}
		o.blockSizes = append(o.blockSizes, n)
	}
	o.workloads = strings.Split(wl, ",")
	if o.quick {
		o.rounds = min(o.rounds, 2)
		o.lookupTime = 20 * time.Millisecond
	}
	runtime.GOMAXPROCS(o.procs)
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-compare:", err)
		os.Exit(1)
	}
}

// workloads are the configurations measured. shared is the sizing point's fleet: 20 shared
// 90K-token prefixes, each endpoint holding two of them (so each prefix is on 10 endpoints)
// with a 10K-token question of its own. disjoint gives every endpoint a 100K-token prompt of its
// own (one key per entry: the most keys for the entries). hot has every endpoint hold the same
// 100K-token prompt (the lookup's worst case: no endpoint drops out before the end).
func workloads(o options, blockSize int) []Workload {
	if o.quick {
		return []Workload{
			{Name: "shared", Endpoints: 10, PromptsPerEndpoint: 2, SharedPrefixes: 4, PrefixTokens: 8192, QuestionTokens: 1024, BlockSize: blockSize, ChunkTokens: 2048},
			{Name: "disjoint", Endpoints: 10, PromptsPerEndpoint: 1, PrefixTokens: 8192, QuestionTokens: 1024, BlockSize: blockSize, ChunkTokens: 2048},
			{Name: "hot", Endpoints: 10, PromptsPerEndpoint: 1, SharedPrefixes: 1, PrefixTokens: 9216, BlockSize: blockSize, ChunkTokens: 2048},
		}
	}
	n := o.endpoints
	return []Workload{
		{Name: "shared", Endpoints: n, PromptsPerEndpoint: 2, SharedPrefixes: 20, PrefixTokens: 90_000 / blockSize * blockSize, QuestionTokens: 100_000 - 90_000/blockSize*blockSize, BlockSize: blockSize, ChunkTokens: 2048},
		{Name: "disjoint", Endpoints: n, PromptsPerEndpoint: 1, PrefixTokens: 90_000 / blockSize * blockSize, QuestionTokens: 100_000 - 90_000/blockSize*blockSize, BlockSize: blockSize, ChunkTokens: 2048},
		{Name: "hot", Endpoints: n, PromptsPerEndpoint: 1, SharedPrefixes: 1, PrefixTokens: 100_000 / blockSize * blockSize, QuestionTokens: 0, BlockSize: blockSize, ChunkTokens: 2048},
	}
}

// system is one router's index with the workload already decoded into its own event types.
type system interface {
	name() string
	fresh()
	applyBuild() int
	applyChurn() int
	lookup([]uint32)
	prepareKeys([]uint32)
	lookupKeys()
	answer() map[string]int
	drop()
}

type kvSystem struct {
	w            Workload
	build, churn []kvrouterBatch
	*kvrouterSide
}

func (s *kvSystem) name() string    { return "kvrouter" }
func (s *kvSystem) fresh()          { s.kvrouterSide = newKVRouter(s.w) }
func (s *kvSystem) applyBuild() int { return s.apply(s.build) }
func (s *kvSystem) applyChurn() int { return s.apply(s.churn) }
func (s *kvSystem) drop()           { s.kvrouterSide = nil }

type ldSystem struct {
	w            Workload
	build, churn []llmdMessage
	*llmdSide
}

func (s *ldSystem) name() string    { return "llm-d" }
func (s *ldSystem) fresh()          { s.llmdSide = newLLMD(s.w) }
func (s *ldSystem) applyBuild() int { return s.apply(s.build) }
func (s *ldSystem) applyChurn() int { return s.apply(s.churn) }
func (s *ldSystem) drop()           { s.llmdSide = nil }

// sample is one system's figures in one round.
type sample struct {
	applyRate     float64            // blocks (stored + removed) per second, Build and Churn
	bytesPerEntry float64            // live heap after Build over the (block, endpoint) entries
	lookup        map[string]float64 // seconds per call, median of the round's calls
	answers       map[string]map[string]int
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// useWall switches every time figure from process CPU time to wall-clock time (-wall).
var useWall bool

type stopwatch struct {
	wall time.Time
	cpu  time.Duration
}

func startWatch() stopwatch { return stopwatch{time.Now(), cputime.Process()} }

// elapsed returns seconds on the chosen clock, and the other one.
func (w stopwatch) elapsed() (chosen, other float64) {
	wall, cpu := time.Since(w.wall).Seconds(), (cputime.Process() - w.cpu).Seconds()
	if useWall {
		return wall, cpu
	}
	return cpu, wall
}

// timeCalls returns the seconds per call of f, called until minTime has passed (at least 5
// calls, unless one call alone takes minTime: then that call is the figure): the mean over the
// calls, since CPU time cannot be read per call precisely.
func timeCalls(f func(), minTime time.Duration) float64 {
	w := startWatch()
	f()
	if d, _ := w.elapsed(); d >= minTime.Seconds() {
		return d
	}
	n := 0
	w = startWatch()
	for {
		f()
		n++
		if d, _ := w.elapsed(); n >= 5 && (d >= minTime.Seconds() || n >= 1_000_000) {
			return d / float64(n)
		}
	}
}

func measure(sys system, s *Stream, o options) (sample, error) {
	out := sample{lookup: map[string]float64{}, answers: map[string]map[string]int{}}
	before := heapAlloc()
	sys.fresh()
	w := startWatch()
	failed := sys.applyBuild()
	build, _ := w.elapsed()
	after := heapAlloc()
	if failed != 0 {
		return out, fmt.Errorf("%s: %d blocks or events of Build not applied", sys.name(), failed)
	}
	if kv, ok := sys.(*kvSystem); ok && kv.entries() != s.Entries {
		return out, fmt.Errorf("kvrouter holds %d entries, the workload %d", kv.entries(), s.Entries)
	}
	out.bytesPerEntry = (float64(after) - float64(before)) / float64(s.Entries)
	for _, l := range s.Lookups {
		out.lookup[l.Name] = timeCalls(func() { sys.lookup(l.Tokens) }, o.lookupTime)
		out.answers[l.Name] = sys.answer()
		sys.prepareKeys(l.Tokens)
		out.lookup[l.Name+" keys"] = timeCalls(sys.lookupKeys, o.lookupTime)
		if !maps.Equal(sys.answer(), out.answers[l.Name]) {
			return out, fmt.Errorf("%s: lookup %s over precomputed keys answers differently", sys.name(), l.Name)
		}
	}
	w = startWatch()
	failed = sys.applyChurn()
	churn, _ := w.elapsed()
	if failed != 0 {
		return out, fmt.Errorf("%s: %d blocks or events of Churn not applied", sys.name(), failed)
	}
	out.applyRate = float64(s.BuildBlocks+s.ChurnBlocks) / (build + churn)
	sys.drop()
	return out, nil
}

func median(xs []float64) float64 {
	ys := slices.Clone(xs)
	slices.Sort(ys)
	n := len(ys)
	if n%2 == 1 {
		return ys[n/2]
	}
	return (ys[n/2-1] + ys[n/2]) / 2
}

// stat is "median (min-max)" of xs formatted with f.
func stat(xs []float64, f func(float64) string) string {
	if len(xs) == 1 {
		return f(xs[0])
	}
	return fmt.Sprintf("%s (%s–%s)", f(median(xs)), f(slices.Min(xs)), f(slices.Max(xs)))
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}

func versions() string {
	var parts []string
	parts = append(parts, runtime.Version())
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/llm-d/llm-d-kv-cache" {
				v := d.Version
				if d.Replace != nil {
					v = d.Replace.Path + " " + d.Replace.Version
				}
				parts = append(parts, "llm-d-kv-cache "+v)
			}
		}
	}
	return strings.Join(parts, ", ")
}

func ms(x float64) string {
	switch {
	case x >= 1:
		return fmt.Sprintf("%.2f s", x)
	case x >= 0.01:
		return fmt.Sprintf("%.1f ms", x*1e3)
	case x >= 0.001:
		return fmt.Sprintf("%.2f ms", x*1e3)
	}
	return fmt.Sprintf("%.3f ms", x*1e3)
}

func rate(x float64) string {
	if x >= 1e6 {
		return fmt.Sprintf("%.2f M/s", x/1e6)
	}
	return fmt.Sprintf("%.0f K/s", x/1e3)
}

func bytes(x float64) string { return fmt.Sprintf("%.0f B", x) }

func times(x float64) string {
	if x >= 100 {
		return fmt.Sprintf("%.0f×", x)
	}
	if x >= 10 {
		return fmt.Sprintf("%.1f×", x)
	}
	return fmt.Sprintf("%.2f×", x)
}

func run(o options) error {
	start := loadavg()
	began := time.Now()
	fmt.Printf("<!-- bench-compare %s -->\n", strings.Join(os.Args[1:], " "))
	clock := "process CPU time"
	if useWall {
		clock = "wall-clock time"
	}
	fmt.Printf("%s; GOMAXPROCS=%d of %d CPUs; %d interleaved rounds; times are %s; load average at start %s\n\n",
		versions(), runtime.GOMAXPROCS(0), runtime.NumCPU(), o.rounds, clock, start)
	fmt.Println("| workload | block size | figure | kvrouter | llm-d | kvrouter's lead (llm-d ÷ kvrouter) |")
	fmt.Println("|---|---|---|---|---|---|")
	var notes []string
	for _, bs := range o.blockSizes {
		for _, w := range workloads(o, bs) {
			if !slices.Contains(o.workloads, w.Name) {
				continue
			}
			s := Generate(w)
			kv := &kvSystem{w: w, build: kvrouterBatches(w, s.Build), churn: kvrouterBatches(w, s.Churn)}
			ld := &ldSystem{w: w, build: llmdMessages(w, s.Build), churn: llmdMessages(w, s.Churn)}
			var kvs, lds []sample
			for r := 0; r < o.rounds; r++ {
				// Who goes first alternates, so that a drift in the machine's load over a round
				// falls on both.
				order := []system{kv, ld}
				if r%2 == 1 {
					order = []system{ld, kv}
				}
				got := map[string]sample{}
				for _, sys := range order {
					smp, err := measure(sys, s, o)
					if err != nil {
						return fmt.Errorf("%s, block size %d: %w", w.Name, bs, err)
					}
					got[sys.name()] = smp
				}
				for name, a := range got["kvrouter"].answers {
					if b := got["llm-d"].answers[name]; !maps.Equal(a, b) {
						return fmt.Errorf("%s, block size %d, lookup %s: the indexes disagree: kvrouter %v, llm-d %v", w.Name, bs, name, a, b)
					}
				}
				kvs = append(kvs, got["kvrouter"])
				lds = append(lds, got["llm-d"])
				// The round's raw figures go to stderr as they come: a run stopped early still
				// leaves its completed rounds.
				fmt.Fprintf(os.Stderr, "%s/%d round %d done (%s, load %s)\n", w.Name, bs, r+1, time.Since(began).Round(time.Second), loadavg())
				for _, name := range []string{"kvrouter", "llm-d"} {
					g := got[name]
					fmt.Fprintf(os.Stderr, "  %-8s apply %s, %s per entry", name, rate(g.applyRate), bytes(g.bytesPerEntry))
					for _, l := range s.Lookups {
						fmt.Fprintf(os.Stderr, ", lookup %s %s (keys given %s)", l.Name, ms(g.lookup[l.Name]), ms(g.lookup[l.Name+" keys"]))
					}
					fmt.Fprintln(os.Stderr)
				}
			}
			row := func(figure string, get func(sample) float64, f func(float64) string, lead func(kv, ld float64) float64) {
				var a, b, ratio []float64
				for i := range kvs {
					a = append(a, get(kvs[i]))
					b = append(b, get(lds[i]))
					ratio = append(ratio, lead(a[i], b[i]))
				}
				fmt.Printf("| %s | %d | %s | %s | %s | %s |\n", w.Name, bs, figure, stat(a, f), stat(b, f), stat(ratio, times))
			}
			row("apply (blocks/s)", func(s sample) float64 { return s.applyRate }, rate, func(kv, ld float64) float64 { return kv / ld })
			row(fmt.Sprintf("memory per entry (%d entries, %d endpoints)", s.Entries, w.Endpoints), func(s sample) float64 { return s.bytesPerEntry }, bytes, func(kv, ld float64) float64 { return ld / kv })
			for _, l := range s.Lookups {
				row("lookup "+l.Name+" (router path: hash + match)", func(s sample) float64 { return s.lookup[l.Name] }, ms, func(kv, ld float64) float64 { return ld / kv })
				row("lookup "+l.Name+" (index only, keys given)", func(s sample) float64 { return s.lookup[l.Name+" keys"] }, ms, func(kv, ld float64) float64 { return ld / kv })
				ans := kvs[0].answers[l.Name]
				best := 0
				for _, n := range ans {
					best = max(best, n)
				}
				notes = append(notes, fmt.Sprintf("%s/%d %s lookup: %d of %d endpoints match, the longest %d of %d blocks (both indexes agree)",
					w.Name, bs, l.Name, len(ans), w.Endpoints, best, len(l.Tokens)/bs))
			}
		}
	}
	fmt.Println()
	for _, n := range notes {
		fmt.Println("* " + n)
	}
	fmt.Printf("\nload average at end %s; %s in all\n", loadavg(), time.Since(began).Round(time.Second))
	return nil
}
