// Package driver is pelwarden's consumer runtime: it reads new entries of a
// Redis stream through a consumer group, runs business handlers on them with
// bounded concurrency, acknowledges in fenced batches, and reclaims entries
// abandoned by dead consumers through the pelwarden function library, which
// dead-letters poison entries atomically.
//
//	c, err := driver.New(rdb, driver.Config{
//		Stream: "{orders}", Group: "billing",
//		Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
//			return bill(ctx, m)
//		}),
//	})
//	if err != nil { ... }
//	err = c.Run(ctx) // until ctx is cancelled and in-flight work is settled
//
// Delivery is at least once: a handler can see an entry again (after a
// crash, or when its lease was lost), so handlers must be idempotent; the
// stream id is the natural key. Tracing of Redis commands comes from
// go-redis hooks (redisotel); the driver adds logs (log/slog) and the
// Metrics hook.
package driver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ctxwait"
)

// ErrAlreadyRunning is returned by Run when the Consumer is already running,
// or when a previous Run returned while a Redis call or a handler that
// ignored its cancelled context was still in progress (until they return).
var ErrAlreadyRunning = errors.New("pelwarden/driver: consumer already running")

// Consumer runs handlers for one consumer of a group. Create it with New.
type Consumer struct {
	rdb redis.UniversalClient
	lib *pelwarden.Library
	cfg Config
	log *slog.Logger
	m   Metrics

	running atomic.Bool

	slots *slotPool // free handler slots

	// inHand counts entries dispatched and not yet settled (queued or
	// running); readIdle is set while the last read found nothing new.
	// Together they tell the ack loop when to flush without waiting for
	// a full batch (see drained).
	inHand   atomic.Int64
	readIdle atomic.Bool

	mu        sync.Mutex
	inflight  map[string]*inflight // by entry id
	delayed   map[string]time.Time // RetryAfter beyond MinIdle: id -> retry at
	unstarted []string             // queued entries skipped at shutdown

	// closed: shutdown began. Set under mu with jobs.close(), so dispatch
	// (under mu) never pushes after it; the workers skip queued jobs.
	closed atomic.Bool

	jobs      *jobQueue     // dispatched entries, to the handler workers
	acks      *ackQueue     // ids to ack, from handlers to the ack loop
	ackStop   chan struct{} // closed: no more acks are coming, flush and exit
	ackerGone chan struct{} // closed when the ack loop has exited

	fatalOnce sync.Once
	fatalErr  error
	fatal     chan struct{}
}

// job is one entry handed to a handler worker.
type job struct {
	m *Message
	f *inflight
}

type inflight struct {
	started time.Time
	ctx     *entryContext // the handler's context
	lost    atomic.Bool
}

var errLostOwnership = errors.New("pelwarden/driver: entry ownership lost to another consumer")

// New returns a Consumer for rdb (any go-redis client: single server,
// cluster, failover). It validates cfg, naming the bad field in an error
// matching pelwarden.ErrInvalidArgument, and does no I/O. The caller keeps
// ownership of rdb; the Consumer never closes it.
func New(rdb redis.UniversalClient, cfg Config) (*Consumer, error) {
	if rdb == nil {
		return nil, &ConfigError{Field: "rdb", Reason: "a Redis client is required"}
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Consumer{
		rdb: rdb,
		lib: pelwarden.NewLibrary(rdb),
		cfg: cfg,
		log: cfg.Logger.With("stream", cfg.Stream, "group", cfg.Group, "consumer", cfg.Consumer),
		m:   cfg.Metrics,
	}, nil
}

// Name returns the consumer's name in the group.
func (c *Consumer) Name() string { return c.cfg.Consumer }

// Config returns the effective configuration, defaults filled in.
func (c *Consumer) Config() Config { return c.cfg }

// Run loads the library, makes sure the group exists, then reads, reclaims
// and handles entries until ctx is cancelled. It then stops reading, lets
// in-flight handlers finish within ShutdownTimeout (cancelling the rest,
// whose entries stay pending), flushes pending acks and returns nil. It also
// returns nil when ctx is cancelled before it has started.
//
// It returns an error for conditions retrying cannot fix: a missing group
// without CreateGroup (pelwarden.ErrNoGroup), a key of the wrong type, a
// server that cannot run the library, a command or key the server's ACL
// refuses (pelwarden.ErrNoPermission, naming it), refused credentials, a
// TLS certificate that does not verify. Connection loss, timeouts and failover
// are retried with capped exponential backoff and jitter. A Consumer runs
// once at a time.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	loopsDone := make(chan struct{})
	released := false
	defer func() {
		if !released {
			c.running.Store(false)
		}
	}()

	held := c.cfg.Concurrency + c.cfg.Prefetch // entries held at most: running + queued
	c.slots = newSlotPool(held)
	c.inflight = map[string]*inflight{}
	c.delayed = map[string]time.Time{}
	// Room for every handler's ack plus two batches: a finished handler
	// hands its ack over and frees its slot at once, even while the ack loop
	// waits for a call in flight.
	c.acks = newAckQueue(c.cfg.AckBatch, 2*c.cfg.AckBatch+held)
	c.ackStop = make(chan struct{})
	c.ackerGone = make(chan struct{})
	c.fatal = make(chan struct{})
	c.fatalOnce = sync.Once{}
	c.fatalErr = nil
	c.closed.Store(false)
	c.unstarted = nil
	c.inHand.Store(0)
	c.readIdle.Store(false)

	if err := c.start(ctx); err != nil {
		if ctx.Err() != nil && !permanent(err) {
			// Stopped while still starting (loading the library or checking
			// the group, retried while the server is unreachable): nothing
			// ran, and a requested stop is not a failure.
			c.log.Info("pelwarden consumer stopped before it started", "err", err)
			return nil
		}
		return err
	}
	c.log.Info("pelwarden consumer started", "concurrency", c.cfg.Concurrency, "min_idle", c.cfg.MinIdle,
		"max_deliveries", c.cfg.MaxDeliveries, "library_mode", c.lib.Mode().String())

	// loopCtx stops the reader, reclaimer and lease loops; handlerCtx is
	// independent of ctx so handlers can finish during the shutdown.
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	// The channel, not the field: this goroutine may still be leaving when
	// Run returns and the next Run replaces c.fatal.
	fatal := c.fatal
	go func() {
		select {
		case <-fatal:
			stopLoops()
		case <-loopCtx.Done():
		}
	}()
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	// Concurrency long-lived handler workers. A job holds a slot from
	// before its entry is read until its handler returns, so at most held
	// jobs are queued.
	c.jobs = newJobQueue(c.cfg.Concurrency)
	var handlers sync.WaitGroup
	for range c.cfg.Concurrency {
		handlers.Go(func() {
			for {
				j, ok := c.jobs.get()
				if !ok {
					return
				}
				if c.closed.Load() {
					c.skip(j)
					continue
				}
				c.runJob(j)
			}
		})
	}
	var loops sync.WaitGroup
	loops.Go(func() { c.readLoop(loopCtx, handlerCtx) })
	loops.Go(func() { c.reclaimLoop(loopCtx, handlerCtx) })
	loops.Go(func() { c.leaseLoop(loopCtx) })
	go func() { loops.Wait(); close(loopsDone) }()
	flushCtx, cancelFlush := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelFlush()
	go func() {
		defer close(c.ackerGone)
		c.ackLoop(flushCtx)
	}()

	<-loopCtx.Done()
	// A loop blocked in a Redis call that ignores cancellation (go-redis
	// honours context deadlines only with Options.ContextTimeoutEnabled)
	// is not waited for beyond ShutdownTimeout; nothing it reads from now
	// on is dispatched (such entries stay pending).
	if !waitOrTimeout(loopsDone, c.cfg.ShutdownTimeout) {
		c.log.Warn("shutdown: a Redis call is still in progress; continuing without it")
	}
	c.mu.Lock()
	c.closed.Store(true) // no more dispatch; queued jobs are not started
	c.jobs.close()       // the workers skip the queued jobs, then exit
	c.mu.Unlock()

	// Shutdown, phase 1: in-flight handlers get ShutdownTimeout to finish;
	// the ack loop keeps sending their acks meanwhile.
	done := make(chan struct{})
	go func() { handlers.Wait(); close(done) }()
	if !waitOrTimeout(done, c.cfg.ShutdownTimeout) {
		// Phase 2: cancel them; their entries stay pending. They get another
		// ShutdownTimeout to return.
		c.log.Warn("shutdown timeout: cancelling handlers; their entries stay pending", "in_flight", c.inflightCount())
		cancelHandlers()
		waitOrTimeout(done, c.cfg.ShutdownTimeout)
	}
	// Queued entries no handler started (all of them, should every worker
	// be stuck) go back to the group at once rather than after MinIdle.
	for _, j := range c.jobs.drain() {
		c.skip(j)
	}
	c.releaseUnstarted(flushCtx)
	// Phase 3: flush the remaining acks, bounded by ShutdownTimeout.
	close(c.ackStop)
	<-c.ackerGone
	if !waitOrTimeout(done, time.Second) {
		c.log.Error("handlers ignored their cancelled context; abandoned (their outcome is discarded, entries stay pending)", "in_flight", c.inflightCount())
	}
	if !closedNow(loopsDone) || !closedNow(done) {
		// Let Run be called again only once the lingering call and the
		// abandoned handlers returned: they still use this run's slots,
		// ack queue and in-flight map, which the next Run would replace.
		released = true
		go func() { <-loopsDone; <-done; c.running.Store(false) }()
	}

	c.mu.Lock()
	fatalErr := c.fatalErr // a lingering Redis call may still report one
	c.mu.Unlock()
	if fatalErr != nil {
		return fatalErr
	}
	c.log.Info("pelwarden consumer stopped")
	return nil
}

// start loads the library and checks or creates the group.
func (c *Consumer) start(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		_, err := c.lib.Load(ctx)
		if err == nil {
			break
		}
		if permanent(err) || ctx.Err() != nil {
			return fmt.Errorf("pelwarden/driver: load library: %w", err)
		}
		c.commandError("load library", err, attempt)
		if !ctxwait.Sleep(ctx, backoff(attempt)) {
			return fmt.Errorf("pelwarden/driver: load library: %w", ctx.Err())
		}
	}
	for attempt := 0; ; attempt++ {
		err := c.ensureGroup(ctx)
		if err == nil {
			return nil
		}
		if permanent(err) || ctx.Err() != nil {
			return err
		}
		c.commandError("check group", err, attempt)
		if !ctxwait.Sleep(ctx, backoff(attempt)) {
			return fmt.Errorf("pelwarden/driver: check group: %w", ctx.Err())
		}
	}
}

// ensureGroup creates the group when CreateGroup is set (BUSYGROUP is
// fine), and otherwise checks it exists.
func (c *Consumer) ensureGroup(ctx context.Context) error {
	if c.cfg.CreateGroup {
		err := c.rdb.XGroupCreateMkStream(ctx, c.cfg.Stream, c.cfg.Group, c.cfg.GroupStartID).Err()
		switch {
		case err == nil:
			c.log.Info("created consumer group", "start_id", c.cfg.GroupStartID)
			return nil
		case redis.HasErrorPrefix(err, "BUSYGROUP"):
			return nil
		case redis.HasErrorPrefix(err, "WRONGTYPE"):
			return fmt.Errorf("pelwarden/driver: create group: %w: %v", pelwarden.ErrWrongType, err)
		case redis.HasErrorPrefix(err, "NOPERM"):
			return fmt.Errorf("pelwarden/driver: create group (XGROUP CREATE %s %s %s MKSTREAM; Config.CreateGroup needs +xgroup|create): %w: %w",
				c.cfg.Stream, c.cfg.Group, c.cfg.GroupStartID, pelwarden.ErrNoPermission, err)
		}
		return fmt.Errorf("pelwarden/driver: create group: %w", err)
	}
	_, err := c.lib.Stats(ctx, pelwarden.StatsArgs{Stream: c.cfg.Stream, DeadLetterStream: c.cfg.DeadLetterStream, Group: c.cfg.Group})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pelwarden.ErrNoGroup):
		return fmt.Errorf("pelwarden/driver: group %q on stream %q does not exist; create it (XGROUP CREATE %s %s 0 MKSTREAM) or set Config.CreateGroup: %w",
			c.cfg.Group, c.cfg.Stream, c.cfg.Stream, c.cfg.Group, err)
	}
	return fmt.Errorf("pelwarden/driver: check group: %w", err)
}

// groupMissing handles a NOGROUP seen while running: recreate the group with
// CreateGroup, else stop with an error. It reports whether to go on.
func (c *Consumer) groupMissing(ctx context.Context, err error) bool {
	if !c.cfg.CreateGroup {
		c.stop(fmt.Errorf("pelwarden/driver: group %q on stream %q disappeared: %w", c.cfg.Group, c.cfg.Stream, err))
		return false
	}
	c.log.Warn("consumer group disappeared; creating it again", "err", err)
	if cerr := c.ensureGroup(ctx); cerr != nil && permanent(cerr) {
		c.stop(cerr)
		return false
	}
	return true
}

// stopping reports whether stop was called.
func (c *Consumer) stopping() bool { return closedNow(c.fatal) }

// stop ends Run with err (the first one wins).
func (c *Consumer) stop(err error) {
	c.fatalOnce.Do(func() {
		c.log.Error("pelwarden consumer stopping", "err", err)
		c.mu.Lock()
		c.fatalErr = err
		c.mu.Unlock()
		close(c.fatal)
	})
}

// dispatch queues msgs for the handler workers; the caller holds one
// handler slot for each, released when its handler returns. A batch takes
// the lock, the clock and its allocations once.
func (c *Consumer) dispatch(handlerCtx context.Context, msgs []*Message) {
	if len(msgs) == 0 {
		return
	}
	now := time.Now()
	fs := make([]inflight, len(msgs))
	ctxs := make([]entryContext, len(msgs))
	jobs := make([]job, 0, len(msgs))
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		c.slots.release(len(msgs))
		c.log.Warn("entries read during shutdown; they stay pending", "count", len(msgs), "ids", firstIDs(messageIDs(msgs)))
		return
	}
	for i, m := range msgs {
		if _, busy := c.inflight[m.ID]; busy {
			// Our own reclaim pass took back an entry whose handler still
			// runs here (its lease lapsed): the running handler settles it.
			continue
		}
		f := &fs[i]
		f.started = now
		f.ctx = &ctxs[i]
		f.ctx.parent = handlerCtx
		c.inflight[m.ID] = f
		if len(c.delayed) > 0 {
			delete(c.delayed, m.ID)
		}
		jobs = append(jobs, job{m: m, f: f})
	}
	// Under c.mu, so never after c.jobs.close().
	c.inHand.Add(int64(len(jobs)))
	c.jobs.push(jobs...)
	c.mu.Unlock()
	c.slots.release(len(msgs) - len(jobs))
}

func messageIDs(msgs []*Message) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

// skip drops a queued job at shutdown without running its handler; its
// entry is released by releaseUnstarted.
func (c *Consumer) skip(j job) {
	j.f.ctx.release()
	c.forget(j.m.ID)
	c.mu.Lock()
	c.unstarted = append(c.unstarted, j.m.ID)
	c.mu.Unlock()
	c.settled()
	c.slots.release(1)
}

// settled notes that an entry in hand was settled (or skipped).
func (c *Consumer) settled() {
	if c.inHand.Add(-1) == 0 && c.readIdle.Load() {
		c.drained()
	}
}

// drained tells the ack loop to flush now: nothing is queued or running
// and the last read found nothing new, so no more acks are coming soon.
// Under load this never happens and acks go out in full batches; after a
// burst, its acks go out at once instead of after AckInterval.
func (c *Consumer) drained() { signal(c.acks.drained) }

// releaseUnstarted makes the entries skipped at shutdown claimable by other
// consumers at once (a fenced release: entries taken over meanwhile are
// left alone).
func (c *Consumer) releaseUnstarted(ctx context.Context) {
	c.mu.Lock()
	ids := c.unstarted
	c.unstarted = nil
	c.mu.Unlock()
	if len(ids) > 0 {
		c.log.Info("shutdown: releasing queued entries no handler had started", "count", len(ids))
	}
	for len(ids) > 0 {
		batch := ids[:min(len(ids), pelwarden.MaxCount)]
		ids = ids[len(batch):]
		c.release(ctx, batch, 0)
	}
}

// runJob runs one handler and settles its outcome, then frees its slot.
func (c *Consumer) runJob(j job) {
	defer c.slots.release(1)
	defer j.f.ctx.release()
	err, panicked := c.runHandler(j.f.ctx, j.m)
	if !c.settle(j.m, j.f, err, panicked) {
		c.forget(j.m.ID)
	}
	c.settled()
}

// monoEpoch anchors handler timings: time.Since of a time with a monotonic
// reading reads one clock, where time.Now reads two (a handler that does
// nothing costs less than the clock reads around it).
var monoEpoch = time.Now()

func (c *Consumer) runHandler(ctx context.Context, m *Message) (err error, panicked bool) {
	start := time.Since(monoEpoch)
	defer func() {
		c.m.HandlerDuration(time.Since(monoEpoch) - start)
		if r := recover(); r != nil {
			panicked = true
			err = fmt.Errorf("handler panic: %v", r)
			c.m.Count(EventHandlerPanic, 1)
			c.log.Error("handler panicked", "id", m.ID, "deliveries", m.Deliveries, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	return c.cfg.Handler.Handle(ctx, m), false
}

// settle applies a handler's outcome.
//
// It reports whether the entry stays tracked as in flight: a succeeded entry
// stays until the ack loop has sent its ack, so the lease heartbeat keeps
// protecting it and a reclaim pass of this consumer does not run it again.
// Every other outcome is forgotten before its Redis call (a release must not
// race with a lease extension).
func (c *Consumer) settle(m *Message, f *inflight, err error, panicked bool) bool {
	if f.lost.Load() {
		c.m.Count(EventLostOwnership, 1)
		c.log.Warn("entry reclaimed by another consumer while its handler ran; outcome dropped", "id", m.ID, "err", err)
		return false
	}
	out, delay := classify(err)
	if out != outcomeAck {
		c.m.Count(EventHandlerError, 1)
	}
	if out != outcomeAck && f.ctx.parent.Err() != nil {
		// Cancelled by the shutdown timeout (a lost lease returned above):
		// leave it pending.
		c.log.Warn("handler cancelled by shutdown; entry stays pending", "id", m.ID, "err", err)
		return false
	}
	if out == outcomeAck {
		c.m.Count(EventHandled, 1)
		if c.acks.push(m.ID) {
			return true
		}
		c.log.Error("handler succeeded after the ack loop stopped; entry stays pending and will be handled again", "id", m.ID)
		return false
	}
	c.forget(m.ID)
	ctx := context.WithoutCancel(f.ctx.parent)
	switch out {
	case outcomeDeadLetter:
		c.deadLetter(ctx, m, err)
	case outcomeRetry:
		c.log.Info("handler asked for a retry", "id", m.ID, "deliveries", m.Deliveries, "after", delay, "err", err)
		c.retryLater(ctx, m, delay)
	default:
		if !panicked {
			c.log.Warn("handler failed; entry stays pending for the next reclaim pass", "id", m.ID, "deliveries", m.Deliveries, "err", err)
		}
		c.retryLater(ctx, m, 0)
	}
	return false
}

// forget stops tracking ids as in flight.
func (c *Consumer) forget(ids ...string) {
	c.mu.Lock()
	for _, id := range ids {
		delete(c.inflight, id)
	}
	c.mu.Unlock()
}

// deadLetter moves one entry to the dead-letter stream, retrying transient
// errors for up to ShutdownTimeout. If it cannot, the entry stays pending
// and the reclaim pass dead-letters it at MaxDeliveries.
func (c *Consumer) deadLetter(ctx context.Context, m *Message, herr error) {
	var dl *deadLetterError
	text := errText(herr)
	if errors.As(herr, &dl) {
		text = errText(dl.err)
	}
	c.withRetry(ctx, "dead-letter", func(ctx context.Context) error {
		r, err := c.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: c.cfg.Stream, DeadLetterStream: c.cfg.DeadLetterStream,
			Group: c.cfg.Group, Consumer: c.cfg.Consumer, IDs: []string{m.ID}, Reason: pelwarden.ReasonHandler, Error: text})
		if err != nil {
			return err
		}
		if len(r.DeadLettered) > 0 {
			c.m.DeadLettered(pelwarden.ReasonHandler, len(r.DeadLettered))
			c.log.Warn("dead-lettered entry on handler request", "id", m.ID, "err", text)
		}
		if lost := r.OwnedElsewhere(); len(lost) > 0 {
			c.m.Count(EventLostOwnership, len(lost))
		}
		if len(r.Deleted) > 0 {
			c.m.Count(EventDeletedFromPEL, len(r.Deleted))
		}
		if len(r.TooLarge) > 0 {
			// Still pending and ours: give it back; once it reaches
			// MaxDeliveries the reclaim pass reports it for an operator.
			c.m.Count(EventTooLarge, len(r.TooLarge))
			c.log.Error("entry has too many fields to dead-letter atomically; it stays pending", "id", m.ID, "err", text)
			c.release(ctx, r.TooLarge, 0)
		}
		return nil
	})
}

// retryLater makes the entry claimable again after delay (at the next
// reclaim pass for 0). Delays beyond MinIdle are held by the lease loop.
func (c *Consumer) retryLater(ctx context.Context, m *Message, delay time.Duration) {
	if delay > c.cfg.MinIdle {
		c.mu.Lock()
		c.delayed[m.ID] = time.Now().Add(delay)
		c.mu.Unlock()
		return
	}
	c.release(ctx, []string{m.ID}, max(delay, 0))
}

func (c *Consumer) release(ctx context.Context, ids []string, delay time.Duration) {
	c.withRetry(ctx, "release", func(ctx context.Context) error {
		r, err := c.lib.Release(ctx, pelwarden.ReleaseArgs{Stream: c.cfg.Stream, Group: c.cfg.Group, Consumer: c.cfg.Consumer,
			IDs: ids, MinIdle: c.cfg.MinIdle, Delay: delay})
		if err != nil {
			return err
		}
		if len(r.NotOwned) > 0 {
			c.m.Count(EventLostOwnership, len(r.NotOwned))
		}
		return nil
	})
}

// withRetry runs op until it succeeds, fails permanently, or ShutdownTimeout
// passes. Failures are logged and counted.
func (c *Consumer) withRetry(ctx context.Context, what string, op func(context.Context) error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ShutdownTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		err := op(ctx)
		if err == nil {
			return
		}
		c.commandError(what, err, attempt)
		if errors.Is(err, pelwarden.ErrNoGroup) {
			c.groupMissing(ctx, err)
			return
		}
		if permanent(err) || !ctxwait.Sleep(ctx, backoff(attempt)) {
			c.log.Error(what+" gave up; the entry stays pending", "err", err)
			return
		}
	}
}

func (c *Consumer) inflightCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.inflight)
}

// commandError counts and logs a failed Redis call. A fatal error (see
// fatal) also stops the consumer: Run returns it. On a cluster client, an
// error that suggests a failover refreshes the slot map (see
// followTopology), so the retry reaches the promoted replica.
func (c *Consumer) commandError(what string, err error, attempt int) {
	c.m.Count(EventCommandError, 1)
	c.log.Error("redis call failed", "op", what, "attempt", attempt+1, "err", err)
	if fatal(err) {
		c.stop(fmt.Errorf("pelwarden/driver: %s: %w", what, err))
		return
	}
	c.followTopology(err)
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

// backoff is capped exponential backoff with full jitter: 50ms doubling up
// to 5s.
func backoff(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt, 7)
	d = min(d, 5*time.Second)
	return d/2 + rand.N(d/2+1)
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
