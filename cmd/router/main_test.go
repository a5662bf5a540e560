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

// --mode and the gRPC ports of the endpoint picker: the defaults, the command line the operator
// renders for an InferencePool's picker, and what is refused.
func TestModeFlags(t *testing.T) {
	o, err := parseFlags([]string{"--endpoints-file", "x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.mode != "proxy" || o.grpcPort != 9002 || o.grpcHealthPort != 9003 || !o.serveHTTP() || o.serveEPP() {
		t.Fatalf("defaults %+v", o)
	}
	args := strings.Fields("--discovery kubernetes --namespace team-a --selector app=engine --mode epp " +
		"--grpc-port 9002 --grpc-health-port 9003 --admin-addr :9090")
	if o, err = parseFlags(args, io.Discard); err != nil {
		t.Fatal(err)
	}
	if o.mode != "epp" || o.serveHTTP() || !o.serveEPP() {
		t.Fatalf("epp: %+v", o)
	}
	// --port is not served in epp mode: it may be anything, even a gRPC port's.
	if _, err := parseFlags([]string{"--endpoints-file", "x", "--mode", "epp", "--port", "9002"}, io.Discard); err != nil {
		t.Fatalf("epp mode with --port 9002: %v", err)
	}
	if o, err = parseFlags([]string{"--endpoints-file", "x", "--mode", "both"}, io.Discard); err != nil || !o.serveHTTP() || !o.serveEPP() {
		t.Fatalf("both: %+v %v", o, err)
	}
	for _, bad := range [][]string{
		{"--mode", "gateway"},
		{"--mode", "EPP"},
		{"--mode", "epp", "--grpc-port", "-1"},
		{"--mode", "epp", "--grpc-health-port", "70000"},
		{"--mode", "epp", "--grpc-port", "9003"},     // the health port's
		{"--mode", "both", "--port", "9002"},         // the ext_proc port's
		{"--mode", "epp", "--admin-addr", ":9003"},   // the health port's
		{"--mode", "proxy", "--admin-addr", ":8080"}, // --port's
	} {
		if _, err := parseFlags(append([]string{"--endpoints-file", "x"}, bad...), io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// --discovery inferencepool: the pool names the pods and their ports, so it needs the pool and
// its namespace and refuses a --selector that would be a second, disagreeing source.
func TestInferencePoolDiscoveryFlags(t *testing.T) {
	o, err := parseFlags(strings.Fields("--discovery inferencepool --namespace team-a --pool-name llama --mode epp"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.discovery != "inferencepool" || o.poolName != "llama" || o.namespace != "team-a" {
		t.Fatalf("%+v", o)
	}
	for bad, want := range map[string]string{
		"--discovery inferencepool --namespace team-a":                                    "--pool-name",
		"--discovery inferencepool --pool-name llama":                                     "--namespace",
		"--discovery inferencepool --namespace a --pool-name llama --selector app=engine": "drop --selector",
		"--discovery pool --namespace a --pool-name llama":                                "inferencepool",
	} {
		_, err := parseFlags(strings.Fields(bad), io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", bad, err, want)
		}
	}
}
