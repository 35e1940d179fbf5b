// Package demo plays pelwarden's demo scenario with the real driver: a
// producer writes orders to a stream; three consumers of one group handle
// them; one consumer is killed in the middle of its work and the others
// reclaim its entries; poison orders are dead-lettered; slow orders keep
// their lease. Run returns a Report with an invariant check (every order
// handled and acknowledged, or dead-lettered; the PEL empty), which
// Report.WriteText prints for people. `pelwarden demo` (cmd/internal/cli) is
// its front end: it picks the server and maps the outcome to exit codes.
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/numfmt"
	"github.com/pelwarden/pelwarden/internal/progress"
)

// The demo's timings: short, so reclaiming and dead-lettering happen within
// seconds.
const (
	// MinIdle is the consumers' MinIdle: a dead consumer's entries are
	// reclaimed once idle this long.
	MinIdle = 2 * time.Second
	// ReclaimInterval is the consumers' ReclaimInterval.
	ReclaimInterval = 500 * time.Millisecond
	// StallAfter is the consumers' StallAfter, their default: MinIdle plus
	// three ReclaimIntervals (the dashboard lists entries idle this long as
	// stuck).
	StallAfter = MinIdle + 3*ReclaimInterval
	// MaxDeliveries is the consumers' MaxDeliveries: a declined order is
	// dead-lettered after this many deliveries.
	MaxDeliveries = 3
	// SlowWork is how long a bulk order's handler works (longer than
	// MinIdle: the lease heartbeat keeps it).
	SlowWork = 5 * time.Second
	// Group is the consumer group's name.
	Group = "billing"

	concurrency = 32
	killTimeout = time.Millisecond // the killed consumer's ShutdownTimeout
)

// Limits of Options, checked by Options.Validate.
const (
	MaxOrders      = 1_000_000
	MaxRate        = 1_000_000
	MaxPoisonRate  = 0.5
	MinDuration    = 5 * time.Second
	defaultOrders  = 5000
	defaultPoison  = 0.02
	defaultRate    = 250
	defaultTimeout = 55 * time.Second
)

// Options shape one run. The zero value of a field means its default.
type Options struct {
	// Orders to produce (default 5000, at most MaxOrders).
	Orders int
	// PoisonRate is the share of poison orders, 0 to MaxPoisonRate: half
	// declined cards, half unsupported currencies (default 0.02; set
	// NoPoison for none).
	PoisonRate float64
	// NoPoison produces no poison orders.
	NoPoison bool
	// Duration bounds the run (default 55s, at least MinDuration): orders
	// unsettled after it are reported, not waited for.
	Duration time.Duration
	// Rate is how many orders are produced per second (default 250).
	Rate int
	// Keep leaves the demo's stream and dead-letter stream on the server.
	Keep bool
	// Verbose shows the driver's warnings and errors as progress events.
	Verbose bool
}

// optionError is a bad Options field: a *pelwarden.ArgumentError naming
// it ("Orders").
func optionError(field, reason string) error {
	return &pelwarden.ArgumentError{Scope: "demo", Field: field, Reason: reason}
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	if o.Orders == 0 {
		o.Orders = defaultOrders
	}
	if o.PoisonRate == 0 && !o.NoPoison {
		o.PoisonRate = defaultPoison
	}
	if o.Duration == 0 {
		o.Duration = defaultTimeout
	}
	if o.Rate == 0 {
		o.Rate = defaultRate
	}
	return o
}

// Validate checks o (defaults applied) and returns a
// *pelwarden.ArgumentError naming the field.
func (o Options) Validate() error {
	switch {
	case o.Orders < 1 || o.Orders > MaxOrders:
		return optionError("Orders", fmt.Sprintf("must be between 1 and %d, got %d", MaxOrders, o.Orders))
	case o.PoisonRate < 0 || o.PoisonRate > MaxPoisonRate || o.PoisonRate != o.PoisonRate:
		return optionError("PoisonRate", fmt.Sprintf("must be between 0 and %v, got %v", MaxPoisonRate, o.PoisonRate))
	case o.Duration < MinDuration:
		return optionError("Duration", fmt.Sprintf("must be at least %v (reclaiming needs MinIdle %v, bulk orders %v), got %v", MinDuration, MinIdle, SlowWork, o.Duration))
	case o.Rate < 1 || o.Rate > MaxRate:
		return optionError("Rate", fmt.Sprintf("must be between 1 and %d, got %d", MaxRate, o.Rate))
	}
	return nil
}

// ErrInterrupted is returned by Run when its context ends before the
// scenario did.
var ErrInterrupted = errors.New("demo interrupted")

// Server is where a run plays.
type Server struct {
	// NewClient dials a new client each call. The consumer killed in the
	// scenario gets its own, closed at the kill like the connections of a
	// dead process.
	NewClient func() redis.UniversalClient
	// Label says what the server is, e.g. "container redis:8 on 127.0.0.1:32768".
	Label string
}

// Started is what a run tells before it plays: its keys (for a dashboard
// or a status command to follow).
type Started struct {
	Stream, DeadLetterStream, Group string
}

// demo is one run.
type demo struct {
	o   Options
	rdb redis.UniversalClient
	// newClient dials a new client (the victim's own).
	newClient func() redis.UniversalClient
	server    string
	stream    string
	dlq       string
	kinds     []orderKind
	st        *state
	cons      []*consumer
	victim    *consumer
	live      *progress.Line
	start     time.Time
	errs      *errorCounter

	killedInFlight int64
	producerErr    atomic.Value // error
}

// Run plays the scenario on srv, showing progress on live, and returns the
// verified report. started, when not nil, is called once the demo's keys
// exist, before the orders flow. A report whose Invariant is not OK is
// returned with a nil error: the caller decides what it means.
func Run(ctx context.Context, o Options, srv Server, live *progress.Line, started func(Started)) (*Report, error) {
	o = o.WithDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	rdb := srv.NewClient()
	defer rdb.Close()

	if _, err := pelwarden.Load(ctx, rdb); err != nil {
		return nil, fmt.Errorf("load the pelwarden library: %w", err)
	}
	d := &demo{o: o, rdb: rdb, newClient: srv.NewClient, live: live, st: newState(), kinds: orderPlan(o.Orders, o.PoisonRate)}
	d.server = serverName(ctx, rdb) + " (" + srv.Label + ")"
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	d.stream = "{demo-orders-" + hex.EncodeToString(b) + "}"
	d.dlq = pelwarden.DeadLetterStreamFor(d.stream)
	if !o.Keep {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = rdb.Del(cctx, d.stream).Err()
			_ = rdb.Del(cctx, d.dlq).Err()
		}()
	}
	if err := rdb.XGroupCreateMkStream(ctx, d.stream, Group, "0").Err(); err != nil {
		return nil, fmt.Errorf("create the demo's group: %w", err)
	}
	if started != nil {
		started(Started{Stream: d.stream, DeadLetterStream: d.dlq, Group: Group})
	}
	return d.play(ctx)
}

// play runs the scenario and returns the verified report.
func (d *demo) play(ctx context.Context) (*Report, error) {
	o := d.o
	d.errs = &errorCounter{}
	var verbose io.Writer = io.Discard
	if o.Verbose {
		verbose = lineWriter{live: d.live}
	}
	for _, name := range []string{"consumer-a", "consumer-b", "consumer-c"} {
		c := &consumer{name: name, victim: name == "consumer-b", m: newMetrics()}
		logger := slog.New(d.errs.wrap(slog.NewTextHandler(verbose, &slog.HandlerOptions{Level: slog.LevelWarn}), !c.victim))
		cfg := driver.Config{
			Stream: d.stream, Group: Group, Consumer: name, Handler: d.st.handler(c),
			DeadLetterStream: d.dlq, MaxDeliveries: MaxDeliveries,
			MinIdle: MinIdle, StallAfter: StallAfter,
			Concurrency:     concurrency,
			ShutdownTimeout: 5 * time.Second, CreateGroup: true,
			Logger: logger, Metrics: c.m,
			Tuning: driver.Tuning{ReclaimInterval: ReclaimInterval, ReadBlock: 200 * time.Millisecond},
		}
		if c.victim {
			cfg.ShutdownTimeout = killTimeout
			d.victim = c
		} else {
			cfg.ReapIdle = 2 * MinIdle // removes the dead consumer once its entries are reclaimed
		}
		c.rdb = d.rdb
		if c.victim {
			c.rdb = d.newClient()
			defer c.rdb.Close()
		}
		dc, err := driver.New(c.rdb, cfg)
		if err != nil {
			return nil, err
		}
		c.c = dc
		d.cons = append(d.cons, c)
	}

	d.start = time.Now()
	d.live.Event(fmt.Sprintf("pelwarden demo on %s", d.server))
	d.live.Event(fmt.Sprintf("%s orders to stream %s at %d/s; 3 consumers of group %q (MinIdle %v, reclaim every %v, max %d deliveries)",
		numfmt.Count(int64(o.Orders)), d.stream, o.Rate, Group, MinIdle, ReclaimInterval, MaxDeliveries))
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	for _, c := range d.cons {
		c.start(runCtx)
	}
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		if err := d.st.produce(runCtx, d.rdb, d.stream, d.kinds, o.Rate); err != nil && runCtx.Err() == nil {
			d.producerErr.Store(err)
		}
	}()

	finished, err := d.watch(ctx, prodDone)
	stopRun()
	<-prodDone
	for _, c := range d.cons {
		if c.victim && c.killedAt > 0 {
			continue
		}
		if err := c.stop(); err != nil && !errors.Is(err, context.Canceled) {
			d.live.Event(fmt.Sprintf("%s stopped with an error: %v", c.name, err))
		}
	}
	if err != nil {
		return nil, err
	}
	d.live.Set(d.status(), true)
	d.live.Close()
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return d.verify(vctx, finished)
}

// watch drives the scenario until every order is settled, --duration
// passes or ctx is cancelled. It kills the victim on the way.
func (d *demo) watch(ctx context.Context, prodDone <-chan struct{}) (bool, error) {
	deadline := time.NewTimer(d.o.Duration)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var producerDone, firstMax, firstHandler, firstLease, allTaken, reaped bool
	lastSettleCheck := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return false, ErrInterrupted
		case <-deadline.C:
			d.event(fmt.Sprintf("--duration %v is up: stopping before every order was settled", d.o.Duration))
			return false, nil
		case <-tick.C:
		}
		if v := d.st.produced.Load(); !producerDone && v == int64(d.o.Orders) {
			select {
			case <-prodDone:
				producerDone = true
				d.event(fmt.Sprintf("producer done: %s orders written", numfmt.Count(v)))
			default:
			}
		}
		if perr, _ := d.producerErr.Load().(error); perr != nil {
			return false, fmt.Errorf("producer: %w", perr)
		}
		if d.victim.killedAt == 0 {
			h := d.st.handled.Load()
			if (h >= int64(d.o.Orders)/3 && d.victim.inflight.Load() > 0) || (producerDone && h >= int64(d.o.Orders)/2) {
				if err := d.kill(ctx); err != nil {
					return false, err
				}
			}
		}
		var deadMax, deadHand, leases, reapedN int64
		for _, c := range d.cons {
			deadMax += c.m.deadMax.Load()
			deadHand += c.m.deadByHand.Load()
			leases += c.m.get(driver.EventLeaseExtended)
			reapedN += c.m.get(driver.EventReaped)
		}
		if !firstHandler && deadHand > 0 {
			firstHandler = true
			d.event(fmt.Sprintf("an order with an unsupported currency was dead-lettered by its handler at once (reason %s)", pelwarden.ReasonHandler))
		}
		if !firstMax && deadMax > 0 {
			firstMax = true
			d.event(fmt.Sprintf("a declined order failed %d times and was dead-lettered by the reclaim pass (reason %s)", MaxDeliveries, pelwarden.ReasonMaxDeliveries))
		}
		if !firstLease && leases > 0 {
			firstLease = true
			d.event(fmt.Sprintf("a bulk order is still in its handler (%v of work > MinIdle %v): its consumer extends the lease, nobody else takes it", SlowWork, MinIdle))
		}
		d.st.mu.Lock()
		taken, orphans, allAt := d.st.orphansTaken, len(d.st.orphans), d.st.allTakenAt
		d.st.mu.Unlock()
		if !allTaken && orphans > 0 && taken == orphans {
			allTaken = true
			d.event(fmt.Sprintf("all %d orders left by %s were reclaimed, %v after the kill", orphans, d.victim.name, numfmt.Duration(allAt.Sub(d.start)-d.victim.killedAt)))
		}
		if !reaped && reapedN > 0 {
			reaped = true
			d.event(fmt.Sprintf("%s owned nothing any more and was idle: reaped from the group", d.victim.name))
		}
		d.live.Set(d.status(), false)

		if producerDone && d.victim.killedAt > 0 && time.Since(lastSettleCheck) >= 250*time.Millisecond {
			lastSettleCheck = time.Now()
			if d.settled(ctx) {
				d.event("every order is settled: handled and acknowledged, or dead-lettered")
				return true, nil
			}
		}
	}
}

// kill stops the victim like a crash: its connections are closed, so
// nothing more reaches the server (no last acks), and its handlers are
// cancelled after 1ms; their entries stay pending in its name.
func (d *demo) kill(ctx context.Context) error {
	v := d.victim
	d.killedInFlight = v.inflight.Load()
	_ = v.rdb.Close()
	_ = v.stop()
	v.killedAt = max(time.Since(d.start), time.Millisecond)
	pending, err := d.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: d.stream, Group: Group, Start: "-", End: "+", Count: pelwarden.MaxCount, Consumer: v.name,
	}).Result()
	if err != nil {
		return fmt.Errorf("XPENDING of %s: %v", v.name, err)
	}
	d.st.mu.Lock()
	d.st.orphans = map[string]string{}
	for _, p := range pending {
		d.st.orphans[p.ID] = ""
	}
	d.st.mu.Unlock()
	d.event(fmt.Sprintf("killed %s in the middle of its work: %d handler(s) cut off, %d entries left pending in its name (in flight or handled but not acked); reclaimable once idle %v",
		v.name, d.killedInFlight, len(pending), MinIdle))
	return nil
}

// settled reports whether every order has an outcome and the PEL is empty.
func (d *demo) settled(ctx context.Context) bool {
	d.st.mu.Lock()
	handled := len(d.st.successes)
	d.st.mu.Unlock()
	dead, err := d.rdb.XLen(ctx, d.dlq).Result()
	if err != nil || int64(handled)+dead < int64(d.o.Orders) {
		return false
	}
	p, err := d.rdb.XPending(ctx, d.stream, Group).Result()
	return err == nil && p.Count == 0
}

func (d *demo) event(s string) {
	d.live.Event(fmt.Sprintf("%6.1fs  %s", time.Since(d.start).Seconds(), s))
}

// status is the live line.
func (d *demo) status() string {
	var reclaimed, dead int64
	for _, c := range d.cons {
		reclaimed += c.m.get(driver.EventClaimed)
		dead += c.m.deadMax.Load() + c.m.deadByHand.Load()
	}
	return fmt.Sprintf("%6.1fs  produced %s/%s  handled %s  reclaimed %s  dead-lettered %s  in flight %s",
		time.Since(d.start).Seconds(), numfmt.Count(d.st.produced.Load()), numfmt.Count(int64(d.o.Orders)),
		numfmt.Count(d.st.handled.Load()), numfmt.Count(reclaimed), numfmt.Count(dead), numfmt.Count(d.st.inflight.Load()))
}

// serverName is "redis 8.0.2" or "valkey 8.1.1" from INFO server.
func serverName(ctx context.Context, rdb redis.UniversalClient) string {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "server"
	}
	get := func(k string) string {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), k+":"); ok {
				return v
			}
		}
		return ""
	}
	if v := get("valkey_version"); v != "" {
		return "valkey " + v
	}
	return "redis " + get("redis_version")
}

// errorCounter counts error logs of the surviving consumers; the killed
// consumer's are expected (its acks cannot be sent) and not counted.
type errorCounter struct {
	n    atomic.Int64
	last atomic.Value // string
}

func (e *errorCounter) wrap(h slog.Handler, count bool) slog.Handler {
	return &countingHandler{Handler: h, e: e, count: count}
}

type countingHandler struct {
	slog.Handler
	e     *errorCounter
	count bool
}

func (h *countingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError || h.Handler.Enabled(ctx, l)
}

func (h *countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.count && r.Level >= slog.LevelError {
		h.e.n.Add(1)
		msg := r.Message
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" {
				msg += ": " + a.Value.String()
			}
			return true
		})
		h.e.last.Store(msg)
	}
	if h.Handler.Enabled(ctx, r.Level) {
		return h.Handler.Handle(ctx, r)
	}
	return nil
}

func (h *countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &countingHandler{Handler: h.Handler.WithAttrs(as), e: h.e, count: h.count}
}

func (h *countingHandler) WithGroup(name string) slog.Handler {
	return &countingHandler{Handler: h.Handler.WithGroup(name), e: h.e, count: h.count}
}

func firstStrings(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "...")
	}
	return s
}
