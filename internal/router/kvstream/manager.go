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

package kvstream

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kvrouter/kvrouter/internal/router/kvevents"
	"github.com/kvrouter/kvrouter/internal/router/kvindex"
)

// Manager runs one subscriber per (endpoint, rank) and feeds a Sink. Give it endpoints with
// SetEndpoints (from discovery) at any time, before or after Start. It implements
// prometheus.Collector for the per-source metrics and the decoders' malformed-payload counters.
type Manager struct {
	sink    Sink
	cfg     Config
	tr      Transport
	decodeM *kvevents.Metrics

	mu         sync.Mutex
	ctx        context.Context // nil until Start
	configured bool            // SetEndpoints was called
	eps        map[string]Endpoint
	running    map[string]*endpointRun
}

type endpointRun struct {
	subs   []*subscriber
	cancel context.CancelFunc
	done   chan struct{}
}

// NewManager returns a Manager feeding sink over the pure-Go ZMQ transport, whose connections
// refuse frames over cfg.MaxFrameBytes.
func NewManager(sink Sink, cfg Config) *Manager {
	return NewManagerWithTransport(sink, cfg, GoZMQ{MaxFrameBytes: cfg.MaxFrameBytes})
}

// NewManagerWithTransport is NewManager with another transport (tests, libzmq).
func NewManagerWithTransport(sink Sink, cfg Config, tr Transport) *Manager {
	if cfg.HWM <= 0 {
		cfg.HWM = 10000
	}
	if cfg.ReconnectMin <= 0 {
		cfg.ReconnectMin = 100 * time.Millisecond
	}
	if cfg.ReconnectMax <= 0 {
		cfg.ReconnectMax = 5 * time.Second
	}
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = logr.Discard()
	}
	return &Manager{sink: sink, cfg: cfg, tr: tr, decodeM: kvevents.NewMetrics(),
		eps: map[string]Endpoint{}, running: map[string]*endpointRun{}}
}

// Start runs the subscribers until ctx is done, then stops them and returns. Call it once.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.ctx != nil {
		m.mu.Unlock()
		return fmt.Errorf("kvstream: Manager already started")
	}
	m.ctx = ctx
	for _, ep := range m.eps {
		m.startLocked(ep)
	}
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	runs := m.running
	m.running = map[string]*endpointRun{}
	m.mu.Unlock()
	for _, r := range runs {
		r.cancel()
		<-r.done
	}
	return nil
}

// SetEndpoints reconciles the subscribed set: new endpoints get subscribers, changed ones
// (URLs, ranks or topic) are restarted, vanished ones are stopped and their entries removed from
// the sink (ClearSource for each rank). Endpoints with an empty Name or EventsURL are ignored.
func (m *Manager) SetEndpoints(eps []Endpoint) {
	want := make(map[string]Endpoint, len(eps))
	for _, ep := range eps {
		if ep.Name == "" || ep.EventsURL == "" {
			continue
		}
		if ep.DPRanks <= 0 {
			ep.DPRanks = 1
		}
		want[ep.Name] = ep
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.configured = true
	for name, old := range m.eps {
		if ep, ok := want[name]; !ok || ep != old {
			m.stopLocked(name, old)
		}
	}
	for name, ep := range want {
		if old, ok := m.eps[name]; ok && old == ep {
			continue
		}
		m.eps[name] = ep
		if m.ctx != nil {
			m.startLocked(ep)
		}
	}
}

func (m *Manager) stopLocked(name string, old Endpoint) {
	delete(m.eps, name)
	if r, ok := m.running[name]; ok {
		delete(m.running, name)
		r.cancel()
		<-r.done
	}
	for rank := 0; rank < old.DPRanks; rank++ {
		m.sink.ClearSource(kvindex.SourceID{Endpoint: name, Rank: rank})
	}
}

func (m *Manager) startLocked(ep Endpoint) {
	ctx, cancel := context.WithCancel(m.ctx)
	r := &endpointRun{cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	for rank := 0; rank < ep.DPRanks; rank++ {
		ev, err1 := RankURL(ep.EventsURL, rank)
		rp, err2 := RankURL(ep.ReplayURL, rank)
		if err1 != nil || err2 != nil {
			m.cfg.Logger.Error(fmt.Errorf("%v %v", err1, err2), "kv events endpoint unusable", "endpoint", ep.Name)
			continue
		}
		s := newSubscriber(kvindex.SourceID{Endpoint: ep.Name, Rank: rank}, ev, rp, ep.Topic, m.sink, m.tr, &m.cfg, m.decodeM)
		r.subs = append(r.subs, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(ctx)
		}()
	}
	go func() {
		wg.Wait()
		close(r.done)
	}()
	m.running[ep.Name] = r
}

// CatchingUp lists the sources whose first catch-up (the replay from 0 after they connect) has
// not ended yet. known is false until both SetEndpoints and Start have been called: before that
// nothing says which sources there will be.
func (m *Manager) CatchingUp() (sources []kvindex.SourceID, known bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.configured || m.ctx == nil {
		return nil, false
	}
	for name := range m.eps {
		r, ok := m.running[name]
		if !ok {
			sources = append(sources, kvindex.SourceID{Endpoint: name})
			continue
		}
		for _, s := range r.subs {
			select {
			case <-s.caughtUp:
			default:
				sources = append(sources, s.src)
			}
		}
	}
	return sources, true
}

// WaitCaughtUp returns nil once every source of the endpoints set so far has ended its first
// catch-up, replayed or failed (a failure leaves the source partial, and waiting longer would
// not repair it), or ctx's error. A restarted router uses it to take traffic only once its index
// holds what the engines' replay buffers had.
func (m *Manager) WaitCaughtUp(ctx context.Context) error {
	return wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		pending, known := m.CatchingUp()
		return known && len(pending) == 0, nil
	})
}

// Status returns every subscriber's health, sorted by endpoint then rank.
func (m *Manager) Status() []SourceStatus {
	now := m.cfg.Now()
	m.mu.Lock()
	var out []SourceStatus
	for _, r := range m.running {
		for _, s := range r.subs {
			out = append(out, s.status(now))
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Source, out[j].Source
		return a.Endpoint < b.Endpoint || (a.Endpoint == b.Endpoint && a.Rank < b.Rank)
	})
	return out
}

var (
	labels      = []string{"endpoint", "rank"}
	descBatches = prometheus.NewDesc("kvrouter_kvstream_batches_total", "KV event batches applied.", labels, nil)
	descBlocks  = prometheus.NewDesc("kvrouter_kvstream_blocks_total", "Blocks applied (stored + removed).", labels, nil)
	descGaps    = prometheus.NewDesc("kvrouter_kvstream_gaps_total", "Sequence gaps detected.", labels, nil)
	descReplays = prometheus.NewDesc("kvrouter_kvstream_replays_total", "Gaps (and catch-ups) repaired by replay.", labels, nil)
	descReplayF = prometheus.NewDesc("kvrouter_kvstream_replay_failures_total",
		"Gaps replay could not cover; each dropped the source's entries.", labels, nil)
	descRestarts = prometheus.NewDesc("kvrouter_kvstream_restarts_total",
		"Engine restarts detected (sequence went back); each dropped the source's entries.", labels, nil)
	descDecodeErr = prometheus.NewDesc("kvrouter_kvstream_decode_errors_total",
		"Messages that could not be parsed or decoded.", labels, nil)
	descOversized = prometheus.NewDesc("kvrouter_kvstream_oversized_frames_total",
		"Connections dropped because the peer declared a frame over the size limit (or a replay over its budget); each dropped the source's entries or that replay.", labels, nil)
	descLag = prometheus.NewDesc("kvrouter_kvstream_event_lag_seconds",
		"Now minus the engine timestamp of the last applied batch.", labels, nil)
	descConnected = prometheus.NewDesc("kvrouter_kvstream_connected", "1 if the SUB socket is connected.", labels, nil)
	descPartial   = prometheus.NewDesc("kvrouter_kvstream_partial",
		"1 if the source's entries were dropped after an unrepaired gap and are being rebuilt.", labels, nil)
)

// Describe implements prometheus.Collector.
func (m *Manager) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBatches, descBlocks, descGaps, descReplays, descReplayF,
		descRestarts, descDecodeErr, descOversized, descLag, descConnected, descPartial} {
		ch <- d
	}
	m.decodeM.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Manager) Collect(ch chan<- prometheus.Metric) {
	for _, st := range m.Status() {
		lv := []string{st.Source.Endpoint, strconv.Itoa(st.Source.Rank)}
		c := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
		}
		c(descBatches, st.Batches)
		c(descBlocks, st.Blocks)
		c(descGaps, st.Gaps)
		c(descReplays, st.Replays)
		c(descReplayF, st.ReplayFailures)
		c(descRestarts, st.Restarts)
		c(descDecodeErr, st.DecodeErrors)
		c(descOversized, st.OversizedFrames)
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, st.Lag.Seconds(), lv...)
		ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, b2f(st.Connected), lv...)
		ch <- prometheus.MustNewConstMetric(descPartial, prometheus.GaugeValue, b2f(st.Partial), lv...)
	}
	m.decodeM.Collect(ch)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
