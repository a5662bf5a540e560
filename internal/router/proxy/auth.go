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

package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/kvrouter/kvrouter/internal/apikey"
)

// Auth is the router's API-key configuration: the keys clients must present (its own) and the
// key the engines require (vLLM's --api-key). The zero value checks nothing and passes each
// client's Authorization through to the engines, so a key that only the engines check still
// works end to end.
type Auth struct {
	// Clients are the keys a request to /v1/ must carry as "Authorization: Bearer <key>". Nil:
	// none required.
	Clients *KeyFile
	// Engine holds the key sent to the engines in place of the client's Authorization, on
	// proxied requests and on the router's own /tokenize and /v1/models calls. Nil: none.
	Engine *KeyFile
}

// requiresKey reports whether a request to p needs a client key: everything under /v1/ on the
// public handler. /health and /ready stay open for the kubelet's probes; the readers of /metrics,
// /v1/status and /v1/autoscale carry no key and reach them on the admin handler, which checks
// none. The path is cleaned first, as the mux cleans it before routing, so "//v1/completions" or
// "/v1/x/../completions" cannot slip past.
func requiresKey(p string) bool {
	p = path.Clean("/" + p)
	return p == "/v1" || strings.HasPrefix(p, "/v1/")
}

// requireKey wraps the router's handler with the client key check (a no-op without keys).
func (s *Server) requireKey(next http.Handler) http.Handler {
	if s.cfg.Auth.Clients == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// CORS preflights carry no credentials, as in vLLM.
		if r.Method != http.MethodOptions {
			if err := s.checkKey(r.URL.Path, r.Header); err != nil {
				s.refuse(w, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// checkKey says whether a request to p with header may pass the client key check: nil, or the
// 401 it is answered with. Both front ends ask it.
func (s *Server) checkKey(p string, header http.Header) error {
	keys := s.cfg.Auth.Clients
	if keys == nil || !requiresKey(p) {
		return nil
	}
	presented := header.Get("Authorization")
	if keys.Set().Allows(presented) {
		return nil
	}
	msg := "invalid API key"
	if presented == "" {
		msg = "missing API key: send it as Authorization: Bearer <key>"
	}
	return keyError(msg)
}

// keyError is a 401 as OpenAI's API answers it, so that client SDKs raise their authentication
// error. The presented key is never echoed.
func keyError(msg string) *apiError {
	return &apiError{status: http.StatusUnauthorized, typ: invalidRequest, code: "invalid_api_key", msg: msg,
		header: http.Header{"Www-Authenticate": {`Bearer realm="kvrouter"`}}}
}

// upstreamAuthorization is the Authorization value a request to an engine carries, given the
// client's: the engine key when there is one; nothing when the client's header holds the
// router's own key (it is not the engines' to see); else the client's, unchanged.
func (a Auth) upstreamAuthorization(client string) string {
	switch {
	case a.Engine != nil:
		if keys := a.Engine.Keys(); len(keys) > 0 {
			return "Bearer " + keys[0]
		}
		return ""
	case a.Clients != nil:
		return ""
	}
	return client
}

// setUpstream sets the Authorization header of an engine request from the client's.
func (a Auth) setUpstream(h http.Header, client string) {
	if v := a.upstreamAuthorization(client); v != "" {
		h.Set("Authorization", v)
	} else {
		h.Del("Authorization")
	}
}

// KeyFile is a file of API keys, one per line, re-read while the router runs so that a
// rotated Secret (the kubelet swaps the mounted file) applies without a restart: add the new
// key as a second line, move clients over, then remove the old one. A file that becomes
// unreadable or empty keeps the last keys it held.
type KeyFile struct {
	path string
	what string // for logs: "client API keys", "engine API key"
	log  logr.Logger
	cur  atomic.Pointer[keyState]
}

type keyState struct {
	keys []string
	set  apikey.Set
	raw  string
}

// OpenKeyFile reads path; it fails when the file cannot be read or holds no key, so that a
// router told to require a key never starts open.
func OpenKeyFile(path, what string, log logr.Logger) (*KeyFile, error) {
	f := &KeyFile{path: path, what: what, log: log}
	if _, err := f.reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Keys returns the current keys (read only).
func (f *KeyFile) Keys() []string { return f.cur.Load().keys }

// Set returns the current keys as an apikey.Set.
func (f *KeyFile) Set() apikey.Set { return f.cur.Load().set }

// reload reads the file again; changed is true when its keys changed.
func (f *KeyFile) reload() (changed bool, err error) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return false, fmt.Errorf("%s: %w", f.what, err)
	}
	keys := apikey.Parse(data)
	if len(keys) == 0 {
		return false, fmt.Errorf("%s: %s holds no key", f.what, f.path)
	}
	raw := strings.Join(keys, "\n")
	if old := f.cur.Load(); old != nil && old.raw == raw {
		return false, nil
	}
	f.cur.Store(&keyState{keys: keys, set: apikey.NewSet(keys), raw: raw})
	return true, nil
}

// Run re-reads the file every interval until ctx ends. It logs how many keys a change brought,
// never a key.
func (f *KeyFile) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := f.reload()
		switch {
		case err != nil && !failing:
			f.log.Error(err, "cannot re-read the key file; keeping the keys read before", "path", f.path)
		case err == nil && changed:
			f.log.Info("key file reloaded", "what", f.what, "path", f.path, "keys", len(f.Keys()))
		}
		failing = err != nil
	}
}

// LoadAuth opens the router's key files (either path may be empty) and starts re-reading them
// every interval until ctx ends.
func LoadAuth(ctx context.Context, clientKeys, engineKey string, interval time.Duration, log logr.Logger) (Auth, error) {
	var a Auth
	var errs []error
	open := func(path, what string) *KeyFile {
		if path == "" {
			return nil
		}
		f, err := OpenKeyFile(path, what, log)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		go f.Run(ctx, interval)
		return f
	}
	a.Clients = open(clientKeys, "client API keys")
	a.Engine = open(engineKey, "engine API key")
	return a, errors.Join(errs...)
}
