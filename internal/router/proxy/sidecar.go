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
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"

	"github.com/kvrouter/kvrouter/internal/router/policy"
)

// SidecarHandler serves the sidecar in front of one decode engine (cmd/router --mode sidecar),
// the other half of EPP mode's split requests: the endpoint picker sends a split request to the
// decode engine's address with the prefill engine's host:port in PrefillerHeader, and the
// sidecar runs the prefill leg there, then the decode leg on its engine, with the proxy's own
// leg code. A request without the header goes to the engine unchanged, as does anything else
// than an inference request. The server's table must hold the local engine alone.
func (s *Server) SidecarHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.handleSidecar(kindCompletion))
	mux.HandleFunc("POST /v1/chat/completions", s.handleSidecar(kindChat))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t := s.tbl.Load()
		if len(t.routes) == 0 {
			s.refuse(w, s.unavailable("the sidecar has no engine"))
			return
		}
		target, err := url.Parse(t.routes[0].ep.URL)
		if err != nil {
			s.refuse(w, s.unavailable("the engine URL is not valid"))
			return
		}
		rp := &httputil.ReverseProxy{Transport: s.client.Transport, Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
		}}
		rp.ServeHTTP(w, r)
	})
	return mux
}

func (s *Server) handleSidecar(kind apiKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.counters.requests.Add(1)
		body, err := s.receiveBody(w, r)
		if err != nil {
			s.refuse(w, err)
			return
		}
		t := s.tbl.Load()
		if len(t.routes) == 0 {
			s.refuse(w, s.unavailable("the sidecar has no engine"))
			return
		}
		req, err := parseBody(kind, body)
		if err != nil {
			s.refuse(w, err)
			return
		}
		prefiller := r.Header.Get(PrefillerHeader)
		r.Header.Del(PrefillerHeader)
		// Not tokenized: a size for the engine's load accounting only.
		prompt := len(body) / 4
		rt := routing{req: policy.Request{PromptTokens: prompt, MaxTokens: req.maxTokens(), LoRA: req.lora}}
		d := policy.Decision{Endpoint: t.routes[0].name, UncachedTokens: prompt, PrefillWork: -1}
		x := s.newExchange(w, r, &req, rt)
		if prefiller == "" {
			x.run(t, d)
			return
		}
		target, err := prefillerAddr(prefiller)
		if err != nil {
			s.refuse(w, badRequest("", PrefillerHeader+": "+err.Error()))
			return
		}
		res := x.runPrefill(prefillTarget{base: "http://" + target, deadline: s.cfg.TTFBWatchdogCap}, d)
		if res == nil {
			return
		}
		if !res.fallback {
			x.prefillEndpoint = prefiller
		}
		x.run(t, d)
	}
}

// prefillerAddr checks the prefill engine a split request names. The endpoint picker names a
// pod by its IP (discovery reads pod IPs), so anything else (a host name, a URL smuggled into
// the host part, a link-local address such as a cloud metadata service, a multicast or
// unspecified one) is refused: the sidecar sends the request, with the Authorization it came
// with, where the header says, and must not be a relay to arbitrary places. The header is only
// trusted because the picker sets it and strips a client's own; a NetworkPolicy limiting the
// engine pods' egress to the pod network is the complete answer (docs/router.md).
func prefillerAddr(v string) (string, error) {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return "", fmt.Errorf("%q is not an ip:port", v)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return "", fmt.Errorf("%q: want the prefill engine's IP address, not %q", v, host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: port %q is not a port number", v, port)
	}
	if ip.IsUnspecified() || ip.IsMulticast() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() {
		return "", fmt.Errorf("%q: %s is not an engine address", v, ip)
	}
	return net.JoinHostPort(ip.Unmap().String(), port), nil
}
