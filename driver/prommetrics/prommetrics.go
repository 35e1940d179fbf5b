// Package prommetrics exports a driver.Consumer's counters to Prometheus. It
// lives in its own package so programs that don't use Prometheus never
// import client_golang.
//
//	m := prommetrics.New(prommetrics.Options{})
//	prometheus.MustRegister(m)
//	c, err := driver.New(rdb, driver.Config{..., Metrics: m})
package prommetrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pelwarden/pelwarden/driver"
)

// Options configure the collector.
type Options struct {
	// Namespace prefixes every metric name. Defaults to "pelwarden".
	Namespace string
	// ConstLabels are added to every series (e.g. the stream and group when
	// one process runs several consumers).
	ConstLabels prometheus.Labels
	// Buckets of the handler duration histogram, in seconds. Defaults to
	// prometheus.DefBuckets.
	Buckets []float64
}

// Metrics implements driver.Metrics, driver.PartitionMetrics,
// driver.LimitMetrics and prometheus.Collector:
//
//	<ns>_events_total{event="read|handled|handler_error|..."}
//	<ns>_dead_lettered_total{reason="max_deliveries|handler|..."}
//	<ns>_handler_duration_seconds
//	<ns>_partition_owned{partition="..."}    1 while this consumer owns the partition (ordered mode)
//	<ns>_partition_blocked{partition="..."}  1 while a failing head blocks it (ordered mode)
//	<ns>_limit_throttled_seconds_total{limit="..."}  time reads waited for the limit's permits
//	<ns>_limit_permits_held{limit="..."}   the limit's cap permits this consumer holds
//
// A partition's series are removed when the consumer no longer owns it,
// so a fleet's sum of partition_owned is the number of owned partitions.
type Metrics struct {
	events   *prometheus.CounterVec
	byEvent  []prometheus.Counter
	dead     *prometheus.CounterVec
	duration prometheus.Histogram
	owned    *prometheus.GaugeVec
	blocked  *prometheus.GaugeVec
	throttle *prometheus.CounterVec
	held     *prometheus.GaugeVec
}

var _ driver.Metrics = (*Metrics)(nil)
var _ driver.PartitionMetrics = (*Metrics)(nil)
var _ driver.LimitMetrics = (*Metrics)(nil)
var _ prometheus.Collector = (*Metrics)(nil)

// New returns a collector; register it with a prometheus.Registerer.
func New(o Options) *Metrics {
	if o.Namespace == "" {
		o.Namespace = "pelwarden"
	}
	if o.Buckets == nil {
		o.Buckets = prometheus.DefBuckets
	}
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: o.Namespace, Name: "events_total", ConstLabels: o.ConstLabels,
			Help: eventsHelp(),
		}, []string{"event"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: o.Namespace, Name: "dead_lettered_total", ConstLabels: o.ConstLabels,
			Help: "Entries moved to the dead-letter stream, by reason.",
		}, []string{"reason"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: o.Namespace, Name: "handler_duration_seconds", ConstLabels: o.ConstLabels,
			Help: "Duration of handler calls.", Buckets: o.Buckets,
		}),
		owned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: o.Namespace, Name: "partition_owned", ConstLabels: o.ConstLabels,
			Help: "1 while this consumer owns the partition (ordered mode).",
		}, []string{"partition"}),
		blocked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: o.Namespace, Name: "partition_blocked", ConstLabels: o.ConstLabels,
			Help: "1 while a failing head blocks the partition this consumer owns (ordered mode).",
		}, []string{"partition"}),
		throttle: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: o.Namespace, Name: "limit_throttled_seconds_total", ConstLabels: o.ConstLabels,
			Help: "Time this consumer's reads waited for permits of the limit (driver.Config.Limit).",
		}, []string{"limit"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: o.Namespace, Name: "limit_permits_held", ConstLabels: o.ConstLabels,
			Help: "Permits of the limit's concurrency cap this consumer holds (handlers running or queued, reads under way).",
		}, []string{"limit"}),
	}
	// Pre-create every event series so they export 0 before the first event.
	for _, e := range driver.Events() {
		m.byEvent = append(m.byEvent, m.events.WithLabelValues(e.String()))
	}
	return m
}

// eventsHelp is the events counter's help text, naming every driver.Event.
func eventsHelp() string {
	names := make([]string, 0, len(driver.Events()))
	for _, e := range driver.Events() {
		names = append(names, e.String())
	}
	return "Consumer events: " + strings.Join(names, ", ") + "."
}

// Count implements driver.Metrics.
func (m *Metrics) Count(e driver.Event, n int) {
	if int(e) >= 0 && int(e) < len(m.byEvent) {
		m.byEvent[e].Add(float64(n))
		return
	}
	m.events.WithLabelValues(e.String()).Add(float64(n))
}

// DeadLettered implements driver.Metrics.
func (m *Metrics) DeadLettered(reason string, n int) {
	m.dead.WithLabelValues(reason).Add(float64(n))
}

// HandlerDuration implements driver.Metrics.
func (m *Metrics) HandlerDuration(d time.Duration) { m.duration.Observe(d.Seconds()) }

// PartitionOwned implements driver.PartitionMetrics: the partition's
// partition_owned series is 1 while owned and removed (with its
// partition_blocked series) when it leaves.
func (m *Metrics) PartitionOwned(stream string, owned bool) {
	if owned {
		m.owned.WithLabelValues(stream).Set(1)
		m.blocked.WithLabelValues(stream).Set(0)
		return
	}
	m.owned.DeleteLabelValues(stream)
	m.blocked.DeleteLabelValues(stream)
}

// PartitionBlocked implements driver.PartitionMetrics.
func (m *Metrics) PartitionBlocked(stream string, blocked bool) {
	v := 0.0
	if blocked {
		v = 1
	}
	m.blocked.WithLabelValues(stream).Set(v)
}

// Throttled implements driver.LimitMetrics.
func (m *Metrics) Throttled(limit string, d time.Duration) {
	m.throttle.WithLabelValues(limit).Add(d.Seconds())
}

// PermitsHeld implements driver.LimitMetrics.
func (m *Metrics) PermitsHeld(limit string, n int) {
	m.held.WithLabelValues(limit).Set(float64(n))
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.events.Describe(ch)
	m.dead.Describe(ch)
	m.duration.Describe(ch)
	m.owned.Describe(ch)
	m.blocked.Describe(ch)
	m.throttle.Describe(ch)
	m.held.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.events.Collect(ch)
	m.dead.Collect(ch)
	m.duration.Collect(ch)
	m.owned.Collect(ch)
	m.blocked.Collect(ch)
	m.throttle.Collect(ch)
	m.held.Collect(ch)
}
