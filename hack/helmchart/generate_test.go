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
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestChartIsGenerated fails when charts/kvrouter is not what config/ generates, so that a
// change to config/ without `make helm` fails `go test` as well as `make verify`.
func TestChartIsGenerated(t *testing.T) {
	root := filepath.Join("..", "..")
	want, err := generate(filepath.Join(root, "config"), "")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "charts", "kvrouter")
	got := map[string][]byte{}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		got[filepath.ToSlash(rel)], err = os.ReadFile(path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("charts/kvrouter/%s is missing: run make helm", name)
		} else if !bytes.Equal(g, b) {
			t.Errorf("charts/kvrouter/%s is stale: run make helm", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("charts/kvrouter/%s is not generated from config/: run make helm", name)
		}
	}
}

func TestVersion(t *testing.T) {
	files, err := generate(filepath.Join("..", "..", "config"), "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	chart := string(files["Chart.yaml"])
	if !strings.Contains(chart, "\nversion: 1.2.3\n") || !strings.Contains(chart, "\nappVersion: \"1.2.3\"\n") {
		t.Errorf("Chart.yaml with -version v1.2.3:\n%s", chart)
	}
	if _, err := generate(filepath.Join("..", "..", "config"), "1.2"); err == nil || !strings.Contains(err.Error(), `"1.2"`) {
		t.Errorf("version 1.2: err = %v, want one naming it", err)
	}
}

// TestRefusesWhatItCannotTemplate checks that a config/ the chart's values no longer fit stops
// the generator with an error saying what to do, instead of a chart that drops the value.
func TestRefusesWhatItCannotTemplate(t *testing.T) {
	for _, tc := range []struct {
		name, file, old, new, want string
	}{
		{"no leader election argument", "manager/manager.yaml", "        - --leader-elect\n", "", "--leader-elect"},
		{"no WATCH_NAMESPACE", "manager/manager.yaml", "        - name: WATCH_NAMESPACE\n", "        - name: SOMETHING_ELSE\n", "WATCH_NAMESPACE"},
		{"a node selector the chart would override", "manager/manager.yaml", "      serviceAccountName: kvrouter-manager\n",
			"      serviceAccountName: kvrouter-manager\n      nodeSelector: {kubernetes.io/os: linux}\n", "nodeSelector"},
		{"an image kustomize does not resolve", "manager/kustomization.yaml", "- name: router\n", "- name: not-the-router\n", "RELATED_IMAGE_ROUTER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := copyConfig(t)
			path := filepath.Join(cfg, tc.file)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte(tc.old)) {
				t.Fatalf("%s no longer holds %q: update the test", tc.file, tc.old)
			}
			if err := os.WriteFile(path, bytes.Replace(b, []byte(tc.old), []byte(tc.new), 1), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := generate(cfg, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func copyConfig(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "config")
	src := filepath.Join("..", "..", "config")
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
