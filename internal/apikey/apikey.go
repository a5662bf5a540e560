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

// Package apikey checks bearer API keys: "Authorization: Bearer <key>", the scheme OpenAI's
// clients send and vLLM's --api-key checks. Keys are kept as SHA-256 digests and compared in
// constant time, so neither the comparison's duration nor a memory dump of the checker tells
// what a key is.
//
// It is shared by two programs: the router (internal/router/proxy checks clients' keys) and
// vllm-sim (internal/sim/server checks a key as vLLM's --api-key does), which is why it sits at
// the top of internal/ rather than under either.
package apikey

import (
	"crypto/sha256"
	"crypto/subtle"
	"strings"
)

// Set is the keys a server accepts. The zero value accepts nothing.
type Set struct {
	digests [][sha256.Size]byte
}

// NewSet returns the set of keys, ignoring empty ones.
func NewSet(keys []string) Set {
	var s Set
	for _, k := range keys {
		if k != "" {
			s.digests = append(s.digests, sha256.Sum256([]byte(k)))
		}
	}
	return s
}

// Len is the number of keys.
func (s Set) Len() int { return len(s.digests) }

// Allows reports whether an Authorization header value carries one of the keys. Every key is
// compared, whether or not an earlier one matched.
func (s Set) Allows(authorization string) bool {
	key, ok := Bearer(authorization)
	if !ok {
		return false
	}
	d := sha256.Sum256([]byte(key))
	match := 0
	for i := range s.digests {
		match |= subtle.ConstantTimeCompare(d[:], s.digests[i][:])
	}
	return match == 1
}

// Bearer returns the credentials of a "Bearer <key>" header value; the scheme is matched
// without regard to case (RFC 9110 §11.1). ok is false for any other scheme or an empty key.
func Bearer(authorization string) (key string, ok bool) {
	scheme, key, found := strings.Cut(authorization, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	key = strings.TrimSpace(key)
	return key, key != ""
}

// Parse reads the keys of a key file: one key per line; surrounding spaces and blank lines are
// ignored (a Secret written with `kubectl create secret --from-file` often ends in a newline).
func Parse(data []byte) []string {
	var keys []string
	for _, line := range strings.Split(string(data), "\n") {
		if k := strings.TrimSpace(line); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}
