package driver

// The stall check: pending entries idle past Config.StallAfter, which the
// reclaim passes should have taken long before, reported once each.

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/pelwarden/pelwarden"
)

// stallCount bounds the entries one stall check looks at (XPENDING COUNT):
// the reply stays small however many are stalled, and what lies beyond is
// seen once the first ones are gone.
const stallCount = 100

// stallLogIDs bounds the ids one stall report names.
const stallLogIDs = 10

// stallLoop checks for stalled entries every max(ReclaimInterval,
// StallAfter/3), the first time one such interval after start (nothing can
// have stalled under this consumer's watch before).
func (mt *maintainer) stallLoop(ctx context.Context) {
	every := max(mt.cfg.ReclaimInterval, mt.cfg.StallAfter/3)
	var reported map[string]bool
	repeat(ctx, every, func(first bool) {
		if !first {
			reported = mt.stallCheck(ctx, reported)
		}
	})
}

// stallCheck asks for the pending entries idle past StallAfter that a
// completed sweep of the PEL left (and the entries this consumer parked
// that long ago), and logs
// and counts those that reported (what the previous check found) does not
// hold. It returns what it found, for the next check: an entry that leaves
// the list and stalls again later is reported again. On an error it logs,
// counts and keeps reported.
func (mt *maintainer) stallCheck(ctx context.Context, reported map[string]bool) map[string]bool {
	found, err := mt.srv.idlePending(ctx, mt.cfg.StallAfter, stallCount)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, pelwarden.ErrNoGroup) {
			mt.faults.commandError("stall check", err, 0)
		}
		return reported
	}
	more := len(found) == stallCount
	// An entry idle past StallAfter is stalled only if a sweep of the PEL
	// (see lane.sweptAt) began after it became claimable and left it: a
	// backlog this consumer is still working through (a dead consumer's
	// large PEL, slow handlers) keeps its entries idle for as long as it
	// takes, and no pass has finished walking past them yet.
	checked := mt.clock.now()
	swept := found[:0]
	for _, p := range found {
		if mt.sweeps.since(checked - p.Idle + mt.cfg.claimableAfter()) {
			swept = append(swept, p)
		}
	}
	found = swept
	// Parked entries (see parkedEntry) are held under the lease, so never
	// idle: they are reported once parked for StallAfter.
	found = append(found, mt.hand.parkedSince(mt.cfg.StallAfter, mt.cfg.Consumer)...)
	now := make(map[string]bool, len(found))
	var n int
	var ids []string
	owners := map[string]int{}
	var oldest time.Duration
	var mostDeliveries int64
	for _, p := range found {
		if now[p.ID] {
			continue // idle and parked at once: parked as the check ran
		}
		now[p.ID] = true
		if reported[p.ID] {
			continue
		}
		n++
		if len(ids) < stallLogIDs {
			ids = append(ids, p.ID)
		}
		owners[p.Consumer]++
		oldest = max(oldest, p.Idle)
		mostDeliveries = max(mostDeliveries, p.Deliveries)
	}
	if n > 0 {
		mt.m.Count(EventStalled, n)
		attrs := []any{"count", n, "stall_after", mt.cfg.StallAfter, "oldest_idle", oldest.Round(time.Millisecond),
			"most_deliveries", mostDeliveries, "ids", ids, "owners", ownerList(owners)}
		if more {
			attrs = append(attrs, "more", "the check looks at the first "+strconv.Itoa(stallCount)+" only")
		}
		mt.log.Warn("pending entries idle past StallAfter that no reclaim pass took: recovery is stalled (a consumer's reclaim loop is stuck, or a bug)", attrs...)
	}
	return now
}

// ownerList names each owner with its count of stalled entries, sorted:
// "c1:3", "c2:1".
func ownerList(owners map[string]int) []string {
	out := make([]string, 0, len(owners))
	for _, name := range slices.Sorted(maps.Keys(owners)) {
		out = append(out, name+":"+strconv.Itoa(owners[name]))
	}
	return out
}
