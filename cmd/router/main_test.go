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
	"strings"
	"testing"
)

// The command line the operator renders (contracts), which the router must accept as is.
func TestOperatorCommandLine(t *testing.T) {
	args := strings.Fields("--port 8080 --discovery kubernetes --namespace team-a " +
		"--selector app.kubernetes.io/component=engine,serving.kvrouter.dev/kvrouter=llama " +
		"--engine-port 8000 --kv-events-port 5557 --kv-replay-port 5558 --block-size 32 --policy Auto " +
		"--model llama --session-header X-Session-Id --admin-addr :9090")
	o, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.discovery != "kubernetes" || o.namespace != "team-a" || o.blockSize != 32 || o.policy != "Auto" ||
		o.model != "llama" || o.sessionHeader != "X-Session-Id" || o.enginePort != 8000 || o.port != 8080 || o.adminAddr != ":9090" {
		t.Fatalf("%+v", o)
	}
}

func TestLaptopCommandLineAndDefaults(t *testing.T) {
	o, err := parseFlags([]string{"--port", "8080", "--endpoints-file", "endpoints.yaml"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.discovery != "file" || o.blockSize != 16 || o.policy != "Auto" || o.model != "" || o.adminAddr != ":9090" {
		t.Fatalf("%+v", o)
	}
	for _, bad := range [][]string{
		{},                            // no discovery at all
		{"--discovery", "kubernetes"}, // no namespace/selector
		{"--discovery", "dns", "--endpoints-file", "x"},
		{"--endpoints-file", "x", "--policy", "auto"}, // the CRD enum is case-sensitive
		{"--endpoints-file", "x", "--block-size", "0"},
		{"--endpoints-file", "x", "--kv-cache-report-mode", "loud"},
		{"--endpoints-file", "x", "stray"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
