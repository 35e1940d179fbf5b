package driver

// The heartbeat loop: heartbeats for slow handlers, and RetryAfter delays
// beyond MinIdle.

import (
	"context"
	"time"

	"github.com/pelwarden/pelwarden"
)

// heartbeatLoop extends the lease of entries held longer than HeartbeatInterval,
// cancels handlers whose entry was taken over, and holds entries whose
// RetryAfter delay is longer than MinIdle: a leaseTick every
// HeartbeatInterval (MinIdle/3 with NoHeartbeat).
func (l *lane) heartbeatLoop(ctx context.Context) {
	every := l.cfg.HeartbeatInterval
	if every == NoHeartbeat {
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
		l.heartbeatTick(ctx, every)
	}
}

// heartbeatTick is one tick of the heartbeat loop, every apart: it releases the
// delayed entries due within MinIdle and extends the leases due (see
// hand.heartbeatDue), marking lost those another consumer owns now.
func (l *lane) heartbeatTick(ctx context.Context, every time.Duration) {
	ids, toRelease, releaseDelay := l.hand.heartbeatDue(l.cfg.HeartbeatInterval != NoHeartbeat, every, l.cfg.MinIdle)
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
			l.hand.lost(lost)
		}
		l.hand.extended(batch, l.idleResetFrom(began)) // skips the lost ones
	}
}
