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

package epptest

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// Gateway is an HTTP front end that routes each request as an Inference Extension gateway does:
// it asks the picker (Client), then forwards the request to the first destination that accepts
// a connection (Envoy's retry on connect failure down the picker's list), and relays the
// response through the picker to the client. It stands in for Envoy where a test or a
// benchmark needs a gateway in front of a picker.
type Gateway struct {
	Client *Client
	// Subset, when not nil, gives a request's subset hint (nil for none).
	Subset func(*http.Request) []string
	// Transport reaches the engines; default a fresh http.Transport without proxies.
	Transport http.RoundTripper
	// Served, when not nil, is told where each forwarded request was served.
	Served func(r *http.Request, destinations []string, served string)
}

var defaultTransport = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, DisableCompression: true}

// hopHeaders are connection-scoped and never forwarded.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "cannot read the request body", http.StatusBadRequest)
		return
	}
	req := Request{Method: r.Method, Path: r.URL.RequestURI(), Authority: r.Host, Header: r.Header, Body: body}
	if g.Subset != nil {
		req.Subset = g.Subset(r)
	}
	x, err := g.Client.Start(r.Context(), req)
	if err != nil {
		http.Error(w, "endpoint picker: "+err.Error(), http.StatusInternalServerError)
		return
	}
	d := &x.Decision
	if im := d.Immediate; im != nil {
		_ = x.Close()
		maps.Copy(w.Header(), im.Header)
		w.WriteHeader(im.Status)
		_, _ = w.Write(im.Body)
		return
	}
	resp, served, err := g.forward(r, d)
	if err != nil {
		x.Abort()
		http.Error(w, "no healthy upstream: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer resp.Body.Close()
	if g.Served != nil {
		g.Served(r, d.Destinations(), served)
	}
	set, err := x.ResponseHeaders(resp.StatusCode, resp.Header, served, false)
	if err != nil {
		x.Abort()
		http.Error(w, "endpoint picker: "+err.Error(), http.StatusBadGateway)
		return
	}
	h := w.Header()
	for k, vs := range resp.Header {
		if !isHop(k) {
			h[k] = vs
		}
	}
	for k, vs := range set {
		h[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			out, err := x.ResponseBody(buf[:n], false)
			if err != nil {
				x.Abort()
				return
			}
			if _, err := w.Write(out); err != nil {
				x.Abort() // the client left: Envoy resets both streams
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if errors.Is(rerr, io.EOF) {
			out, err := x.ResponseBody(nil, true)
			if err == nil {
				_, _ = w.Write(out)
				err = x.Close()
			}
			if err != nil {
				x.Abort()
			}
			return
		}
		if rerr != nil {
			x.Abort() // the upstream broke off
			panic(http.ErrAbortHandler)
		}
	}
}

// forward sends the request to the decision's destinations in order until one accepts the
// connection, and says which did.
func (g *Gateway) forward(r *http.Request, d *Decision) (*http.Response, string, error) {
	tr := g.Transport
	if tr == nil {
		tr = defaultTransport
	}
	var lastErr error
	for _, dest := range d.Destinations() {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+dest+r.URL.RequestURI(), bytes.NewReader(d.Body))
		if err != nil {
			return nil, "", err
		}
		for k, vs := range r.Header {
			if !isHop(k) {
				req.Header[k] = append([]string(nil), vs...)
			}
		}
		for k, vs := range d.SetHeaders {
			req.Header[k] = vs
		}
		for _, k := range d.RemoveHeaders {
			req.Header.Del(k)
		}
		req.Header.Del("Content-Length")
		req.ContentLength = int64(len(d.Body))
		if cl := d.SetHeaders.Get("Content-Length"); cl != "" {
			if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n != req.ContentLength {
				return nil, "", errors.New("the picker's Content-Length does not match the body it returned")
			}
		}
		resp, err := tr.RoundTrip(req)
		if err == nil {
			return resp, dest, nil
		}
		lastErr = err
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" {
			return nil, "", err // only a refused connection moves on, as Envoy's connect-failure retry
		}
	}
	if lastErr == nil {
		lastErr = errors.New("the picker named no destination")
	}
	return nil, "", lastErr
}

func isHop(k string) bool {
	for _, h := range hopHeaders {
		if strings.EqualFold(k, h) {
			return true
		}
	}
	return false
}
