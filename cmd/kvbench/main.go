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

// Command kvbench measures routing policies on the same workloads: `kvbench simulate` runs every
// policy over simulated engines in virtual time; `kvbench live` drives a running router or engine
// over HTTP; `kvbench gateway` stands in for an Inference Gateway in front of a router in EPP mode,
// so that `kvbench live` can drive that too; `kvbench overhead` measures the router's added
// latency and CPU against a plain reverse proxy; `kvbench verdict` judges a matrix run against the
// best variant of each peer. See docs/kvbench.md.
package main

import (
	"fmt"
	"log/slog"
	"os"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "simulate":
		err = runSimulate(os.Args[2:], log)
	case "live":
		err = runLive(os.Args[2:], log)
	case "gateway":
		err = runGateway(os.Args[2:], log)
	case "overhead":
		err = runOverhead(os.Args[2:], log)
	case "plainproxy":
		err = runPlainProxy(os.Args[2:])
	case "compare":
		err = runCompare(os.Args[2:])
	case "markdown":
		err = runMarkdown(os.Args[2:])
	case "policies":
		err = runPolicies(os.Args[2:], os.Stdout)
	case "verdict":
		err = runVerdict(os.Args[2:], os.Stdout)
	case "paired":
		err = runPaired(os.Args[2:], os.Stdout)
	case "-h", "--help", "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "kvbench: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvbench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  kvbench simulate [--workload FILE[,FILE...]] [FILE...] [--policies a,b] [--rates r1,r2] [--out DIR] [--traces DIR] [--seed N]
  kvbench live --target URL --workload FILE [--label NAME] [--endpoint completions|chat] [--api-key KEY]
               [--rate R] [--requests N] [--duration D] [--goodput ttft:MS,tpot:MS] [--progress auto|bar|lines|none] [--out DIR]
                                                         (any OpenAI-compatible server: router, vLLM, ...)
  kvbench gateway [--epp HOST:PORT] [--listen ADDR] [--body-mode full-duplex|buffered] [--chunk-bytes N]
                                                         (HTTP gateway on loopback in front of a router in --mode epp)
  kvbench overhead [--rates 100,200,300] [--rounds 5] [--duration 10s] [--prompt ids|text] [--stream] [--routers name=path,...]
                                                         (the router's added latency and CPU against a plain reverse proxy)
  kvbench plainproxy --listen ADDR --upstreams URL,URL   (httputil.ReverseProxy round-robin: overhead's baseline)
  kvbench compare --out DIR REPORT.json REPORT.json...   (merge live reports into one comparison)
  kvbench markdown [--sweep a,b] REPORT.json...           (Markdown tables for docs/benchmarks.md)
  kvbench policies [--families] [--set matrix|pd-matrix|peers]
                                                         (list the policies, their peer families, the matrix's sets)
  kvbench verdict [--before DIR] [--over DIR] [--json] DIR|REPORT.json...
                                                         (kvrouter against each peer's best variant, per workload and rate)
  kvbench paired [--policy kvrouter] [--json] BEFORE AFTER
                                                         (one policy in two runs, seed by seed: what a change did)
Run "kvbench <command> -h" for the flags of a command.
`)
}
