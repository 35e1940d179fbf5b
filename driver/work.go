package driver

// The handler side: the workers, and applying each handler's outcome.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/pelwarden/pelwarden"
)

// worker runs queued jobs of every stream until the queue is closed and
// empty, each through its stream's lane; after the shutdown began it skips
// them.
func (s *session) worker() {
	for {
		j, ok := s.jobs.get()
		if !ok {
			return
		}
		if s.closed.Load() {
			j.lane.skip(j)
			continue
		}
		j.lane.runJob(j)
	}
}

// runJob runs one handler and settles its outcome, then frees its place in
// the window.
func (l *lane) runJob(j job) {
	defer j.f.ctx.finish()
	start := l.clock.now()
	err, panicked := l.runHandler(j.f.ctx, j.m)
	took := l.clock.now() - start
	l.m.HandlerDuration(took)
	l.flow.timing(start-j.f.queued, took)
	if !l.applyOutcome(j.m, j.f, err, panicked) {
		l.hand.forget(j.m.ID)
	}
	l.flow.free(j.f.bytes)
	l.handlerDone()
}

func (l *lane) runHandler(ctx context.Context, m *Message) (err error, panicked bool) {
	return runHandler(ctx, l.cfg.Handler, m, l.m, l.sess.entryLogs, l.log)
}

// runHandler calls h on m, recovering a panic: it is logged with its stack
// (rate-limited by logs) and counted, and returned as an error.
func runHandler(ctx context.Context, h Handler, m *Message, metrics Metrics, logs *logLimiter, log *slog.Logger) (err error, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			panicked = true
			err = fmt.Errorf("handler panic: %v", p)
			metrics.Count(EventHandlerPanic, 1)
			if ok, suppressed := logs.allow(); ok {
				log.Error("handler panicked", "id", m.ID, "deliveries", m.Deliveries, "panic", p,
					"stack", string(debug.Stack()), "suppressed", suppressed)
			}
		}
	}()
	return h.Handle(ctx, m), false
}

// entryLog writes a per-entry record at level warn (or info) on the
// lane's log, rate-limited for the whole Run.
func (l *lane) entryLog(warn bool, msg string, args ...any) {
	l.sess.entryLog(l.log, warn, msg, args...)
}

// applyOutcome applies a handler's outcome.
//
// It reports whether the entry stays tracked as in hand: a succeeded entry
// stays until the ack loop has sent its ack, so the heartbeat keeps
// protecting it and a reclaim pass of this consumer does not run it again.
// Every other outcome is forgotten before its Redis call (a release must not
// race with a lease extension).
func (l *lane) applyOutcome(m *Message, f *handEntry, err error, panicked bool) bool {
	if f.lost.Load() {
		l.m.Count(EventLostOwnership, 1)
		l.entryLog(true, "entry reclaimed by another consumer while its handler ran; outcome dropped", "id", m.ID, "err", err)
		return false
	}
	out := OutcomeOf(err, l.cfg.MinIdle)
	if out.Action != ActionAck {
		l.m.Count(EventHandlerError, 1)
	}
	if out.Action != ActionAck && f.ctx.parent.Err() != nil {
		// Cancelled by the shutdown timeout (a lost lease returned above):
		// leave it pending.
		l.entryLog(true, "handler cancelled by shutdown; entry stays pending", "id", m.ID, "err", err)
		return false
	}
	if out.Action == ActionAck {
		l.m.Count(EventHandled, 1)
		f.acking.Store(true)
		if l.acks.add(m.ID, time.Duration(f.ownedUntil.Load())) {
			return true
		}
		l.log.Error("handler succeeded after the ack loop stopped; entry stays pending and will be handled again", "id", m.ID)
		return false
	}
	ctx := context.WithoutCancel(f.ctx.parent)
	if out.Action == ActionDeadLetter {
		// Held until the call settles it: a claim that returns it
		// meanwhile is skipped (see hand.gone).
		l.deadLetter(ctx, m, out.ErrText)
		return false
	}
	l.hand.forget(m.ID)
	switch {
	case out.Retry:
		l.entryLog(false, "handler asked for a retry", "id", m.ID, "deliveries", m.Deliveries, "after", out.Delay, "err", err)
	case !panicked:
		l.entryLog(true, "handler failed; entry stays pending for the next reclaim pass", "id", m.ID, "deliveries", m.Deliveries, "err", err)
	}
	if out.Action == ActionHold {
		// The heartbeat loop keeps it ours until the retry is within MinIdle.
		l.hand.delay(m.ID, l.clock.now()+out.Delay)
		return false
	}
	l.fail(ctx, m.ID, out.ReleaseDelay(l.readClaim.Load(), l.cfg.ReclaimInterval, l.cfg.MinIdle), out.ErrText)
	return false
}

// fail records a failed attempt of id (the fail function): claimable
// again after max(delay, its Backoff) from now, a fenced call, its error
// kept for the dead letter written if it reaches MaxDeliveries.
func (l *lane) fail(ctx context.Context, id string, delay time.Duration, errText string) {
	l.giveBack(ctx, func(ctx context.Context) (*pelwarden.ReleaseResult, error) {
		return l.srv.fail(ctx, id, l.cfg.MinIdle, delay, errText)
	})
}

// deadLetter moves one entry in hand to the dead-letter stream, retrying
// transient errors for up to ShutdownTimeout (while the server is out of
// memory, for as long as the run lasts), and stops tracking it. If it
// cannot, the entry stays pending and the reclaim pass dead-letters it at
// MaxDeliveries.
func (l *lane) deadLetter(ctx context.Context, m *Message, text string) {
	tracked := true
	defer func() {
		if tracked {
			l.hand.forget(m.ID)
		}
	}()
	l.withRetry(ctx, "dead-letter", func(ctx context.Context) error {
		res, err := l.srv.deadLetter(ctx, m.ID, text)
		if err != nil {
			return err
		}
		if len(res.DeadLettered) > 0 || len(res.Deleted) > 0 {
			l.hand.gone(m.ID) // copied and acked, or cleared from the PEL
		} else {
			l.hand.forget(m.ID) // still pending (ours, or another's)
		}
		tracked = false
		l.sess.memoryFreed("dead-letter")
		if len(res.DeadLettered) > 0 {
			l.m.DeadLettered(pelwarden.ReasonHandler, len(res.DeadLettered))
			l.entryLog(true, "dead-lettered entry on handler request", "id", m.ID, "err", text)
		}
		if lost := res.OwnedElsewhere(); len(lost) > 0 {
			l.m.Count(EventLostOwnership, len(lost))
		}
		if len(res.Deleted) > 0 {
			l.m.Count(EventDeletedFromPEL, len(res.Deleted))
		}
		if len(res.TooLarge) > 0 {
			// Still pending and ours: give it back; once it reaches
			// MaxDeliveries the reclaim pass reports it for an operator.
			l.m.Count(EventTooLarge, len(res.TooLarge))
			l.log.Error("entry has too many fields to dead-letter atomically; it stays pending", "id", m.ID, "err", text)
			l.release(ctx, res.TooLarge, 0)
		}
		return nil
	})
}

// release makes ids claimable again after delay (at the next reclaim pass
// for 0), a fenced release: entries taken over meanwhile are left alone.
func (l *lane) release(ctx context.Context, ids []string, delay time.Duration) {
	l.giveBack(ctx, func(ctx context.Context) (*pelwarden.ReleaseResult, error) {
		return l.srv.release(ctx, ids, l.cfg.MinIdle, delay)
	})
}

// giveBack runs one of the calls that give owned entries back (release,
// fail, giveback) with withRetry, counting the ids owned elsewhere by then.
func (l *lane) giveBack(ctx context.Context, call func(context.Context) (*pelwarden.ReleaseResult, error)) {
	l.withRetry(ctx, "release", func(ctx context.Context) error {
		res, err := call(ctx)
		if err != nil {
			return err
		}
		if len(res.NotOwned) > 0 {
			l.m.Count(EventLostOwnership, len(res.NotOwned))
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
func (l *lane) withRetry(ctx context.Context, what string, op func(context.Context) error) {
	deadline := time.Now().Add(l.cfg.ShutdownTimeout)
	stop := func(err error, _ int) bool {
		switch {
		case errors.Is(err, pelwarden.ErrNoGroup) || permanent(err):
			return true
		case outOfMemory(err):
			return closedNow(l.sess.handlersDone)
		}
		return time.Now().After(deadline)
	}
	err := retry(ctx, stop, func(err error, attempt int) { l.commandError(what, err, attempt) }, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, l.cfg.ShutdownTimeout)
		defer cancel()
		return op(ctx)
	})
	switch {
	case err == nil:
	case permanent(err):
		l.failedForGood(ctx, what, err)
	default:
		l.log.Error(what+" gave up; the entry stays pending", "err", err)
	}
}
