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

package main

// EPP mode against proxy mode on a real fleet: vllm-sim engines with KV events over ZMQ, the
// router as a process, and `kvbench gateway` standing in for the Inference Gateway.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/test/fleettest"
)

// The fleet and workload of the EPP comparison, sized so that placement decides both the hit
// rate and the throughput: 5 groups (coprime with the 4 engines, so that round-robin cannot
// keep a group on one engine by accident), each asked for in completion and in chat form (two
// token prefixes, the chat template coming first), of about 1,610 tokens (100 blocks) each: 10
// prefixes, about 1,000 blocks. An engine holds eppBlocks, so a cache-aware placement (two or
// three prefixes per engine) keeps every prefix it has placed, while an engine that sees every
// prefix, as under round-robin, holds four of the ten and evicts each before it comes round
// again, to prefill it anew.
// The 16 output tokens keep prefill the larger part of an engine's time, so that the hit rate
// shows in the throughput.
const (
	eppEngines   = 4
	eppScale     = "0.2" // a fifth of real speed: the engines, not the 2 shared cores, bound the throughput
	eppBlocks    = "400"
	eppGroups    = 5
	eppWords     = 1400
	eppQuestions = 16
	eppTokens    = 16
	eppRequests  = 120
	eppWorkers   = 12
)

// Tolerances of the EPP-vs-proxy comparison. The policy may copy a busy group's prefix to a
// second engine to share its load, and whether it does depends on the order in which the 12
// clients' requests arrive, so the fleet hit rate moves from run to run in either mode: in 14
// runs of this test on the 2-core development machine (6 of them with two busy loops competing
// for both cores) it was 87.5% to 91.1% (each step of 0.84 points is one prefix prefilled on one
// more engine), in proxy and EPP mode alike, and the two differed by up to 2.7 points (3.5 in
// a CI run with the other packages' tests beside it). EPP's completed requests per second (and
// output tokens per second, the same ratio) were 4.2% below proxy's to 6.4% above, at 15.4 to
// 16.8 requests per second (6.8% apart in that CI run). Round-robin through the same gateway
// got 4.0% to 22.9% and 9.2 to 9.8 requests per second. The tolerances cover that spread with
// room for a busier neighbour (five points of hit rate are about half as much prefill again,
// some 10% of throughput here), and stay far inside the gap to round-robin: an EPP that placed
// six prefixes worse than the proxy would fail.
const (
	// eppHitTolerance is the largest difference in fleet hit rate (absolute) between the two
	// front ends.
	eppHitTolerance = 0.05
	// eppThroughputTolerance is the largest relative difference in completed requests per
	// second, and in output tokens per second, between them.
	eppThroughputTolerance = 0.15
	// eppOverRoundRobin is how far above round-robin's hit rate both must be, and
	// eppRoundRobinSpeedup how many times its throughput.
	eppOverRoundRobin    = 0.50
	eppRoundRobinSpeedup = 1.3
)

// fleetRun is what one pass of the workload measured.
type fleetRun struct {
	label string
	// hitRate is the engines' own: Σ prefix_cache_hits / Σ prefix_cache_queries over the run
	// (the engines start cold, so their counters cover exactly this run).
	hitRate float64
	// reqPerSec and tokPerSec are completed requests and generated tokens (the engines'
	// generation_tokens_total) per wall second, from the first request sent to the last answer.
	reqPerSec, tokPerSec float64
	perEngine            map[string]int
	tally                *fleettest.Tally
}

func (f fleetRun) String() string {
	return fmt.Sprintf("%-24s hit rate %5.1f%%  %6.2f req/s  %7.1f output tok/s  per engine %v",
		f.label, 100*f.hitRate, f.reqPerSec, f.tokPerSec, f.perEngine)
}

const (
	mHits    = "vllm:prefix_cache_hits_total"
	mQueries = "vllm:prefix_cache_queries_total"
	mGen     = "vllm:generation_tokens_total"
	mDone    = "vllm:request_success_total"
)

// driveFleet sends the workload's first eppRequests requests through url from eppWorkers
// closed-loop clients (each sends its next request when its last one has ended), and reads what
// the engines counted.
func driveFleet(t *testing.T, label, url string, engines []*fleettest.Engine, work fleettest.Workload) fleetRun {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: eppWorkers}}
	defer client.CloseIdleConnections()
	tally := &fleettest.Tally{}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range eppWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= eppRequests {
					return
				}
				tally.Add(fleettest.Do(context.Background(), client, url, work(i), time.Minute))
			}
		})
	}
	wg.Wait()
	wall := time.Since(start).Seconds()
	run := fleetRun{label: label, tally: tally, perEngine: map[string]int{}}
	for _, r := range tally.Results() {
		run.perEngine[r.Endpoint]++
	}
	var hits, queries, gen, done float64
	for _, e := range engines {
		c := fleettest.EngineCounters(t, e.URL, mHits, mQueries, mGen, mDone)
		hits, queries, gen, done = hits+c[mHits], queries+c[mQueries], gen+c[mGen], done+c[mDone]
	}
	if queries == 0 {
		t.Fatalf("%s: the engines counted no prefix-cache queries", label)
	}
	if int(done) != eppRequests || int(gen) != eppRequests*eppTokens {
		t.Errorf("%s: the engines finished %v requests and generated %v tokens, want %d and %d (a leftover from an earlier run?)",
			label, done, gen, eppRequests, eppRequests*eppTokens)
	}
	run.hitRate = hits / queries
	run.reqPerSec = float64(tally.Count(fleettest.Completed)) / wall
	run.tokPerSec = gen / wall
	return run
}

// coldFleet restarts every engine (same ports, so the endpoints file stands): empty caches and
// zeroed counters, so that each front end starts from the same state.
func coldFleet(t *testing.T, engines []*fleettest.Engine) {
	t.Helper()
	for _, e := range engines {
		e.Proc.Kill()
		e.Proc = fleettest.Start(t, "vllm-sim", e.Proc.Args...)
	}
	for _, e := range engines {
		fleettest.WaitOK(t, e.URL+"/health")
	}
}

// eppFleet starts the comparison's engines.
func eppFleet(t *testing.T) []*fleettest.Engine {
	var es []*fleettest.Engine
	for i := range eppEngines {
		es = append(es, fleettest.StartEngine(t, fmt.Sprintf("e%d", i), eppScale, "--num-gpu-blocks-override", eppBlocks))
	}
	return es
}

// runProxy runs the workload through the router in proxy mode on cold engines.
func runProxy(t *testing.T, engines []*fleettest.Engine, file string, work fleettest.Workload) fleetRun {
	t.Helper()
	coldFleet(t, engines)
	r := fleettest.StartRouter(t, file, "--admission=false")
	r.WaitConnected(t, len(engines))
	defer r.Proc.Stop(10 * time.Second)
	return driveFleet(t, "proxy", r.URL, engines, work)
}

// runEPP runs the workload through `kvbench gateway` and the router in --mode epp on cold
// engines.
func runEPP(t *testing.T, label string, engines []*fleettest.Engine, file string, work fleettest.Workload, args ...string) fleetRun {
	t.Helper()
	coldFleet(t, engines)
	r := fleettest.StartEPPRouter(t, file, append([]string{"--admission=false"}, args...)...)
	r.WaitConnected(t, len(engines))
	defer r.Proc.Stop(10 * time.Second)
	g := fleettest.StartGateway(t, r.EPPAddr)
	run := driveFleet(t, label, g.URL, engines, work)
	if !g.Proc.Stop(10 * time.Second) {
		t.Errorf("%s: kvbench gateway did not exit within 10 s of SIGTERM", label)
	}
	return run
}

// The router in EPP mode, behind an Envoy-like gateway (`kvbench gateway`), places a shared-prefix
// workload as well as in proxy mode: the same workload on cold engines gives the same fleet hit
// rate (the engines' own counters) and the same throughput within the tolerances above, every
// answer is whole, and both are far above what round-robin placement gets through the same
// gateway.
//
// Admission control is off in every run: it would shed round-robin's queues and leave it fewer,
// easier requests. Even with identical decisions two things differ between the runs: the order
// in which 12 concurrent clients' requests reach the router (which request of a group comes
// first and places it, and which engine is least loaded at that instant), and the CPU the
// gateway process takes. The tolerances above say how much that moved the figures.
func TestE2EEppMatchesProxy(t *testing.T) {
	fleettest.NeedBinaries(t)
	engines := eppFleet(t)
	file := fleettest.WriteEndpoints(t, engines)
	work := fleettest.SharedPrefix(eppGroups, eppWords, eppQuestions, eppTokens)

	proxy := runProxy(t, engines, file, work)
	epp := runEPP(t, "epp (kvbench gateway)", engines, file, work)
	rr := runEPP(t, "epp --policy RoundRobin", engines, file, work, "--policy", "RoundRobin")
	for _, f := range []fleetRun{proxy, epp, rr} {
		t.Log(f)
		if n := f.tally.Count(fleettest.Completed); n != eppRequests {
			t.Errorf("%s: %d of %d requests completed whole: %s", f.label, n, eppRequests, f.tally)
		}
	}
	if d := math.Abs(epp.hitRate - proxy.hitRate); d > eppHitTolerance {
		t.Errorf("hit rate: EPP %.3f, proxy %.3f: differ by %.3f, more than %.2f", epp.hitRate, proxy.hitRate, d, eppHitTolerance)
	}
	if d := math.Abs(epp.reqPerSec/proxy.reqPerSec - 1); d > eppThroughputTolerance {
		t.Errorf("throughput: EPP %.2f req/s, proxy %.2f: differ by %.0f%%, more than %.0f%%",
			epp.reqPerSec, proxy.reqPerSec, 100*d, 100*eppThroughputTolerance)
	}
	if d := math.Abs(epp.tokPerSec/proxy.tokPerSec - 1); d > eppThroughputTolerance {
		t.Errorf("output tokens: EPP %.1f tok/s, proxy %.1f: differ by %.0f%%, more than %.0f%%",
			epp.tokPerSec, proxy.tokPerSec, 100*d, 100*eppThroughputTolerance)
	}
	for _, f := range []fleetRun{proxy, epp} {
		if f.hitRate < rr.hitRate+eppOverRoundRobin {
			t.Errorf("%s: hit rate %.3f is not %.2f above round-robin's %.3f", f.label, f.hitRate, eppOverRoundRobin, rr.hitRate)
		}
		if f.reqPerSec < eppRoundRobinSpeedup*rr.reqPerSec {
			t.Errorf("%s: %.2f req/s is not %.1f times round-robin's %.2f", f.label, f.reqPerSec, eppRoundRobinSpeedup, rr.reqPerSec)
		}
	}
	if len(rr.perEngine) != eppEngines {
		t.Errorf("round-robin served from %v: the baseline did not spread", rr.perEngine)
	}
	// For the figures in the report: one line that a script can collect over rounds.
	if os.Getenv("KVROUTER_EPP_FIGURES") != "" {
		b, _ := json.Marshal(map[string]any{
			"proxy_hit": proxy.hitRate, "epp_hit": epp.hitRate, "rr_hit": rr.hitRate,
			"proxy_req_s": proxy.reqPerSec, "epp_req_s": epp.reqPerSec, "rr_req_s": rr.reqPerSec,
			"proxy_tok_s": proxy.tokPerSec, "epp_tok_s": epp.tokPerSec, "rr_tok_s": rr.tokPerSec,
		})
		t.Logf("FIGURES %s", b)
	}
}

// `kvbench live`, the benchmark's own client, drives the router in EPP mode through `kvbench
// gateway` as it drives the proxy (hack/demo.sh): a shared-prefix workload at the engines' time
// scale, every request answered, a report written, and the per-engine figures there, from the
// X-Kvrouter-Endpoint the picker sets on each response.
func TestE2EEppKvbenchLive(t *testing.T) {
	fleettest.NeedBinaries(t)
	var engines []*fleettest.Engine
	for i := range eppEngines {
		engines = append(engines, fleettest.StartEngine(t, fmt.Sprintf("e%d", i), eppScale, "--num-gpu-blocks-override", "500"))
	}
	r := fleettest.StartEPPRouter(t, fleettest.WriteEndpoints(t, engines), "--admission=false")
	r.WaitConnected(t, eppEngines)
	g := fleettest.StartGateway(t, r.EPPAddr)
	out := t.TempDir()
	const requests = 60
	live := fleettest.Start(t, "kvbench", "live", "--target", g.URL, "--workload", filepath.Join("..", "..", "bench", "workloads", "demo.yaml"),
		"--label", "epp", "--requests", fmt.Sprint(requests), "--time-scale", eppScale, "--max-wall", "60s", "--out", out)
	if code := live.Wait(t, 90*time.Second); code != 0 {
		t.Fatalf("kvbench live exited %d:\n%s", code, live.Output())
	}
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatalf("no report: %v\n%s", err, live.Output())
	}
	var rep struct {
		Policies []struct {
			Policy      string         `json:"policy"`
			Requests    int            `json:"requests"`
			Completed   int            `json:"completed"`
			Failed      int            `json:"failed"`
			HitRate     float64        `json:"hit_rate"`
			PerEndpoint map[string]int `json:"requests_per_endpoint"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Policies) != 1 {
		t.Fatalf("report: %s", b)
	}
	p := rep.Policies[0]
	served := 0
	names := make([]string, 0, len(p.PerEndpoint))
	for name, n := range p.PerEndpoint {
		served += n
		names = append(names, name)
	}
	sort.Strings(names)
	if p.Policy != "epp" || p.Requests != requests || p.Completed != requests || p.Failed != 0 || served != requests {
		t.Fatalf("report %+v, want %d requests completed, none failed, each attributed to an engine", p, requests)
	}
	for _, name := range names {
		if name != "e0" && name != "e1" && name != "e2" && name != "e3" {
			t.Fatalf("requests attributed to %q, not an engine: %v", name, p.PerEndpoint)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "report.html")); err != nil {
		t.Fatal(err)
	}
	t.Logf("kvbench live through the gateway: %d requests, hit rate %.1f%%, per engine %v", p.Completed, 100*p.HitRate, p.PerEndpoint)
}
