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

package overhead

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"time"
)

// PlainProxy is the baseline: httputil.ReverseProxy round-robin over upstreams, with the
// Transport a competent operator would give it (idle connections kept per engine for the whole
// client concurrency, so that no request waits on a dial; no compression, since the engines'
// bytes pass through as they are; no environment proxy). ReverseProxy flushes text/event-stream
// answers as they arrive on its own. The body is read whole before it is forwarded, as the router
// does: passed through as a stream, about 4% of streamed answers were cut short under load
// ("use of closed network connection" on the upstream read), which would spare the baseline
// its slowest requests. /health answers 200 for the harness.
func PlainProxy(upstreams []*url.URL, maxIdlePerHost int) http.Handler {
	transport := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        maxIdlePerHost * max(1, len(upstreams)),
		MaxIdleConnsPerHost: maxIdlePerHost,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	var next atomic.Uint64
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			u := upstreams[next.Add(1)%uint64(len(upstreams))]
			r.SetURL(u)
			r.Out.Host = r.In.Host
			if b, err := io.ReadAll(r.In.Body); err == nil {
				r.Out.Body, r.Out.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
			}
		},
		Transport: transport,
		ErrorLog:  nil,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("/", rp)
	return mux
}
