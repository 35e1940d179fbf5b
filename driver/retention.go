package driver

// Retention and upkeep: the periodic trim of the stream (entries every
// group has acknowledged), and the upkeep loop: the reaping of dead
// consumers and the bounds of the dead-letter stream.

import (
	"context"

	"github.com/pelwarden/pelwarden"
)

// trimLoop trims the stream at start and every TrimInterval.
func (l *lane) trimLoop(ctx context.Context) {
	repeat(ctx, l.cfg.TrimInterval, func(bool) { l.trimPass(ctx) })
}

// trimPass deletes what every group has acknowledged, in calls of
// TrimLimit entries until nothing below the bound is left. A failed call
// ends the pass (logged and counted); the next interval tries again.
func (l *lane) trimPass(ctx context.Context) {
	var total int64
	var res *pelwarden.TrimResult
	for ctx.Err() == nil {
		var err error
		res, err = l.srv.trim(ctx, l.cfg.TrimLimit)
		if err != nil {
			if ctx.Err() == nil {
				l.commandError("trim", err, 0)
			}
			break
		}
		total += res.Trimmed
		l.m.Count(EventTrimmed, int(res.Trimmed))
		if !res.More {
			break
		}
	}
	if total > 0 && res != nil {
		l.log.Debug("trimmed entries every group acknowledged", "count", total, "bound", res.Bound,
			"held_back_by", res.Holder, "length", res.Length)
	}
}

// upkeepLoop, with ReapIdle, DeadLetterMaxAge or DeadLetterMaxLen set,
// reaps dead consumers and bounds the dead-letter stream at start and
// every ReclaimInterval.
func (l *lane) upkeepLoop(ctx context.Context) {
	repeat(ctx, l.cfg.ReclaimInterval, func(bool) { l.upkeep(ctx) })
}

// upkeep is one round of the upkeep loop.
func (l *lane) upkeep(ctx context.Context) {
	if l.cfg.ReapIdle > 0 {
		l.reap(ctx)
	}
	if (l.cfg.DeadLetterMaxAge > 0 || l.cfg.DeadLetterMaxLen > 0) && ctx.Err() == nil {
		l.deadLetterRetention(ctx)
	}
}

// reap deletes the group's consumers idle longer than ReapIdle that own
// no pending entries. Errors are logged and counted; the next round tries
// again.
func (l *lane) reap(ctx context.Context) {
	res, err := l.srv.reap(ctx, l.cfg.ReapIdle)
	if err != nil {
		if ctx.Err() == nil {
			l.commandError("reap", err, 0)
		}
		return
	}
	if len(res.Deleted) > 0 {
		l.m.Count(EventReaped, len(res.Deleted))
		l.log.Info("reaped idle consumers that owned nothing", "consumers", res.Deleted)
	}
	for _, k := range res.Kept {
		l.log.Debug("idle consumer kept: it still owns pending entries", "idle_consumer", k.Name, "pending", k.Pending)
	}
}

// deadLetterRetention applies DeadLetterMaxAge and DeadLetterMaxLen to the
// dead-letter stream (it has no consumer groups, so a plain XTRIM is
// right there). Errors are logged and counted; the next pass tries again.
func (l *lane) deadLetterRetention(ctx context.Context) {
	dlq := l.cfg.DeadLetterStream
	var deleted int64
	if l.cfg.DeadLetterMaxAge > 0 {
		now, err := l.srv.time(ctx)
		if err != nil {
			if ctx.Err() == nil {
				l.commandError("dead-letter retention: TIME", err, 0)
			}
			return
		}
		n, err := l.srv.trimDeadLetters(ctx, minIDBefore(now, l.cfg.DeadLetterMaxAge), 0)
		if err != nil {
			if ctx.Err() == nil {
				l.commandError("dead-letter retention: XTRIM "+dlq+" MINID", err, 0)
			}
			return
		}
		deleted += n
	}
	if l.cfg.DeadLetterMaxLen > 0 {
		n, err := l.srv.trimDeadLetters(ctx, "", l.cfg.DeadLetterMaxLen)
		if err != nil {
			if ctx.Err() == nil {
				l.commandError("dead-letter retention: XTRIM "+dlq+" MAXLEN", err, 0)
			}
			return
		}
		deleted += n
	}
	if deleted > 0 {
		l.m.Count(EventDeadLetterTrimmed, int(deleted))
		l.log.Info("dead-letter retention deleted records", "dead_letter_stream", dlq, "count", deleted,
			"max_age", l.cfg.DeadLetterMaxAge, "max_len", l.cfg.DeadLetterMaxLen)
	}
}
