package consume

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/ctxwait"
	"github.com/pelwarden/pelwarden/internal/measure"
)

// goal closes done once target entries were settled (acked or
// dead-lettered), by one consumer or several.
type goal struct {
	settled atomic.Int64
	target  int64
	once    sync.Once
	done    chan struct{}
}

func newGoal(target int64) *goal { return &goal{target: target, done: make(chan struct{})} }

func (g *goal) add(n int) {
	if g.settled.Add(int64(n)) >= g.target {
		g.once.Do(func() { close(g.done) })
	}
}

// counting is the driver's Metrics for the benchmark: what one consumer
// did, and its acks and dead-letterings towards a goal.
type counting struct {
	acked, read, claimed, dead, leases, errs atomic.Int64
	goal                                     *goal
}

// Count implements driver.Metrics.
func (m *counting) Count(e driver.Event, n int) {
	switch e {
	case driver.EventAcked:
		m.acked.Add(int64(n))
		m.goal.add(n)
	case driver.EventRead:
		m.read.Add(int64(n))
	case driver.EventClaimed:
		m.claimed.Add(int64(n))
	case driver.EventLeaseExtended:
		m.leases.Add(int64(n))
	case driver.EventCommandError, driver.EventHandlerError, driver.EventLostOwnership:
		m.errs.Add(int64(n))
	}
}

// DeadLettered implements driver.Metrics.
func (m *counting) DeadLettered(_ string, n int) {
	m.dead.Add(int64(n))
	m.goal.add(n)
}

// HandlerDuration implements driver.Metrics.
func (m *counting) HandlerDuration(time.Duration) {}

// logCounter is the driver's slog.Handler in the benchmark. It counts the
// records at Info or above (the level of slog.Default, which a user who
// sets no Logger gets) and passes the first forwardLogs of those at Warn
// or above to stderr.
type logCounter struct {
	all, warn *atomic.Int64 // shared with the handlers derived from it
	out       slog.Handler
}

// forwardLogs is how many Warn records of one consumer reach stderr.
const forwardLogs = 10

func newLogCounter() logCounter {
	return logCounter{all: new(atomic.Int64), warn: new(atomic.Int64),
		out: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})}
}

// Enabled implements slog.Handler.
func (h logCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

// Handle implements slog.Handler.
func (h logCounter) Handle(ctx context.Context, r slog.Record) error {
	h.all.Add(1)
	if r.Level >= slog.LevelWarn && h.warn.Add(1) <= forwardLogs {
		return h.out.Handle(ctx, r)
	}
	return nil
}

// WithAttrs implements slog.Handler.
func (h logCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return logCounter{all: h.all, warn: h.warn, out: h.out.WithAttrs(as)}
}

// WithGroup implements slog.Handler.
func (h logCounter) WithGroup(name string) slog.Handler {
	return logCounter{all: h.all, warn: h.warn, out: h.out.WithGroup(name)}
}

// driverSpec is one measured run of the driver. Every zero field leaves the
// driver's Config field at its default.
type driverSpec struct {
	method string
	part   Part
	k      keys
	// v holds Concurrency, Prefetch, ReadCount and AckMode.
	v                        DriverVariant
	minIdle, reclaimInterval time.Duration
	// clientName, when set, names the driver's connections (CLIENT
	// SETNAME), so the server's slow log tells its commands apart.
	clientName string
	limit      string        // the limit the consumer runs under ("": none)
	target     int64         // entries to settle (acked or dead-lettered)
	minRun     time.Duration // keep running at least this long
}

// driverRun is one driver consumer of a measured run.
type driverRun struct {
	rdb  *redis.Client
	m    *counting
	logs logCounter
	c    *driver.Consumer
}

// newDriverRun creates a consumer of spec named consumer, its client
// counted by h, its acks and dead-letterings counted towards g. Its Config
// sets Stream, Group, Consumer, Handler, CreateGroup, Logger and Metrics,
// and the fields of spec that are not zero.
func (b *bench) newDriverRun(spec driverSpec, consumer string, h *hook, g *goal, handler driver.Handler) (*driverRun, error) {
	o := b.clientOptions()
	o.ClientName = spec.clientName
	rdb := redis.NewClient(o)
	rdb.AddHook(h)
	d := &driverRun{rdb: rdb, m: &counting{goal: g}, logs: newLogCounter()}
	c, err := driver.New(rdb, driver.Config{
		Stream: spec.k.stream, Group: benchGroup, Consumer: consumer, Handler: handler, CreateGroup: true,
		Concurrency: spec.v.Concurrency, Limit: spec.limit,
		MinIdle: spec.minIdle,
		Logger:  slog.New(d.logs), Metrics: d.m,
		Tuning: driver.Tuning{Prefetch: spec.v.Prefetch, ReadCount: spec.v.ReadCount, AckMode: spec.v.AckMode, ReadClaim: spec.v.ReadClaim, ReclaimInterval: spec.reclaimInterval},
	})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	d.c = c
	return d, nil
}

// start runs the consumer until ctx is cancelled; Run's error arrives on
// the returned channel.
func (d *driverRun) start(ctx context.Context) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- d.c.Run(ctx) }()
	return ch
}

// record copies the consumer's counters into r.
func (d *driverRun) record(r *Result) {
	r.Acked += d.m.acked.Load()
	r.Read += d.m.read.Load()
	r.Claimed += d.m.claimed.Load()
	r.DeadLettered += d.m.dead.Load()
	r.LeaseExtensions += d.m.leases.Load()
	r.LogRecords += d.logs.all.Load()
	r.LogWarnings += d.logs.warn.Load()
}

// noop is the driver's handler in every part but PartSlow.
var noop = driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })

// measureDriver runs a driver consumer with a no-op handler until it
// settled spec.target entries (and spec.minRun passed), then cancels it.
func (b *bench) measureDriver(ctx context.Context, spec driverSpec) (*Result, error) {
	r := &Result{Method: spec.method, Part: spec.part, Sample: measure.Sample{Entries: int(spec.target)}, Concurrency: spec.v.concurrency()}
	h := &hook{}
	g := newGoal(spec.target)
	d, err := b.newDriverRun(spec, benchName, h, g, noop)
	if err != nil {
		return nil, err
	}
	defer d.rdb.Close()
	// Load the library before measuring (the driver's own Load then finds
	// it in place).
	if _, err := pelwarden.NewLibrary(b.ctl).Load(ctx); err != nil {
		return nil, err
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The profiles start before the measures and stop after them: their
	// collections are not the run's.
	stopProfile, err := b.startProfile(spec)
	if err != nil {
		return nil, err
	}
	p, err := b.begin(ctx, h, g.settled.Load)
	if err != nil {
		stopProfile()
		return nil, err
	}
	runErr := d.start(runCtx)
	timeout := time.NewTimer(b.cfg.Timeout)
	defer timeout.Stop()
	var problem error
	select {
	case <-g.done:
	case err := <-runErr:
		problem = fmt.Errorf("Run returned before %d entries were settled: %v", spec.target, err)
		runErr = alreadyReceived(err)
	case <-timeout.C:
		problem = fmt.Errorf("timeout: %d of %d entries settled after %v", g.settled.Load(), spec.target, b.cfg.Timeout)
	case <-ctx.Done():
		problem = ctx.Err()
	}
	wall := time.Since(p.start)
	if problem == nil && spec.minRun > wall {
		ctxwait.Sleep(ctx, spec.minRun-wall)
	}
	err = p.end(ctx, r, wall)
	stopProfile()
	if err != nil {
		return r, err
	}
	d.record(r)
	cancel()
	if err := <-runErr; err != nil && problem == nil {
		problem = fmt.Errorf("Run: %w", err)
	}
	if problem == nil && d.m.errs.Load() > 0 {
		problem = fmt.Errorf("%d command errors, handler errors or lost ownerships", d.m.errs.Load())
	}
	if problem == nil && r.Acked+r.DeadLettered != spec.target {
		problem = fmt.Errorf("%d entries acked and %d dead-lettered, want %d in all", r.Acked, r.DeadLettered, spec.target)
	}
	return r, problem
}

// alreadyReceived returns a channel holding err: Run's error, received
// before the caller waits for it.
func alreadyReceived(err error) <-chan error {
	ch := make(chan error, 1)
	ch <- err
	return ch
}
