package driver

// Ordered mode's part of Config: its checks and the intervals derived
// from PartitionLease.

import (
	"fmt"
	"slices"
	"time"

	"github.com/pelwarden/pelwarden"
)

// minPartitionLease is the shortest Config.PartitionLease: the owner
// renews every third of it and stops a quarter of it before it lapses,
// which below this leaves too little for a round trip.
const minPartitionLease = 100 * time.Millisecond

// orderedBatch is how many new entries one lease_next hands an owner at
// most. The owner still runs them one at a time, in order; the batch only
// spreads the call's fixed cost (the fence, the renewal, the PEL scan)
// over many entries. Its price: entries of a batch that a crash or a lost
// lease left unhandled count one delivery, so the next owner sees them as
// delivery 2 (a failing head's batch is given back first and counts
// nothing).
const orderedBatch = 100

// validateOrdered checks the fields of ordered mode (defaults applied):
// PartitionLease only with Ordered, and none of the fields whose loops
// ordered mode does not run.
func (c Config) validateOrdered() error {
	if !c.Ordered {
		if c.PartitionLease != 0 {
			return configError("PartitionLease", "only with Ordered, got %v", c.PartitionLease)
		}
		return nil
	}
	for i, stream := range c.Streams {
		field := fmt.Sprintf("Streams[%d]", i)
		if c.Stream != "" {
			field = "Stream"
		}
		lease := pelwarden.LeaseKeyFor(stream)
		if len(lease) > pelwarden.MaxNameBytes {
			return configError(field, "its lease key %q would exceed %d bytes", lease, pelwarden.MaxNameBytes)
		}
		if pelwarden.Slot(lease) != pelwarden.Slot(stream) {
			return configError(field, "%q and its lease key %q hash to different cluster slots; use a hash tag such as {orders} (pelwarden.Partitions names are)", stream, lease)
		}
	}
	if c.PartitionLease < minPartitionLease {
		return configError("PartitionLease", "must be at least %v, got %v", minPartitionLease, c.PartitionLease)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"AckMode", c.AckMode != AckFenced},
		{"Prefetch", c.Prefetch != 0},
		{"TrimInterval", c.TrimInterval != 0},
		{"ReapIdle", c.ReapIdle != 0},
		{"DeadLetterMaxAge", c.DeadLetterMaxAge != 0},
		{"DeadLetterMaxLen", c.DeadLetterMaxLen != 0},
	} {
		if f.set {
			return configError(f.name, "not available with Ordered (ordered mode acks through the partition's lease, one entry at a time, and runs no upkeep loops); leave it unset")
		}
	}
	return nil
}

// leaseMargin is how long before a lease's expiry, by the local clock
// from the moment its renewing call was sent, the owner stops handling the
// partition: a quarter of PartitionLease, time for a handler to see its
// cancelled context before another consumer may take the partition.
func (c Config) leaseMargin() time.Duration { return c.PartitionLease / 4 }

// leaseRenewal is how long the owner goes without renewing a lease it
// holds: a third of PartitionLease.
func (c Config) leaseRenewal() time.Duration { return c.PartitionLease / 3 }

// balanceInterval is the period of the rebalancing round (heartbeat,
// shares, acquisitions and hand-overs): PartitionLease/5, at most a
// second, so a partition given back is taken again within a second.
func (c Config) balanceInterval() time.Duration { return min(c.PartitionLease/5, time.Second) }

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
