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

package policy

import "fmt"

// Kind names a routing policy. The values match the KVRouter CRD's enum.
type Kind string

const (
	Auto         Kind = "Auto"
	PrefillBound Kind = "PrefillBound"
	DecodeBound  Kind = "DecodeBound"
	RoundRobin   Kind = "RoundRobin"
	LeastLoaded  Kind = "LeastLoaded"
	PrefixOnly   Kind = "PrefixOnly"
)

// Kinds lists every policy, in the CRD's order.
var Kinds = []Kind{Auto, PrefillBound, DecodeBound, RoundRobin, LeastLoaded, PrefixOnly}

// ParseKind accepts a policy name as the CRD spells it (case-sensitive, as the enum is).
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown routing policy %q (want one of %v)", s, Kinds)
}

// Shape is the resource a request mostly consumes, which decides the load signal it is
// balanced on.
type Shape string

const (
	// ShapePrefill: the uncached prompt dominates; balance on queued prefill work (as time).
	ShapePrefill Shape = "prefill"
	// ShapeDecode: generation dominates; balance on active streams.
	ShapeDecode Shape = "decode"
)

// Reason says why a decision came out the way it did. It is a metric label, so the set is closed.
type Reason string

const (
	ReasonPrefix        Reason = "prefix"          // stayed on the endpoint holding the longest prefix
	ReasonSaturated     Reason = "saturated"       // the holder was saturated; picked by load
	ReasonLoad          Reason = "load"            // nothing cached anywhere worth following; picked by load
	ReasonRoundRobin    Reason = "round_robin"     // RoundRobin
	ReasonLeastLoaded   Reason = "least_loaded"    // LeastLoaded
	ReasonNoEndpoint    Reason = "no_endpoint"     // nothing ready
	ReasonAdmissionFull Reason = "admission_limit" // every ready endpoint is at its admission limit
)
