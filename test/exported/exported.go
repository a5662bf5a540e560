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

// Package exported builds the router's and vllm-sim's metrics the way their binaries do, so that
// what reads those metrics (the Grafana dashboard, the shipped alert rules) is checked against
// the names and buckets they really export rather than against a list kept by hand.
package exported

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/internal/router/kvindex"
	"github.com/kvrouter/kvrouter/internal/router/kvstream"
	"github.com/kvrouter/kvrouter/internal/router/loadsignal"
	"github.com/kvrouter/kvrouter/internal/router/proxy"
	"github.com/kvrouter/kvrouter/internal/sim/blockhash"
	"github.com/kvrouter/kvrouter/internal/sim/engine"
	"github.com/kvrouter/kvrouter/internal/sim/server"
	"github.com/kvrouter/kvrouter/internal/sim/timing"
)

// RouterMetrics are the metric names the router registers: its collectors built as cmd/router
// builds them, described through the registry they register with. Described rather than
// gathered, because a vector with no series yet gathers nothing.
func RouterMetrics(t testing.TB) map[string]bool {
	t.Helper()
	index := kvindex.New(kvindex.Config{})
	streams := kvstream.NewManager(index, kvstream.Config{Logger: logr.Discard()})
	reg := &recordingRegistry{Registry: prometheus.NewRegistry()}
	reg.MustRegister(index, streams)
	proxy.New(proxy.Config{}, logr.Discard(), index, streams, loadsignal.NewTracker(), reg)

	descs := make(chan *prometheus.Desc, 1024)
	for _, c := range reg.collectors {
		c.Describe(descs)
	}
	close(descs)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		names[m[1]] = true
	}
	if len(names) < 20 {
		t.Fatalf("the router describes only %d metrics: %v", len(names), names)
	}
	return names
}

// recordingRegistry remembers every collector registered with it.
type recordingRegistry struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recordingRegistry) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registry.Register(c)
}

func (r *recordingRegistry) MustRegister(cs ...prometheus.Collector) {
	r.collectors = append(r.collectors, cs...)
	r.Registry.MustRegister(cs...)
}

// EngineMetrics are the metric families vllm-sim's /metrics serves (vLLM's names), scraped from
// a simulator started on loopback and stopped before it returns.
func EngineMetrics(t testing.TB) map[string]*dto.MetricFamily {
	t.Helper()
	seed := "0"
	eng, err := engine.New(engine.Config{Profile: timing.ForModel("llama-8b", 1), HashAlgo: blockhash.SHA256CBOR, HashSeed: &seed, MaxModelLen: 4096})
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(eng, server.Options{ServedModelNames: []string{"m"}, TimeScale: 1000, PrefixCaching: true, HashAlgo: blockhash.SHA256CBOR})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	hs := httptest.NewServer(srv.Handler())
	defer func() { hs.Close(); cancel(); <-done }()

	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}
