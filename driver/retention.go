package driver

// Retention and upkeep: the periodic trim of the stream (entries every
// group has acknowledged), and the upkeep loop: the reaping of dead
// consumers and the bounds of the dead-letter stream.

import (
	"context"
	"log/slog"
	"sync"

	"github.com/pelwarden/pelwarden"
)

// maintainer keeps one stream of a Run in order, each task in a loop of
// its own: the stall check (stall.go), the trim, and the upkeep (reaping
// dead consumers, bounding the dead-letter stream). It reads the stream's
// entries in hand (parked ones are reported as stalled) and the lane's
// sweeps, and reports failed calls to faults; it never touches an entry
// in hand.
type maintainer struct {
	cfg    Config
	log    *slog.Logger
	m      Metrics
	srv    upkeepServer // trim, reap, time, trimDeadLetters, idlePending
	clock  clock
	faults faults
	hand   *hand
	sweeps *sweeps
}

// start starts the loops cfg asks for on loops: the upkeep loop with
// ReapIdle, DeadLetterMaxAge or DeadLetterMaxLen, the trim loop with
// TrimInterval, the stall check unless StallAfter is NoStallCheck. They
// return when ctx ends.
func (mt *maintainer) start(ctx context.Context, loops *sync.WaitGroup) {
	if mt.cfg.ReapIdle > 0 || mt.cfg.DeadLetterMaxAge > 0 || mt.cfg.DeadLetterMaxLen > 0 {
		loops.Go(func() { mt.upkeepLoop(ctx) })
	}
	if mt.cfg.TrimInterval > 0 {
		loops.Go(func() { mt.trimLoop(ctx) })
	}
	if mt.cfg.StallAfter != NoStallCheck {
		loops.Go(func() { mt.stallLoop(ctx) })
	}
}

// trimLoop trims the stream at start and every TrimInterval.
func (mt *maintainer) trimLoop(ctx context.Context) {
	repeat(ctx, mt.cfg.TrimInterval, func(bool) { mt.trimPass(ctx) })
}

// trimPass deletes what every group has acknowledged, in calls of
// TrimLimit entries until nothing below the bound is left. A failed call
// ends the pass (logged and counted); the next interval tries again.
func (mt *maintainer) trimPass(ctx context.Context) {
	var total int64
	var res *pelwarden.TrimResult
	for ctx.Err() == nil {
		var err error
		res, err = mt.srv.trim(ctx, mt.cfg.TrimLimit)
		if err != nil {
			if ctx.Err() == nil {
				mt.faults.commandError("trim", err, 0)
			}
			break
		}
		total += res.Trimmed
		mt.m.Count(EventTrimmed, int(res.Trimmed))
		if !res.More {
			break
		}
	}
	if total > 0 && res != nil {
		mt.log.Debug("trimmed entries every group acknowledged", "count", total, "bound", res.Bound,
			"held_back_by", res.Holder, "length", res.Length)
	}
}

// upkeepLoop, with ReapIdle, DeadLetterMaxAge or DeadLetterMaxLen set,
// reaps dead consumers and bounds the dead-letter stream at start and
// every ReclaimInterval.
func (mt *maintainer) upkeepLoop(ctx context.Context) {
	repeat(ctx, mt.cfg.ReclaimInterval, func(bool) { mt.upkeep(ctx) })
}

// upkeep is one round of the upkeep loop.
func (mt *maintainer) upkeep(ctx context.Context) {
	if mt.cfg.ReapIdle > 0 {
		mt.reap(ctx)
	}
	if (mt.cfg.DeadLetterMaxAge > 0 || mt.cfg.DeadLetterMaxLen > 0) && ctx.Err() == nil {
		mt.deadLetterRetention(ctx)
	}
}

// reap deletes the group's consumers idle longer than ReapIdle that own
// no pending entries. Errors are logged and counted; the next round tries
// again.
func (mt *maintainer) reap(ctx context.Context) {
	res, err := mt.srv.reap(ctx, mt.cfg.ReapIdle)
	if err != nil {
		if ctx.Err() == nil {
			mt.faults.commandError("reap", err, 0)
		}
		return
	}
	if len(res.Deleted) > 0 {
		mt.m.Count(EventReaped, len(res.Deleted))
		mt.log.Info("reaped idle consumers that owned nothing", "consumers", res.Deleted)
	}
	for _, k := range res.Kept {
		mt.log.Debug("idle consumer kept: it still owns pending entries", "idle_consumer", k.Name, "pending", k.Pending)
	}
}

// deadLetterRetention applies DeadLetterMaxAge and DeadLetterMaxLen to the
// dead-letter stream (it has no consumer groups, so a plain XTRIM is
// right there). Errors are logged and counted; the next pass tries again.
func (mt *maintainer) deadLetterRetention(ctx context.Context) {
	dlq := mt.cfg.DeadLetterStream
	var deleted int64
	if mt.cfg.DeadLetterMaxAge > 0 {
		now, err := mt.srv.time(ctx)
		if err != nil {
			if ctx.Err() == nil {
				mt.faults.commandError("dead-letter retention: TIME", err, 0)
			}
			return
		}
		n, err := mt.srv.trimDeadLetters(ctx, minIDBefore(now, mt.cfg.DeadLetterMaxAge), 0)
		if err != nil {
			if ctx.Err() == nil {
				mt.faults.commandError("dead-letter retention: XTRIM "+dlq+" MINID", err, 0)
			}
			return
		}
		deleted += n
	}
	if mt.cfg.DeadLetterMaxLen > 0 {
		n, err := mt.srv.trimDeadLetters(ctx, "", mt.cfg.DeadLetterMaxLen)
		if err != nil {
			if ctx.Err() == nil {
				mt.faults.commandError("dead-letter retention: XTRIM "+dlq+" MAXLEN", err, 0)
			}
			return
		}
		deleted += n
	}
	if deleted > 0 {
		mt.m.Count(EventDeadLetterTrimmed, int(deleted))
		mt.log.Info("dead-letter retention deleted records", "dead_letter_stream", dlq, "count", deleted,
			"max_age", mt.cfg.DeadLetterMaxAge, "max_len", mt.cfg.DeadLetterMaxLen)
	}
}
