package driver

// The lease loop: heartbeats for slow handlers, and RetryAfter delays
// beyond MinIdle.

import (
	"context"
	"time"

	"github.com/pelwarden/pelwarden"
)

// leaseLoop extends the lease of entries whose handler has run longer than
// LeaseInterval, cancels handlers whose entry was taken over, and holds entries
// whose RetryAfter delay is longer than MinIdle.
func (c *Consumer) leaseLoop(ctx context.Context) {
	every := c.cfg.LeaseInterval
	if every == NoLease {
		// No heartbeat; RetryAfter delays beyond MinIdle still need a tick.
		every = c.cfg.MinIdle / 3
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var ids []string
		var toRelease []string
		var releaseDelay time.Duration
		c.mu.Lock()
		for id, f := range c.inflight {
			if c.cfg.LeaseInterval != NoLease && now.Sub(f.started) >= every && !f.lost.Load() {
				ids = append(ids, id)
			}
		}
		for id, at := range c.delayed {
			left := at.Sub(now)
			if left <= c.cfg.MinIdle-every {
				toRelease = append(toRelease, id)
				releaseDelay = max(releaseDelay, left)
				delete(c.delayed, id)
			} else {
				ids = append(ids, id)
			}
		}
		c.mu.Unlock()
		if len(toRelease) > 0 {
			c.release(ctx, toRelease, max(releaseDelay, 0))
		}
		for len(ids) > 0 {
			batch := ids[:min(len(ids), pelwarden.MaxCount)]
			ids = ids[len(batch):]
			r, err := c.lib.Extend(ctx, pelwarden.ExtendArgs{Stream: c.cfg.Stream, Group: c.cfg.Group, Consumer: c.cfg.Consumer, IDs: batch})
			if err != nil {
				if ctx.Err() == nil {
					c.commandError("extend lease", err, 0)
				}
				break
			}
			c.m.Count(EventLeaseExtended, int(r.Extended))
			lost := append(r.NotOwned, r.Deleted...)
			if len(lost) == 0 {
				continue
			}
			c.mu.Lock()
			for _, id := range lost {
				if f, ok := c.inflight[id]; ok {
					f.lost.Store(true)
					f.ctx.cancelWith(errLostOwnership)
				}
				delete(c.delayed, id)
			}
			c.mu.Unlock()
		}
	}
}
