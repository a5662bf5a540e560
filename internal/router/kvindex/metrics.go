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

package kvindex

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	ix        *Index
	stored    prometheus.Counter
	removed   prometheus.Counter
	evictions prometheus.Counter
	skipped   *prometheus.CounterVec
	keys      *prometheus.Desc
	entries   *prometheus.Desc
	sources   *prometheus.Desc
	predicted *prometheus.Desc
}

func newMetrics() *metrics {
	return &metrics{
		stored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_kvindex_blocks_stored_total",
			Help: "Block stores applied to the prefix index (duplicates and tier copies included).",
		}),
		removed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_kvindex_blocks_removed_total",
			Help: "Block removals applied to the prefix index.",
		}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_kvindex_evictions_total",
			Help: "Content keys evicted because the index reached its key cap.",
		}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_kvindex_skipped_blocks_total",
			Help: "Blocks in events the index could not place, by reason.",
		}, []string{"reason"}),
		keys:      prometheus.NewDesc("kvrouter_kvindex_keys", "Distinct content keys held.", nil, nil),
		entries:   prometheus.NewDesc("kvrouter_kvindex_entries", "Per-source block records held.", nil, nil),
		sources:   prometheus.NewDesc("kvrouter_kvindex_sources", "Event sources known to the index.", nil, nil),
		predicted: prometheus.NewDesc("kvrouter_kvindex_predicted_entries", "Predicted (unconfirmed) entries held.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (ix *Index) Describe(ch chan<- *prometheus.Desc) {
	m := ix.metrics
	m.stored.Describe(ch)
	m.removed.Describe(ch)
	m.evictions.Describe(ch)
	m.skipped.Describe(ch)
	ch <- m.keys
	ch <- m.entries
	ch <- m.sources
	ch <- m.predicted
}

// Collect implements prometheus.Collector.
func (ix *Index) Collect(ch chan<- prometheus.Metric) {
	m := ix.metrics
	m.stored.Collect(ch)
	m.removed.Collect(ch)
	m.evictions.Collect(ch)
	m.skipped.Collect(ch)
	st := ix.Stats()
	ch <- prometheus.MustNewConstMetric(m.keys, prometheus.GaugeValue, float64(st.Keys))
	ch <- prometheus.MustNewConstMetric(m.entries, prometheus.GaugeValue, float64(st.Entries))
	ch <- prometheus.MustNewConstMetric(m.sources, prometheus.GaugeValue, float64(st.Sources))
	ch <- prometheus.MustNewConstMetric(m.predicted, prometheus.GaugeValue, float64(st.Predicted))
}
