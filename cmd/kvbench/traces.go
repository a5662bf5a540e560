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
	"flag"
	"os"
	"path/filepath"
)

// defaultTraces is where the repository vendors the public traces (bench/traces/README.md),
// relative to the repository root, which is where `make bench` runs kvbench.
const defaultTraces = "bench/traces"

// tracesFlag registers --traces on fs.
func tracesFlag(fs *flag.FlagSet) *string {
	return fs.String("traces", defaultTraces, "directory holding the trace files (the default is relative to the repository root; run elsewhere, the traces folder beside the workload's folder is used)")
}

// tracesDir returns the trace directory for the workload file at workloadPath. A --traces given
// on the command line is used as is. The default, bench/traces, is relative to the repository
// root; run from anywhere else, it falls back to the traces folder next to the workload's folder
// (bench/workloads/x.yaml -> bench/traces) when that exists, so that
// `kvbench simulate path/to/bench/workloads/x.yaml` finds the vendored traces from any directory.
func tracesDir(fs *flag.FlagSet, value, workloadPath string) string {
	explicit := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "traces" {
			explicit = true
		}
	})
	if explicit || value != defaultTraces || isDir(value) {
		return value
	}
	if beside := filepath.Join(filepath.Dir(workloadPath), "..", "traces"); isDir(beside) {
		return beside
	}
	return value
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}
