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
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
	"github.com/kvrouter/kvrouter/internal/operator/render"
)

// runRender implements `manager render -f FILE [--router-image IMG] [--simulator-image IMG]
// [--namespace NS]`: it prints the objects the operator would apply for the KVRouters in FILE as one multi-document YAML stream.
// It runs render.Objects, the function the reconciler runs, and needs no cluster.
func runRender(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("manager render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", `KVRouter manifest to render (YAML, one or more documents); "-" reads stdin`)
	images := bindImageFlags(fs)
	platform := bindPlatformFlags(fs, platformKubernetes)
	access := bindAdminAccessFlags(fs)
	namespace := fs.String("namespace", "default", "namespace of KVRouters whose manifest names none")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: manager render -f FILE [--router-image IMG] [--simulator-image IMG] [--namespace NS] [--platform kubernetes|openshift]\n\n"+
			"Prints the objects the operator creates for a KVRouter manifest, without a cluster.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	images.resolve(fs)
	if *file == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	opts := render.Options{RouterImage: images.router, SimulatorImage: images.simulator, EngineImage: images.engine}
	if err := platform.validate(false); err != nil {
		fmt.Fprintf(stderr, "manager render: %v\n", err)
		return 2
	}
	if _, err := platform.apply(&opts, nil); err != nil {
		fmt.Fprintf(stderr, "manager render: %v\n", err)
		return 2
	}
	if err := access.apply(fs, &opts); err != nil {
		fmt.Fprintf(stderr, "manager render: %v\n", err)
		return 2
	}

	data, err := readInput(*file)
	if err != nil {
		fmt.Fprintf(stderr, "manager render: %v\n", err)
		return 1
	}
	kvrs, err := decodeKVRouters(data, *file)
	if err != nil {
		fmt.Fprintf(stderr, "manager render: %v\n", err)
		return 1
	}
	var objs []client.Object
	for _, kvr := range kvrs {
		if kvr.Namespace == "" {
			kvr.Namespace = *namespace
		}
		o, err := render.Objects(kvr, opts)
		if err != nil {
			fmt.Fprintf(stderr, "manager render: %v\n", err)
			return 1
		}
		objs = append(objs, o...)
	}
	if err := render.WriteYAML(stdout, objs); err != nil {
		fmt.Fprintf(stderr, "manager render: %v\n", err)
		return 1
	}
	return 0
}

func readInput(file string) ([]byte, error) {
	if file == "-" {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return nil, fmt.Errorf("reading stdin: %w", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err // already names the file
	}
	return b, nil
}

// decodeKVRouters reads every non-empty YAML document of data as a KVRouter. Unknown fields are
// errors, as the API server's strict field validation would make them: a misspelt field would
// otherwise be rendered as if it were absent.
func decodeKVRouters(data []byte, source string) ([]*v1alpha1.KVRouter, error) {
	reader := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*v1alpha1.KVRouter
	for doc := 1; ; doc++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: reading document %d: %w", source, doc, err)
		}
		if isEmptyDocument(raw) {
			continue
		}
		var typeMeta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := sigsyaml.Unmarshal(raw, &typeMeta); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, doc, err)
		}
		if typeMeta.APIVersion != v1alpha1.GroupVersion.String() || typeMeta.Kind != "KVRouter" {
			return nil, fmt.Errorf("%s: document %d is %s %q, want kind KVRouter of apiVersion %s",
				source, doc, typeMeta.Kind, typeMeta.APIVersion, v1alpha1.GroupVersion.String())
		}
		var kvr v1alpha1.KVRouter
		if err := sigsyaml.UnmarshalStrict(raw, &kvr); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, doc, err)
		}
		out = append(out, &kvr)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no KVRouter found", source)
	}
	return out, nil
}

func isEmptyDocument(raw []byte) bool {
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && line != "---" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}
