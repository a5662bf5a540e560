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

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/internal/operator/render"
	"github.com/kvrouter/kvrouter/test/exported"
)

// TestCommittedFilesAreCurrent: config/prometheus holds what the generator writes now, so a
// change to the rules cannot ship in the operator's PrometheusRules but not in the
// cluster-wide files (make verify checks the same after make manifests).
func TestCommittedFilesAreCurrent(t *testing.T) {
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join("..", "..", "config", "prometheus", path))
		if err != nil {
			t.Fatalf("%v: run make manifests", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("config/prometheus/%s is stale: run make manifests", path)
		}
	}
}

func TestWriteCreatesAndRewrites(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{"a.yaml": []byte("a: 1\n"), "sub/b.yaml": []byte("b: 2\n")}
	for range 2 { // the second run finds them current
		if err := write(dir, files); err != nil {
			t.Fatal(err)
		}
	}
	files["a.yaml"] = []byte("a: 3\n")
	if err := write(dir, files); err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		if got, err := os.ReadFile(filepath.Join(dir, path)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %q, %v; want %q", path, got, err, want)
		}
	}
}

// selector finds the metric name of each selector; every selector of the rules has matchers.
var selector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}`)

// TestRulesReadExportedSeries: every series an alert reads is one the router registers or
// vllm-sim (which serves vLLM's names) exports, and the TTFT threshold is a bucket boundary of
// the engines' histogram. A renamed metric or bucket would otherwise leave an alert that
// can never fire.
func TestRulesReadExportedSeries(t *testing.T) {
	known := exported.RouterMetrics(t)
	engineFamilies := exported.EngineMetrics(t)
	for name, fam := range engineFamilies {
		known[name] = true
		if fam.GetType() == dto.MetricType_HISTOGRAM {
			known[name+"_bucket"], known[name+"_count"], known[name+"_sum"] = true, true, true
		}
	}
	for _, r := range render.AlertRules(render.AlertScope{}) {
		sels := selector.FindAllStringSubmatch(r.Expr, -1)
		if len(sels) == 0 {
			t.Errorf("%s reads no series", r.Alert)
		}
		for _, s := range sels {
			if !known[s[1]] {
				t.Errorf("%s reads %s, which neither the router nor the engines export", r.Alert, s[1])
			}
		}
	}

	ttft := engineFamilies["vllm:time_to_first_token_seconds"]
	if ttft == nil || len(ttft.GetMetric()) == 0 {
		t.Fatal("vllm-sim exports no vllm:time_to_first_token_seconds")
	}
	var bounds []string
	for _, b := range ttft.GetMetric()[0].GetHistogram().GetBucket() {
		bounds = append(bounds, model.FloatString(b.GetUpperBound()).String())
	}
	if !strings.Contains(" "+strings.Join(bounds, " ")+" ", " "+render.TTFTThresholdSeconds+" ") {
		t.Errorf("TTFT threshold %s is not a bucket boundary of vllm:time_to_first_token_seconds (%v)", render.TTFTThresholdSeconds, bounds)
	}
}
