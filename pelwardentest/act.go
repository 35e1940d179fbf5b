package pelwardentest

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
)

// Test timings ConsumerConfig (and so RunConsumer) gives the zero fields
// of a driver.Config, so a reclaim or a dead-lettering happens within a
// test's patience (the driver's own defaults count in minutes). They are
// the one definition of test timings for pelwarden's own suites too, chosen
// to hold on a loaded two-core CI machine running tests in parallel: an
// entry a consumer is still handling is extended long before TestMinIdle
// passes, and a reclaim pass every TestReclaimInterval keeps idle
// consumers cheap. A test that needs another timing (a short MinIdle to
// take entries over at once, a long one to keep a slow handler's entries)
// sets the field itself.
const (
	TestMinIdle         = 300 * time.Millisecond
	TestReclaimInterval = 100 * time.Millisecond
	TestReadBlock       = 100 * time.Millisecond
	TestShutdownTimeout = 5 * time.Second
)

// Consumer is a driver consumer RunConsumer started.
type Consumer struct {
	// Consumer is the running driver consumer.
	*driver.Consumer

	cancel    context.CancelFunc
	done      chan struct{}
	err       error // Run's result, set before done is closed
	once      sync.Once
	collected atomic.Bool // the test took Run's error (Stop, or Err after Done)
}

// Stop cancels the consumer, waits for Run to return (in-flight handlers
// settle within ShutdownTimeout) and returns Run's error. It may be called
// more than once. Once a test has called Stop, Run's error is its to check:
// the cleanup no longer reports it.
func (c *Consumer) Stop() error {
	c.collected.Store(true)
	return c.stop()
}

func (c *Consumer) stop() error {
	c.once.Do(c.cancel)
	<-c.done
	return c.err
}

// Done is closed when Run has returned, on Stop or by itself (an error).
func (c *Consumer) Done() <-chan struct{} { return c.done }

// Err returns Run's error once Done is closed, and nil while Run is still
// running. An error Err returned is the test's to check: the cleanup no
// longer reports it.
func (c *Consumer) Err() error {
	select {
	case <-c.done:
		c.collected.Store(true)
		return c.err
	default:
		return nil
	}
}

// RunConsumer starts a driver consumer on the fixture's stream for the rest
// of the test, with the configuration ConsumerConfig makes of cfg. A
// configuration driver.New refuses fails the test. t.Cleanup stops the
// consumer and fails the test if Run returned an error the test did not
// take with Stop or Err.
func (f *Fixture) RunConsumer(cfg driver.Config) *Consumer {
	f.t.Helper()
	cfg = f.ConsumerConfig(cfg)
	dc, err := driver.New(f.srv.client, cfg)
	if err != nil {
		f.fatalf("RunConsumer: %v", err)
	}
	return f.run(dc, cfg.Consumer)
}

// RunOrderedConsumer starts an ordered driver consumer (driver.NewOrdered)
// for the rest of the test, with the configuration OrderedConsumerConfig
// makes of cfg, as RunConsumer does an unordered one.
func (f *Fixture) RunOrderedConsumer(cfg driver.OrderedConfig) *Consumer {
	f.t.Helper()
	cfg = f.OrderedConsumerConfig(cfg)
	dc, err := driver.NewOrdered(f.srv.client, cfg)
	if err != nil {
		f.fatalf("RunOrderedConsumer: %v", err)
	}
	return f.run(dc, cfg.Consumer)
}

// run runs dc until the test ends (see RunConsumer).
func (f *Fixture) run(dc *driver.Consumer, name string) *Consumer {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Consumer{Consumer: dc, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.err = dc.Run(ctx)
	}()
	t := f.t
	t.Cleanup(func() {
		if err := c.stop(); err != nil && !c.collected.Load() {
			t.Errorf("pelwardentest: consumer %q on %s: Run returned %v", name, f, err)
		}
	})
	return c
}

// OrderedConsumerConfig returns cfg, the caller's, with these fields filled
// when zero: Stream (unless Streams is set), DeadLetterStream (with
// Stream) and Group from the fixture's Keys; Consumer, ShutdownTimeout and
// Logger as ConsumerConfig fills them.
func (f *Fixture) OrderedConsumerConfig(cfg driver.OrderedConfig) driver.OrderedConfig {
	if cfg.Stream == "" && len(cfg.Streams) == 0 {
		cfg.Stream = f.Stream
		if cfg.DeadLetterStream == "" {
			cfg.DeadLetterStream = f.DeadLetterStream
		}
	}
	if cfg.Group == "" {
		cfg.Group = f.Group
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "consumer"
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = TestShutdownTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = f.testLogger()
	}
	return cfg
}

// ConsumerConfig returns cfg, the caller's, with these fields filled when
// zero: Stream, Group and DeadLetterStream from the fixture's Keys;
// Consumer "consumer"; MinIdle TestMinIdle; ReclaimInterval
// TestReclaimInterval; ReadBlock TestReadBlock; ShutdownTimeout
// TestShutdownTimeout; Logger, when the T has a Logf method (*testing.T
// has), warnings and errors to the test's log. Every other field,
// MaxDeliveries and CreateGroup included, keeps its driver default. Use it
// to run a consumer yourself (driver.New, Run) with the timings
// RunConsumer uses.
func (f *Fixture) ConsumerConfig(cfg driver.Config) driver.Config {
	if cfg.Stream == "" {
		cfg.Stream = f.Stream
	}
	if cfg.Group == "" {
		cfg.Group = f.Group
	}
	if cfg.DeadLetterStream == "" {
		cfg.DeadLetterStream = f.DeadLetterStream
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "consumer"
	}
	if cfg.MinIdle == 0 {
		cfg.MinIdle = TestMinIdle
	}
	if cfg.ReclaimInterval == 0 {
		cfg.ReclaimInterval = TestReclaimInterval
	}
	if cfg.ReadBlock == 0 {
		cfg.ReadBlock = TestReadBlock
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = TestShutdownTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = f.testLogger()
	}
	return cfg
}

// testLogger writes warnings and errors to the test's log when the T has
// a Logf method (*testing.T has); nil otherwise (the driver's default).
func (f *Fixture) testLogger() *slog.Logger {
	if l, ok := f.t.(logger); ok {
		return slog.New(slog.NewTextHandler(testLog{l}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return nil
}

// logger is the logging half of testing.TB.
type logger interface {
	Logf(format string, args ...any)
}

// testLog writes a consumer's log lines to the test's log.
type testLog struct{ l logger }

func (w testLog) Write(p []byte) (int, error) {
	w.l.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// ReclaimArgs configure one reclaim pass (Reclaim).
type ReclaimArgs struct {
	// Consumer that takes the entries over. Defaults to "reclaimer".
	Consumer string
	// MinIdle: only entries idle this long are taken. Zero takes every
	// pending entry.
	MinIdle time.Duration
	// MaxDeliveries: entries already delivered this many times are
	// dead-lettered instead (reason max_deliveries). 0 means
	// pelwarden.DefaultMaxDeliveries and pelwarden.NoDeliveryLimit no
	// limit, as in the driver and the library (pelwarden.DeliveryLimit).
	MaxDeliveries int
	// Count is the page size. Defaults to pelwarden.DefaultCount.
	Count int
	// MaxBytes bounds a page's field bytes; zero means the library's
	// default.
	MaxBytes int
	// Backoff, DeleteDeadLettered, DeadLetterOnly: as in
	// pelwarden.ClaimArgs.
	Backoff            []time.Duration
	DeleteDeadLettered bool
	DeadLetterOnly     bool
	// Handler, when set, receives each claimed entry, as the driver would
	// hand it, and its result is applied as the driver applies it
	// (driver.OutcomeOf with MinIdle): nil acks it (fenced),
	// driver.DeadLetter(err) dead-letters it with err's text (reason
	// handler), driver.RetryAfter(d, err) releases it for a retry after d
	// when d is up to MinIdle and holds it (left pending, owned by
	// Consumer, not released) when d is longer, any other error releases it
	// for the next pass (driver.Outcome.ReleaseDelay of a pass: at once; a
	// consumer whose reads claim, Redis 8.4+, releases it for
	// min(ReclaimInterval, MinIdle) instead). A panic in the Handler fails
	// the test (with the stack) instead of crashing it. Without a Handler,
	// claimed entries stay pending, owned by Consumer.
	Handler driver.Handler
}

// ReclaimResult is what one reclaim pass did.
type ReclaimResult struct {
	// Claimed entries, in PEL order, with their new delivery counts.
	Claimed []pelwarden.Entry
	// DeadLettered ids: by the pass (max deliveries) and by the Handler.
	DeadLettered []string
	// Acked ids: the Handler returned nil.
	Acked []string
	// Retried ids: the Handler returned driver.RetryAfter with a delay up
	// to MinIdle; they were released (stay pending, claimable again after
	// the delay).
	Retried []string
	// Held ids: the Handler returned driver.RetryAfter with a delay longer
	// than MinIdle. A driver consumer keeps such an entry, extending its
	// lease until the retry is within MinIdle; the kit leaves it pending,
	// owned by Consumer, without releasing it.
	Held []string
	// Failed ids: the Handler returned another error; the failure was
	// recorded as a consumer records it (pelwarden's Fail: claimable again
	// after their Backoff from now, at the next pass without one; the
	// error kept for a dead letter at MaxDeliveries). They stay pending.
	Failed []string
	// Deleted ids were pending but gone from the stream.
	Deleted []string
	// BackedOff counts entries left alone because their Backoff delay had
	// not passed (summed over the pages).
	BackedOff int
	// Pages is the number of Claim calls.
	Pages int
}

// Reclaim runs one whole reclaim pass over the fixture's PEL with
// pelwarden's Claim, page by page from cursor 0-0, as a driver consumer's
// reclaim loop does, handing claimed entries to a.Handler. Errors of the
// library, and a page whose cursor does not advance, fail the test.
func (f *Fixture) Reclaim(a ReclaimArgs) ReclaimResult {
	f.t.Helper()
	if a.Consumer == "" {
		a.Consumer = "reclaimer"
	}
	lib := f.srv.lib
	var res ReclaimResult
	cursor := "0-0"
	for {
		ctx, cancel := f.cmdCtx()
		page, err := lib.Claim(ctx, pelwarden.ClaimArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream,
			Group: f.Group, Consumer: a.Consumer, MinIdle: a.MinIdle, Cursor: cursor, Count: a.Count,
			MaxDeliveries: a.MaxDeliveries, DeleteDeadLettered: a.DeleteDeadLettered, Backoff: a.Backoff,
			MaxBytes: a.MaxBytes, DeadLetterOnly: a.DeadLetterOnly, LastErrors: pelwarden.LastErrorsKeyFor(f.Stream)})
		cancel()
		if err != nil {
			f.fatalf("Reclaim: claim on %s: %v", f, err)
		}
		res.Pages++
		res.Claimed = append(res.Claimed, page.Entries...)
		res.DeadLettered = append(res.DeadLettered, page.DeadLettered...)
		res.Deleted = append(res.Deleted, page.Deleted...)
		res.BackedOff += page.BackedOff
		if a.Handler != nil {
			for _, e := range page.Entries {
				f.handle(a, e, &res)
			}
		}
		if page.Done() {
			return res
		}
		if page.Cursor == cursor {
			f.fatalf("Reclaim: the cursor did not advance past %s on %s", cursor, f)
		}
		cursor = page.Cursor
	}
}

func (f *Fixture) handle(a ReclaimArgs, e pelwarden.Entry, res *ReclaimResult) {
	f.t.Helper()
	m := &driver.Message{ID: e.ID, Fields: e.Fields, Deliveries: e.Deliveries, Stream: f.Stream, Group: f.Group, Consumer: a.Consumer}
	herr, panicked := callHandler(f.ctx, a.Handler, m)
	if panicked != nil {
		f.fatalf("Reclaim: the handler panicked on %s: %v", e.ID, panicked)
		return
	}
	ctx, cancel := f.cmdCtx()
	defer cancel()
	out := driver.OutcomeOf(herr, a.MinIdle)
	switch out.Action {
	case driver.ActionAck:
		r, err := f.srv.lib.Ack(ctx, pelwarden.AckArgs{Stream: f.Stream, Group: f.Group, Consumer: a.Consumer, IDs: []string{e.ID}})
		if err == nil {
			err = r.Err()
		}
		if err != nil {
			f.fatalf("Reclaim: ack %s: %v", e.ID, err)
		}
		res.Acked = append(res.Acked, e.ID)
	case driver.ActionDeadLetter:
		r, err := f.srv.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream,
			Group: f.Group, Consumer: a.Consumer, IDs: []string{e.ID}, Reason: pelwarden.ReasonHandler, Error: out.ErrText,
			LastErrors: pelwarden.LastErrorsKeyFor(f.Stream)})
		if err == nil {
			err = r.Err()
		}
		if err != nil {
			f.fatalf("Reclaim: dead-letter %s: %v", e.ID, err)
		}
		res.DeadLettered = append(res.DeadLettered, e.ID)
	case driver.ActionHold:
		res.Held = append(res.Held, e.ID)
	case driver.ActionRelease:
		// As a driver consumer records a failed attempt: re-timed for its
		// Backoff from now, its error kept for a dead letter at
		// MaxDeliveries.
		_, err := f.srv.lib.Fail(ctx, pelwarden.FailArgs{Stream: f.Stream, LastErrors: pelwarden.LastErrorsKeyFor(f.Stream),
			Group: f.Group, Consumer: a.Consumer, IDs: []string{e.ID}, MinIdle: a.MinIdle,
			Delay: out.ReleaseDelay(false, 0, a.MinIdle), Backoff: a.Backoff, Error: out.ErrText})
		if err != nil {
			f.fatalf("Reclaim: release %s for a retry: %v", e.ID, err)
		}
		if out.Retry {
			res.Retried = append(res.Retried, e.ID)
		} else {
			res.Failed = append(res.Failed, e.ID)
		}
	}
}

// callHandler runs h, turning a panic into a value for the caller to
// report as a test failure.
func callHandler(ctx context.Context, h driver.Handler, m *driver.Message) (err error, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			panicked = fmt.Sprintf("%v\n%s", p, debug.Stack())
		}
	}()
	return h.Handle(ctx, m), nil
}

// Metrics is a driver.Metrics that keeps what a consumer reports in
// memory, for a test to check (pass it as driver.Config.Metrics). It is
// safe for concurrent use; the zero value is ready.
type Metrics struct {
	mu       sync.Mutex
	events   map[driver.Event]int
	dead     map[string]int
	handlers int
}

var _ driver.Metrics = (*Metrics)(nil)

// Count adds n to the counter of e (driver.Metrics).
func (m *Metrics) Count(e driver.Event, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.events == nil {
		m.events = map[driver.Event]int{}
	}
	m.events[e] += n
}

// DeadLettered adds n entries dead-lettered for reason (driver.Metrics).
func (m *Metrics) DeadLettered(reason string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead == nil {
		m.dead = map[string]int{}
	}
	m.dead[reason] += n
}

// HandlerDuration counts one handler call (driver.Metrics); the duration
// is not kept.
func (m *Metrics) HandlerDuration(time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.handlers++
}

// Total returns the counter of e so far.
func (m *Metrics) Total(e driver.Event) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.events[e]
}

// DeadLetteredTotal returns how many entries were dead-lettered for reason
// so far.
func (m *Metrics) DeadLetteredTotal(reason string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dead[reason]
}

// HandlerCalls returns how many handler calls were observed so far.
func (m *Metrics) HandlerCalls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.handlers
}

// Calls counts a handler's calls per entry id, for a test to check how
// often each entry reached it: call Add from the handler. It is safe for
// concurrent use; the zero value is ready.
type Calls struct {
	mu    sync.Mutex
	calls map[string]int
}

// Add records one call for id and returns how many calls id has had, this
// one included (1 on its first delivery to the handler).
func (c *Calls) Add(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[id]++
	return c.calls[id]
}

// Count returns how many calls id has had.
func (c *Calls) Count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[id]
}

// Distinct returns how many different ids reached the handler.
func (c *Calls) Distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}
