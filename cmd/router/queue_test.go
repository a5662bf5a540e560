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

	"github.com/kvrouter/kvrouter/internal/router/policy"
	"github.com/kvrouter/kvrouter/internal/router/proxy"
)

func TestQueueFlags(t *testing.T) {
	base := []string{"--endpoints-file", "x"}
	apply := func(args ...string) proxy.Config {
		t.Helper()
		o, err := parseFlags(append(base, args...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var cfg proxy.Config
		applyQueueFlags(&cfg, o)
		return cfg
	}
	// Defaults: off; once on, bounded below the admission TTFT bound, holding at the policy's
	// default.
	c := apply()
	if c.QueueCapacity != 0 || c.QueueMaxWait != proxy.DefaultQueueMaxWait || c.Policy.HoldAfter != policy.DefaultHoldAfter {
		t.Fatalf("defaults: %d %v %v", c.QueueCapacity, c.QueueMaxWait, c.Policy.HoldAfter)
	}
	c = apply("--queue-capacity", "1024", "--queue-max-wait", "2s", "--queue-hold-after", "0.25")
	if c.QueueCapacity != 1024 || c.QueueMaxWait != 2*time.Second || c.Policy.HoldAfter != 0.25 {
		t.Fatalf("%d %v %v", c.QueueCapacity, c.QueueMaxWait, c.Policy.HoldAfter)
	}
	// 0 on the command line is "never hold", which the policy spells negative (its 0 is its
	// default).
	if c = apply("--queue-hold-after", "0"); c.Policy.HoldAfter >= 0 {
		t.Fatalf("--queue-hold-after 0: HoldAfter %v", c.Policy.HoldAfter)
	}
	for _, bad := range [][]string{
		{"--queue-capacity", "-1"},
		{"--queue-max-wait", "0"},
		{"--queue-max-wait", "-1s"},
		{"--queue-hold-after", "-0.5"},
		{"--queue-hold-after", "NaN"},
	} {
		if _, err := parseFlags(append(base, bad...), io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
