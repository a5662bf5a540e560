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
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dockerignored reads .dockerignore's patterns. The file holds plain directory names only (no
// globs or negations), which keeps this check exact; a pattern of another form fails the test.
func dockerignored(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, "*?[!") {
			t.Fatalf(".dockerignore pattern %q: only plain paths are checked here", line)
		}
		dirs = append(dirs, strings.Trim(line, "/"))
	}
	return dirs
}

// Both images build from the repository root with the same .dockerignore (docker and podman
// read it for every Dockerfile in the context), so nothing either one COPYs from the context
// may be ignored: the bundle image copies bundle/, the operator images api/, cmd/, internal/.
func TestBuildContextHoldsWhatTheDockerfilesCopy(t *testing.T) {
	ignored := dockerignored(t)
	for _, dockerfile := range []string{"Dockerfile", "bundle.Dockerfile"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, dockerfile))
		if err != nil {
			t.Fatal(err)
		}
		copies := 0
		for _, st := range parseStages(t, string(b)) {
			for _, in := range st.body {
				if in.cmd != "COPY" || strings.Contains(in.args, "--from=") {
					continue
				}
				fields := strings.Fields(in.args)
				for _, src := range fields[:len(fields)-1] {
					copies++
					src = strings.Trim(filepath.Clean(src), "/")
					if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
						t.Errorf("%s copies %s, which is not in the repository: %v", dockerfile, src, err)
					}
					for _, dir := range ignored {
						if src == dir || strings.HasPrefix(src, dir+"/") {
							t.Errorf("%s copies %s, but .dockerignore leaves %s/ out of the build context", dockerfile, src, dir)
						}
					}
				}
			}
		}
		if copies == 0 {
			t.Errorf("%s: no COPY from the build context found; the parser no longer reads it", dockerfile)
		}
	}
}
