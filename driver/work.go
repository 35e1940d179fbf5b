package driver

// The handler side: the workers, and applying each handler's outcome.

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
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
		l.settle.deadLetter(ctx, m, out.ErrText)
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
	l.settle.fail(ctx, m.ID, out.ReleaseDelay(l.readClaim.Load(), l.cfg.ReclaimInterval, l.cfg.MinIdle), out.ErrText)
	return false
}
