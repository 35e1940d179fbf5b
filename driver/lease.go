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
			if lost := append(res.NotOwned, res.Deleted...); len(lost) > 0 {
				r.held.lost(lost)
			}
			r.held.extended(batch, r.fenceFrom(began)) // skips the lost ones
		}
	}
}
