package driver

// The settler: every write a handler's outcome causes but the acks (the
// acker sends those).

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/pelwarden/pelwarden"
)

// settler sends, for one stream of a Run, every write that settles an
// entry in hand other than an ack: a failed attempt (fail), a dead letter
// on the handler's request, the dead letter of entries a read handed over
// after MaxDeliveries, the release of entries a RetryAfter held, and the
// give-back of entries no handler started. Each call is fenced by the
// PEL's owner (an entry another consumer took over is left alone) and
// retried by withRetry's rule.
type settler struct {
	cfg    Config
	log    *slog.Logger
	m      Metrics
	srv    settleServer
	hand   *hand
	faults faults
	run    settleRun
}

// settleRun is what a settler needs of its Run.
type settleRun interface {
	// memoryFreed ends a pause for lack of memory: a write succeeded.
	memoryFreed(what string)
	// entryLog writes a rate-limited per-entry record on log.
	entryLog(log *slog.Logger, warn bool, msg string, args ...any)
	// handlersCancelled reports whether the shutdown cancelled the
	// handlers (a write refused for lack of memory is retried until then).
	handlersCancelled() bool
}

// entryLog writes a per-entry record (see settleRun).
func (st *settler) entryLog(warn bool, msg string, args ...any) {
	st.run.entryLog(st.log, warn, msg, args...)
}

// fail records a failed attempt of id (the fail function): claimable
// again after max(delay, its Backoff) from now, a fenced call, its error
// kept for the dead letter written if it reaches MaxDeliveries.
func (st *settler) fail(ctx context.Context, id string, delay time.Duration, errText string) {
	st.giveBack(ctx, func(ctx context.Context) (*pelwarden.ReleaseResult, error) {
		return st.srv.fail(ctx, id, st.cfg.MinIdle, delay, errText)
	})
}

// deadLetter moves one entry in hand to the dead-letter stream, retrying
// transient errors for up to ShutdownTimeout (while the server is out of
// memory, for as long as the run lasts), and stops tracking it. If it
// cannot, the entry stays pending and the reclaim pass dead-letters it at
// MaxDeliveries.
func (st *settler) deadLetter(ctx context.Context, m *Message, text string) {
	tracked := true
	defer func() {
		if tracked {
			st.hand.forget(m.ID)
		}
	}()
	st.withRetry(ctx, "dead-letter", func(ctx context.Context) error {
		res, err := st.srv.deadLetter(ctx, m.ID, text)
		if err != nil {
			return err
		}
		if len(res.DeadLettered) > 0 || len(res.Deleted) > 0 {
			st.hand.gone(m.ID) // copied and acked, or cleared from the PEL
		} else {
			st.hand.forget(m.ID) // still pending (ours, or another's)
		}
		tracked = false
		if st.deadLettered(res, pelwarden.ReasonHandler) {
			st.entryLog(true, "dead-lettered entry on handler request", "id", m.ID, "err", text)
		}
		if len(res.TooLarge) > 0 {
			// Still pending and ours: give it back; once it reaches
			// MaxDeliveries the reclaim pass reports it for an operator.
			st.m.Count(EventTooLarge, len(res.TooLarge))
			st.log.Error("entry has too many fields to dead-letter atomically; it stays pending", "id", m.ID, "err", text)
			st.release(ctx, res.TooLarge, 0)
		}
		return nil
	})
}

// release makes ids claimable again after delay (at the next reclaim pass
// for 0), a fenced release: entries taken over meanwhile are left alone.
func (st *settler) release(ctx context.Context, ids []string, delay time.Duration) {
	st.giveBack(ctx, func(ctx context.Context) (*pelwarden.ReleaseResult, error) {
		return st.srv.release(ctx, ids, st.cfg.MinIdle, delay)
	})
}

// giveBack runs one of the calls that give owned entries back (release,
// fail, giveback) with withRetry, counting the ids owned elsewhere by then.
func (st *settler) giveBack(ctx context.Context, call func(context.Context) (*pelwarden.ReleaseResult, error)) {
	st.withRetry(ctx, "release", func(ctx context.Context) error {
		res, err := call(ctx)
		if err != nil {
			return err
		}
		if len(res.NotOwned) > 0 {
			st.m.Count(EventLostOwnership, len(res.NotOwned))
		}
		return nil
	})
}

// withRetry runs op until it succeeds, fails permanently, or ShutdownTimeout
// passes; while the server refuses it for lack of memory it keeps trying
// until the run's handlers are cancelled (the end of a shutdown). ctx
// carries no cancellation (a finished handler's outcome is applied during
// the shutdown too); each attempt is bounded by ShutdownTimeout. Failures
// are logged and counted; a missing group is handled by groupMissing.
func (st *settler) withRetry(ctx context.Context, what string, op func(context.Context) error) {
	deadline := time.Now().Add(st.cfg.ShutdownTimeout)
	stop := func(err error, _ int) bool {
		switch {
		case errors.Is(err, pelwarden.ErrNoGroup) || permanent(err):
			return true
		case outOfMemory(err):
			return st.run.handlersCancelled()
		}
		return time.Now().After(deadline)
	}
	err := retry(ctx, stop, func(err error, attempt int) { st.faults.commandError(what, err, attempt) }, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, st.cfg.ShutdownTimeout)
		defer cancel()
		return op(ctx)
	})
	switch {
	case err == nil:
	case permanent(err):
		st.faults.failedForGood(ctx, what, err)
	default:
		st.log.Error(what+" gave up; the entry stays pending", "err", err)
	}
}

// deadLetterSpent dead-letters entries a read handed over after
// MaxDeliveries deliveries, retried as a handler's dead-letter is. If it
// gives up, they stay pending with a count above MaxDeliveries, so
// whoever takes them next (a read or a reclaim pass) dead-letters them
// too: they never reach a handler. Those too large to dead-letter are
// parked (see parkedEntry); deliveries has the count of each id.
func (st *settler) deadLetterSpent(ctx context.Context, ids []string, deliveries map[string]int64) {
	st.withRetry(context.WithoutCancel(ctx), "dead-letter", func(ctx context.Context) error {
		res, err := st.srv.deadLetterSpent(ctx, ids)
		if err != nil {
			return err
		}
		if st.deadLettered(res, pelwarden.ReasonMaxDeliveries) {
			st.entryLog(true, "dead-lettered entries delivered too often", "count", len(res.DeadLettered),
				"max_deliveries", st.cfg.deliveryLimit(), "first_ids", firstIDs(res.DeadLettered))
		}
		if len(res.TooLarge) > 0 {
			st.m.Count(EventTooLarge, len(res.TooLarge))
			park := make(map[string]int64, len(res.TooLarge))
			for _, id := range res.TooLarge {
				park[id] = deliveries[id]
			}
			st.hand.park(park)
			st.log.Error("entries at MaxDeliveries have too many fields to dead-letter atomically; parked: they stay pending with this consumer, untouched, for an operator",
				"count", len(res.TooLarge), "first_ids", firstIDs(res.TooLarge))
		}
		return nil
	})
}

// deadLettered counts what a dead-letter call that the server accepted
// did (it also ends a pause for lack of memory): the entries dead-lettered
// for reason, those owned elsewhere by then, those deleted from the
// stream. It reports whether any was dead-lettered. Those too large to
// dead-letter are the caller's.
func (st *settler) deadLettered(res *pelwarden.DeadLetterResult, reason string) bool {
	st.run.memoryFreed("dead-letter")
	if len(res.DeadLettered) > 0 {
		st.m.DeadLettered(reason, len(res.DeadLettered))
	}
	if lost := res.OwnedElsewhere(); len(lost) > 0 {
		st.m.Count(EventLostOwnership, len(lost))
	}
	if len(res.Deleted) > 0 {
		st.m.Count(EventDeletedFromPEL, len(res.Deleted))
	}
	return len(res.DeadLettered) > 0
}

// releaseUnstarted makes the entries skipped at shutdown claimable by other
// consumers at once, with the delivery that handed them out taken back, so
// a graceful stop spends no attempt of an entry no handler started (a
// fenced give-back: entries taken over meanwhile are left alone).
func (st *settler) releaseUnstarted(ctx context.Context) {
	ids := st.hand.takeUnstarted()
	if len(ids) > 0 {
		st.log.Info("shutdown: releasing queued entries no handler had started", "count", len(ids))
	}
	for len(ids) > 0 {
		batch := ids[:min(len(ids), pelwarden.MaxCount)]
		ids = ids[len(batch):]
		st.giveBack(ctx, func(ctx context.Context) (*pelwarden.ReleaseResult, error) {
			return st.srv.giveBack(ctx, batch, st.cfg.MinIdle)
		})
	}
}
