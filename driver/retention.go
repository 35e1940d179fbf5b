package driver

// Retention: the periodic trim of the stream (entries every group has
// acknowledged) and the bounds of the dead-letter stream.

import (
	"context"
	"strconv"
	"time"

	"github.com/pelwarden/pelwarden"
)

// trimLoop trims the stream at start and every TrimInterval.
func (r *run) trimLoop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.trimPass(ctx)
		t.Reset(r.cfg.TrimInterval)
	}
}

// trimPass deletes what every group has acknowledged, in calls of
// TrimLimit entries until nothing below the bound is left. A failed call
// ends the pass (logged and counted); the next interval tries again.
func (r *run) trimPass(ctx context.Context) {
	var total int64
	var res *pelwarden.TrimResult
	for ctx.Err() == nil {
		var err error
		res, err = r.lib.Trim(ctx, pelwarden.TrimArgs{Stream: r.cfg.Stream, Limit: r.cfg.TrimLimit})
		if err != nil {
			if ctx.Err() == nil {
				r.commandError("trim", err, 0)
			}
			break
		}
		total += res.Trimmed
		r.m.Count(EventTrimmed, int(res.Trimmed))
		if !res.More {
			break
		}
	}
	if total > 0 && res != nil {
		r.log.Debug("trimmed entries every group acknowledged", "count", total, "bound", res.Bound,
			"held_back_by", res.Holder, "length", res.Length)
	}
}

// deadLetterRetention applies DeadLetterMaxAge and DeadLetterMaxLen to the
// dead-letter stream (it has no consumer groups, so a plain XTRIM is
// right there). Errors are logged and counted; the next pass tries again.
func (r *run) deadLetterRetention(ctx context.Context) {
	dlq := r.cfg.DeadLetterStream
	var deleted int64
	if r.cfg.DeadLetterMaxAge > 0 {
		now, err := r.rdb.Time(ctx).Result()
		if err != nil {
			if ctx.Err() == nil {
				r.commandError("dead-letter retention: TIME", err, 0)
			}
			return
		}
		minID := strconv.FormatInt(max(now.Add(-r.cfg.DeadLetterMaxAge).UnixMilli(), 0), 10) + "-0"
		n, err := r.rdb.XTrimMinID(ctx, dlq, minID).Result()
		if err != nil {
			if ctx.Err() == nil {
				r.commandError("dead-letter retention: XTRIM "+dlq+" MINID", err, 0)
			}
			return
		}
		deleted += n
	}
	if r.cfg.DeadLetterMaxLen > 0 {
		n, err := r.rdb.XTrimMaxLen(ctx, dlq, r.cfg.DeadLetterMaxLen).Result()
		if err != nil {
			if ctx.Err() == nil {
				r.commandError("dead-letter retention: XTRIM "+dlq+" MAXLEN", err, 0)
			}
			return
		}
		deleted += n
	}
	if deleted > 0 {
		r.m.Count(EventDeadLetterTrimmed, int(deleted))
		r.log.Info("dead-letter retention deleted records", "dead_letter_stream", dlq, "count", deleted,
			"max_age", r.cfg.DeadLetterMaxAge, "max_len", r.cfg.DeadLetterMaxLen)
	}
}
