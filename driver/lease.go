package driver

// The lease loop: heartbeats for slow handlers, and RetryAfter delays
// beyond MinIdle.

import (
	"context"
	"time"

	"github.com/pelwarden/pelwarden"
)

// leaseLoop extends the lease of entries held longer than LeaseInterval,
// cancels handlers whose entry was taken over, and holds entries whose
// RetryAfter delay is longer than MinIdle.
func (r *run) leaseLoop(ctx context.Context) {
	every := r.cfg.LeaseInterval
	if every == NoLease {
		// No heartbeat; RetryAfter delays beyond MinIdle still need a tick.
		every = r.cfg.MinIdle / 3
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ids, toRelease, releaseDelay := r.held.leaseDue(r.cfg.LeaseInterval != NoLease, every, r.cfg.MinIdle)
		if len(toRelease) > 0 {
			r.release(ctx, toRelease, releaseDelay)
		}
		for len(ids) > 0 {
			batch := ids[:min(len(ids), pelwarden.MaxCount)]
			ids = ids[len(batch):]
			began := time.Since(monoEpoch)
			res, err := r.lib.Extend(ctx, pelwarden.ExtendArgs{Stream: r.cfg.Stream, Group: r.cfg.Group, Consumer: r.cfg.Consumer, IDs: batch})
			if err != nil {
				if ctx.Err() == nil {
					r.commandError("extend lease", err, 0)
				}
				break
			}
			r.m.Count(EventLeaseExtended, int(res.Extended))
			lost := append(res.NotOwned, res.Deleted...)
			if len(lost) > 0 {
				r.held.lost(lost)
			}
			r.held.extended(without(batch, lost), r.fenceFrom(began))
		}
	}
}

// without returns ids minus drop (ids itself when drop is empty).
func without(ids, drop []string) []string {
	if len(drop) == 0 {
		return ids
	}
	gone := make(map[string]bool, len(drop))
	for _, id := range drop {
		gone[id] = true
	}
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !gone[id] {
			out = append(out, id)
		}
	}
	return out
}
