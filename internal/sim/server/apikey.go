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
	"net/http"
	"strings"

	"github.com/kvrouter/kvrouter/internal/apikey"
)

// publicPaths stay open when the engine has API keys, as in vLLM: probes, metrics scraping,
// the version. Every other route needs "Authorization: Bearer <key>" (recent vLLM guards every
// route it serves but these; older releases guarded /v1 only, so /tokenize was open there).
var publicPaths = []string{"/health", "/ping", "/load", "/version", "/metrics"}

func isPublic(path string) bool {
	for _, p := range publicPaths {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// requireAPIKey answers 401 {"error": "Unauthorized"} (vLLM's answer) to a request without one
// of keys; no keys: every request passes.
func requireAPIKey(keys apikey.Set, next http.Handler) http.Handler {
	if keys.Len() == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions || isPublic(r.URL.Path) || keys.Allows(r.Header.Get("Authorization")) {
			next.ServeHTTP(w, r)
			return
		}
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
	})
}
