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

// Command bundle writes the OLM bundle, bundle/ and bundle.Dockerfile, from the kustomize tree in
// config/ (`make bundle`). It stands in for `operator-sdk generate bundle`, which this repository
// does not download: see docs/openshift.md for what it reads and writes.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/kvrouter/kvrouter/hack/internal/gen"
)

func main() {
	configDir := flag.String("config", "config", "the kustomize tree to read")
	out := flag.String("out", ".", "directory to write bundle/ and bundle.Dockerfile into")
	version := flag.String("version", "", "CSV version (semver); empty: spec.version of the CSV base")
	flag.Parse()
	fs, err := generate(*configDir, *version)
	if err == nil {
		err = gen.WriteTree(*out, bundleDir, fs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bundle:", err)
		os.Exit(1)
	}
}
