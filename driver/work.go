package driver

// The handler side: the workers, and applying each handler's outcome.

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// worker runs queued jobs of every stream until the queue is closed and
// empty, each through its stream's executor; after the shutdown began it
// skips them.
func (s *session) worker() {
	for {
		j, ok := s.jobs.get()
		if !ok {
			return
		}
		if s.closed.Load() {
			j.exec.skip(j)
			continue
		}
		j.exec.runJob(j)
	}
}

// executor runs the handlers of one stream's entries, on the Run's
// workers, and applies each outcome: a success goes to the acker, a dead
// letter, a failed attempt or a release to the settler, a RetryAfter
// beyond MinIdle to the hand (the keeper holds it).
type executor struct {
	cfg    Config
	log    *slog.Logger
	m      Metrics
	clock  clock
	hand   *hand
	flow   *window
	acks   *acker
	settle *settler
	run    *core
	drain  *drain
	// readClaim: the stream's reads claim (a failed attempt is then
	// released for the next read rather than the next pass).
	readClaim *atomic.Bool
}

// skip drops a queued job at shutdown without running its handler; its
// entry is released by the settler's releaseUnstarted.
func (e *executor) skip(j job) {
	j.f.ctx.finish()
	e.hand.skipped(j.m.ID)
	e.flow.free(j.f.bytes)
	e.drain.done()
}

// runJob runs one handler and settles its outcome, then frees its place in
// the window.
func (e *executor) runJob(j job) {
	defer j.f.ctx.finish()
	start := e.clock.now()
	err, panicked := e.runHandler(j.f.ctx, j.m)
	took := e.clock.now() - start
	e.m.HandlerDuration(took)
	e.flow.timing(start-j.f.queued, took)
	if !e.applyOutcome(j.m, j.f, err, panicked) {
		e.hand.forget(j.m.ID)
	}
	e.flow.free(j.f.bytes)
	e.drain.done()
}

func (e *executor) runHandler(ctx context.Context, m *Message) (err error, panicked bool) {
	return runHandler(ctx, e.cfg.Handler, m, e.m, e.run.entryLogs, e.log)
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
func (e *executor) entryLog(warn bool, msg string, args ...any) {
	e.run.entryLog(e.log, warn, msg, args...)
}

// applyOutcome applies a handler's outcome.
//
// It reports whether the entry stays tracked as in hand: a succeeded entry
// stays until the ack loop has sent its ack, so the heartbeat keeps
// protecting it and a reclaim pass of this consumer does not run it again.
// Every other outcome is forgotten before its Redis call (a release must not
// race with a lease extension).
func (e *executor) applyOutcome(m *Message, f *handEntry, err error, panicked bool) bool {
	if f.lost.Load() {
		e.m.Count(EventLostOwnership, 1)
		e.entryLog(true, "entry reclaimed by another consumer while its handler ran; outcome dropped", "id", m.ID, "err", err)
		return false
	}
	out := OutcomeOf(err, e.cfg.MinIdle)
	if out.Action != ActionAck {
		e.m.Count(EventHandlerError, 1)
	}
	if out.Action != ActionAck && f.ctx.parent.Err() != nil {
		// Cancelled by the shutdown timeout (a lost lease returned above):
		// leave it pending.
		e.entryLog(true, "handler cancelled by shutdown; entry stays pending", "id", m.ID, "err", err)
		return false
	}
	if out.Action == ActionAck {
		e.m.Count(EventHandled, 1)
		f.acking.Store(true)
		if e.acks.add(m.ID, time.Duration(f.ownedUntil.Load())) {
			return true
		}
		e.log.Error("handler succeeded after the ack loop stopped; entry stays pending and will be handled again", "id", m.ID)
		return false
	}
	ctx := context.WithoutCancel(f.ctx.parent)
	if out.Action == ActionDeadLetter {
		// Held until the call settles it: a claim that returns it
		// meanwhile is skipped (see hand.gone).
		e.settle.deadLetter(ctx, m, out.ErrText)
		return false
	}
	e.hand.forget(m.ID)
	switch {
	case out.Retry:
		e.entryLog(false, "handler asked for a retry", "id", m.ID, "deliveries", m.Deliveries, "after", out.Delay, "err", err)
	case !panicked:
		e.entryLog(true, "handler failed; entry stays pending for the next reclaim pass", "id", m.ID, "deliveries", m.Deliveries, "err", err)
	}
	if out.Action == ActionHold {
		// The heartbeat loop keeps it ours until the retry is within MinIdle.
		e.hand.delay(m.ID, e.clock.now()+out.Delay)
		return false
	}
	e.settle.fail(ctx, m.ID, out.ReleaseDelay(e.readClaim.Load(), e.cfg.ReclaimInterval, e.cfg.MinIdle), out.ErrText)
	return false
}
