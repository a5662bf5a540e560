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
