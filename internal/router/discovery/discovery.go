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

// Package discovery finds the engines the router sends traffic to: from a watched YAML file
// (laptops, HPC, tests), from the engine pods of one KVRouter in Kubernetes, or from the pods of a
// Gateway API Inference Extension InferencePool. Either way the result is a full list of
// endpoints handed to a callback whenever it changes; endpoints come and go without a restart.
package discovery

import (
	"context"
	"fmt"
	"net/url"
	"sort"
)

// Endpoint is one engine.
type Endpoint struct {
	// Name identifies the engine in logs, metrics, /v1/status and the X-Kvrouter-Endpoint header
	// (the pod name in Kubernetes).
	Name string `json:"name"`
	// URL is the engine's OpenAI server, e.g. http://10.0.0.7:8000.
	URL string `json:"url"`
	// KVEvents and KVReplay are rank 0's ZMQ endpoints (tcp://host:port); empty when the engine
	// publishes no events (the router then routes it by load only).
	KVEvents string `json:"kvEvents,omitempty"`
	KVReplay string `json:"kvReplay,omitempty"`
	// DPRanks is the number of data-parallel ranks behind URL (0 or 1: one).
	DPRanks int `json:"dpRanks,omitempty"`
	// Ready is false for an engine that exists but must not get traffic (pod not ready,
	// terminating).
	Ready bool `json:"ready"`
	// Role is the engine's pool in a disaggregated fleet (RolePrefill or RoleDecode), from the
	// pod's RoleLabel or the endpoints file; empty when the fleet is not split.
	Role string `json:"role,omitempty"`
}

// Engine roles in a disaggregated fleet, and the pod label that carries them (the operator's
// render package sets it; a test there keeps the two spellings equal).
const (
	RoleLabel   = "serving.kvrouter.dev/role"
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// KnownRole reports whether role names a pool of a disaggregated fleet.
func KnownRole(role string) bool { return role == RolePrefill || role == RoleDecode }

// Ranks returns the number of data-parallel ranks, at least 1.
func (e Endpoint) Ranks() int { return max(1, e.DPRanks) }

// Source is a discovery mechanism. Run calls update with the full endpoint list (sorted by name)
// each time it changes, and blocks until ctx is done or the source fails for good.
type Source interface {
	Run(ctx context.Context, update func([]Endpoint)) error
}

// validate checks one endpoint and normalises it.
func validate(e Endpoint) (Endpoint, error) {
	if e.Name == "" {
		return e, fmt.Errorf("endpoint without a name (url %q)", e.URL)
	}
	u, err := url.Parse(e.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return e, fmt.Errorf("endpoint %s: url %q is not an http(s) URL", e.Name, e.URL)
	}
	for _, z := range []string{e.KVEvents, e.KVReplay} {
		if z == "" {
			continue
		}
		zu, err := url.Parse(z)
		if err != nil || zu.Scheme != "tcp" || zu.Port() == "" {
			return e, fmt.Errorf("endpoint %s: %q is not a tcp://host:port ZMQ endpoint", e.Name, z)
		}
	}
	if e.DPRanks < 0 {
		return e, fmt.Errorf("endpoint %s: dpRanks %d is negative", e.Name, e.DPRanks)
	}
	// Strip a trailing slash so that URL+"/v1/..." is well formed.
	for len(e.URL) > 0 && e.URL[len(e.URL)-1] == '/' {
		e.URL = e.URL[:len(e.URL)-1]
	}
	return e, nil
}

func sortEndpoints(eps []Endpoint) {
	sort.Slice(eps, func(i, j int) bool { return eps[i].Name < eps[j].Name })
}

func equal(a, b []Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
