package driver

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pelwarden/pelwarden"
)

// session is the state of one Run that its lanes share: the window, the
// handler workers' job queue, the shutdown and the pause. Everything one
// Run creates lives in its session and lanes, so a Consumer run again
// starts afresh (doc.go has the map of the goroutines).
type session struct {
	cfg Config          // the consumer's
	run context.Context // Run's context (set as serve starts)
	log *slog.Logger    // the consumer's, without a stream
	m   Metrics
	lib loader

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

	// stopped is closed by stop, with stopErr, the error Run returns.
	stopOnce sync.Once
	stopMu   sync.Mutex
	stopErr  error
	stopped  chan struct{}
}

// loader loads the function library (a *pelwarden.Library).
type loader interface {
	Load(ctx context.Context) (*pelwarden.LoadResult, error)
	Mode() pelwarden.Mode
}

// newSession returns the state of a Run of cfg (defaults applied): its
// session and one lane per stream, each on the server laneOf returns for
// the lane's configuration, reading clk. log is the consumer's.
func newSession(cfg Config, log *slog.Logger, lib loader, laneOf func(Config) laneServer, clk clock) (*session, []*lane) {
	ceil := cfg.MaxInHand
	if cfg.Prefetch > 0 {
		ceil = cfg.Concurrency + cfg.Prefetch
	}
	s := &session{
		cfg:       cfg,
		log:       log,
		m:         cfg.Metrics,
		lib:       lib,
		flow:      newWindow(min(cfg.Concurrency, ceil), ceil, cfg.Prefetch > 0, cfg.MaxInHandBytes, cfg.MinIdle),
		entryLogs: newLogLimiter(entryLogBurst, entryLogRate),
		stopped:   make(chan struct{}),
	}
	s.jobs = newJobQueue(cfg.Concurrency, &s.flow.starved)
	lanes := make([]*lane, len(cfg.Streams))
	for i, stream := range cfg.Streams {
		lcfg := cfg
		lcfg.Stream, lcfg.DeadLetterStream = stream, cfg.deadLetterStreamOf(stream)
		llog := log
		if len(cfg.Streams) > 1 {
			llog = log.With("stream", stream)
		}
		// Room for every held entry's ack plus two batches: a finished
		// handler hands its ack over and frees its place at once, even
		// while the ack loop waits for a call in flight.
		lanes[i] = newLane(s, laneOf(lcfg), clk, lcfg, llog, len(cfg.Streams) == 1, 2*cfg.AckBatch+ceil)
	}
	return s, lanes
}

// serve is Run's body. It returns a channel closed once a Redis call and
// handlers still in progress after the shutdown have returned (nil when
// none is), and Run's error.
func (s *session) serve(ctx context.Context, lanes []*lane) (lingering <-chan struct{}, err error) {
	cfg := s.cfg
	s.run = ctx
	if err := s.start(ctx, lanes); err != nil {
		if ctx.Err() != nil && !permanent(err) {
			// Stopped while still starting (loading the library or checking
			// the group, retried while the server is unreachable): nothing
			// ran, and a requested stop is not a failure.
			s.log.Info("pelwarden consumer stopped before it started", "err", err)
			return nil, nil
		}
		return nil, err
	}
	s.log.Info("pelwarden consumer started", "streams", len(lanes), "concurrency", cfg.Concurrency, "max_in_hand", s.flow.ceil,
		"min_idle", cfg.MinIdle, "max_deliveries", cfg.MaxDeliveries, "library_mode", s.lib.Mode().String(),
		"read_claim", readClaimCount(lanes))

	// loopCtx stops the readers, reclaimers and lease loops; handlerCtx is
	// independent of ctx so handlers can finish during the shutdown.
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	go func() {
		select {
		case <-s.stopped:
			stopLoops()
		case <-loopCtx.Done():
		}
	}()
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	s.handlersDone = handlerCtx.Done()

	// Concurrency long-lived handler workers, fed by the job queue with the
	// entries of every stream.
	var handlers sync.WaitGroup
	for range cfg.Concurrency {
		handlers.Go(s.worker)
	}
	var loops sync.WaitGroup
	flushCtx, cancelFlush := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelFlush()
	for _, l := range lanes {
		l.startLoops(loopCtx, handlerCtx, &loops)
		l.acks.start(flushCtx)
	}
	loopsDone := make(chan struct{})
	go func() { loops.Wait(); close(loopsDone) }()

	<-loopCtx.Done()
	// A loop blocked in a Redis call that ignores cancellation (go-redis
	// honours context deadlines only with Options.ContextTimeoutEnabled)
	// is not waited for beyond ShutdownTimeout; nothing it reads from now
	// on is dispatched (such entries stay pending).
	if !waitOrTimeout(loopsDone, cfg.ShutdownTimeout) {
		s.log.Warn("shutdown: a Redis call is still in progress; continuing without it")
	}
	s.closed.Store(true) // queued jobs are not started
	// No more dispatch: every tracker refuses adds, then the queue closes;
	// the workers skip the queued jobs, then exit.
	for _, l := range lanes {
		l.held.close()
	}
	s.jobs.close()

	// Shutdown, phase 1: in-flight handlers get ShutdownTimeout to finish;
	// the ack loops keep sending their acks meanwhile.
	done := make(chan struct{})
	go func() { handlers.Wait(); close(done) }()
	if !waitOrTimeout(done, cfg.ShutdownTimeout) {
		// Phase 2: cancel them; their entries stay pending. They get another
		// ShutdownTimeout to return.
		s.log.Warn("shutdown timeout: cancelling handlers; their entries stay pending", "in_flight", heldCount(lanes))
		cancelHandlers()
		waitOrTimeout(done, cfg.ShutdownTimeout)
	}
	// Queued entries no handler started (all of them, should every worker
	// be stuck) go back to the group at once rather than after MinIdle.
	for _, j := range s.jobs.drain() {
		j.lane.skip(j)
	}
	for _, l := range lanes {
		l.releaseUnstarted(flushCtx)
	}
	// Phase 3: flush the remaining acks, bounded by ShutdownTimeout.
	for _, l := range lanes {
		l.acks.stop()
	}
	for _, l := range lanes {
		<-l.acks.done()
	}
	if !waitOrTimeout(done, time.Second) {
		s.log.Error("handlers ignored their cancelled context; abandoned (their outcome is discarded, entries stay pending)", "in_flight", heldCount(lanes))
	}
	if !closedNow(loopsDone) || !closedNow(done) {
		ch := make(chan struct{})
		go func() { <-loopsDone; <-done; close(ch) }()
		lingering = ch
	}

	s.stopMu.Lock()
	stopErr := s.stopErr // a lingering Redis call may still report one
	s.stopMu.Unlock()
	if stopErr != nil {
		return lingering, stopErr
	}
	s.log.Info("pelwarden consumer stopped")
	return lingering, nil
}

// start loads the library and checks or creates the group of every
// stream.
func (s *session) start(ctx context.Context, lanes []*lane) error {
	failed := func(l *lane, what string) func(error, int) {
		return func(err error, attempt int) {
			if !permanent(err) {
				l.commandError(what, err, attempt)
			}
		}
	}
	err := retry(ctx, onPermanent, failed(lanes[0], "load library"), func(ctx context.Context) error {
		_, err := s.lib.Load(ctx)
		return err
	})
	if err != nil {
		if ctx.Err() != nil && !permanent(err) {
			err = ctx.Err()
		}
		return fmt.Errorf("pelwarden/driver: load library: %w", err)
	}
	for _, l := range lanes {
		err = retry(ctx, onPermanent, failed(l, "check group"), l.ensureGroup)
		if err != nil && ctx.Err() != nil && !permanent(err) {
			return fmt.Errorf("pelwarden/driver: check group: %w", ctx.Err())
		}
		if err != nil {
			return err
		}
		l.detectReadClaim()
	}
	return nil
}

// readClaimCount is how many of the lanes' reads take idle entries over.
func readClaimCount(lanes []*lane) int {
	n := 0
	for _, l := range lanes {
		if l.readClaim.Load() {
			n++
		}
	}
	return n
}

// heldCount is how many entries the lanes hold.
func heldCount(lanes []*lane) int {
	n := 0
	for _, l := range lanes {
		n += l.held.count()
	}
	return n
}

// stopping reports whether stop was called.
func (s *session) stopping() bool { return closedNow(s.stopped) }

// stop ends Run with err (the first one wins).
func (s *session) stop(err error) {
	s.stopOnce.Do(func() {
		s.log.Error("pelwarden consumer stopping", "err", err)
		s.stopMu.Lock()
		s.stopErr = err
		s.stopMu.Unlock()
		close(s.stopped)
	})
}

// memoryFull pauses the taking of new entries: the server refused a write
// (a claim that may dead-letter, a handler's dead-letter) because it is at
// maxmemory. Acks, lease extensions and releases still land (their
// functions may run when the server is full), so the entries in hand
// settle; reading more would only grow the PEL of a full server. It logs
// once per pause, with the server's message.
func (s *session) memoryFull(what string, err error) {
	if s.flow.pause() {
		s.m.Count(EventPaused, 1)
		s.oomMu.Lock()
		s.oom = err
		s.oomMu.Unlock()
		s.log.Error("server out of memory: stopped taking new entries until a refused call succeeds; entries in hand are still handled and acked",
			"op", what, "err", err)
	}
}

// memoryFreed ends a pause of memoryFull: a call the full server refused
// has succeeded.
func (s *session) memoryFreed(what string) {
	if s.flow.resume() {
		s.oomMu.Lock()
		err := s.oom
		s.oom = nil
		s.oomMu.Unlock()
		s.log.Warn("server accepts writes again: taking new entries", "op", what, "refused_with", err)
	}
}

// The driver's readings of pelwarden.Classify:
//   - outOfMemory: the server refused a write at maxmemory; the consumer
//     pauses its taking (session.memoryFull);
//   - permanent: retrying cannot fix it;
//   - fatal: an error of the deployment, not of one entry or one moment,
//     which stops the consumer wherever it happens: the ACL refuses a
//     command or key the consumer needs (running on would leave work half
//     done: acks refused, poison entries never parked), the credentials
//     are refused, or the server's TLS certificate does not verify.
func outOfMemory(err error) bool { return pelwarden.Classify(err) == pelwarden.ClassOutOfMemory }
func permanent(err error) bool   { return pelwarden.Classify(err).Permanent() }
func fatal(err error) bool       { return pelwarden.Classify(err) == pelwarden.ClassNoPermission }

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
