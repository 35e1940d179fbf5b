package driver

// A lane: one stream's part of a Run.

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// lane is one stream's part of a Run: the loops that read, reclaim and
// extend entries of that stream, its acker, and the entries of it in hand.
// A Run has one lane per stream; they share the session's window and
// handler workers. Everything a lane asks of the server goes through srv,
// and every time its rules read comes from clock.
type lane struct {
	// cfg is the consumer's configuration with this lane's Stream and
	// DeadLetterStream.
	cfg    Config
	log    *slog.Logger // names the stream when the consumer has several
	m      Metrics
	single bool // the consumer's only stream: a read of an idle stream blocks

	srv   laneServer
	clock clock

	sess   *session     // the Run's core, shutdown and workers
	faults streamFaults // the core's error policy, for this stream
	scope  *streamScope // the stream's configuration, log and server, for the core
	flow   *window      // the session's
	jobs   *jobQueue    // the session's

	hand *hand  // the entries of this stream in hand
	acks *acker // sends the acks of entries whose handler succeeded

	// drain tells the acker when the lane has drained what it had.
	drain drain
	// exec runs the stream's handlers and applies their outcomes.
	exec *executor

	// readClaim is set while the lane's reads take idle entries over
	// (XREADGROUP ... CLAIM MinIdle): see detectReadClaim.
	readClaim atomic.Bool
	// reclaimNow makes the reclaim loop run a round at once (see
	// signal): the read loop found that the server refuses read claims,
	// so the passes take the idle entries from now on, and one that ran
	// meanwhile left them to the reads (see reclaimTick).
	reclaimNow chan struct{}
	// claimPage sizes the reclaim pass's pages (the reclaim loop's own).
	claimPage claimPacer

	// sweeps records the completed sweeps of the PEL (see sweeps).
	sweeps sweeps
	// maint runs the stall check, the trim and the upkeep.
	maint *maintainer
	// settle sends the outcomes' writes but the acks.
	settle *settler
	// keep runs the heartbeat of the entries in hand.
	keep *keeper
	// pause is the operator's pause of the group on this stream.
	pause pauseGate
	// readPulse is the read loop's progress, for the liveness probe.
	readPulse *pulse
	// takeovers reports the entries taken over from other consumers.
	takeovers *takeovers
}

// sweeps holds one more than the clock reading at which the latest
// completed sweep of the PEL began (0: none yet): a reclaim pass that
// reached the PEL's end, or a read that claims and found fewer entries
// than it asked for. Every entry claimable when such a sweep began was
// taken by it, unless it could not be (the stall check reports those).
type sweeps struct{ at atomic.Int64 }

// record records a completed sweep of the PEL that began at at (a clock
// reading).
func (s *sweeps) record(at time.Duration) {
	v := int64(at) + 1
	for {
		old := s.at.Load()
		if old >= v || s.at.CompareAndSwap(old, v) {
			return
		}
	}
}

// since reports whether a completed sweep began at or after at.
func (s *sweeps) since(at time.Duration) bool {
	v := s.at.Load()
	return v != 0 && v-1 >= int64(at)
}

// newLane returns the lane of stream sc in session s, on srv (sc's
// server); its acker queues at most ackLimit acks.
func newLane(s *session, sc *streamScope, srv laneServer, clk clock, single bool, ackLimit int) *lane {
	cfg, log := sc.cfg, sc.log
	l := &lane{
		cfg: cfg, log: log, m: cfg.Metrics, single: single,
		srv: srv, clock: clk,
		sess: s, scope: sc, flow: s.flow, jobs: s.jobs,
		hand: newHand(clk), reclaimNow: make(chan struct{}, 1), takeovers: newTakeovers(),
	}
	l.faults = streamFaults{core: s.core, scope: sc}
	l.acks = newAcker(acker{
		srv: srv, hand: l.hand, clock: clk, m: cfg.Metrics, log: log, faults: l.faults,
		batch: cfg.AckBatch, limit: ackLimit, interval: min(cfg.AckInterval, cfg.MinIdle/4),
		flushTimeout: cfg.ShutdownTimeout,
	})
	l.drain.acks = l.acks
	l.settle = &settler{cfg: cfg, log: log, m: cfg.Metrics, srv: srv, hand: l.hand, faults: l.faults, run: s}
	l.exec = &executor{cfg: cfg, log: log, m: cfg.Metrics, clock: clk, hand: l.hand, flow: s.flow, acks: l.acks,
		settle: l.settle, run: s.core, drain: &l.drain, readClaim: &l.readClaim, pause: &l.pause}
	l.keep = &keeper{cfg: cfg, m: cfg.Metrics, srv: srv, clock: clk, hand: l.hand, settle: l.settle, faults: l.faults}
	l.readPulse = s.health.pulse("read loop of "+cfg.Stream, cfg.ReadBlock+time.Minute)
	l.keep.pulse = s.health.pulse("heartbeat loop of "+cfg.Stream, 3*cfg.heartbeatTick()+time.Minute)
	s.health.watch(&l.pause)
	l.maint = &maintainer{cfg: cfg, log: log, m: cfg.Metrics, srv: srv, clock: clk, faults: l.faults, hand: l.hand, sweeps: &l.sweeps}
	return l
}

// pauseSource is the lane's stream for the Run's pause checks: a resume
// queues the held entries again (or, once the queue is closed by the
// shutdown, releases them as unstarted).
func (l *lane) pauseSource() *pauseSource {
	return &pauseSource{scope: l.scope, srv: l.srv, gate: &l.pause, requeue: func(held []job) {
		if !l.jobs.push(held...) {
			for _, j := range held {
				j.exec.skip(j)
			}
		}
	}}
}

// startLoops starts the lane's loops on loops: read, reclaim and lease
// always, the stall check unless StallAfter is NoStallCheck, the upkeep
// and trim loops when configured. They return when ctx ends. (The acker
// has its own start and stop, and its own goroutine.)
func (l *lane) startLoops(ctx, handlerCtx context.Context, loops *sync.WaitGroup) {
	loops.Go(func() { l.readLoop(ctx, handlerCtx) })
	loops.Go(func() { l.reclaimLoop(ctx, handlerCtx) })
	loops.Go(func() { l.keep.heartbeatLoop(ctx) })
	l.maint.start(ctx, loops)
}

// faults is how a stream's parts report failed server calls
// (streamFaults implements it).
type faults interface {
	// commandError counts and logs a failed call (attempt from 0), stops
	// the consumer at a fatal error and pauses it at a full server.
	commandError(what string, err error, attempt int)
	// failedForGood applies the policy for a call that will not be
	// retried (see core.failedForGood); it reports whether to go on.
	failedForGood(ctx context.Context, what string, err error) bool
	// stopping reports whether the consumer is stopping.
	stopping() bool
}

// streamFaults applies the core's policy to the failed calls of one
// stream (the faults of its parts).
type streamFaults struct {
	core  *core
	scope *streamScope
}

func (f streamFaults) commandError(what string, err error, attempt int) {
	f.core.commandError(f.scope, what, err, attempt)
}

func (f streamFaults) failedForGood(ctx context.Context, what string, err error) bool {
	return f.core.failedForGood(ctx, f.scope, what, err)
}

func (f streamFaults) stopping() bool { return f.core.stopping() }

// drain tells the acker to flush without waiting for a full batch once
// the lane has drained: nothing dispatched is queued or running and the
// last read found nothing new, so no more acks are coming soon.
type drain struct {
	acks       *acker
	unfinished atomic.Int64 // entries dispatched whose handler has not finished
	readIdle   atomic.Bool  // the last read found nothing new
}

// add counts n entries dispatched to the workers.
func (d *drain) add(n int) { d.unfinished.Add(int64(n)) }

// done notes that n entries dispatched left the workers: their handlers
// ran and their outcomes were applied (or, for a success, queued for the
// acker), or they were skipped at dispatch or at shutdown.
func (d *drain) done(n int) {
	if d.unfinished.Add(-int64(n)) == 0 && d.readIdle.Load() {
		d.acks.drained()
	}
}

// read notes whether a read found nothing new (idle).
func (d *drain) read(idle bool) {
	d.readIdle.Store(idle)
	if idle && d.unfinished.Load() == 0 {
		d.acks.drained()
	}
}

// idle reports whether the last read found nothing new.
func (d *drain) idle() bool { return d.readIdle.Load() }
