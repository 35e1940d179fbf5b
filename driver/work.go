package driver

// The handler side: dispatching fetched entries, the workers, and settling
// each handler's outcome.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"time"

	"github.com/pelwarden/pelwarden"
)

// dispatch hands msgs, fetched by the call of reservation res begun at
// began (since monoEpoch), to the handler workers, and reports the call to
// the window. rtt is the call's round trip; more says the source had at
// least as many entries as the call asked for.
func (r *run) dispatch(handlerCtx context.Context, msgs []*Message, res reservation, began, rtt time.Duration, more bool) {
	sizes := make([]int64, len(msgs))
	var total int64
	for i, m := range msgs {
		sizes[i] = entryBytes(m)
		total += sizes[i]
	}
	if limit := r.flow.fill(res, len(msgs), total, rtt, more); limit > 0 {
		r.log.Debug("flow window resized", "max_in_hand", limit)
	}
	if len(msgs) == 0 {
		return
	}
	r.inHand.Add(int64(len(msgs)))
	skipped, closed := r.held.add(handlerCtx, msgs, sizes, r.fenceFrom(began), r.jobs, r)
	if closed {
		r.log.Warn("entries read during shutdown; they stay pending", "count", len(msgs), "ids", firstIDs(messageIDs(msgs)))
	}
	for _, m := range skipped {
		r.flow.settle(entryBytes(m))
		r.settled()
	}
}

// fenceFrom returns when entries delivered (or extended) by a call begun
// at began could first be taken over by another consumer, less a margin:
// a claim takes only entries idle for MinIdle, and the server reset their
// idle time after began. Until then a plain XACK acks exactly what the
// fenced ack function would, for a quarter of its server CPU, so the ack
// loop fences only the entries held longer (see run.ack). Ownership moved
// by hand without regard to MinIdle (XCLAIM with min-idle 0) is not seen
// for entries acked within MinIdle/2 of their delivery.
func (r *run) fenceFrom(began time.Duration) time.Duration {
	if r.cfg.AckMode == AckPlain {
		return math.MaxInt64
	}
	return began + r.cfg.MinIdle/2
}

// entryBytes is the size the window counts for an entry: its field data
// and its id (never zero, so the window learns the size of entries whose
// fields are empty).
func entryBytes(m *Message) int64 {
	n := int64(len(m.ID))
	for _, f := range m.Fields {
		n += int64(len(f.Name) + len(f.Value))
	}
	return n
}

func messageIDs(msgs []*Message) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

// worker runs queued jobs of every stream until the queue is closed and
// empty, each through its stream's lane; after the shutdown began it skips
// them.
func (s *shared) worker() {
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

// skip drops a queued job at shutdown without running its handler; its
// entry is released by releaseUnstarted.
func (r *run) skip(j job) {
	j.f.ctx.release()
	r.held.skipped(j.m.ID)
	r.flow.settle(j.f.bytes)
	r.settled()
}

// settled notes that an entry in hand was settled (or skipped).
func (r *run) settled() {
	if r.inHand.Add(-1) == 0 && r.readIdle.Load() {
		r.drained()
	}
}

// drained tells the ack loop to flush now: nothing is queued or running
// and the last read found nothing new, so no more acks are coming soon.
// Under load this never happens and acks go out in full batches; after a
// burst, its acks go out at once instead of after AckInterval.
func (r *run) drained() { signal(r.acks.drained) }

// releaseUnstarted makes the entries skipped at shutdown claimable by other
// consumers at once (a fenced release: entries taken over meanwhile are
// left alone).
func (r *run) releaseUnstarted(ctx context.Context) {
	ids := r.held.takeUnstarted()
	if len(ids) > 0 {
		r.log.Info("shutdown: releasing queued entries no handler had started", "count", len(ids))
	}
	for len(ids) > 0 {
		batch := ids[:min(len(ids), pelwarden.MaxCount)]
		ids = ids[len(batch):]
		r.release(ctx, batch, 0)
	}
}

// runJob runs one handler and settles its outcome, then frees its place in
// the window.
func (r *run) runJob(j job) {
	defer j.f.ctx.release()
	start := time.Since(monoEpoch)
	err, panicked := r.runHandler(j.f.ctx, j.m)
	took := time.Since(monoEpoch) - start
	r.m.HandlerDuration(took)
	r.flow.timing(start-j.f.queued, took)
	if !r.settle(j.m, j.f, err, panicked) {
		r.held.forget(j.m.ID)
	}
	r.flow.settle(j.f.bytes)
	r.settled()
}

func (r *run) runHandler(ctx context.Context, m *Message) (err error, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			panicked = true
			err = fmt.Errorf("handler panic: %v", p)
			r.m.Count(EventHandlerPanic, 1)
			if ok, suppressed := r.entryLogs.allow(); ok {
				r.log.Error("handler panicked", "id", m.ID, "deliveries", m.Deliveries, "panic", p,
					"stack", string(debug.Stack()), "suppressed", suppressed)
			}
		}
	}()
	return r.cfg.Handler.Handle(ctx, m), false
}

// entryLog writes a per-entry record at level warn (or info), rate-limited
// by entryLogs.
func (r *run) entryLog(warn bool, msg string, args ...any) {
	ok, suppressed := r.entryLogs.allow()
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	if warn {
		r.log.Warn(msg, args...)
	} else {
		r.log.Info(msg, args...)
	}
}

// settle applies a handler's outcome.
//
// It reports whether the entry stays tracked as in hand: a succeeded entry
// stays until the ack loop has sent its ack, so the lease heartbeat keeps
// protecting it and a reclaim pass of this consumer does not run it again.
// Every other outcome is forgotten before its Redis call (a release must not
// race with a lease extension).
func (r *run) settle(m *Message, f *inflight, err error, panicked bool) bool {
	if f.lost.Load() {
		r.m.Count(EventLostOwnership, 1)
		r.entryLog(true, "entry reclaimed by another consumer while its handler ran; outcome dropped", "id", m.ID, "err", err)
		return false
	}
	out, delay := classify(err)
	if out != outcomeAck {
		r.m.Count(EventHandlerError, 1)
	}
	if out != outcomeAck && f.ctx.parent.Err() != nil {
		// Cancelled by the shutdown timeout (a lost lease returned above):
		// leave it pending.
		r.entryLog(true, "handler cancelled by shutdown; entry stays pending", "id", m.ID, "err", err)
		return false
	}
	if out == outcomeAck {
		r.m.Count(EventHandled, 1)
		f.acking.Store(true)
		if r.acks.push(ackItem{id: m.ID, ownedUntil: time.Duration(f.ownedUntil.Load())}) {
			return true
		}
		r.log.Error("handler succeeded after the ack loop stopped; entry stays pending and will be handled again", "id", m.ID)
		return false
	}
	r.held.forget(m.ID)
	ctx := context.WithoutCancel(f.ctx.parent)
	switch out {
	case outcomeDeadLetter:
		r.deadLetter(ctx, m, err)
	case outcomeRetry:
		r.entryLog(false, "handler asked for a retry", "id", m.ID, "deliveries", m.Deliveries, "after", delay, "err", err)
		r.retryLater(ctx, m, delay)
	default:
		if !panicked {
			r.entryLog(true, "handler failed; entry stays pending for the next reclaim pass", "id", m.ID, "deliveries", m.Deliveries, "err", err)
		}
		r.retryLater(ctx, m, 0)
	}
	return false
}

// deadLetter moves one entry to the dead-letter stream, retrying transient
// errors for up to ShutdownTimeout (while the server is out of memory, for
// as long as the run lasts). If it cannot, the entry stays pending and the
// reclaim pass dead-letters it at MaxDeliveries.
func (r *run) deadLetter(ctx context.Context, m *Message, herr error) {
	var dl *DeadLetterError
	text := errText(herr)
	if errors.As(herr, &dl) {
		text = errText(dl.Err)
	}
	r.withRetry(ctx, "dead-letter", func(ctx context.Context) error {
		res, err := r.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: r.cfg.Stream, DeadLetterStream: r.cfg.DeadLetterStream,
			Group: r.cfg.Group, Consumer: r.cfg.Consumer, IDs: []string{m.ID}, Reason: pelwarden.ReasonHandler, Error: text})
		if err != nil {
			return err
		}
		r.memoryFreed("dead-letter")
		if len(res.DeadLettered) > 0 {
			r.m.DeadLettered(pelwarden.ReasonHandler, len(res.DeadLettered))
			r.entryLog(true, "dead-lettered entry on handler request", "id", m.ID, "err", text)
		}
		if lost := res.OwnedElsewhere(); len(lost) > 0 {
			r.m.Count(EventLostOwnership, len(lost))
		}
		if len(res.Deleted) > 0 {
			r.m.Count(EventDeletedFromPEL, len(res.Deleted))
		}
		if len(res.TooLarge) > 0 {
			// Still pending and ours: give it back; once it reaches
			// MaxDeliveries the reclaim pass reports it for an operator.
			r.m.Count(EventTooLarge, len(res.TooLarge))
			r.log.Error("entry has too many fields to dead-letter atomically; it stays pending", "id", m.ID, "err", text)
			r.release(ctx, res.TooLarge, 0)
		}
		return nil
	})
}

// retryLater makes the entry claimable again after delay (at the next
// reclaim pass for 0). Delays beyond MinIdle are held by the lease loop.
func (r *run) retryLater(ctx context.Context, m *Message, delay time.Duration) {
	if delay > r.cfg.MinIdle {
		r.held.delay(m.ID, time.Now().Add(delay))
		return
	}
	r.release(ctx, []string{m.ID}, max(delay, 0))
}

func (r *run) release(ctx context.Context, ids []string, delay time.Duration) {
	r.withRetry(ctx, "release", func(ctx context.Context) error {
		res, err := r.lib.Release(ctx, pelwarden.ReleaseArgs{Stream: r.cfg.Stream, Group: r.cfg.Group, Consumer: r.cfg.Consumer,
			IDs: ids, MinIdle: r.cfg.MinIdle, Delay: delay})
		if err != nil {
			return err
		}
		if len(res.NotOwned) > 0 {
			r.m.Count(EventLostOwnership, len(res.NotOwned))
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
func (r *run) withRetry(ctx context.Context, what string, op func(context.Context) error) {
	deadline := time.Now().Add(r.cfg.ShutdownTimeout)
	stop := func(err error, _ int) bool {
		switch {
		case errors.Is(err, pelwarden.ErrNoGroup) || permanent(err):
			return true
		case outOfMemory(err):
			return closedNow(r.handlersDone)
		}
		return time.Now().After(deadline)
	}
	err := retry(ctx, stop, func(err error, attempt int) { r.commandError(what, err, attempt) }, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, r.cfg.ShutdownTimeout)
		defer cancel()
		return op(ctx)
	})
	switch {
	case err == nil:
	case errors.Is(err, pelwarden.ErrNoGroup):
		r.groupMissing(ctx, err)
	default:
		r.log.Error(what+" gave up; the entry stays pending", "err", err)
	}
}
