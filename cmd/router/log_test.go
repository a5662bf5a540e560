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
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func logLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

// logr's V(1) lines (kvstream's "kv events gap") are labelled DEBUG, not slog's "DEBUG+3", and
// keep their verbosity as "v"; INFO and ERROR lines are unchanged and carry no "v".
func TestLogLevelLabels(t *testing.T) {
	var buf bytes.Buffer
	log := newLoggerTo(&buf, "debug").WithName("kvstream").WithValues("source", "e0/0")
	log.V(1).Info("kv events gap", "from", 3, "to", 7)
	log.V(4).Info("deepest debug")
	log.Info("connected")
	log.Error(errors.New("boom"), "replay failed")
	got := logLines(t, buf.String())
	if len(got) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(got), buf.String())
	}
	for i, want := range []struct {
		level string
		v     any
	}{{"DEBUG", 1.0}, {"DEBUG", 4.0}, {"INFO", nil}, {"ERROR", nil}} {
		if got[i]["level"] != want.level || got[i]["v"] != want.v {
			t.Errorf("line %d: level %v, v %v; want %s, %v", i, got[i]["level"], got[i]["v"], want.level, want.v)
		}
		if got[i]["logger"] != "kvstream" || got[i]["source"] != "e0/0" {
			t.Errorf("line %d lost the logger's name or values: %v", i, got[i])
		}
	}
	if got[0]["msg"] != "kv events gap" || got[0]["from"] != 3.0 || got[0]["to"] != 7.0 {
		t.Errorf("V(1) line lost its message or attributes: %v", got[0])
	}
}

// At the default level, V-lines are not printed at all.
func TestLogLevelInfoDropsVerbose(t *testing.T) {
	var buf bytes.Buffer
	log := newLoggerTo(&buf, "info")
	log.V(1).Info("kv events gap")
	log.Info("shown")
	got := logLines(t, buf.String())
	if len(got) != 1 || got[0]["msg"] != "shown" || got[0]["level"] != "INFO" {
		t.Fatalf("unexpected output:\n%s", buf.String())
	}
}
