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

package timing

import (
	"strings"
	"testing"
)

// figures computes the headline numbers docs/simulator.md compares with public measurements.
type figures struct {
	tpotBatch1    float64 // s, one sequence decoding at 1k context
	prefill2k     float64 // s, one 2048-token prompt, cold
	decodeTokPerS float64 // output tokens/s with 256 sequences at 1k context
	kvTokens      int     // KV capacity at gpu-memory-utilization 0.9, block size 16
}

func measure(p Profile) figures {
	var one, pre, big Batch
	one.Add(1, 1000)
	pre.Add(2048, 0)
	for range 256 {
		big.Add(1, 1000)
	}
	return figures{
		tpotBatch1:    p.StepTime(one),
		prefill2k:     p.StepTime(pre),
		decodeTokPerS: 256 / p.StepTime(big),
		kvTokens:      p.NumBlocks(16, 0.9) * 16,
	}
}

// The calibration targets and their sources are in docs/simulator.md; these bounds keep the
// profiles from drifting away from them.
func TestCalibration(t *testing.T) {
	cases := []struct {
		profile       string
		tpot, prefill [2]float64
		tput          [2]float64
		kv            [2]int
	}{
		{"h100-llama-3.1-8b-tp1", [2]float64{0.005, 0.010}, [2]float64{0.04, 0.12}, [2]float64{9000, 16000}, [2]int{380000, 480000}},
		{"h100-qwen2.5-32b-tp2", [2]float64{0.012, 0.022}, [2]float64{0.10, 0.30}, [2]float64{4000, 11000}, [2]int{250000, 360000}},
	}
	for _, c := range cases {
		p, err := Lookup(c.profile)
		if err != nil {
			t.Fatal(err)
		}
		f := measure(p)
		t.Logf("%s: TPOT %.1f ms, 2k prefill %.0f ms, decode %.0f tok/s at 256 seqs, KV %d tokens",
			c.profile, f.tpotBatch1*1e3, f.prefill2k*1e3, f.decodeTokPerS, f.kvTokens)
		if f.tpotBatch1 < c.tpot[0] || f.tpotBatch1 > c.tpot[1] || f.prefill2k < c.prefill[0] || f.prefill2k > c.prefill[1] ||
			f.decodeTokPerS < c.tput[0] || f.decodeTokPerS > c.tput[1] || f.kvTokens < c.kv[0] || f.kvTokens > c.kv[1] {
			t.Errorf("%s out of its calibration range: %+v", c.profile, f)
		}
	}
}

func TestStepTimeShape(t *testing.T) {
	p, _ := Lookup("h100-llama-3.1-8b-tp1")
	var empty Batch
	if p.StepTime(empty) != 0 {
		t.Fatal("an empty step must take no time")
	}
	short, long, cached := Batch{}, Batch{}, Batch{}
	short.Add(512, 0)
	long.Add(4096, 0)
	cached.Add(512, 3584) // same prompt as long with 3584 tokens from the prefix cache
	if !(p.StepTime(short) < p.StepTime(cached) && p.StepTime(cached) < p.StepTime(long)/3) {
		t.Fatalf("prefill times short %v cached %v long %v", p.StepTime(short), p.StepTime(cached), p.StepTime(long))
	}
	d1, d64 := Batch{}, Batch{}
	d1.Add(1, 2000)
	for range 64 {
		d64.Add(1, 2000)
	}
	if !(p.StepTime(d64) > p.StepTime(d1) && p.StepTime(d64) < 64*p.StepTime(d1)/8) {
		t.Fatal("decode must batch: 64 sequences cost more than one but far less than 64 steps")
	}
}

func TestForModelAndLookup(t *testing.T) {
	if p := ForModel("Qwen/Qwen2.5-32B-Instruct", 0); p.Model.Name != "qwen2.5-32b" || p.TP != 2 {
		t.Fatalf("32B pick %+v", p)
	}
	if p := ForModel("meta-llama/Llama-3.1-8B-Instruct", 2); p.TP != 2 || !strings.Contains(p.Name, "tp2") || p.AllReduceLatency == 0 {
		t.Fatalf("TP override %+v", p)
	}
	if p := ForModel("meta-llama/Llama-3.3-70B-Instruct", 0); p.Model.Name != "llama-3.1-70b" {
		t.Fatalf("70B pick %+v", p)
	}
	if _, err := Lookup("nope"); err == nil || !strings.Contains(err.Error(), "h100-llama-3.1-8b-tp1") {
		t.Fatalf("unknown profile error %v", err)
	}
}
