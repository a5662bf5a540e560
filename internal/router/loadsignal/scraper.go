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

package loadsignal

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Target is one engine to scrape.
type Target struct {
	Name string
	// URL of the engine's HTTP server (the scraper appends /metrics).
	URL string
}

// Scraper reads every target's /metrics on an interval and records the result in a Tracker.
type Scraper struct {
	Tracker *Tracker
	Client  *http.Client
	// Targets is called on every round, so endpoints that come and go are followed.
	Targets func() []Target
	// Interval between rounds (default 1 s) and Timeout of one scrape (default 80 % of the
	// interval: a slow engine must not delay the next round).
	Interval, Timeout time.Duration
	// Parallel bounds the concurrent scrapes of one round (default 16).
	Parallel int
	// MaxBytes caps the lines of a metrics page the router keeps, those of the families it
	// reads (default DefaultMaxKeptBytes): an engine is trusted, but not unboundedly.
	MaxBytes int64
	// MaxReadBytes caps the whole page read (default DefaultMaxReadBytes). A page past either
	// cap is a failed scrape, never one read in part.
	MaxReadBytes int64
	// Now is the clock (tests replace it).
	Now func() time.Time
}

// Run scrapes until ctx is done. It scrapes once immediately.
func (s *Scraper) Run(ctx context.Context) {
	interval := s.Interval
	if interval <= 0 {
		interval = time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		s.Round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Round scrapes every target once and waits for all of them.
func (s *Scraper) Round(ctx context.Context) {
	targets := s.Targets()
	par := s.Parallel
	if par <= 0 {
		par = 16
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for _, t := range targets {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			m, err := s.scrape(ctx, t)
			if err != nil {
				if ctx.Err() == nil {
					s.Tracker.RecordScrapeError(t.Name, err)
				}
				return
			}
			s.Tracker.RecordScrape(t.Name, m, s.now())
		}()
	}
	wg.Wait()
}

func (s *Scraper) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Scraper) scrape(ctx context.Context, t Target) (EngineMetrics, error) {
	timeout := s.Timeout
	if timeout <= 0 {
		iv := s.Interval
		if iv <= 0 {
			iv = time.Second
		}
		timeout = iv * 8 / 10
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL+"/metrics", nil)
	if err != nil {
		return EngineMetrics{}, fmt.Errorf("scrape %s: %w", t.Name, err)
	}
	client := s.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return EngineMetrics{}, fmt.Errorf("scrape %s: %w", t.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return EngineMetrics{}, fmt.Errorf("scrape %s: %s", t.Name, resp.Status)
	}
	kept, read := s.MaxBytes, s.MaxReadBytes
	if kept <= 0 {
		kept = DefaultMaxKeptBytes
	}
	if read <= 0 {
		read = DefaultMaxReadBytes
	}
	m, err := ParseMetricsWithin(resp.Body, kept, read)
	if err != nil {
		return EngineMetrics{}, fmt.Errorf("scrape %s: %w", t.Name, err)
	}
	return m, nil
}
