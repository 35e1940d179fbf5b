package ops

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// PendingOptions are the options of ListPending.
type PendingOptions struct {
	// Stream and Group are required.
	Stream, Group string
	// Consumer, when set, lists only the entries it owns.
	Consumer string
	// MinIdle lists only entries idle at least this long (0: all).
	MinIdle time.Duration
	// MinDeliveries lists only entries delivered at least this many times
	// (0 or 1: all).
	MinDeliveries int64
	// Limit is how many entries to list at most: 1 to MaxPendingLimit.
	Limit int
	// Scan is how many PEL entries to examine at most (in XPENDING pages
	// of 1,000), which bounds the call on a PEL of any size: 1 to
	// MaxPendingScan.
	Scan int64
}

// The bounds of PendingOptions.
const (
	MaxPendingLimit = 10_000
	MaxPendingScan  = 10_000_000
)

// PendingEntry is one entry ListPending lists.
type PendingEntry struct {
	ID, Consumer string
	Idle         time.Duration
	Deliveries   int64
}

// PendingList is ListPending's answer.
type PendingList struct {
	// Entries that matched, in id order, at most Limit.
	Entries []PendingEntry
	// Pending is the group's whole PEL (or the consumer's, with
	// Consumer), Scanned how many of them were examined.
	Pending, Scanned int64
	// Complete: every entry that matches is in Entries (the scan reached
	// the end of the PEL before Limit matches or Scan entries).
	Complete bool
}

// ListPending lists the group's pending entries that match o, with their
// owner, idle time and deliveries: XPENDING pages of 1,000 from the
// oldest id (IDLE filters on the server), never more than o.Scan entries
// examined, so the call is bounded on a PEL of any size.
func ListPending(ctx context.Context, rdb redis.UniversalClient, o PendingOptions) (PendingList, error) {
	switch {
	case o.Limit < 1 || o.Limit > MaxPendingLimit:
		return PendingList{}, argumentError("Limit", "must be 1 to %d, got %d", MaxPendingLimit, o.Limit)
	case o.Scan < 1 || o.Scan > MaxPendingScan:
		return PendingList{}, argumentError("Scan", "must be 1 to %d, got %d", MaxPendingScan, o.Scan)
	case o.MinIdle < 0:
		return PendingList{}, argumentError("MinIdle", "must not be negative, got %v", o.MinIdle)
	case o.MinDeliveries < 0:
		return PendingList{}, argumentError("MinDeliveries", "must not be negative, got %d", o.MinDeliveries)
	}
	sum, err := rdb.XPending(ctx, o.Stream, o.Group).Result()
	if err != nil {
		return PendingList{}, commandError("XPENDING", o.Stream, err)
	}
	out := PendingList{Pending: sum.Count, Entries: []PendingEntry{}}
	if o.Consumer != "" {
		out.Pending = sum.Consumers[o.Consumer]
	}
	start := "-"
	for out.Scanned < o.Scan {
		if err := ctx.Err(); err != nil {
			return out, interrupted(err)
		}
		want := min(1000, o.Scan-out.Scanned)
		page, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: o.Stream, Group: o.Group, Idle: o.MinIdle,
			Start: start, End: "+", Count: want, Consumer: o.Consumer}).Result()
		if err != nil {
			return out, commandError("XPENDING", o.Stream, err)
		}
		for i, p := range page {
			if p.RetryCount < o.MinDeliveries {
				continue
			}
			out.Entries = append(out.Entries, PendingEntry{ID: p.ID, Consumer: p.Consumer, Idle: p.Idle, Deliveries: p.RetryCount})
			if len(out.Entries) == o.Limit {
				out.Scanned += int64(i + 1)
				// Complete only when nothing is left after the last one.
				out.Complete = int64(i+1) == int64(len(page)) && int64(len(page)) < want
				return out, nil
			}
		}
		out.Scanned += int64(len(page))
		if int64(len(page)) < want {
			out.Complete = true
			return out, nil
		}
		start = "(" + page[len(page)-1].ID
	}
	return out, nil
}
