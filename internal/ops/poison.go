package ops

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// Consumer is the consumer name the operator actions pass to the library.
// Calls that only dead-letter never create it in the group.
const Consumer = "pelwarden-cli"

// PoisonPage is how many PEL entries one claim call of Poison walks.
const PoisonPage = 1000

// PoisonOptions are the options of Poison.
type PoisonOptions struct {
	// Stream, Group and DeadLetterStream are required.
	Stream, Group, DeadLetterStream string
	// MaxDeliveries: entries delivered at least this many times are
	// dead-lettered, as pelwarden.DeliveryLimit reads it (0 is
	// pelwarden.DefaultMaxDeliveries); NoDeliveryLimit is refused.
	MaxDeliveries int
	// MinIdle spares entries idle less than this (0: every entry).
	MinIdle time.Duration
	// Progress, when set, is called after each page but the last.
	Progress func(PoisonProgress)
}

// PoisonProgress is a poison pass's state after a page.
type PoisonProgress struct {
	// Page is the number of pages walked, Cursor where the next starts.
	Page   int
	Cursor string
	// DeadLettered entries so far.
	DeadLettered int
}

// PoisonResult is what Poison did.
type PoisonResult struct {
	// DeadLettered are the ids moved to the dead-letter stream.
	DeadLettered []string
	// Deleted ids were pending but their entries were gone from the
	// stream; they were cleared from the PEL.
	Deleted []string
}

// Poison walks the group's PEL with the claim function in dead-letter-only
// mode: every entry delivered at least MaxDeliveries times (and idle at
// least MinIdle) is copied to the dead-letter stream with reason
// max_deliveries and acknowledged, atomically per page of PoisonPage; the
// other entries stay with their owners. It returns what it did so far
// beside any error (the library's, sentinels kept).
func Poison(ctx context.Context, rdb redis.UniversalClient, o PoisonOptions) (*PoisonResult, error) {
	if _, limited, err := pelwarden.DeliveryLimit("MaxDeliveries", o.MaxDeliveries); err != nil || !limited {
		return nil, argumentError("MaxDeliveries", "must be positive or 0 (pelwarden.DefaultMaxDeliveries), got %d", o.MaxDeliveries)
	}
	lib := pelwarden.NewLibrary(rdb)
	out := &PoisonResult{DeadLettered: []string{}, Deleted: []string{}}
	cursor := "0-0"
	for pages := 1; ; pages++ {
		page, err := lib.Claim(ctx, pelwarden.ClaimArgs{
			Stream: o.Stream, DeadLetterStream: o.DeadLetterStream, Group: o.Group, Consumer: Consumer,
			MinIdle: o.MinIdle, Cursor: cursor, Count: PoisonPage, MaxDeliveries: o.MaxDeliveries, DeadLetterOnly: true,
		})
		if err != nil {
			return out, asInterrupted(ctx, err)
		}
		out.DeadLettered = append(out.DeadLettered, page.DeadLettered...)
		out.Deleted = append(out.Deleted, page.Deleted...)
		if page.Done() {
			return out, nil
		}
		cursor = page.Cursor
		if o.Progress != nil {
			o.Progress(PoisonProgress{Page: pages, Cursor: cursor, DeadLettered: len(out.DeadLettered)})
		}
	}
}

// PoisonCount is CountPoison's answer.
type PoisonCount struct {
	// Poison entries found (delivered at least MaxDeliveries times and
	// idle at least MinIdle) among Scanned PEL entries of Pending.
	Poison, Scanned, Pending int64
	// Complete: the whole PEL was scanned, so Poison is exact.
	Complete bool
}

// CountPoison counts the entries a Poison pass would move, reading the PEL
// with XPENDING pages of 1,000 (never the whole PEL at once) and stopping
// after limit entries: on a large PEL the count covers its first limit
// entries only (Complete false).
func CountPoison(ctx context.Context, rdb redis.UniversalClient, stream, group string, maxDeliveries int, minIdle time.Duration, limit int64) (PoisonCount, error) {
	deliveries, limited, err := pelwarden.DeliveryLimit("MaxDeliveries", maxDeliveries)
	if err != nil || !limited {
		return PoisonCount{}, argumentError("MaxDeliveries", "must be positive or 0 (pelwarden.DefaultMaxDeliveries), got %d", maxDeliveries)
	}
	sum, err := rdb.XPending(ctx, stream, group).Result()
	if err != nil {
		return PoisonCount{}, commandError("XPENDING", stream, err)
	}
	out := PoisonCount{Pending: sum.Count}
	start := "-"
	for out.Scanned < limit {
		want := min(1000, limit-out.Scanned)
		page, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: start, End: "+", Count: want}).Result()
		if err != nil {
			return out, commandError("XPENDING", stream, err)
		}
		for _, p := range page {
			if p.RetryCount >= int64(deliveries) && p.Idle >= minIdle {
				out.Poison++
			}
		}
		out.Scanned += int64(len(page))
		if int64(len(page)) < want {
			out.Complete = true
			return out, nil
		}
		start = "(" + page[len(page)-1].ID
	}
	out.Complete = out.Scanned >= out.Pending
	return out, nil
}
