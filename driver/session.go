package driver

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// session is the state of one unordered Run that its lanes share: the
// core (start, stop, error policy), the window, the handler workers' job
// queue and the shutdown. Everything one Run creates lives in its session
// and lanes, so a Consumer run again starts afresh (doc.go has the map of
// the goroutines).
type session struct {
	*core

	flow *window   // how many more to fetch, for every stream
	jobs *jobQueue // dispatched entries of every stream, to the handler workers

	// closed: shutdown began (set with the trackers' close): the workers
	// skip queued jobs.
	closed atomic.Bool

	// handlersDone is closed when the shutdown cancels the handlers.
	handlersDone <-chan struct{}
}

// newSession returns the state of a Run of cfg (defaults applied): its
// session and one lane per stream, each on the server laneOf returns for
// the lane's configuration, reading clk. log is the consumer's.
func newSession(cfg Config, log *slog.Logger, lib loader, laneOf func(Config) laneServer, clk clock) (*session, []*lane) {
	ceil := cfg.MaxInHand
	if cfg.Prefetch > 0 {
		ceil = cfg.Concurrency + cfg.Prefetch
	}
	floor := min(cfg.Concurrency, ceil)
	if cfg.Limit != "" {
		// Under a limit, the entries in hand are bounded by the permits
		// (a cap's share, a rate's horizon), and a rate's permits come
		// due over the horizon ahead: a window of Concurrency would cut
		// the reads short of the permits they could take, leaving the
		// rate's slots unclaimed whenever a call lags.
		floor = min(limitWindowFloor*cfg.Concurrency, ceil)
	}
	flow := newWindow(floor, ceil, cfg.Prefetch > 0, cfg.MaxInHandBytes, cfg.MinIdle)
	s := &session{core: newCore(cfg, log, lib, flow, clk), flow: flow}
	s.jobs = newJobQueue(cfg.Concurrency, &s.flow.starved)
	lanes := make([]*lane, len(cfg.Streams))
	for i, stream := range cfg.Streams {
		sc, srv := scopeOf(s.core, stream, laneOf)
		// Room for every held entry's ack plus two batches: a finished
		// handler hands its ack over and frees its place at once, even
		// while the ack loop waits for a call in flight.
		lanes[i] = newLane(s, sc, srv, clk, len(cfg.Streams) == 1, 2*cfg.AckBatch+ceil)
	}
	return s, lanes
}

// serve is Run's body. It returns a channel closed once a Redis call and
// handlers still in progress after the shutdown have returned (nil when
// none is), and Run's error.
func (s *session) serve(ctx context.Context, lanes []*lane) (lingering <-chan struct{}, err error) {
	cfg := s.cfg
	scopes := make([]*streamScope, len(lanes))
	for i, l := range lanes {
		scopes[i] = l.scope
	}
	if ok, err := s.begin(ctx, scopes); !ok {
		return nil, err
	}
	for _, l := range lanes {
		l.detectReadClaim()
	}
	// A group paused before the start: nothing is read until the resume.
	pauses := make([]*pauseSource, len(lanes))
	for i, l := range lanes {
		pauses[i] = l.pauseSource()
	}
	s.checkPauses(ctx, pauses)
	s.log.Info("pelwarden consumer started", "streams", len(lanes), "concurrency", cfg.Concurrency, "max_in_hand", s.flow.ceil,
		"min_idle", cfg.MinIdle, "max_deliveries", cfg.MaxDeliveries, "library_mode", s.lib.Mode().String(),
		"read_claim", readClaimCount(lanes))

	// loopCtx stops the readers, reclaimers and lease loops; handlerCtx is
	// independent of ctx so handlers can finish during the shutdown.
	loopCtx, stopLoops := s.loopContext(ctx)
	defer stopLoops()
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
	loops.Go(func() { s.pauseLoop(loopCtx, pauses) })
	// The limit's loop gives the permits of ending handlers back until
	// they all ended.
	limitCtx, stopLimit := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLimit()
	var limitLoop sync.WaitGroup
	limitLoop.Go(func() { s.limit.loop(limitCtx) })
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
	// No more dispatch: every hand refuses adds, then the queue closes;
	// the workers skip the queued jobs, then exit.
	for _, l := range lanes {
		l.hand.close()
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
		j.exec.skip(j)
	}
	for _, l := range lanes {
		for _, j := range l.pause.close() {
			j.exec.skip(j) // held while paused
		}
	}
	for _, l := range lanes {
		l.settle.releaseUnstarted(flushCtx)
	}
	// Phase 3: flush the remaining acks, bounded by ShutdownTimeout.
	for _, l := range lanes {
		l.acks.stop()
	}
	for _, l := range lanes {
		<-l.acks.done()
	}
	stopLimit()
	limitLoop.Wait()
	finishCtx, cancelFinish := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	s.limit.finish(finishCtx) // every permit still held goes back, and the lease ends
	cancelFinish()
	if !waitOrTimeout(done, time.Second) {
		s.log.Error("handlers ignored their cancelled context; abandoned (their outcome is discarded, entries stay pending)", "in_flight", heldCount(lanes))
	}
	if !closedNow(loopsDone) || !closedNow(done) {
		ch := make(chan struct{})
		go func() { <-loopsDone; <-done; close(ch) }()
		lingering = ch
	}

	return lingering, s.end()
}

// handlersCancelled reports whether the shutdown cancelled the handlers.
func (s *session) handlersCancelled() bool { return closedNow(s.handlersDone) }

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
		n += l.hand.count()
	}
	return n
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
