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

package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ociLabels are the OCI image annotations every image carries; the last three come from the
// build arguments `make docker-build` passes.
var ociLabels = map[string]string{
	"org.opencontainers.image.title":       "",
	"org.opencontainers.image.description": "",
	"org.opencontainers.image.source":      "",
	"org.opencontainers.image.licenses":    "",
	"org.opencontainers.image.version":     "$VERSION",
	"org.opencontainers.image.revision":    "$REVISION",
	"org.opencontainers.image.created":     "$CREATED",
}

// Each runtime image is labelled with the OCI annotations, the build-time ones from arguments the
// stage declares (an ARG before the first FROM is out of scope in a stage until redeclared), and
// `make docker-build` passes those arguments.
func TestImagesCarryOCILabels(t *testing.T) {
	for _, s := range parseDockerfile(t) {
		if !strings.HasPrefix(s.from, "gcr.io/distroless/") {
			continue
		}
		labels, args := map[string]string{}, map[string]bool{}
		for _, in := range s.body {
			switch in.cmd {
			case "ARG":
				name, _, _ := strings.Cut(in.args, "=")
				args[name] = true
			case "LABEL":
				for _, kv := range strings.Fields(in.args) {
					k, v, _ := strings.Cut(kv, "=")
					labels[k] = strings.Trim(v, `"`)
				}
			}
		}
		for k, want := range ociLabels {
			got, ok := labels[k]
			switch {
			case !ok:
				t.Errorf("stage %s has no label %s", s.name, k)
			case want != "" && got != want:
				t.Errorf("stage %s label %s = %q, want %q", s.name, k, got, want)
			case want != "" && !args[strings.TrimPrefix(want, "$")]:
				t.Errorf("stage %s uses %s without declaring ARG %s", s.name, want, strings.TrimPrefix(want, "$"))
			}
		}
	}
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"VERSION", "REVISION", "CREATED"} {
		if !strings.Contains(string(mk), "--build-arg "+arg+"=") {
			t.Errorf("the Makefile passes no --build-arg %s", arg)
		}
	}
}
