package driver

// The core of a Run, whatever its mode: the start, the stop and the
// error policy, decided once for both runtimes.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/pelwarden/pelwarden"
)

// core is what one Run shares with its parts in either mode: the
// configuration, the log, the metrics and the library; the start (load the
// library, check or create the groups); the stop and its error; the error
// policy for failed Redis calls; the pause while the server is out of
// memory; and the rate-limited log of per-entry events. The unordered
// runtime (session) and the ordered one (orderedRun) each hold one.
type core struct {
	cfg       Config
	log       *slog.Logger // the consumer's, without a stream
	m         Metrics
	lib       loader
	entryLogs *logLimiter

	// intake is what a full server pauses: the taking of new entries (the
	// window in unordered mode; in ordered mode the owners' next calls,
	// which the server refuses, are the pause and its probe).
	intake intake
	// health answers probes (Consumer.Health).
	health *health
	// limit takes the permits of Config.Limit (nil without one).
	limit *permits
	oomMu sync.Mutex
	oom   error // the refusal that paused the intake

	// run is Run's context, set by begin: failures it caused are not
	// errors (endedByRun).
	run context.Context

	stopOnce sync.Once
	stopMu   sync.Mutex
	stopErr  error
	stopped  chan struct{} // closed by stop
}

// loader loads the function library (a *pelwarden.Library).
type loader interface {
	Load(ctx context.Context) (*pelwarden.LoadResult, error)
	Mode() pelwarden.Mode
}

// intake is the taking of new entries, which a server out of memory
// pauses. pause and resume report whether they changed its state.
type intake interface {
	pause() bool
	resume() bool
}

// intakeFlag is an intake that only records its state: ordered mode's,
// whose owners find out by their own calls whether the server takes
// writes again.
type intakeFlag struct{ paused atomic.Bool }

func (f *intakeFlag) pause() bool  { return f.paused.CompareAndSwap(false, true) }
func (f *intakeFlag) resume() bool { return f.paused.CompareAndSwap(true, false) }

// streamScope is one stream of a Run: its configuration (the consumer's
// with this Stream and DeadLetterStream), its logger (naming the stream
// when the consumer has several) and its server's group and topology
// calls.
type streamScope struct {
	cfg Config
	log *slog.Logger
	srv streamServer
}

// streamServer is what the core asks of one stream's server.
type streamServer interface {
	groupServer
	// stale tells the client that err suggests its cluster slot map is
	// out of date (see followTopology).
	stale(err error)
}

func newCore(cfg Config, log *slog.Logger, lib loader, in intake, clk clock) *core {
	return &core{cfg: cfg, log: log, m: cfg.Metrics, lib: lib, intake: in, health: newHealth(clk),
		entryLogs: newLogLimiter(entryLogBurst, entryLogRate), stopped: make(chan struct{})}
}

// scopeOf returns stream's scope on the server srvOf returns for its
// configuration.
func scopeOf[S streamServer](c *core, stream string, srvOf func(Config) S) (*streamScope, S) {
	cfg := c.cfg
	cfg.Stream, cfg.DeadLetterStream = stream, cfg.deadLetterStreamOf(stream)
	log := c.log
	if len(c.cfg.Streams) > 1 {
		log = log.With("stream", stream)
	}
	srv := srvOf(cfg)
	return &streamScope{cfg: cfg, log: log, srv: srv}, srv
}

// begin starts a Run on ctx: it loads the library and checks or creates
// the group of every stream, retrying what can be retried. It reports
// whether the Run goes on; a Run stopped while still starting (ctx
// cancelled while the server was unreachable) ends with no error, as
// nothing ran and a requested stop is not a failure.
func (c *core) begin(ctx context.Context, streams []*streamScope) (bool, error) {
	c.run = ctx
	err := c.start(ctx, streams)
	switch {
	case err == nil:
		c.health.ready.Store(true)
		return true, nil
	case ctx.Err() != nil && !permanent(err):
		c.log.Info("pelwarden consumer stopped before it started", "err", err)
		return false, nil
	}
	return false, err
}

func (c *core) start(ctx context.Context, streams []*streamScope) error {
	failed := func(sc *streamScope, what string) func(error, int) {
		return func(err error, attempt int) {
			if !permanent(err) {
				c.commandError(sc, what, err, attempt)
			}
		}
	}
	err := retry(ctx, onPermanent, failed(nil, "load library"), func(ctx context.Context) error {
		_, err := c.lib.Load(ctx)
		return err
	})
	if err != nil {
		if ctx.Err() != nil && !permanent(err) {
			err = ctx.Err()
		}
		return fmt.Errorf("pelwarden/driver: load library: %w", err)
	}
	if c.limit != nil {
		err := retry(ctx, func(err error, _ int) bool { return permanent(err) || errors.Is(err, pelwarden.ErrNoLimit) },
			failed(nil, "read limit"), c.limit.check)
		if err != nil {
			if ctx.Err() != nil && !permanent(err) && !errors.Is(err, pelwarden.ErrNoLimit) {
				err = ctx.Err()
			}
			return fmt.Errorf("pelwarden/driver: read limit: %w", err)
		}
	}
	for _, sc := range streams {
		err := retry(ctx, onPermanent, failed(sc, "check group"), func(ctx context.Context) error {
			return ensureGroup(ctx, sc.srv, sc.cfg, sc.log)
		})
		if err != nil && ctx.Err() != nil && !permanent(err) {
			return fmt.Errorf("pelwarden/driver: check group: %w", ctx.Err())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ensureGroup creates the group of cfg.Stream on g when CreateGroup is
// set (BUSYGROUP is fine), and otherwise checks it exists.
func ensureGroup(ctx context.Context, g groupServer, cfg Config, log *slog.Logger) error {
	if cfg.CreateGroup {
		err := g.createGroup(ctx, cfg.GroupStartID)
		switch {
		case err == nil:
			log.Info("created consumer group", "start_id", cfg.GroupStartID)
			return nil
		case pelwarden.Matches(err, pelwarden.ErrGroupExists):
			return nil
		case pelwarden.Matches(err, pelwarden.ErrWrongType):
			return fmt.Errorf("pelwarden/driver: create group: %w: %v", pelwarden.ErrWrongType, err)
		case pelwarden.Matches(err, pelwarden.ErrNoPermission):
			return fmt.Errorf("pelwarden/driver: create group (XGROUP CREATE %s %s %s MKSTREAM; Config.CreateGroup needs +xgroup|create): %w: %w",
				cfg.Stream, cfg.Group, cfg.GroupStartID, pelwarden.ErrNoPermission, err)
		}
		return fmt.Errorf("pelwarden/driver: create group: %w", err)
	}
	err := g.checkGroup(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pelwarden.ErrNoGroup):
		return fmt.Errorf("pelwarden/driver: group %q on stream %q does not exist; create it (XGROUP CREATE %s %s 0 MKSTREAM) or set Config.CreateGroup: %w",
			cfg.Group, cfg.Stream, cfg.Stream, cfg.Group, err)
	}
	return fmt.Errorf("pelwarden/driver: check group: %w", err)
}

// loopContext returns the context of the Run's loops: it ends with ctx or
// at stop.
func (c *core) loopContext(ctx context.Context) (context.Context, context.CancelFunc) {
	loopCtx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-c.stopped:
			cancel()
		case <-loopCtx.Done():
		}
		c.health.notReady("stopping")
	}()
	return loopCtx, cancel
}

// end returns Run's error once the shutdown is over, logging a clean stop.
func (c *core) end() error {
	c.stopMu.Lock()
	err := c.stopErr // a lingering Redis call may still report one
	c.stopMu.Unlock()
	if err == nil {
		c.log.Info("pelwarden consumer stopped")
	}
	return err
}

// stop ends Run with err (the first one wins).
func (c *core) stop(err error) {
	c.stopOnce.Do(func() {
		c.log.Error("pelwarden consumer stopping", "err", err)
		c.stopMu.Lock()
		c.stopErr = err
		c.stopMu.Unlock()
		close(c.stopped)
	})
}

// stopping reports whether stop was called.
func (c *core) stopping() bool { return closedNow(c.stopped) }

// commandError is the error policy for a failed Redis call of stream sc
// (nil for a call of the whole Run: the library, the membership), in
// either mode. It counts the failure, then:
//   - a failure caused by the end of Run (endedByRun) is no error;
//   - a refusal for lack of memory pauses the intake (memoryFull);
//   - a fatal error (see fatal) stops the consumer: Run returns it;
//   - on a cluster client, an error that suggests a failover refreshes
//     the slot map (see followTopology), so the retry reaches the
//     promoted replica.
//
// A missing group is the caller's to hand to groupMissing, and an error
// retrying cannot fix the caller's to stop on: only the caller knows
// whether it retries.
func (c *core) commandError(sc *streamScope, what string, err error, attempt int) {
	c.m.Count(EventCommandError, 1)
	log := c.log
	if sc != nil {
		log = sc.log
	}
	if endedByRun(c.run, err) {
		log.Debug("redis call ended by the run's end", "op", what, "err", err)
		return
	}
	if outOfMemory(err) {
		c.memoryFull(what, err)
		return
	}
	log.Error("redis call failed", "op", what, "attempt", attempt+1, "err", err)
	if fatal(err) {
		c.stop(fmt.Errorf("pelwarden/driver: %s: %w", what, err))
		return
	}
	if sc != nil {
		sc.srv.stale(err)
	}
}

// groupMissing handles a NOGROUP of stream sc seen while running: with
// CreateGroup it creates the group again, else it stops the consumer with
// an error. It reports whether to go on.
func (c *core) groupMissing(ctx context.Context, sc *streamScope, err error) bool {
	if !c.cfg.CreateGroup {
		c.stop(fmt.Errorf("pelwarden/driver: group %q on stream %q disappeared: %w", c.cfg.Group, sc.cfg.Stream, err))
		return false
	}
	sc.log.Warn("consumer group disappeared; creating it again", "err", err)
	cerr := ensureGroup(ctx, sc.srv, sc.cfg, sc.log)
	if cerr != nil && permanent(cerr) {
		c.stop(cerr)
		return false
	}
	if cerr == nil {
		c.memoryFreed("create group") // a write the server accepted
	}
	return true
}

// failedForGood is the policy for a call of stream sc that failed and
// will not be tried again: a missing group goes to groupMissing, and an
// error retrying cannot fix stops the consumer (Run returns it, naming
// what failed). Any other failure (a transient one past its caller's
// retry bound) is the caller's: the entries it concerned stay pending. It
// reports whether the caller may go on.
func (c *core) failedForGood(ctx context.Context, sc *streamScope, what string, err error) bool {
	switch {
	case errors.Is(err, pelwarden.ErrNoGroup):
		return c.groupMissing(ctx, sc, err)
	case permanent(err):
		c.stop(fmt.Errorf("pelwarden/driver: %s on stream %q: %w", what, sc.cfg.Stream, err))
		return false
	}
	return true
}

// memoryFull pauses the taking of new entries: the server refused a write
// because it is at maxmemory. Acks, lease extensions, releases and lease
// renewals still land (their functions may run when the server is full),
// so the entries in hand settle; taking more would only grow the PEL of a
// full server. It logs once per pause, with the server's message.
func (c *core) memoryFull(what string, err error) {
	if !c.intake.pause() {
		return
	}
	c.m.Count(EventPaused, 1)
	c.oomMu.Lock()
	c.oom = err
	c.oomMu.Unlock()
	c.log.Error("server out of memory: stopped taking new entries until a refused call succeeds; entries in hand are still handled and acked",
		"op", what, "err", err)
}

// memoryFreed ends a pause of memoryFull: a call the full server refused
// has succeeded.
func (c *core) memoryFreed(what string) {
	if !c.intake.resume() {
		return
	}
	c.oomMu.Lock()
	err := c.oom
	c.oom = nil
	c.oomMu.Unlock()
	c.log.Warn("server accepts writes again: taking new entries", "op", what, "refused_with", err)
}

// entryLog writes a per-entry record on log at level warn (or info),
// rate-limited for the whole Run.
func (c *core) entryLog(log *slog.Logger, warn bool, msg string, args ...any) {
	ok, suppressed := c.entryLogs.allow()
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	if warn {
		log.Warn(msg, args...)
	} else {
		log.Info(msg, args...)
	}
}

// The driver's readings of pelwarden.Classify:
//   - outOfMemory: the server refused a write at maxmemory; the consumer
//     pauses its taking (core.memoryFull);
//   - permanent: retrying cannot fix it;
//   - fatal: an error of the deployment, not of one entry or one moment,
//     which stops the consumer wherever it happens: the ACL refuses a
//     command or key the consumer needs (running on would leave work half
//     done: acks refused, poison entries never parked), the credentials
//     are refused, or the server's TLS certificate does not verify.
func outOfMemory(err error) bool { return pelwarden.Classify(err) == pelwarden.ClassOutOfMemory }
func permanent(err error) bool   { return pelwarden.Classify(err).Permanent() }
func fatal(err error) bool       { return pelwarden.Classify(err) == pelwarden.ClassNoPermission }
