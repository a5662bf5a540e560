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

package render

import (
	"bytes"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// ToUnstructured converts a rendered object to the unstructured form that server-side apply
// sends and `manager render` prints. It drops what a typed Go object carries but a desired state
// must not: the zero creationTimestamp of every ObjectMeta and the status, which would otherwise
// claim ownership of fields the object's own controller writes.
func ToUnstructured(obj client.Object) (*unstructured.Unstructured, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.DeepCopy(), nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %T %s to unstructured: %w", obj, obj.GetName(), err)
	}
	delete(m, "status")
	dropNullCreationTimestamps(m)
	return &unstructured.Unstructured{Object: m}, nil
}

func dropNullCreationTimestamps(v any) {
	switch t := v.(type) {
	case map[string]any:
		if ts, ok := t["creationTimestamp"]; ok && ts == nil {
			delete(t, "creationTimestamp")
		}
		for _, c := range t {
			dropNullCreationTimestamps(c)
		}
	case []any:
		for _, c := range t {
			dropNullCreationTimestamps(c)
		}
	}
}

// WriteYAML writes the objects as a multi-document YAML stream, each document starting with
// "---". Map keys come out sorted, so the output is byte-for-byte stable for a given input.
func WriteYAML(w io.Writer, objs []client.Object) error {
	var buf bytes.Buffer
	for _, obj := range objs {
		u, err := ToUnstructured(obj)
		if err != nil {
			return err
		}
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			return fmt.Errorf("encoding %s %s as YAML: %w", u.GetKind(), u.GetName(), err)
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	_, err := w.Write(buf.Bytes())
	return err
}
