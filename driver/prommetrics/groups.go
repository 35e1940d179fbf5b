package prommetrics

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// GroupCollector defaults.
const (
	// DefaultMaxStreams is the default of GroupOptions.MaxStreams.
	DefaultMaxStreams = 1000
	// DefaultDiscoverEvery is the default of GroupOptions.DiscoverEvery.
	DefaultDiscoverEvery = time.Minute
	// DefaultScrapeTimeout is the default of GroupOptions.Timeout.
	DefaultScrapeTimeout = 10 * time.Second
)

// GroupOptions configure a GroupCollector.
type GroupOptions struct {
	// Namespace prefixes every metric name. Defaults to "pelwarden".
	Namespace string
	// ConstLabels are added to every series (e.g. the Redis deployment's
	// name when one Prometheus watches several).
	ConstLabels prometheus.Labels
	// Streams are the streams to watch: names, or globs in SCAN MATCH
	// syntax ("{orders}*"). Defaults to every stream with consumer groups
	// ("*") when Partitioned is empty too.
	Streams []string
	// Partitioned are the names of partitioned streams (the name given to
	// pelwarden.Partitions): each one's partitions are found by a SCAN
	// whatever their number.
	Partitioned []string
	// Limits are the names of the limits to watch (pelwarden.SetLimit).
	// When Streams, Partitioned and Limits are all empty, the collector
	// watches every stream with groups and every limit on the server; a
	// collector given streams watches the limits named here only (a limit
	// discovery is a SCAN of the keyspace).
	Limits []string
	// StalledAfter: a consumer that owns entries and has been idle this
	// long is stalled, and its entries count in group_stalled. Use the
	// consumers' MinIdle. Defaults to driver.DefaultMinIdle.
	StalledAfter time.Duration
	// MaxStreams bounds the streams with groups a scrape reads; the rest
	// are left out and state_truncated is 1. Defaults to
	// DefaultMaxStreams.
	MaxStreams int
	// ScanKeys bounds the keys one discovery walks per primary and glob
	// (SCAN ... TYPE stream). Defaults to 200,000.
	ScanKeys int64
	// DiscoverEvery is how long a discovery of the streams is reused: a
	// scrape in between reads only the streams already found. Defaults to
	// DefaultDiscoverEvery.
	DiscoverEvery time.Duration
	// Timeout bounds one scrape's reads. Defaults to DefaultScrapeTimeout.
	Timeout time.Duration
	// Logger receives a warning when a scrape or a group's read fails.
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// GroupCollector exports the state of consumer groups, read from the
// server at each scrape (it implements prometheus.Collector). It is the
// collector behind `pelwarden exporter`; register it in a consumer's own
// process to need no second one:
//
//	gc, err := prommetrics.NewGroupCollector(rdb, prommetrics.GroupOptions{Streams: []string{"{orders}"}})
//	prometheus.MustRegister(gc)
//
// Per stream and group (labels stream, group):
//
//	<ns>_group_pending                  entries delivered and not acked (the PEL's size)
//	<ns>_group_lag                      entries not yet delivered to the group; absent when the server cannot tell
//	<ns>_group_oldest_pending_seconds   age of the oldest pending entry, from its id's time (0 when none)
//	<ns>_group_consumers                consumers in the group
//	<ns>_group_active_consumers         consumers idle less than StalledAfter
//	<ns>_group_stalled                  entries owned by stalled consumers (idle StalledAfter or more)
//	<ns>_group_stalled_consumers        consumers that own entries and have been idle StalledAfter or more
//	<ns>_group_paused                   1 while an operator has the group paused on the stream (pelwarden.PauseGroup)
//	<ns>_group_paused_seconds           for how long (0 when not paused)
//
// Per stream (label stream; dead_letter_stream names its dead-letter stream):
//
//	<ns>_stream_length                  entries in the stream
//	<ns>_dead_letter_entries            records in the stream's dead-letter stream
//	<ns>_dead_letter_added_total        records ever added to it (XINFO STREAM entries-added)
//
// Per partition of a partitioned stream (labels stream, partition_of, partition):
//
//	<ns>_partition_lease_owner          1, with the lease's holder in label owner
//	<ns>_partition_lease_seconds_left   time left on the lease (0 or less: expired)
//	<ns>_partition_head_blocked         1 while a failing head blocks the partition
//	<ns>_partition_head_deliveries      the blocked head's deliveries (0 when none)
//
// Per limit (label limit; pelwarden.Library.SetLimit):
//
//	<ns>_limit_rate                     its rate, permits a second (0: none)
//	<ns>_limit_burst                    its burst
//	<ns>_limit_concurrency              its cap (0: none)
//	<ns>_limit_in_use                   the cap's permits held now
//	<ns>_limit_leases                   the leases holding them
//	<ns>_limit_available                the rate's permits available now (absent without a rate)
//
// And about the scrape itself: <ns>_state_up (0 when the server could not
// be read), <ns>_state_scrape_seconds, <ns>_state_streams,
// <ns>_state_read_errors (groups and limits that could not be read),
// <ns>_state_discovery_complete and <ns>_state_truncated.
//
// A scrape costs a discovery (bounded by ScanKeys, and reused for
// DiscoverEvery), three pipelined round trips whose work grows with the
// groups and consumers, never with the size of a PEL or a stream, and one
// read-only call per limit.
type GroupCollector struct {
	rdb  redis.UniversalClient
	lib  *pelwarden.Library // reads the limits; keeps the call mode it found across scrapes
	opts GroupOptions

	pending, lag, oldest, consumers, active, stalled, stalledConsumers, paused, pausedFor *prometheus.Desc
	length, deadEntries, deadAdded                                                        *prometheus.Desc
	leaseOwner, leaseLeft, headBlocked, headDeliveries                                    *prometheus.Desc
	limitRate, limitBurst, limitConcurrency, limitInUse, limitLeases, limitAvailable      *prometheus.Desc
	up, scrapeSeconds, streams, readErrors, complete, truncate                            *prometheus.Desc

	// mu serialises scrapes: two scrapers at once do the work once each,
	// one after the other, never in parallel.
	mu             sync.Mutex
	discoverLimits bool // watch every limit (see GroupOptions.Limits)
	discovered     *ops.Discovery
	limits         []string // the limits' names, from Limits or the discovery
	discoveredAt   time.Time
	partitions     map[string]partitionOf
}

// partitionOf is a stream's ParsePartition result, kept across scrapes.
type partitionOf struct {
	p  ops.Partition
	ok bool
}

var _ prometheus.Collector = (*GroupCollector)(nil)

// NewGroupCollector returns a collector over rdb (any go-redis client,
// cluster included; never closed by the collector). It validates o: a
// *pelwarden.ArgumentError names the bad field.
func NewGroupCollector(rdb redis.UniversalClient, o GroupOptions) (*GroupCollector, error) {
	if rdb == nil {
		return nil, &pelwarden.ArgumentError{Field: "rdb", Reason: "must not be nil"}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	discoverLimits := len(o.Streams) == 0 && len(o.Partitioned) == 0 && len(o.Limits) == 0
	o = o.withDefaults()
	c := &GroupCollector{rdb: rdb, lib: pelwarden.NewLibrary(rdb), opts: o, partitions: map[string]partitionOf{}, discoverLimits: discoverLimits}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(o.Namespace, "", name), help, labels, o.ConstLabels)
	}
	group := []string{"stream", "group"}
	c.pending = desc("group_pending", "Entries delivered to the group and not acked (the size of its PEL).", group...)
	c.lag = desc("group_lag", "Entries not yet delivered to the group; absent when the server cannot tell (after deletions or trimming past entries the group had not read).", group...)
	c.oldest = desc("group_oldest_pending_seconds", "Age of the group's oldest pending entry, from its id's time on the server's clock (0 when nothing is pending).", group...)
	c.consumers = desc("group_consumers", "Consumers in the group.", group...)
	c.active = desc("group_active_consumers", "Consumers of the group idle less than the collector's stalled-after (a running consumer reads at least every few seconds).", group...)
	c.stalled = desc("group_stalled", "Entries owned by the group's stalled consumers: consumers idle at least the collector's stalled-after (their entries are reclaimable).", group...)
	c.stalledConsumers = desc("group_stalled_consumers", "Consumers that own entries and have been idle at least the collector's stalled-after.", group...)
	c.paused = desc("group_paused", "1 while an operator has the group paused on the stream (pelwarden pause), 0 otherwise.", group...)
	c.pausedFor = desc("group_paused_seconds", "How long the group has been paused on the stream, on the server's clock (0 when it is not).", group...)
	dl := []string{"stream", "dead_letter_stream"}
	c.length = desc("stream_length", "Entries in the stream.", "stream")
	c.deadEntries = desc("dead_letter_entries", "Records in the stream's dead-letter stream.", dl...)
	c.deadAdded = desc("dead_letter_added_total", "Records ever added to the stream's dead-letter stream (its entries-added counter).", dl...)
	part := []string{"stream", "partition_of", "partition"}
	c.leaseOwner = desc("partition_lease_owner", "1, with the consumer holding the partition's lease in label owner (ordered mode).", append(part, "owner")...)
	c.leaseLeft = desc("partition_lease_seconds_left", "Time left on the partition's lease; 0 or less when it expired and nobody took it.", part...)
	c.headBlocked = desc("partition_head_blocked", "1 while a failing head entry blocks the partition (ordered mode).", part...)
	c.headDeliveries = desc("partition_head_deliveries", "Deliveries of the head entry blocking the partition (0 when none).", part...)
	c.limitRate = desc("limit_rate", "The limit's rate, permits a second across every holder (0: no rate).", "limit")
	c.limitBurst = desc("limit_burst", "The limit's burst: permits its rate grants at once after a quiet spell.", "limit")
	c.limitConcurrency = desc("limit_concurrency", "The limit's concurrency cap, permits held at once (0: no cap).", "limit")
	c.limitInUse = desc("limit_in_use", "The limit's cap permits held now (expired leases not counted).", "limit")
	c.limitLeases = desc("limit_leases", "Live leases holding the limit's cap permits (about one per holder).", "limit")
	c.limitAvailable = desc("limit_available", "The limit's rate permits available now; absent without a rate.", "limit")
	c.up = desc("state_up", "1 when the last scrape read the server, 0 when it could not.")
	c.scrapeSeconds = desc("state_scrape_seconds", "Duration of the last scrape's reads.")
	c.streams = desc("state_streams", "Streams with consumer groups the last scrape read.")
	c.readErrors = desc("state_read_errors", "Groups and limits the last scrape could not read (each is logged).")
	c.complete = desc("state_discovery_complete", "1 when the last discovery scanned every primary's keyspace to the end (ScanKeys did not cut it short).")
	c.truncate = desc("state_truncated", "1 when more streams with groups were found than MaxStreams: the rest are not exported.")
	return c, nil
}

func (o GroupOptions) validate() error {
	bad := func(field, reason string) error { return &pelwarden.ArgumentError{Field: field, Reason: reason} }
	switch {
	case o.StalledAfter < 0:
		return bad("StalledAfter", "must not be negative, got "+o.StalledAfter.String())
	case o.MaxStreams < 0:
		return bad("MaxStreams", "must not be negative, got "+strconv.Itoa(o.MaxStreams))
	case o.ScanKeys < 0:
		return bad("ScanKeys", "must not be negative, got "+strconv.FormatInt(o.ScanKeys, 10))
	case o.DiscoverEvery < 0:
		return bad("DiscoverEvery", "must not be negative, got "+o.DiscoverEvery.String())
	case o.Timeout < 0:
		return bad("Timeout", "must not be negative, got "+o.Timeout.String())
	}
	for _, s := range o.Streams {
		if s == "" {
			return bad("Streams", "must not hold an empty name")
		}
	}
	for _, l := range o.Limits {
		if l == "" {
			return bad("Limits", "must not hold an empty name")
		}
	}
	for _, s := range o.Partitioned {
		if _, err := pelwarden.Partitions(s, 1); err != nil {
			return bad("Partitioned", "not a partitioned stream's name: "+err.Error())
		}
	}
	return nil
}

func (o GroupOptions) withDefaults() GroupOptions {
	if o.Namespace == "" {
		o.Namespace = "pelwarden"
	}
	if len(o.Streams) == 0 && len(o.Partitioned) == 0 {
		o.Streams = []string{"*"}
	}
	if o.StalledAfter == 0 {
		o.StalledAfter = driver.DefaultMinIdle
	}
	if o.MaxStreams == 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.ScanKeys == 0 {
		o.ScanKeys = ops.DefaultScanKeys
	}
	if o.DiscoverEvery == 0 {
		o.DiscoverEvery = DefaultDiscoverEvery
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultScrapeTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Describe implements prometheus.Collector.
func (c *GroupCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pending, c.lag, c.oldest, c.consumers, c.active, c.stalled, c.stalledConsumers, c.paused, c.pausedFor,
		c.length, c.deadEntries, c.deadAdded, c.leaseOwner, c.leaseLeft, c.headBlocked, c.headDeliveries,
		c.limitRate, c.limitBurst, c.limitConcurrency, c.limitInUse, c.limitLeases, c.limitAvailable,
		c.up, c.scrapeSeconds, c.streams, c.readErrors, c.complete, c.truncate} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it reads the groups' state
// (see the type's doc) and sends it.
func (c *GroupCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	start := time.Now()
	snap, d, err := c.read(ctx)
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	defer func() { gauge(c.scrapeSeconds, time.Since(start).Seconds()) }()
	if err != nil {
		c.opts.Logger.Warn("pelwarden group collector: scrape failed", "err", err)
		gauge(c.up, 0)
		return
	}
	gauge(c.up, 1)
	gauge(c.streams, float64(snap.Streams))
	gauge(c.complete, boolValue(d.Complete))
	gauge(c.truncate, boolValue(snap.Truncated))
	errs := 0
	lastStream := ""
	for i := range snap.Groups {
		g := &snap.Groups[i]
		if g.Err != nil {
			errs++
			c.opts.Logger.Warn("pelwarden group collector: group not read", "stream", g.Stream, "group", g.Group, "err", g.Err)
			continue
		}
		gauge(c.pending, float64(g.Pending), g.Stream, g.Group)
		if g.Lag >= 0 {
			gauge(c.lag, float64(g.Lag), g.Stream, g.Group)
		}
		gauge(c.oldest, max(g.OldestPendingAge, 0).Seconds(), g.Stream, g.Group)
		gauge(c.consumers, float64(g.Consumers), g.Stream, g.Group)
		gauge(c.active, float64(g.Active), g.Stream, g.Group)
		gauge(c.stalled, float64(g.StalledPending), g.Stream, g.Group)
		gauge(c.stalledConsumers, float64(g.Stalled), g.Stream, g.Group)
		if g.PauseErr != nil {
			c.opts.Logger.Warn("pelwarden group collector: pause not read", "stream", g.Stream, "group", g.Group, "err", g.PauseErr)
		} else {
			var pausedFor time.Duration
			if g.Pause != nil {
				pausedFor = max(snap.At.Sub(g.Pause.At), 0)
			}
			gauge(c.paused, boolValue(g.Pause != nil), g.Stream, g.Group)
			gauge(c.pausedFor, pausedFor.Seconds(), g.Stream, g.Group)
		}
		if g.Stream == lastStream {
			continue // the stream's own series are sent once
		}
		lastStream = g.Stream
		gauge(c.length, float64(g.Length), g.Stream)
		gauge(c.deadEntries, float64(g.DeadLetterLength), g.Stream, g.DeadLetterStream)
		ch <- prometheus.MustNewConstMetric(c.deadAdded, prometheus.CounterValue, float64(g.DeadLetterAdded), g.Stream, g.DeadLetterStream)
		c.collectPartition(g, gauge)
	}
	errs += c.collectLimits(ctx, gauge)
	gauge(c.readErrors, float64(errs))
}

// collectLimits sends the series of every watched limit; it returns how
// many could not be read (each is logged).
func (c *GroupCollector) collectLimits(ctx context.Context, gauge func(*prometheus.Desc, float64, ...string)) int {
	errs := 0
	for _, name := range c.limits {
		st, err := c.lib.ReadLimit(ctx, name)
		if err != nil {
			errs++
			c.opts.Logger.Warn("pelwarden group collector: limit not read", "limit", name, "err", err)
			continue
		}
		if !st.Exists {
			continue
		}
		gauge(c.limitRate, st.Rate, name)
		gauge(c.limitBurst, float64(st.Burst), name)
		gauge(c.limitConcurrency, float64(st.Concurrency), name)
		gauge(c.limitInUse, float64(st.InUse), name)
		gauge(c.limitLeases, float64(st.Leases), name)
		if st.Available >= 0 {
			gauge(c.limitAvailable, float64(st.Available), name)
		}
	}
	return errs
}

// collectPartition sends the lease series of g's stream when it is a
// partition with a lease hash.
func (c *GroupCollector) collectPartition(g *ops.GroupState, gauge func(*prometheus.Desc, float64, ...string)) {
	if g.LeaseErr != nil {
		c.opts.Logger.Warn("pelwarden group collector: partition lease not read", "stream", g.Stream, "err", g.LeaseErr)
		return
	}
	if g.Lease == nil {
		return
	}
	po, seen := c.partitions[g.Stream]
	if !seen {
		po.p, po.ok = ops.ParsePartition(g.Stream)
		c.partitions[g.Stream] = po
	}
	of, index := "", ""
	if po.ok {
		of, index = po.p.Name, strconv.Itoa(po.p.Index)
	}
	l := g.Lease
	if l.Owner != "" {
		gauge(c.leaseOwner, 1, g.Stream, of, index, l.Owner)
	}
	gauge(c.leaseLeft, l.Left.Seconds(), g.Stream, of, index)
	gauge(c.headBlocked, boolValue(l.Blocked != ""), g.Stream, of, index)
	gauge(c.headDeliveries, float64(l.BlockedDeliveries), g.Stream, of, index)
}

// read discovers the streams (or reuses the last discovery) and reads
// their groups.
func (c *GroupCollector) read(ctx context.Context) (*ops.GroupsSnapshot, *ops.Discovery, error) {
	if c.discovered == nil || time.Since(c.discoveredAt) >= c.opts.DiscoverEvery {
		d, err := c.discover(ctx)
		if err != nil {
			return nil, nil, err
		}
		limits := c.opts.Limits
		if c.discoverLimits {
			found, complete, err := ops.DiscoverLimits(ctx, c.rdb, c.opts.ScanKeys)
			if err != nil {
				return nil, nil, fmt.Errorf("discover limits: %w", err)
			}
			limits = found
			d.Complete = d.Complete && complete
		}
		c.discovered, c.limits, c.discoveredAt = d, limits, time.Now()
		if len(c.partitions) > 4*len(d.Streams)+1024 {
			clear(c.partitions) // streams come and go: keep the memo bounded
		}
	}
	snap, err := ops.ReadGroups(ctx, c.rdb, c.discovered.Streams, ops.GroupsOptions{StalledAfter: c.opts.StalledAfter, MaxStreams: c.opts.MaxStreams})
	if err != nil {
		return nil, nil, err
	}
	return snap, c.discovered, nil
}

// discover finds the streams of every pattern of Streams and Partitioned.
func (c *GroupCollector) discover(ctx context.Context) (*ops.Discovery, error) {
	out := &ops.Discovery{Complete: true}
	patterns := slices.Clone(c.opts.Streams)
	for _, name := range c.opts.Partitioned {
		patterns = append(patterns, ops.PartitionGlob(name))
	}
	for i, pattern := range patterns {
		d, err := ops.DiscoverStreams(ctx, c.rdb, ops.DiscoverOptions{Match: pattern, MaxKeys: c.opts.ScanKeys})
		if err != nil {
			return nil, fmt.Errorf("discover %s: %w", pattern, err)
		}
		out.Complete = out.Complete && d.Complete
		for _, s := range d.Streams {
			if i >= len(c.opts.Streams) {
				if _, ok := ops.ParsePartition(s); !ok {
					continue // a key under the name that Partitions did not make
				}
			}
			out.Streams = append(out.Streams, s)
		}
	}
	slices.Sort(out.Streams)
	out.Streams = slices.Compact(out.Streams)
	return out, nil
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
