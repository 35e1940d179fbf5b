package driver

// The keeper: the heartbeat of entries in hand (slow handlers), and
// RetryAfter delays beyond MinIdle.

import (
	"context"
	"time"

	"github.com/pelwarden/pelwarden"
)

// keeper keeps the entries in hand of one stream ours while they are
// handled: every tick it resets the idle time of those in hand longer than
// HeartbeatInterval (the extend function), so no other consumer claims
// them, marks lost (cancelling their handlers) those another consumer took
// over, and holds entries whose RetryAfter delay is longer than MinIdle
// until the retry is within MinIdle, then releases them (settle).
type keeper struct {
	cfg    Config
	m      Metrics
	srv    settleServer // extend
	clock  clock
	hand   *hand
	settle *settler
	faults faults
	pulse  *pulse // the loop's progress, for the liveness probe
}

// heartbeatLoop extends the lease of entries whose idle time was last
// reset HeartbeatInterval ago or more, cancels handlers whose entry was
// taken over, and holds entries whose RetryAfter delay is longer than
// MinIdle: a heartbeatTick every Config.heartbeatTick.
func (k *keeper) heartbeatLoop(ctx context.Context) {
	every := k.cfg.heartbeatTick()
	tickEvery(ctx, every, func() {
		k.heartbeatTick(ctx, every)
		k.pulse.beat()
	})
}

// heartbeatTick is one tick of the heartbeat loop, tick apart: it releases
// the delayed entries due within MinIdle and extends the leases due (see
// hand.heartbeatDue), marking lost those another consumer owns now.
func (k *keeper) heartbeatTick(ctx context.Context, tick time.Duration) {
	ids, toRelease, releaseDelay := k.hand.heartbeatDue(k.cfg.HeartbeatInterval != NoHeartbeat, k.cfg.HeartbeatInterval, tick, k.cfg.MinIdle)
	if len(toRelease) > 0 {
		k.settle.release(ctx, toRelease, releaseDelay)
	}
	for len(ids) > 0 {
		batch := ids[:min(len(ids), pelwarden.MaxCount)]
		ids = ids[len(batch):]
		began := k.clock.now()
		res, err := k.srv.extend(ctx, batch)
		if err != nil {
			if ctx.Err() == nil {
				k.faults.commandError("extend lease", err, 0)
			}
			return
		}
		k.m.Count(EventLeaseExtended, int(res.Extended))
		if lost := append(res.NotOwned, res.Deleted...); len(lost) > 0 {
			k.hand.lost(lost)
		}
		k.hand.extended(batch, k.cfg.idleResetFrom(began)) // skips the lost ones
	}
}
