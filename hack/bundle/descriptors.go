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
	"slices"
	"strings"
	"unicode"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// The console's x-descriptors (OLM's descriptor reference) that the generator gives fields by
// their schema type, and the ones that stand for a whole object: a field carrying one of the
// latter in the CSV base gets no descriptors for what is inside it.
const (
	xText          = "urn:alm:descriptor:com.tectonic.ui:text"
	xNumber        = "urn:alm:descriptor:com.tectonic.ui:number"
	xBooleanSwitch = "urn:alm:descriptor:com.tectonic.ui:booleanSwitch"
	xSelectPrefix  = "urn:alm:descriptor:com.tectonic.ui:select:"
)

var wholeObjectXDescriptors = []string{
	"urn:alm:descriptor:com.tectonic.ui:resourceRequirements",
	"urn:alm:descriptor:com.tectonic.ui:nodeAffinity",
	"urn:alm:descriptor:com.tectonic.ui:podAffinity",
	"urn:alm:descriptor:com.tectonic.ui:podAntiAffinity",
}

// descriptor is a spec descriptor; status descriptors have the same fields (asStatus).
type descriptor = operatorsv1alpha1.SpecDescriptor

// deriveDescriptors gives every field under schema (the spec or the status of the CRD) a
// descriptor, so that fields added to the API get one when `make bundle` runs again. Objects are
// walked into; arrays, maps and objects that base marks as a whole (resourceRequirements...) are
// leaves. base holds the hand-written display names and x-descriptors (the CSV base): its
// x-descriptors replace the ones derived from the type, and its paths must exist in the schema.
// Fields come in the order of base, then alphabetically, parents before their children.
func deriveDescriptors(schema *apiextensionsv1.JSONSchemaProps, base []descriptor, spec bool) ([]descriptor, error) {
	overrides := map[string]int{}
	for i, d := range base {
		if _, dup := overrides[d.Path]; dup {
			return nil, fmt.Errorf("descriptor %q is listed twice", d.Path)
		}
		overrides[d.Path] = i
	}
	var out []descriptor
	seen := map[string]bool{}
	var walk func(prefix string, node *apiextensionsv1.JSONSchemaProps)
	walk = func(prefix string, node *apiextensionsv1.JSONSchemaProps) {
		for _, name := range orderedProperties(prefix, node, overrides) {
			prop := node.Properties[name]
			path := prefix + name
			seen[path] = true
			d := descriptor{Path: path, DisplayName: displayName(name), Description: firstParagraph(prop.Description)}
			if spec {
				d.XDescriptors = typeXDescriptors(&prop)
			}
			if i, ok := overrides[path]; ok {
				if b := base[i]; b.DisplayName != "" {
					d.DisplayName = b.DisplayName
				}
				if b := base[i]; b.Description != "" {
					d.Description = b.Description
				}
				if b := base[i]; b.XDescriptors != nil {
					d.XDescriptors = b.XDescriptors
				}
			}
			out = append(out, d)
			if prop.Type == "object" && len(prop.Properties) > 0 && !wholeObject(d.XDescriptors) {
				walk(path+".", &prop)
			}
		}
	}
	walk("", schema)
	for _, d := range base {
		if !seen[d.Path] {
			return nil, fmt.Errorf("the CSV base describes %q, which the CRD schema does not have (or holds inside a field described as a whole)", d.Path)
		}
	}
	return out, nil
}

// orderedProperties lists node's properties: those named in the CSV base first, in its order,
// then the others alphabetically.
func orderedProperties(prefix string, node *apiextensionsv1.JSONSchemaProps, overrides map[string]int) []string {
	names := make([]string, 0, len(node.Properties))
	for name := range node.Properties {
		names = append(names, name)
	}
	rank := func(name string) int {
		if i, ok := overrides[prefix+name]; ok {
			return i
		}
		return len(overrides)
	}
	slices.SortFunc(names, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return names
}

func typeXDescriptors(p *apiextensionsv1.JSONSchemaProps) []string {
	switch {
	case p.XIntOrString:
		return []string{xText}
	case p.Type == "boolean":
		return []string{xBooleanSwitch}
	case p.Type == "integer" || p.Type == "number":
		// The console's select widget writes strings, so integer enums stay numbers.
		return []string{xNumber}
	case p.Type == "string" && len(p.Enum) > 0:
		var xs []string
		for _, v := range p.Enum {
			xs = append(xs, xSelectPrefix+strings.Trim(string(v.Raw), `"`))
		}
		return xs
	case p.Type == "string":
		return []string{xText}
	}
	return nil
}

func wholeObject(xs []string) bool {
	return slices.ContainsFunc(xs, func(x string) bool { return slices.Contains(wholeObjectXDescriptors, x) })
}

// acronyms keep their capitals in derived display names.
var acronyms = map[string]string{"gpu": "GPU", "hf": "HF", "id": "ID", "kv": "KV", "pvc": "PVC", "uid": "UID", "url": "URL"}

// displayName turns a field name into words: "tensorParallelSize" is "Tensor Parallel Size",
// "cachePVC" is "Cache PVC".
func displayName(field string) string {
	var words []string
	rs := []rune(field)
	start := 0
	for i := 1; i <= len(rs); i++ {
		boundary := i == len(rs) ||
			(unicode.IsUpper(rs[i]) && (unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]))))
		if boundary {
			words = append(words, string(rs[start:i]))
			start = i
		}
	}
	for i, w := range words {
		if a, ok := acronyms[strings.ToLower(w)]; ok {
			words[i] = a
			continue
		}
		r := []rune(w)
		r[0] = unicode.ToUpper(r[0])
		words[i] = string(r)
	}
	return strings.Join(words, " ")
}

// firstParagraph is a schema description up to its first blank line, on one line: the console
// shows descriptor descriptions as one-line help.
func firstParagraph(s string) string {
	if i := strings.Index(s, "\n\n"); i >= 0 {
		s = s[:i]
	}
	return strings.Join(strings.Fields(s), " ")
}

// asStatus converts descriptors to status descriptors; the two types have the same fields.
func asStatus(ds []operatorsv1alpha1.SpecDescriptor) []operatorsv1alpha1.StatusDescriptor {
	out := make([]operatorsv1alpha1.StatusDescriptor, 0, len(ds))
	for _, d := range ds {
		out = append(out, operatorsv1alpha1.StatusDescriptor(d))
	}
	return out
}

func asSpec(ds []operatorsv1alpha1.StatusDescriptor) []operatorsv1alpha1.SpecDescriptor {
	out := make([]operatorsv1alpha1.SpecDescriptor, 0, len(ds))
	for _, d := range ds {
		out = append(out, operatorsv1alpha1.SpecDescriptor(d))
	}
	return out
}
