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
// RetryAfter delay is longer than MinIdle: a leaseTick every
// LeaseInterval (MinIdle/3 with NoLease).
func (l *lane) leaseLoop(ctx context.Context) {
	every := l.cfg.LeaseInterval
	if every == NoLease {
		// No heartbeat; RetryAfter delays beyond MinIdle still need a tick.
		every = l.cfg.MinIdle / 3
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.leaseTick(ctx, every)
	}
}

// leaseTick is one tick of the lease loop, every apart: it releases the
// delayed entries due within MinIdle and extends the leases due (see
// tracker.leaseDue), marking lost those another consumer owns now.
func (l *lane) leaseTick(ctx context.Context, every time.Duration) {
	ids, toRelease, releaseDelay := l.held.leaseDue(l.cfg.LeaseInterval != NoLease, every, l.cfg.MinIdle)
	if len(toRelease) > 0 {
		l.release(ctx, toRelease, releaseDelay)
	}
	for len(ids) > 0 {
		batch := ids[:min(len(ids), pelwarden.MaxCount)]
		ids = ids[len(batch):]
		began := l.clock.now()
		res, err := l.srv.extend(ctx, batch)
		if err != nil {
			if ctx.Err() == nil {
				l.commandError("extend lease", err, 0)
			}
			return
		}
		l.m.Count(EventLeaseExtended, int(res.Extended))
		if lost := append(res.NotOwned, res.Deleted...); len(lost) > 0 {
			l.held.lost(lost)
		}
		l.held.extended(batch, l.leaseFrom(began)) // skips the lost ones
	}
}
