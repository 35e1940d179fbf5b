package driver

// The handler side: the workers, and applying each handler's outcome.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pelwarden/pelwarden"
)

// worker runs queued jobs of every stream until the queue is closed and
// empty, each through its stream's executor; after the shutdown began it
// skips them.
//
// A worker that takes its next job without waiting starts it at the
// clock reading that ended the last one: one clock read per handler,
// where a fast handler costs less than a read.
//
// What its handlers finish it tells their stream's parts in small
// batches (see finished).
func (s *session) worker() {
	var done finished
	defer done.stop()
	last := time.Duration(-1) // when the last job ended (a clock reading)
	took := time.Duration(-1) // how long its handler ran (see jobQueue.take)
	for {
		j, ok, waited := s.jobs.take(done.flush, took)
		if !ok {
			return
		}
		took = -1
		done.use(j.exec)
		if s.closed.Load() {
			j.exec.skip(j)
			continue
		}
		if j.exec.pause.hold(j) {
			last = -1
			continue // its stream is paused: it runs after the resume
		}
		start := last
		if waited || start < 0 {
			start = j.exec.clock.now()
		}
		var due bool
		last, due = j.exec.runAt(j, start, &done)
		took = last - start
		if due {
			done.flush()
		}
	}
}

// finished is what a worker's handlers of one stream finished lately, to
// tell that stream's parts in one step (flush): the acks of those that
// succeeded, their timings and the drain's count. Told entry by entry,
// every fast handler would take the ack queue's lock and the shared
// counters from the other workers, a cost beyond the handler's own. So
// are their places in the window while no call waits for room; while one
// does, a place goes back as its handler ends (see executor.runAt). A worker
// flushes after finishedMost entries, once the first of them finished
// finishedAge ago, before it waits for a job, before a job of another
// stream and when it stops; and should its next handler hold it (a slow
// or blocked handler after fast ones), the batch's timer flushes it
// finishedAge after its first entry. Handlers slower than finishedAge
// are told one by one, as before, and a batch never waits for more work.
type finished struct {
	mu              sync.Mutex
	timer           *time.Timer // flushes the batch finishedAge after its first entry
	exec            *executor
	n               int           // entries finished
	first           time.Duration // when the first of them finished (a clock reading)
	waitSum, runSum time.Duration // their queue waits and handling times
	acks            []ackItem     // the acks of those that succeeded
	// places and placeBytes: the window places of those of them whose
	// places were not given back yet, and their bytes.
	places     int
	placeBytes int64
}

const (
	finishedMost = 64
	finishedAge  = 500 * time.Microsecond
)

// finish records an entry whose handler ended at end (a clock reading),
// after waiting wait in the queue and running for took; with acked, its
// ack (the handler succeeded) joins the batch, fenced from ownedUntil
// (see ackItem); with placeHeld, its place in the window goes back with
// the batch, and without it (a call waits for room) at once, with the
// places the batch holds. One lock for all of it: every entry passes
// here. It reports whether the batch is due (see dueLocked).
func (b *finished) finish(f *handEntry, acked, placeHeld bool, ownedUntil, wait, took, end time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.startLocked(end)
	if acked {
		b.acks = append(b.acks, ackItem{f: f, ownedUntil: ownedUntil, ahead: ownedUntil > end})
	}
	if placeHeld {
		b.places++
		b.placeBytes += f.bytes
	} else {
		// A call waits for room: this entry's place goes back now, with
		// those the batch held.
		b.exec.flow.free(b.places+1, b.placeBytes+f.bytes)
		b.places, b.placeBytes = 0, 0
	}
	b.n++
	b.waitSum += wait
	b.runSum += took
	return b.dueLocked(end)
}

// empty reports whether the batch holds nothing (every entry counts in n,
// its ack with it).
func (b *finished) empty() bool { return b.n == 0 }

// startLocked notes the batch's first entry at now and sets its timer.
func (b *finished) startLocked(now time.Duration) {
	if !b.empty() {
		return
	}
	b.first = now
	if b.timer == nil {
		b.timer = time.AfterFunc(finishedAge, b.flush)
	} else {
		b.timer.Reset(finishedAge)
	}
}

// dueLocked reports whether the batch is to be told now (a clock
// reading): finishedMost entries, or the first finishedAge ago.
func (b *finished) dueLocked(now time.Duration) bool {
	return b.n >= finishedMost || b.n > 0 && now-b.first >= finishedAge
}

// use sets the stream whose entries the batch holds, flushing those of
// another.
func (b *finished) use(e *executor) {
	if b.exec == e {
		return // only the worker sets exec: its own read needs no lock
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.exec != e {
		b.flushLocked()
		b.exec = e
	}
}

// stop flushes the batch and stops its timer, when the worker stops.
func (b *finished) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
	if b.timer != nil {
		b.timer.Stop()
	}
}

// flush tells the batch to the stream's parts and empties it. An ack the
// stopped acker refuses leaves its entry pending, to be handled again.
func (b *finished) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
}

func (b *finished) flushLocked() {
	if b.empty() {
		return
	}
	b.timer.Stop()
	e := b.exec
	if len(b.acks) > 0 {
		e.m.Count(EventHandled, len(b.acks))
		if pushed := e.acks.addAll(b.acks); pushed < len(b.acks) {
			ids := itemIDs(b.acks[pushed:])
			e.hand.drop(false, itemEntries(b.acks[pushed:])...)
			e.log.Error("handlers succeeded after the ack loop stopped; entries stay pending and will be handled again",
				"count", len(ids), "ids", firstIDs(ids))
		}
	}
	if b.places > 0 {
		e.flow.free(b.places, b.placeBytes)
	}
	if b.n > 0 {
		e.flow.timings.add(b.n, b.waitSum, b.runSum)
		e.drain.done(b.n)
	}
	clear(b.acks)
	b.acks = b.acks[:0]
	b.n, b.waitSum, b.runSum = 0, 0, 0
	b.places, b.placeBytes = 0, 0
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
	// pause holds the stream's entries back while its group is paused.
	pause *pauseGate
}

// skip drops a queued job at shutdown without running its handler; its
// entry is released by the settler's releaseUnstarted.
func (e *executor) skip(j job) {
	e.run.limit.unused(1)
	j.f.ctx.finish()
	e.hand.skipped(j.f)
	e.flow.free(1, j.f.bytes)
	e.drain.done(1)
}

// runJob runs one handler and settles its outcome, then frees its place in
// the window.
func (e *executor) runJob(j job) {
	done := finished{exec: e}
	e.runAt(j, e.clock.now(), &done)
	done.stop()
}

// runAt is runJob for a worker that read the clock at start (just before)
// and tells what finished in batches (done, of e): it returns the clock
// reading at the handler's end, and whether the batch is due (see
// finished.dueLocked).
func (e *executor) runAt(j job, start time.Duration, done *finished) (end time.Duration, due bool) {
	defer j.f.ctx.finish()
	if wait := j.f.due - start; wait > 0 {
		// Its permit of the limit's rate comes due then.
		t := time.NewTimer(wait)
		<-t.C
		start = e.clock.now()
	}
	err, panicked := e.runHandler(&j.f.ctx, j.m)
	end = e.clock.now()
	took := end - start
	e.run.limit.ended()
	e.m.HandlerDuration(took)
	acked := e.applyOutcome(j.m, j.f, err, panicked, end)
	if !acked {
		e.hand.drop(false, j.f)
	}
	// Its place goes back at once when a call waits for room (with a
	// small window: slow handlers, or few workers), else with the batch;
	// finish gives it back either way.
	placeHeld := !e.flow.waiting.Load()
	// Waiting for a limit's permit to come due is not waiting for a
	// handler: the window sizes itself by the latter. A succeeded entry's
	// ack goes with the batch (see finished).
	due = done.finish(j.f, acked, placeHeld, time.Duration(j.f.ownedUntil.Load()), start-max(j.f.queued, j.f.due), took, end)
	return end, due
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

// applyOutcome applies the outcome of a handler that returned at now (a
// clock reading).
//
// It reports whether the handler succeeded, its ack to be sent (runAt
// puts it in the worker's batch), and so whether the entry stays tracked
// as in hand: a succeeded entry
// stays until the ack loop has sent its ack, so the heartbeat keeps
// protecting it and a reclaim pass of this consumer does not run it again.
// Every other outcome is forgotten before its Redis call (a release must not
// race with a lease extension).
func (e *executor) applyOutcome(m *Message, f *handEntry, err error, panicked bool, now time.Duration) (acked bool) {
	if f.lost.Load() {
		e.m.Count(EventLostOwnership, 1)
		e.entryLog(true, "entry reclaimed by another consumer while its handler ran; outcome dropped", "id", m.ID, "err", err)
		return false
	}
	out := OutcomeOf(err, e.cfg.MinIdle)
	if out.Action != ActionAck {
		e.m.Count(EventHandlerError, 1)
	}
	if out.Action != ActionAck && f.ctx.handlerContext().Err() != nil {
		// Cancelled by the shutdown timeout (a lost lease returned above):
		// leave it pending.
		e.entryLog(true, "handler cancelled by shutdown; entry stays pending", "id", m.ID, "err", err)
		return false
	}
	if out.Action == ActionAck {
		// Its ack joins the worker's batch (see finished).
		f.acking.Store(true)
		return true
	}
	ctx := context.WithoutCancel(f.ctx.handlerContext())
	if out.Action == ActionDeadLetter {
		// Held until the call settles it: a claim that returns it
		// meanwhile is skipped (see hand.gone).
		e.settle.deadLetter(ctx, m, out.ErrText)
		return false
	}
	e.hand.drop(false, f)
	switch {
	case out.Retry:
		e.entryLog(false, "handler asked for a retry", "id", m.ID, "deliveries", m.Deliveries, "after", out.Delay, "err", err)
	case !panicked:
		e.entryLog(true, "handler failed; entry stays pending for the next reclaim pass", "id", m.ID, "deliveries", m.Deliveries, "err", err)
	}
	if out.Action == ActionHold {
		// The heartbeat loop keeps it ours until the retry is within MinIdle.
		e.hand.delay(m.ID, now+out.Delay)
		return false
	}
	e.settle.fail(ctx, m.ID, out.ReleaseDelay(e.readClaim.Load(), e.cfg.ReclaimInterval, e.cfg.MinIdle), out.ErrText)
	return false
}

// Message is one stream entry handed to a Handler.
type Message struct {
	// ID is the stream id. It is the natural idempotency key: an entry can
	// be handled more than once (at-least-once delivery).
	ID string
	// Fields in stream order, duplicates included.
	Fields []pelwarden.Field
	// Deliveries is how many times the entry has been delivered, this
	// delivery included (1 on the first).
	Deliveries int64
	// Stream the entry belongs to.
	Stream string
	// Group that delivered it.
	Group string
	// Consumer is the name of the consumer that runs the handler
	// (Config.Consumer).
	Consumer string
}

// Value returns the value of the first field called name, and whether there
// is one.
func (m *Message) Value(name string) (string, bool) {
	for _, f := range m.Fields {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// Handler runs the business work for one message. The returned error steers
// what happens to the entry:
//   - nil: it is acknowledged (in a batch; see Config.AckMode);
//   - DeadLetter(err): it is moved to the dead-letter stream at once with the
//     error text, atomically with its acknowledgement;
//   - RetryAfter(d, err): it stays pending and is not redelivered before d;
//   - any other error: it stays pending for the next reclaim pass, and is
//     dead-lettered once it has been delivered MaxDeliveries times.
//
// A panic is recovered, logged with its stack and counted as an error.
// The context is cancelled when the consumer loses ownership of the entry
// (another consumer reclaimed it) or at the end of the shutdown timeout.
type Handler interface {
	Handle(ctx context.Context, m *Message) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, m *Message) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, m *Message) error { return f(ctx, m) }

// ErrLostOwnership is the cause (context.Cause) of a handler's cancelled
// context when another consumer took its entry over (its lease lapsed and
// a reclaim pass elsewhere claimed it). The entry's outcome here is
// dropped; it runs again there.
var ErrLostOwnership = errors.New("pelwarden/driver: entry ownership lost to another consumer")

// DeadLetterError is the outcome DeadLetter returns: the entry goes to the
// dead-letter stream at once, with Err's text. Middleware can recognise it
// with errors.As.
type DeadLetterError struct {
	// Err is the failure recorded in the dead-letter record.
	Err error
}

// Error returns "dead-letter: " and Err's text.
func (e *DeadLetterError) Error() string { return "dead-letter: " + errText(e.Err) }

// Unwrap returns Err.
func (e *DeadLetterError) Unwrap() error { return e.Err }

// DeadLetter marks a permanent failure: the entry is moved to the dead-letter
// stream at once, with err's text, and acknowledged, in one atomic step. It
// returns a *DeadLetterError.
func DeadLetter(err error) error { return &DeadLetterError{Err: err} }

// RetryAfterError is the outcome RetryAfter returns: the entry stays
// pending and is not redelivered before Delay. Middleware can recognise it
// with errors.As.
type RetryAfterError struct {
	// Delay before the entry may be delivered again.
	Delay time.Duration
	// Err is the failure that asked for the retry.
	Err error
}

// Error returns "retry after <Delay>: " and Err's text.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("retry after %v: %s", e.Delay, errText(e.Err))
}

// Unwrap returns Err.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter leaves the entry pending and keeps it from being redelivered
// before d. A delay up to MinIdle is recorded on the server (any consumer
// honours it); a longer one is held by this consumer's heartbeat while
// it runs, and cut to MinIdle if it stops first. Zero or negative d retries
// at the next reclaim pass. It returns a *RetryAfterError.
func RetryAfter(d time.Duration, err error) error { return &RetryAfterError{Delay: d, Err: err} }

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// Outcome is what a consumer does with an entry once its handler
// returned: OutcomeOf decides it, the driver's workers apply it, and so
// does the test kit (pelwardentest), so a test sees what production does.
type Outcome struct {
	// Action to take.
	Action OutcomeAction
	// Delay: with ActionRelease the entry is claimable again after it (0:
	// at the next reclaim pass); with ActionHold it is the RetryAfter
	// delay.
	Delay time.Duration
	// Retry: the handler asked for the retry (RetryAfter); otherwise an
	// ActionRelease is a failure, retried at the next reclaim pass.
	Retry bool
	// ErrText is the handler's error text: with ActionDeadLetter, what the
	// dead-letter record keeps (DeadLetter's error, unwrapped).
	ErrText string
}

// OutcomeAction is what happens to an entry after its handler returned.
type OutcomeAction int

const (
	// ActionAck: the handler returned nil; the entry is acknowledged, in a
	// batch (Config.AckMode).
	ActionAck OutcomeAction = iota
	// ActionDeadLetter: DeadLetter(err); the entry moves to the
	// dead-letter stream, atomically with its acknowledgement.
	ActionDeadLetter
	// ActionRelease: RetryAfter(d, err) with d up to MinIdle, or any other
	// error; the entry is released (the release function), claimable
	// again after Delay, its delivery count unchanged.
	ActionRelease
	// ActionHold: RetryAfter(d, err) with d beyond MinIdle; the consumer
	// keeps the entry, extending its lease, until the retry is within
	// MinIdle, then releases it for what is left (cut to MinIdle if the
	// consumer stops first).
	ActionHold
)

// ReleaseDelay is how long an entry released for this outcome
// (ActionRelease) waits before it may be taken again, as a consumer
// releases it: Delay for a RetryAfter; for a plain failure nothing where
// reclaim passes take idle entries (the next pass takes it), and
// min(reclaimInterval, minIdle) where reads claim (readsClaim: see
// ReadClaimAuto), about when a pass would have taken it, since the very
// next read would take it at once and spend its MaxDeliveries in
// milliseconds.
func (o Outcome) ReleaseDelay(readsClaim bool, reclaimInterval, minIdle time.Duration) time.Duration {
	if o.Retry || !readsClaim {
		return o.Delay
	}
	return min(reclaimInterval, minIdle)
}

// OutcomeOf returns what a consumer whose MinIdle is minIdle does with an
// entry whose handler returned err.
func OutcomeOf(err error, minIdle time.Duration) Outcome {
	if err == nil {
		return Outcome{Action: ActionAck}
	}
	var dl *DeadLetterError
	if errors.As(err, &dl) {
		return Outcome{Action: ActionDeadLetter, ErrText: errText(dl.Err)}
	}
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		if ra.Delay > minIdle {
			return Outcome{Action: ActionHold, Delay: ra.Delay, Retry: true, ErrText: errText(err)}
		}
		return Outcome{Action: ActionRelease, Delay: max(ra.Delay, 0), Retry: true, ErrText: errText(err)}
	}
	return Outcome{Action: ActionRelease, ErrText: errText(err)}
}
