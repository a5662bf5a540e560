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
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// object is one manifest as kustomize builds it, decoded from JSON (numbers are float64 or
// int64 as encoding/json and apimachinery leave them; sigs.k8s.io/yaml writes both back alike).
type object = map[string]any

// templater turns an object into a Helm template. The object is edited in place with markers,
// plain strings that survive YAML marshalling as they are, and the marshalled text then gets the
// template code for each marker: an expression replaces its marker inside a line, a block
// replaces the whole line of its marker (a map key or a list item), indented like that line.
// Working on the object rather than on text keeps every untemplated field exactly as kustomize
// built it, which is what the chart's test compares.
type templater struct {
	exprs  []string
	blocks []string
}

func (t *templater) expr(code string) string {
	t.exprs = append(t.exprs, code)
	return fmt.Sprintf("__HELM_EXPR_%d__", len(t.exprs)-1)
}

// block registers lines of template code, indented relative to the marker's line. In them,
// "nindent +N" becomes nindent with the marker's own indentation plus N.
func (t *templater) block(code string) string {
	t.blocks = append(t.blocks, strings.TrimSuffix(code, "\n"))
	return fmt.Sprintf("__HELM_BLOCK_%d__", len(t.blocks)-1)
}

// addBlock adds a block as a key of m, where it may output keys of m. Its marker sorts after
// every lower-case key, so that it is never the first key of a list item (the line "- KEY"),
// whose dash the block would take.
func (t *templater) addBlock(m map[string]any, code string) {
	t.blocks = append(t.blocks, strings.TrimSuffix(code, "\n"))
	m[fmt.Sprintf("zz_helm_block_%d", len(t.blocks)-1)] = ""
}

var (
	blockLine  = regexp.MustCompile(`^( *)(?:- __HELM_BLOCK_(\d+)__|zz_helm_block_(\d+): "")$`)
	exprMarker = regexp.MustCompile(`__HELM_EXPR_(\d+)__`)
	relIndent  = regexp.MustCompile(`nindent \+(\d+)`)
)

// render marshals obj and puts the template code in place of the markers. Text of the object
// that looks like template code ({{) is escaped first, so that Helm prints it as it is.
func (t *templater) render(obj object) (string, error) {
	b, err := yaml.Marshal(obj)
	if err != nil {
		return "", err
	}
	text := strings.ReplaceAll(string(b), "{{", `{{ "{{" }}`)
	var out strings.Builder
	for line := range strings.SplitSeq(strings.TrimSuffix(text, "\n"), "\n") {
		if m := blockLine.FindStringSubmatch(line); m != nil {
			i, _ := strconv.Atoi(m[2] + m[3])
			indent := m[1]
			for bl := range strings.SplitSeq(t.blocks[i], "\n") {
				bl = relIndent.ReplaceAllStringFunc(bl, func(s string) string {
					n, _ := strconv.Atoi(strings.TrimPrefix(s, "nindent +"))
					return fmt.Sprintf("nindent %d", len(indent)+n)
				})
				out.WriteString(indent + bl + "\n")
			}
			continue
		}
		line = exprMarker.ReplaceAllStringFunc(line, func(s string) string {
			i, _ := strconv.Atoi(exprMarker.FindStringSubmatch(s)[1])
			return t.exprs[i]
		})
		if strings.Contains(line, "__HELM_") || strings.Contains(line, "zz_helm_block_") {
			return "", fmt.Errorf("%s %s: a template marker is left in %q (a block marker must be a map key or a list item of its own)", obj["kind"], name(obj), line)
		}
		out.WriteString(line + "\n")
	}
	return out.String(), nil
}

// itemYAML is v as the lines of a list item, for a block that keeps it in one branch.
func itemYAML(v any) (string, error) {
	b, err := yaml.Marshal([]any{v})
	if err != nil {
		return "", err
	}
	return strings.ReplaceAll(strings.TrimSuffix(string(b), "\n"), "{{", `{{ "{{" }}`), nil
}

func name(o object) string {
	n, _ := nested(o, "metadata", "name").(string)
	return n
}

// nested is the value at path, nil where any step is missing or not a map.
func nested(o object, path ...string) any {
	var v any = o
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// nestedMap is the map at path, created (with the maps above it) where missing.
func nestedMap(o object, path ...string) map[string]any {
	m := o
	for _, p := range path {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	return m
}
