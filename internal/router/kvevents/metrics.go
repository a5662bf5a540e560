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

package kvevents

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts what decoders could not use. One Metrics may be shared by many Decoders; it is a
// prometheus.Collector for the caller's registry.
type Metrics struct {
	malformed *prometheus.CounterVec
	skipped   *prometheus.CounterVec
}

// NewMetrics returns unregistered counters:
// kvrouter_kvevents_malformed_payloads_total{reason} and
// kvrouter_kvevents_skipped_events_total{reason}.
func NewMetrics() *Metrics {
	return &Metrics{
		malformed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_kvevents_malformed_payloads_total",
			Help: "KV event payloads that could not be decoded and were dropped, by reason.",
		}, []string{"reason"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_kvevents_skipped_events_total",
			Help: "KV events decoded but skipped (unknown tag), by reason.",
		}, []string{"reason"}),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.malformed.Describe(ch)
	m.skipped.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.malformed.Collect(ch)
	m.skipped.Collect(ch)
}
