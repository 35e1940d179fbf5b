package prommetrics_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/driver/prommetrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMetrics(t *testing.T) {
	t.Parallel()
	m := prommetrics.New(prommetrics.Options{ConstLabels: prometheus.Labels{"stream": "{orders}"}})
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	m.Count(driver.EventAcked, 3)
	m.Count(driver.EventAcked, 2)
	m.Count(driver.EventDeletedFromPEL, 1)
	m.DeadLettered("max_deliveries", 4)
	m.HandlerDuration(250 * time.Millisecond)

	want := `
# HELP pelwarden_dead_lettered_total Entries moved to the dead-letter stream, by reason.
# TYPE pelwarden_dead_lettered_total counter
pelwarden_dead_lettered_total{reason="max_deliveries",stream="{orders}"} 4
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "pelwarden_dead_lettered_total"))
	n, err := testutil.GatherAndCount(reg, "pelwarden_events_total")
	require.NoError(t, err)
	require.Equal(t, len(driver.Events()), n, "every event series exists from the start")
	require.InDelta(t, 5, testutil.ToFloat64(counter(t, reg, "acked")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(counter(t, reg, "deleted_from_pel")), 0)
	require.Equal(t, 1, testutil.CollectAndCount(m, "pelwarden_handler_duration_seconds"))

	// The help text names every event, from driver.Events().
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "pelwarden_events_total" {
			for _, e := range driver.Events() {
				require.Contains(t, mf.GetHelp(), e.String())
			}
		}
	}
}

// counter re-reads one event series through the registry.
func counter(t *testing.T, reg *prometheus.Registry, event string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "pelwarden_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "event" && l.GetValue() == event {
					return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x"}, func() float64 { return m.GetCounter().GetValue() })
				}
			}
		}
	}
	t.Fatalf("no series for event %q", event)
	return nil
}

// Ordered mode's partitions: partition_owned is 1 while owned,
// partition_blocked follows the blocking head, and both series go when the
// partition leaves; a "stream" const label does not clash with them.
func TestPartitionGauges(t *testing.T) {
	t.Parallel()
	m := prommetrics.New(prommetrics.Options{ConstLabels: prometheus.Labels{"stream": "orders"}})
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	m.PartitionOwned("{orders/4/0/1}", true)
	m.PartitionOwned("{orders/4/1/2}", true)
	m.PartitionBlocked("{orders/4/1/2}", true)
	want := `
# HELP pelwarden_partition_blocked 1 while a failing head blocks the partition this consumer owns (ordered mode).
# TYPE pelwarden_partition_blocked gauge
pelwarden_partition_blocked{partition="{orders/4/0/1}",stream="orders"} 0
pelwarden_partition_blocked{partition="{orders/4/1/2}",stream="orders"} 1
# HELP pelwarden_partition_owned 1 while this consumer owns the partition (ordered mode).
# TYPE pelwarden_partition_owned gauge
pelwarden_partition_owned{partition="{orders/4/0/1}",stream="orders"} 1
pelwarden_partition_owned{partition="{orders/4/1/2}",stream="orders"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "pelwarden_partition_owned", "pelwarden_partition_blocked"))
	m.PartitionBlocked("{orders/4/1/2}", false)
	m.PartitionOwned("{orders/4/0/1}", false)
	want = `
# HELP pelwarden_partition_blocked 1 while a failing head blocks the partition this consumer owns (ordered mode).
# TYPE pelwarden_partition_blocked gauge
pelwarden_partition_blocked{partition="{orders/4/1/2}",stream="orders"} 0
# HELP pelwarden_partition_owned 1 while this consumer owns the partition (ordered mode).
# TYPE pelwarden_partition_owned gauge
pelwarden_partition_owned{partition="{orders/4/1/2}",stream="orders"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "pelwarden_partition_owned", "pelwarden_partition_blocked"))
}

// A limit's throttled time adds up and its permits held follow the
// latest report, labelled by limit.
func TestLimitMetrics(t *testing.T) {
	t.Parallel()
	m := prommetrics.New(prommetrics.Options{})
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	m.Throttled("payments", 1500*time.Millisecond)
	m.Throttled("payments", 500*time.Millisecond)
	m.PermitsHeld("payments", 7)
	m.PermitsHeld("payments", 3)
	want := `
# HELP pelwarden_limit_permits_held Permits of the limit's concurrency cap this consumer holds (handlers running or queued, reads under way).
# TYPE pelwarden_limit_permits_held gauge
pelwarden_limit_permits_held{limit="payments"} 3
# HELP pelwarden_limit_throttled_seconds_total Time this consumer's reads waited for permits of the limit (driver.Config.Limit).
# TYPE pelwarden_limit_throttled_seconds_total counter
pelwarden_limit_throttled_seconds_total{limit="payments"} 2
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "pelwarden_limit_permits_held", "pelwarden_limit_throttled_seconds_total"))
}

// Bad options are refused with the field named; a server that cannot be
// reached makes state_up 0 and no group series, not a failed scrape.
func TestGroupCollectorWithoutServer(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	for field, o := range map[string]prommetrics.GroupOptions{
		"StalledAfter":  {StalledAfter: -time.Second},
		"MaxStreams":    {MaxStreams: -1},
		"ScanKeys":      {ScanKeys: -1},
		"DiscoverEvery": {DiscoverEvery: -time.Second},
		"Timeout":       {Timeout: -time.Second},
		"Streams":       {Streams: []string{""}},
		"Partitioned":   {Partitioned: []string{"a{b}"}},
	} {
		_, err := prommetrics.NewGroupCollector(rdb, o)
		var ae *pelwarden.ArgumentError
		require.ErrorAs(t, err, &ae, field)
		require.Equal(t, field, ae.Field)
		require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
	}
	_, err := prommetrics.NewGroupCollector(nil, prommetrics.GroupOptions{})
	require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)

	gc, err := prommetrics.NewGroupCollector(rdb, prommetrics.GroupOptions{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(gc))
	want := `
# HELP pelwarden_state_up 1 when the last scrape read the server, 0 when it could not.
# TYPE pelwarden_state_up gauge
pelwarden_state_up 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "pelwarden_state_up"))
	n, err := testutil.GatherAndCount(reg, "pelwarden_group_pending")
	require.NoError(t, err)
	require.Zero(t, n)
}
