package driver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// run is the state of one Run: everything a Run creates, so a Consumer
// run again starts afresh (doc.go has the map of its goroutines).
type run struct {
	*Consumer

	held      *tracker    // the entries in hand
	flow      *window     // how many more to fetch
	jobs      *jobQueue   // dispatched entries, to the handler workers
	acks      *ackQueue   // ids to ack, from handlers to the ack loop
	entryLogs *logLimiter // per-entry log records

	// inHand counts entries dispatched and not yet settled (queued or
	// running); readIdle is set while the last read found nothing new.
	// Together they tell the ack loop when to flush without waiting for
	// a full batch (see drained).
	inHand   atomic.Int64
	readIdle atomic.Bool

	// closed: shutdown began (set with held.close): the workers skip
	// queued jobs.
	closed atomic.Bool

	ackStop   chan struct{} // closed: no more acks are coming, flush and exit
	ackerGone chan struct{} // closed when the ack loop has exited

	// oom: the server refused a write for lack of memory; see outOfMemory.
	oomMu sync.Mutex
	oom   error

	// handlersDone is closed when the shutdown cancels the handlers.
	handlersDone <-chan struct{}

	fatalOnce sync.Once
	fatalMu   sync.Mutex
	fatalErr  error
	fatal     chan struct{}
}

func newRun(c *Consumer) *run {
	ceil := c.cfg.MaxInHand
	if c.cfg.Prefetch > 0 {
		ceil = c.cfg.Concurrency + c.cfg.Prefetch
	}
	return &run{
		Consumer: c,
		held:     newTracker(),
		flow:     newWindow(min(c.cfg.Concurrency, ceil), ceil, c.cfg.Prefetch > 0, c.cfg.MaxInHandBytes, c.cfg.MinIdle),
		// Room for every held entry's ack plus two batches: a finished
		// handler hands its ack over and frees its place at once, even
		// while the ack loop waits for a call in flight.
		acks:      newAckQueue(c.cfg.AckBatch, 2*c.cfg.AckBatch+ceil),
		entryLogs: newLogLimiter(entryLogBurst, entryLogRate),
		ackStop:   make(chan struct{}),
		ackerGone: make(chan struct{}),
		fatal:     make(chan struct{}),
	}
}

// run is Run's body. It returns a channel closed once a Redis call and
// handlers still in progress after the shutdown have returned (nil when
// none is), and Run's error.
func (r *run) run(ctx context.Context) (lingering <-chan struct{}, err error) {
	if err := r.start(ctx); err != nil {
		if ctx.Err() != nil && !permanent(err) {
			// Stopped while still starting (loading the library or checking
			// the group, retried while the server is unreachable): nothing
			// ran, and a requested stop is not a failure.
			r.log.Info("pelwarden consumer stopped before it started", "err", err)
			return nil, nil
		}
		return nil, err
	}
	r.log.Info("pelwarden consumer started", "concurrency", r.cfg.Concurrency, "max_in_hand", r.flow.ceil,
		"min_idle", r.cfg.MinIdle, "max_deliveries", r.cfg.MaxDeliveries, "library_mode", r.lib.Mode().String())

	// loopCtx stops the reader, reclaimer and lease loops; handlerCtx is
	// independent of ctx so handlers can finish during the shutdown.
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	go func() {
		select {
		case <-r.fatal:
			stopLoops()
		case <-loopCtx.Done():
		}
	}()
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	r.handlersDone = handlerCtx.Done()

	// Concurrency long-lived handler workers, fed by the job queue.
	r.jobs = newJobQueue(r.cfg.Concurrency, &r.flow.starved)
	var handlers sync.WaitGroup
	for range r.cfg.Concurrency {
		handlers.Go(r.worker)
	}
	var loops sync.WaitGroup
	loops.Go(func() { r.readLoop(loopCtx, handlerCtx) })
	loops.Go(func() { r.reclaimLoop(loopCtx, handlerCtx) })
	loops.Go(func() { r.leaseLoop(loopCtx) })
	if r.cfg.TrimInterval > 0 {
		loops.Go(func() { r.trimLoop(loopCtx) })
	}
	loopsDone := make(chan struct{})
	go func() { loops.Wait(); close(loopsDone) }()
	flushCtx, cancelFlush := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelFlush()
	go func() {
		defer close(r.ackerGone)
		r.ackLoop(flushCtx)
	}()

	<-loopCtx.Done()
	// A loop blocked in a Redis call that ignores cancellation (go-redis
	// honours context deadlines only with Options.ContextTimeoutEnabled)
	// is not waited for beyond ShutdownTimeout; nothing it reads from now
	// on is dispatched (such entries stay pending).
	if !waitOrTimeout(loopsDone, r.cfg.ShutdownTimeout) {
		r.log.Warn("shutdown: a Redis call is still in progress; continuing without it")
	}
	r.closed.Store(true) // queued jobs are not started
	r.held.close(r.jobs) // no more dispatch; the workers skip the queued jobs, then exit

	// Shutdown, phase 1: in-flight handlers get ShutdownTimeout to finish;
	// the ack loop keeps sending their acks meanwhile.
	done := make(chan struct{})
	go func() { handlers.Wait(); close(done) }()
	if !waitOrTimeout(done, r.cfg.ShutdownTimeout) {
		// Phase 2: cancel them; their entries stay pending. They get another
		// ShutdownTimeout to return.
		r.log.Warn("shutdown timeout: cancelling handlers; their entries stay pending", "in_flight", r.held.count())
		cancelHandlers()
		waitOrTimeout(done, r.cfg.ShutdownTimeout)
	}
	// Queued entries no handler started (all of them, should every worker
	// be stuck) go back to the group at once rather than after MinIdle.
	for _, j := range r.jobs.drain() {
		r.skip(j)
	}
	r.releaseUnstarted(flushCtx)
	// Phase 3: flush the remaining acks, bounded by ShutdownTimeout.
	close(r.ackStop)
	<-r.ackerGone
	if !waitOrTimeout(done, time.Second) {
		r.log.Error("handlers ignored their cancelled context; abandoned (their outcome is discarded, entries stay pending)", "in_flight", r.held.count())
	}
	if !closedNow(loopsDone) || !closedNow(done) {
		ch := make(chan struct{})
		go func() { <-loopsDone; <-done; close(ch) }()
		lingering = ch
	}

	r.fatalMu.Lock()
	fatalErr := r.fatalErr // a lingering Redis call may still report one
	r.fatalMu.Unlock()
	if fatalErr != nil {
		return lingering, fatalErr
	}
	r.log.Info("pelwarden consumer stopped")
	return lingering, nil
}

// groupMissing handles a NOGROUP seen while running: recreate the group with
// CreateGroup, else stop with an error. It reports whether to go on.
func (r *run) groupMissing(ctx context.Context, err error) bool {
	if !r.cfg.CreateGroup {
		r.stop(fmt.Errorf("pelwarden/driver: group %q on stream %q disappeared: %w", r.cfg.Group, r.cfg.Stream, err))
		return false
	}
	r.log.Warn("consumer group disappeared; creating it again", "err", err)
	cerr := r.ensureGroup(ctx)
	if cerr != nil && permanent(cerr) {
		r.stop(cerr)
		return false
	}
	if cerr == nil {
		r.memoryFreed("create group") // a write the server accepted
	}
	return true
}

// stopping reports whether stop was called.
func (r *run) stopping() bool { return closedNow(r.fatal) }

// stop ends Run with err (the first one wins).
func (r *run) stop(err error) {
	r.fatalOnce.Do(func() {
		r.log.Error("pelwarden consumer stopping", "err", err)
		r.fatalMu.Lock()
		r.fatalErr = err
		r.fatalMu.Unlock()
		close(r.fatal)
	})
}

// commandError counts and logs a failed Redis call. A fatal error (see
// fatal) also stops the consumer: Run returns it. On a cluster client, an
// error that suggests a failover refreshes the slot map (see
// followTopology), so the retry reaches the promoted replica. A refusal
// for lack of memory pauses the consumer instead (see outOfMemory).
func (r *run) commandError(what string, err error, attempt int) {
	r.m.Count(EventCommandError, 1)
	if outOfMemory(err) {
		r.memoryFull(what, err)
		return
	}
	r.log.Error("redis call failed", "op", what, "attempt", attempt+1, "err", err)
	if fatal(err) {
		r.stop(fmt.Errorf("pelwarden/driver: %s: %w", what, err))
		return
	}
	r.followTopology(err)
}

// memoryFull pauses the taking of new entries: the server refused a write
// (a claim that may dead-letter, a handler's dead-letter) because it is at
// maxmemory. Acks, lease extensions and releases still land (their
// functions may run when the server is full), so the entries in hand
// settle; reading more would only grow the PEL of a full server. It logs
// once per pause, with the server's message.
func (r *run) memoryFull(what string, err error) {
	if r.flow.pause() {
		r.m.Count(EventPaused, 1)
		r.oomMu.Lock()
		r.oom = err
		r.oomMu.Unlock()
		r.log.Error("server out of memory: stopped taking new entries until a refused call succeeds; entries in hand are still handled and acked",
			"op", what, "err", err)
	}
}

// memoryFreed ends a pause of memoryFull: a call the full server refused
// has succeeded.
func (r *run) memoryFreed(what string) {
	if r.flow.resume() {
		r.oomMu.Lock()
		err := r.oom
		r.oom = nil
		r.oomMu.Unlock()
		r.log.Warn("server accepts writes again: taking new entries", "op", what, "refused_with", err)
	}
}

// outOfMemory reports the server's refusal of a write at maxmemory.
func outOfMemory(err error) bool {
	if redis.HasErrorPrefix(err, "OOM") {
		return true
	}
	var e *pelwarden.Error
	return errors.As(err, &e) && e.Code == "OOM"
}

// permanent reports errors that retrying cannot fix.
func permanent(err error) bool {
	return fatal(err) || errors.Is(err, pelwarden.ErrNoGroup) || errors.Is(err, pelwarden.ErrWrongType) ||
		errors.Is(err, pelwarden.ErrInvalidArgument) || errors.Is(err, pelwarden.ErrServerUnsupported) ||
		errors.Is(err, pelwarden.ErrCrossSlot) || redis.HasErrorPrefix(err, "WRONGTYPE")
}

// fatal reports errors of the deployment, not of one entry or one moment,
// which stop the consumer wherever they happen: the ACL refuses a command
// or key the consumer needs (running on would leave work half done: acks
// refused, poison entries never parked), the credentials are refused, or
// the server's TLS certificate does not verify.
func fatal(err error) bool {
	var cv *tls.CertificateVerificationError
	return errors.Is(err, pelwarden.ErrNoPermission) || redis.HasErrorPrefix(err, "NOPERM") ||
		redis.HasErrorPrefix(err, "WRONGPASS") || redis.HasErrorPrefix(err, "NOAUTH") ||
		errors.As(err, &cv)
}

// closedNow reports whether ch is closed, without waiting.
func closedNow(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitOrTimeout waits for ch to close, at most d; it reports whether it did.
func waitOrTimeout(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

func firstIDs(ids []string) []string {
	if len(ids) > 10 {
		return ids[:10]
	}
	return ids
}
