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

// Command helmchart writes the Helm chart charts/kvrouter from the kustomize tree in config/
// (`make helm`): config/default gives the CRD (crds/) and the operator's objects (templates/),
// config/prometheus and config/grafana the optional monitoring objects, each behind a value. The
// chart is generated, never edited, so that it and config/ cannot drift: `make verify` fails
// when charts/ differs from what this program writes.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvrouter/kvrouter/hack/internal/gen"
)

func main() {
	configDir := flag.String("config", "config", "the kustomize tree to read")
	out := flag.String("out", filepath.Join("charts", "kvrouter"), "the chart directory to (re)write")
	version := flag.String("version", "", "chart version and appVersion (semver); empty: spec.version of the OLM CSV base in config/manifests")
	flag.Parse()
	files, err := generate(*configDir, *version)
	if err == nil {
		err = gen.WriteTree(*out, ".", files)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helmchart:", err)
		os.Exit(1)
	}
}
