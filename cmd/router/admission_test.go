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
	"io"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/router/admission"
)

func TestAdmissionFlags(t *testing.T) {
	base := []string{"--endpoints-file", "x"}
	o, err := parseFlags(base, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c := admissionConfig(o); !o.admission || c != (admission.Config{TTFTBound: admission.DefaultTTFTBound,
		BatchFraction: admission.DefaultBatchFraction, TailHeadroom: 0.7}) {
		t.Fatalf("defaults: on %v, %+v", o.admission, c)
	}
	o, err = parseFlags(append(base, "--admission-ttft-bound", "0", "--admission-queue-cap", "16",
		"--admission-fleet-queue-cap", "-1", "--admission-engine-capacity", "64", "--admission-batch-fraction", "0.25",
		"--admission-tail-headroom", "1"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// A zero bound on the command line is "no TTFT bound", which the package spells negative.
	if c := admissionConfig(o); c != (admission.Config{TTFTBound: -1, QueueCap: 16, FleetQueueCap: -1, EngineCapacity: 64, BatchFraction: 0.25, TailHeadroom: 1}) {
		t.Fatalf("%+v", c)
	}
	if o, _ := parseFlags(append(base, "--admission=false", "--admission-ttft-bound", "2s"), io.Discard); o.admission ||
		admissionConfig(o).TTFTBound != 2*time.Second {
		t.Fatalf("--admission=false: %+v", o)
	}
	for _, bad := range [][]string{
		{"--admission-ttft-bound", "-1s"},
		{"--admission-queue-cap", "-1"},
		{"--admission-fleet-queue-cap", "-2"},
		{"--admission-engine-capacity", "-5"},
		{"--admission-batch-fraction", "0"},
		{"--admission-batch-fraction", "1.5"},
		{"--admission-tail-headroom", "0"},
		{"--admission-tail-headroom", "1.2"},
	} {
		if _, err := parseFlags(append(base, bad...), io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
