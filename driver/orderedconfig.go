package driver

// Ordered mode's part of Config: its checks and the intervals derived
// from PartitionLease.

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/pelwarden/pelwarden"
)

// minPartitionLease is the shortest Config.PartitionLease: the holder
// renews every third of it and stops a quarter of it before it lapses,
// which below this leaves too little for a round trip.
const minPartitionLease = 100 * time.Millisecond

// orderedBatch is how many new entries one lease_next hands a holder at
// most. The holder still runs them one at a time, in order; the batch only
// spreads the call's fixed cost (the fence, the renewal, the PEL scan)
// over many entries. Its price: entries of a batch that a crash or a lost
// lease left unhandled count one delivery, so the next holder sees them as
// delivery 2 (a failing head's batch is given back first and counts
// nothing).
const orderedBatch = 100

// OrderedConfig configures an ordered Consumer (NewOrdered): each stream
// of Streams (a partition: see pelwarden.Partitions) is held by at most
// one consumer of the group at a time, through a lease with a fencing token
// kept next to it (pelwarden.LeaseKeyFor), and its entries are handled one
// at a time, in stream order. The consumers of the group find each other
// through a heartbeat (MembersKey) and share the partitions evenly: every
// consumer of the group must list the same Streams. The zero value of
// every optional field means its documented default; NewOrdered never
// modifies the caller's OrderedConfig.
//
// It has only what applies to ordered mode: there are no reads, reclaim
// passes, ack batches or upkeep loops to tune (a holder's one call per
// batch fences, renews, acks and fetches), so the flow-control Tuning and
// the retention fields of Config have no counterpart here.
type OrderedConfig struct {
	// Stream is the one partition to consume; set Stream or Streams.
	Stream string
	// Streams are the partitions (at most MaxStreams), each in its own
	// slot with its lease key and dead-letter stream.
	Streams []string
	// Group is the consumer group. Required.
	Group string
	// Consumer is this consumer's name in the group. Defaults to
	// host-pid-random, unique per process.
	Consumer string
	// Handler runs the business work. Required.
	Handler Handler

	// DeadLetterStream receives the poison entries of Stream. Defaults to
	// pelwarden.DeadLetterStreamFor(Stream); must be empty with Streams
	// (each partition's is that).
	DeadLetterStream string
	// MaxDeliveries: a partition's head delivered this many times without
	// success is dead-lettered, and the partition moves on. 0 means
	// pelwarden.DefaultMaxDeliveries; NoDeliveryLimit makes a poison head
	// block its partition until an operator moves it
	// (pelwarden.DeliveryLimit).
	MaxDeliveries int
	// Backoff is an optional delay per attempt: after its n-th failed
	// attempt the head is tried again Backoff[min(n, len(Backoff))-1]
	// after the failure, the partition waiting meanwhile.
	Backoff []time.Duration
	// PartitionLease is how long a partition's lease lasts from the call
	// that took or renewed it: the holder renews it every PartitionLease/3
	// (with every entry, and while a handler runs), and a crashed holder's
	// partitions run again elsewhere PartitionLease after its last renewal
	// (plus at most one rebalancing round, PartitionLease/5 capped at one
	// second). A holder that could not renew stops handling the partition,
	// cancelling its handler with ErrLostOwnership, once PartitionLease
	// minus a quarter of it has passed since it sent its last successful
	// renewal. Defaults to DefaultPartitionLease; at least 100ms.
	PartitionLease time.Duration

	// Concurrency bounds the handlers running at once over the partitions
	// this consumer owns (one per partition). Defaults to
	// DefaultConcurrency.
	Concurrency int
	// Limit names a limit the handlers run under, shared with every
	// consumer that names it (see Config.Limit): an owner takes permits
	// for the entries of its partition's batch before handling them, and
	// gives back those it did not use.
	Limit string

	// CreateGroup creates the group (and the stream) of every partition at
	// start if missing, and again if it disappears while running.
	CreateGroup bool
	// GroupStartID is where a created group starts: "0" or "$". Defaults
	// to DefaultGroupStartID.
	GroupStartID string

	// ShutdownTimeout: after Run's context is cancelled, each holder hands
	// its partition over once its handler returned; handlers get this long
	// to finish, then their contexts are cancelled and their entries stay
	// pending for the partitions' next holders. Defaults to
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// Logger receives the driver's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Metrics receives counters (PartitionMetrics too, when it has them).
	// Defaults to none.
	Metrics Metrics
}

// config is o as the runtime takes it: a Config in ordered mode.
func (o OrderedConfig) config() Config {
	return Config{Stream: o.Stream, Streams: o.Streams, Group: o.Group, Consumer: o.Consumer, Handler: o.Handler,
		DeadLetterStream: o.DeadLetterStream, MaxDeliveries: o.MaxDeliveries, Backoff: o.Backoff,
		Concurrency: o.Concurrency, Limit: o.Limit, CreateGroup: o.CreateGroup, GroupStartID: o.GroupStartID,
		ShutdownTimeout: o.ShutdownTimeout, Logger: o.Logger, Metrics: o.Metrics,
		ordered: true, partitionLease: o.PartitionLease}
}

// OrderedConfig returns the effective configuration of a Consumer made by
// NewOrdered, defaults filled in (the zero OrderedConfig for one made by
// New).
func (c *Consumer) OrderedConfig() OrderedConfig {
	if !c.cfg.ordered {
		return OrderedConfig{}
	}
	cfg := c.cfg
	return OrderedConfig{Stream: cfg.Stream, Streams: cfg.Streams, Group: cfg.Group, Consumer: cfg.Consumer, Handler: cfg.Handler,
		DeadLetterStream: cfg.DeadLetterStream, MaxDeliveries: cfg.MaxDeliveries, Backoff: cfg.Backoff,
		PartitionLease: cfg.partitionLease, Concurrency: cfg.Concurrency, Limit: cfg.Limit, CreateGroup: cfg.CreateGroup,
		GroupStartID: cfg.GroupStartID, ShutdownTimeout: cfg.ShutdownTimeout, Logger: cfg.Logger, Metrics: cfg.Metrics}
}

// validateOrdered checks the fields of ordered mode (defaults applied):
// PartitionLease only with Ordered, and none of the fields whose loops
// ordered mode does not run.
func (c Config) validateOrdered() error {
	if !c.ordered {
		return nil
	}
	for i, stream := range c.Streams {
		field := fmt.Sprintf("Streams[%d]", i)
		if c.Stream != "" {
			field = "Stream"
		}
		lease := pelwarden.LeaseKeyFor(stream)
		if len(lease) > pelwarden.MaxNameBytes {
			return c.fieldError(field, "its lease key %q would exceed %d bytes", lease, pelwarden.MaxNameBytes)
		}
		if pelwarden.Slot(lease) != pelwarden.Slot(stream) {
			return c.fieldError(field, "%q and its lease key %q hash to different cluster slots; use a hash tag such as {orders} (pelwarden.Partitions names are)", stream, lease)
		}
	}
	if c.partitionLease < minPartitionLease {
		return c.fieldError("PartitionLease", "must be at least %v, got %v", minPartitionLease, c.partitionLease)
	}
	return nil
}

// leaseMargin is how long before a lease's expiry, by the local clock
// from the moment its renewing call was sent, the holder stops handling the
// partition: a quarter of PartitionLease, time for a handler to see its
// cancelled context before another consumer may take the partition.
func (c Config) leaseMargin() time.Duration { return c.partitionLease / 4 }

// leaseRenewal is how long the holder goes without renewing a lease it
// holds: a third of PartitionLease.
func (c Config) leaseRenewal() time.Duration { return c.partitionLease / 3 }

// balanceInterval is the period of the rebalancing round (heartbeat,
// shares, acquisitions and hand-overs): PartitionLease/5, at most a
// second, so a partition given back is taken again within a second.
func (c Config) balanceInterval() time.Duration { return min(c.partitionLease/5, time.Second) }

// MembersKey is the sorted set through which the ordered consumers of
// group on streams find each other: the first of streams in byte order,
// then ":members:" and the group, in that stream's cluster slot. Each
// member is a consumer name scored with the server time (ms) its
// heartbeat lasts until.
func MembersKey(streams []string, group string) string {
	if len(streams) == 0 {
		return ""
	}
	return slices.Min(streams) + ":members:" + group
}
