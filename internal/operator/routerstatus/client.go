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

// Package routerstatus reads a router's GET /v1/status and turns it into the KVRouter status:
// the fleet's prefix-cache hit rate and preemption rate, per-endpoint rows, and the conditions
// CacheThrashing, EventsDegraded, TokenizerDegraded and EngineConfigMismatch. Fetch does the
// I/O; Apply is pure, so the rules are unit-tested without a cluster.
package routerstatus

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/routerapi"
)

// StatusPath is where the router serves its status document.
const StatusPath = "/v1/status"

// DefaultTimeout bounds one read of the router's status. The reconciler waits for it, so it is
// short: a router that cannot answer in this time is reported as unavailable.
const DefaultTimeout = 3 * time.Second

// maxBody caps the document read: a fleet of a thousand endpoints is well under it, and a
// misbehaving server cannot make the operator buffer without bound.
const maxBody = 8 << 20

// Fetch GETs baseURL + /v1/status and decodes it. A nil client uses http.DefaultClient; the
// timeout applies on top of the client's own.
func Fetch(ctx context.Context, c *http.Client, baseURL string, timeout time.Duration) (*routerapi.Status, error) {
	if c == nil {
		c = http.DefaultClient
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := strings.TrimSuffix(baseURL, "/") + StatusPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("building request for %s: %w", url, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, strings.TrimSpace(string(snippet)))
	}
	var st routerapi.Status
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxBody))
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", url, err)
	}
	return &st, nil
}
