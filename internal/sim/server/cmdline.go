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

package server

import (
	"fmt"
	"strings"
)

// commandLine is a vLLM command line split up by scan, before any value is interpreted.
type commandLine struct {
	given      map[string][]string // canonical flag name -> values (one- and on/off-kind flags: the last given)
	positional []string
	// ignored are the flags the table does not know, as spelled but without their values: a value
	// may be a secret (--hf-token), so it is dropped here rather than trusted to every later use.
	ignored []string
}

// scan reads a vLLM-style command line: "--name value", "--name=value", underscores or dashes in
// names, on/off flags without a value and "--no-" negations, many-valued flags, and a leading
// positional model ("vllm serve MODEL"). A flag not in the table is accepted and reported in
// ignored; it swallows the next argument when that does not look like a flag, which matches how
// vLLM's value-taking options are written, so that the value is not mistaken for the model.
func scan(args []string) (commandLine, error) {
	c := commandLine{given: map[string][]string{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "serve" && i == 0 {
			continue // "vllm-sim serve MODEL ..." like "vllm serve"
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			c.positional = append(c.positional, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		name = strings.ReplaceAll(name, "_", "-")
		f := lookupFlag(name)
		if f == nil && strings.HasPrefix(name, "no-") {
			if g := lookupFlag(strings.TrimPrefix(name, "no-")); g != nil && g.kind == boolKind {
				if hasVal {
					return c, fmt.Errorf("flag --%s takes no value", name)
				}
				c.given[g.name] = []string{"false"}
				continue
			}
		}
		if f == nil {
			spelled, _, _ := strings.Cut(a, "=")
			c.ignored = append(c.ignored, spelled)
			if !hasVal && i+1 < len(args) && !looksLikeFlag(args[i+1]) {
				i++
			}
			continue
		}
		switch f.kind {
		case boolKind:
			if !hasVal {
				val = "true"
			}
			c.given[f.name] = []string{val}
		case listKind:
			var vals []string
			if hasVal {
				vals = append(vals, val)
			}
			for i+1 < len(args) && !looksLikeFlag(args[i+1]) {
				i++
				vals = append(vals, args[i])
			}
			if len(vals) == 0 {
				return c, fmt.Errorf("flag --%s needs at least one value", f.name)
			}
			c.given[f.name] = append(c.given[f.name], vals...)
		default:
			if !hasVal {
				if i+1 >= len(args) {
					return c, fmt.Errorf("flag --%s needs a value", f.name)
				}
				i++
				val = args[i]
			}
			c.given[f.name] = []string{val}
		}
	}
	return c, nil
}

// looksLikeFlag is true for "--x" and "-x" but not for negative numbers, so that "-1" can be a value.
func looksLikeFlag(s string) bool {
	if !strings.HasPrefix(s, "-") || len(s) < 2 {
		return false
	}
	c := s[1]
	return c == '-' || (c < '0' || c > '9') && c != '.'
}
