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

package discovery

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"sigs.k8s.io/yaml"
)

// fileSpec is the endpoints file:
//
//	endpoints:
//	  - name: e0
//	    url: http://127.0.0.1:8001
//	    kvEvents: tcp://127.0.0.1:5557
//	    kvReplay: tcp://127.0.0.1:5558
//	    dpRanks: 1          # optional
//	    ready: true         # optional, default true
//	    role: prefill       # optional: prefill or decode in a disaggregated fleet
type fileSpec struct {
	Endpoints []fileEndpoint `json:"endpoints"`
}

type fileEndpoint struct {
	Name     string `json:"name"`
	URL      string `json:"url"`
	KVEvents string `json:"kvEvents,omitempty"`
	KVReplay string `json:"kvReplay,omitempty"`
	DPRanks  int    `json:"dpRanks,omitempty"`
	Ready    *bool  `json:"ready,omitempty"`
	Role     string `json:"role,omitempty"`
}

// ParseFile parses an endpoints file. Unknown fields are errors (a typo such as `kvevent:` would
// otherwise silently turn the index off for that engine), as are duplicate names.
func ParseFile(data []byte) ([]Endpoint, error) {
	var spec fileSpec
	if err := yaml.UnmarshalStrict(data, &spec); err != nil {
		return nil, fmt.Errorf("endpoints file: %w", err)
	}
	out := make([]Endpoint, 0, len(spec.Endpoints))
	seen := map[string]bool{}
	for _, fe := range spec.Endpoints {
		e := Endpoint{Name: fe.Name, URL: fe.URL, KVEvents: fe.KVEvents, KVReplay: fe.KVReplay,
			DPRanks: fe.DPRanks, Ready: fe.Ready == nil || *fe.Ready, Role: fe.Role}
		if e.Role != "" && !KnownRole(e.Role) {
			return nil, fmt.Errorf("endpoints file: endpoint %s: role %q: want %s or %s", fe.Name, fe.Role, RolePrefill, RoleDecode)
		}
		e, err := validate(e)
		if err != nil {
			return nil, fmt.Errorf("endpoints file: %w", err)
		}
		if seen[e.Name] {
			return nil, fmt.Errorf("endpoints file: endpoint %s listed twice", e.Name)
		}
		seen[e.Name] = true
		out = append(out, e)
	}
	sortEndpoints(out)
	return out, nil
}

// File watches an endpoints file. It watches the file's directory rather than the file, so
// editors that write a new file and rename it, and Kubernetes ConfigMap volumes (which swap a
// symlink), are followed. A file that becomes invalid keeps the last good list (and logs why).
type File struct {
	Path string
	Log  logr.Logger
	// Debounce coalesces bursts of file events (default 100 ms).
	Debounce time.Duration
}

// Run implements Source. It fails at once if the file cannot be read or parsed at start.
func (f *File) Run(ctx context.Context, update func([]Endpoint)) error {
	// Watch before the first read, so a change between the read and the watch is not lost.
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", f.Path, err)
	}
	defer w.Close()
	dir := filepath.Dir(f.Path)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	cur, err := f.load()
	if err != nil {
		return err
	}
	update(cur)
	debounce := f.Debounce
	if debounce <= 0 {
		debounce = 100 * time.Millisecond
	}
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("file watcher closed")
			}
			// Any change in the directory may be ours (rename targets, ConfigMap ..data links).
			_ = ev
			timer = time.After(debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("file watcher closed")
			}
			f.Log.Error(err, "watching endpoints file", "path", f.Path)
		case <-timer:
			timer = nil
			next, err := f.load()
			if err != nil {
				f.Log.Error(err, "endpoints file changed but cannot be used; keeping the last good list", "path", f.Path)
				continue
			}
			if !equal(next, cur) {
				cur = next
				f.Log.Info("endpoints file reloaded", "endpoints", len(cur))
				update(cur)
			}
		}
	}
}

func (f *File) load() ([]Endpoint, error) {
	data, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, fmt.Errorf("read endpoints file: %w", err)
	}
	return ParseFile(data)
}
