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
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// modelCache knows which model names the engines serve (base models and LoRA adapters), so an
// unknown model gets a 404 from the router instead of wandering to an engine.
type modelCache struct {
	s     *Server
	mu    sync.Mutex
	ids   map[string]bool // id → is a LoRA adapter
	poke  chan struct{}
	valid bool
	// lastTry rate-limits refreshes on the request path while the list is unknown.
	lastTry time.Time
}

func newModelCache(s *Server) *modelCache {
	return &modelCache{s: s, ids: map[string]bool{}, poke: make(chan struct{}, 1)}
}

// lookup reports whether model is served and, for a LoRA adapter, its name (which enters the
// index keys). When the engines' list is unknown (none reachable, or /v1/models needs an API key
// the router does not have) every name is accepted and the engine judges.
func (c *modelCache) lookup(ctx context.Context, model string) (lora string, known bool) {
	c.mu.Lock()
	try := !c.valid && c.s.now().Sub(c.lastTry) > 5*time.Second
	if try {
		c.lastTry = c.s.now()
	}
	c.mu.Unlock()
	if try {
		c.refresh(ctx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	isLoRA, ok := c.ids[model]
	switch {
	case ok && isLoRA:
		return model, true
	case ok, model == c.s.cfg.Model:
		return "", true
	case len(c.ids) == 0 && c.s.cfg.Model == "":
		return "", true
	}
	return "", false
}

func (c *modelCache) invalidate() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// run refreshes the list every 15 s and soon after the endpoint set changes.
func (c *modelCache) run(ctx context.Context) {
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-c.poke:
		}
		c.refresh(ctx)
	}
}

type modelList struct {
	Data []struct {
		ID     string  `json:"id"`
		Parent *string `json:"parent"`
	} `json:"data"`
}

// refresh unions the model lists of the ready engines.
func (c *modelCache) refresh(ctx context.Context) {
	t := c.s.tbl.Load()
	ids := map[string]bool{}
	seen := map[string]bool{}
	answered := 0
	now := c.s.now()
	for i := range t.routes {
		r := &t.routes[i]
		if seen[r.ep.URL] {
			continue
		}
		seen[r.ep.URL] = true
		if ok, _ := c.s.readiness(r, 0, now); !ok {
			continue
		}
		list, err := c.fetch(ctx, r.ep.URL)
		if err != nil {
			continue
		}
		answered++
		for _, m := range list.Data {
			ids[m.ID] = m.Parent != nil && *m.Parent != "" && *m.Parent != m.ID
		}
	}
	c.mu.Lock()
	if answered > 0 || len(t.routes) == 0 {
		c.ids = ids
	}
	c.valid = answered > 0
	c.mu.Unlock()
}

func (c *modelCache) fetch(ctx context.Context, base string) (*modelList, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	c.s.cfg.Auth.setUpstream(req.Header, "")
	resp, err := c.s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &httpStatusError{resp.Status}
	}
	var l modelList
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return nil, err
	}
	return &l, nil
}

type httpStatusError struct{ status string }

func (e *httpStatusError) Error() string { return "engine answered " + e.status }
