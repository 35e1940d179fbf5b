package driver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// shared is the state of one Run that its streams share: the window, the
// handler workers' job queue, the shutdown and the pause. Everything one
// Run creates lives in shared and its lanes, so a Consumer run again
// starts afresh (doc.go has the map of the goroutines).
type shared struct {
	log *slog.Logger // the consumer's, without a stream

	flow      *window     // how many more to fetch, for every stream
	jobs      *jobQueue   // dispatched entries of every stream, to the handler workers
	entryLogs *logLimiter // per-entry log records

	// closed: shutdown began (set with the trackers' close): the workers
	// skip queued jobs.
	closed atomic.Bool

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

// run is one stream's lane of a Run: the loops that read, reclaim, extend
// and ack entries of that stream, and the entries of it in hand. A Run has
// one lane per stream; they share the window and the handler workers.
type run struct {
	*Consumer
	*shared

	// cfg is the consumer's configuration with this lane's Stream and
	// DeadLetterStream; log names the stream. They shadow the Consumer's.
	cfg Config
	log *slog.Logger

	held *tracker  // the entries of this stream in hand
	acks *ackQueue // ids to ack, from handlers to the ack loop

	// inHand counts entries dispatched and not yet settled (queued or
	// running); readIdle is set while the last read found nothing new.
	// Together they tell the ack loop when to flush without waiting for
	// a full batch (see drained).
	inHand   atomic.Int64
	readIdle atomic.Bool

	ackStop   chan struct{} // closed: no more acks are coming, flush and exit
	ackerGone chan struct{} // closed when the ack loop has exited
}

// newRun returns the shared state of a Run of c and one lane per stream.
func newRun(c *Consumer) (*shared, []*run) {
	ceil := c.cfg.MaxInHand
	if c.cfg.Prefetch > 0 {
		ceil = c.cfg.Concurrency + c.cfg.Prefetch
	}
	s := &shared{
		log:       c.log,
		flow:      newWindow(min(c.cfg.Concurrency, ceil), ceil, c.cfg.Prefetch > 0, c.cfg.MaxInHandBytes, c.cfg.MinIdle),
		entryLogs: newLogLimiter(entryLogBurst, entryLogRate),
		fatal:     make(chan struct{}),
	}
	lanes := make([]*run, len(c.cfg.Streams))
	for i, stream := range c.cfg.Streams {
		cfg := c.cfg
		cfg.Stream, cfg.DeadLetterStream = stream, c.cfg.deadLetterStreamOf(stream)
		log := c.log
		if len(c.cfg.Streams) > 1 {
			log = log.With("stream", stream)
		}
		lanes[i] = &run{
			Consumer: c, shared: s, cfg: cfg, log: log,
			held: newTracker(),
			// Room for every held entry's ack plus two batches: a finished
			// handler hands its ack over and frees its place at once, even
			// while the ack loop waits for a call in flight.
			acks:      newAckQueue(c.cfg.AckBatch, 2*c.cfg.AckBatch+ceil),
			ackStop:   make(chan struct{}),
			ackerGone: make(chan struct{}),
		}
	}
	return s, lanes
}

// run is Run's body. It returns a channel closed once a Redis call and
// handlers still in progress after the shutdown have returned (nil when
// none is), and Run's error.
func (s *shared) run(ctx context.Context, c *Consumer, lanes []*run) (lingering <-chan struct{}, err error) {
	if err := s.start(ctx, c, lanes); err != nil {
		if ctx.Err() != nil && !permanent(err) {
			// Stopped while still starting (loading the library or checking
			// the group, retried while the server is unreachable): nothing
			// ran, and a requested stop is not a failure.
			s.log.Info("pelwarden consumer stopped before it started", "err", err)
			return nil, nil
		}
		return nil, err
	}
	s.log.Info("pelwarden consumer started", "streams", len(lanes), "concurrency", c.cfg.Concurrency, "max_in_hand", s.flow.ceil,
		"min_idle", c.cfg.MinIdle, "max_deliveries", c.cfg.MaxDeliveries, "library_mode", c.lib.Mode().String())

	// loopCtx stops the readers, reclaimers and lease loops; handlerCtx is
	// independent of ctx so handlers can finish during the shutdown.
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	go func() {
		select {
		case <-s.fatal:
			stopLoops()
		case <-loopCtx.Done():
		}
	}()
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	s.handlersDone = handlerCtx.Done()

	// Concurrency long-lived handler workers, fed by the job queue with the
	// entries of every stream.
	s.jobs = newJobQueue(c.cfg.Concurrency, &s.flow.starved)
	var handlers sync.WaitGroup
	for range c.cfg.Concurrency {
		handlers.Go(s.worker)
	}
	var loops sync.WaitGroup
	flushCtx, cancelFlush := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelFlush()
	for _, r := range lanes {
		loops.Go(func() { r.readLoop(loopCtx, handlerCtx) })
		loops.Go(func() { r.reclaimLoop(loopCtx, handlerCtx) })
		loops.Go(func() { r.leaseLoop(loopCtx) })
		if r.cfg.TrimInterval > 0 {
			loops.Go(func() { r.trimLoop(loopCtx) })
		}
		go func() {
			defer close(r.ackerGone)
			r.ackLoop(flushCtx)
		}()
	}
	loopsDone := make(chan struct{})
	go func() { loops.Wait(); close(loopsDone) }()

	<-loopCtx.Done()
	// A loop blocked in a Redis call that ignores cancellation (go-redis
	// honours context deadlines only with Options.ContextTimeoutEnabled)
	// is not waited for beyond ShutdownTimeout; nothing it reads from now
	// on is dispatched (such entries stay pending).
	if !waitOrTimeout(loopsDone, c.cfg.ShutdownTimeout) {
		s.log.Warn("shutdown: a Redis call is still in progress; continuing without it")
	}
	s.closed.Store(true) // queued jobs are not started
	// No more dispatch: every tracker refuses adds, then the queue closes;
	// the workers skip the queued jobs, then exit.
	for _, r := range lanes {
		r.held.close()
	}
	s.jobs.close()

	// Shutdown, phase 1: in-flight handlers get ShutdownTimeout to finish;
	// the ack loops keep sending their acks meanwhile.
	done := make(chan struct{})
	go func() { handlers.Wait(); close(done) }()
	if !waitOrTimeout(done, c.cfg.ShutdownTimeout) {
		// Phase 2: cancel them; their entries stay pending. They get another
		// ShutdownTimeout to return.
		s.log.Warn("shutdown timeout: cancelling handlers; their entries stay pending", "in_flight", heldCount(lanes))
		cancelHandlers()
		waitOrTimeout(done, c.cfg.ShutdownTimeout)
	}
	// Queued entries no handler started (all of them, should every worker
	// be stuck) go back to the group at once rather than after MinIdle.
	for _, j := range s.jobs.drain() {
		j.lane.skip(j)
	}
	for _, r := range lanes {
		r.releaseUnstarted(flushCtx)
	}
	// Phase 3: flush the remaining acks, bounded by ShutdownTimeout.
	for _, r := range lanes {
		close(r.ackStop)
	}
	for _, r := range lanes {
		<-r.ackerGone
	}
	if !waitOrTimeout(done, time.Second) {
		s.log.Error("handlers ignored their cancelled context; abandoned (their outcome is discarded, entries stay pending)", "in_flight", heldCount(lanes))
	}
	if !closedNow(loopsDone) || !closedNow(done) {
		ch := make(chan struct{})
		go func() { <-loopsDone; <-done; close(ch) }()
		lingering = ch
	}

	s.fatalMu.Lock()
	fatalErr := s.fatalErr // a lingering Redis call may still report one
	s.fatalMu.Unlock()
	if fatalErr != nil {
		return lingering, fatalErr
	}
	s.log.Info("pelwarden consumer stopped")
	return lingering, nil
}

// heldCount is how many entries the lanes hold.
func heldCount(lanes []*run) int {
	n := 0
	for _, r := range lanes {
		n += r.held.count()
	}
	return n
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
func (s *shared) stopping() bool { return closedNow(s.fatal) }

// stop ends Run with err (the first one wins).
func (s *shared) stop(err error) {
	s.fatalOnce.Do(func() {
		s.log.Error("pelwarden consumer stopping", "err", err)
		s.fatalMu.Lock()
		s.fatalErr = err
		s.fatalMu.Unlock()
		close(s.fatal)
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
		r.shared.log.Error("server out of memory: stopped taking new entries until a refused call succeeds; entries in hand are still handled and acked",
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
		r.shared.log.Warn("server accepts writes again: taking new entries", "op", what, "refused_with", err)
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
