package cli

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
	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
)

// The demo's timings: short, so reclaiming and dead-lettering happen within
// seconds.
const (
	demoMinIdle         = 2 * time.Second
	demoReclaimInterval = 500 * time.Millisecond
	demoMaxDeliveries   = 3
	demoSlowWork        = 5 * time.Second
	demoConcurrency     = 32
	demoGroup           = "billing"
	demoKillTimeout     = time.Millisecond // the killed consumer's ShutdownTimeout
)

type demoOptions struct {
	orders     int
	poisonRate float64
	duration   time.Duration
	rate       int
	keep       bool
	verbose    bool
}

func (a *app) demoCommand() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Watch three consumers survive a crash, poison orders and a slow handler, then check nothing was lost",
		Long: `demo plays a scenario with the real driver: a producer writes orders to a
stream; three consumers of group "billing" handle them. One consumer is killed
in the middle of its work (its entries stay pending in its name); the others
reclaim them once they have been idle for MinIdle (2s). Some orders are poison:
a declined card fails on every attempt and is dead-lettered after 3 deliveries
(reason max_deliveries); an unsupported currency is dead-lettered by its
handler at once (reason handler). Bulk orders take 5s, longer than MinIdle:
the lease heartbeat keeps them with their consumer.

It shows live progress, then a report: per-consumer counts, what was reclaimed
from the dead consumer, the dead-letter records and why, duplicates, and an
invariant check: every order was handled and acknowledged or dead-lettered,
and the PEL is empty. The exit code is 4 if anything was lost, 1 if the run
did not settle within --duration.

Without --redis or --cluster (and $REDIS_URL is not used here) it starts a
throwaway server: a redis-server or valkey-server binary on PATH, else a
container from $PELWARDEN_DEMO_IMAGE (default ` + defaultThrowawayImage + `), removed at the end.
With --redis it uses new keys {demo-orders-…} and deletes them at the end
(--keep leaves them for status and dlq).`,
		Example: `  make demo
  pelwarden demo --orders 20000 --rate 1000
  pelwarden demo --redis redis://127.0.0.1:6379 --keep`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if err := intInRange("orders", o.orders, 1, 1_000_000); err != nil {
				return err
			}
			if o.poisonRate < 0 || o.poisonRate > 0.5 || o.poisonRate != o.poisonRate {
				return usageErrorf("--poison-rate must be between 0 and 0.5, got %v", o.poisonRate)
			}
			if o.duration < 5*time.Second {
				return usageErrorf("--duration must be at least 5s (reclaiming needs MinIdle %v, bulk orders %v), got %v", demoMinIdle, demoSlowWork, o.duration)
			}
			if err := intInRange("rate", o.rate, 1, 1_000_000); err != nil {
				return err
			}
			e, err := a.resolve(true)
			if err != nil {
				return err
			}
			if o.keep && e == nil {
				return usageErrorf("--keep needs --redis or --cluster: the throwaway server is removed at the end")
			}
			return a.runDemo(cmd.Context(), e, o)
		}),
	}
	f := cmd.Flags()
	f.IntVar(&o.orders, "orders", 5000, "number of orders to produce")
	f.Float64Var(&o.poisonRate, "poison-rate", 0.02, "share of poison orders (0 to 0.5): half declined cards, half unsupported currencies")
	f.DurationVar(&o.duration, "duration", 55*time.Second, "upper bound of the run; unsettled orders after it make the exit code 1")
	f.IntVar(&o.rate, "rate", 250, "orders produced per second")
	f.BoolVar(&o.keep, "keep", false, "keep the demo's stream and dead-letter stream (needs --redis or --cluster)")
	f.BoolVar(&o.verbose, "verbose", false, "show the driver's warnings and errors")
	return cmd
}

// demo is one run.
type demo struct {
	a   *app
	o   demoOptions
	rdb redis.UniversalClient
	// newClient dials a new client (the victim's own).
	newClient func() redis.UniversalClient
	server    string
	stream    string
	dlq       string
	kinds     []orderKind
	st        *demoState
	cons      []*demoConsumer
	victim    *demoConsumer
	live      *liveLine
	start     time.Time
	errs      *errorCounter

	killedInFlight int64
	producerErr    atomic.Value // error
}

func (a *app) runDemo(ctx context.Context, e *endpoint, o demoOptions) error {
	live := newLiveLine(a.stderr, 2*time.Second)
	defer live.Close()
	logf := func(s string) { live.Event(s) }

	// newClient dials one client; the consumer killed in the scenario gets
	// its own, closed at the kill like the connections of a dead process.
	var newClient func() redis.UniversalClient
	where := ""
	if e == nil {
		tw, err := startThrowaway(ctx, []string{"PELWARDEN_DEMO_IMAGE"}, logf)
		if err != nil {
			return err
		}
		defer func() {
			if err := tw.Close(); err != nil {
				logf("removing the throwaway server: " + err.Error())
			} else {
				logf("removed the throwaway server")
			}
		}()
		newClient = func() redis.UniversalClient {
			opts := *tw.opts
			opts.PoolSize = 128
			return redis.NewClient(&opts)
		}
		where = tw.label
	} else {
		newClient = func() redis.UniversalClient {
			if e.cluster != nil {
				o := *e.cluster
				o.PoolSize = max(o.PoolSize, 128)
				return redis.NewClusterClient(&o)
			}
			o := *e.opts
			o.PoolSize = max(o.PoolSize, 128)
			return redis.NewClient(&o)
		}
		c, err := e.client(ctx) // checks the server answers
		if err != nil {
			return err
		}
		_ = c.Close()
		where = e.shown
	}
	rdb := newClient()
	defer rdb.Close()

	if _, err := pelwarden.Load(ctx, rdb); err != nil {
		return fmt.Errorf("load the pelwarden library: %w", err)
	}
	d := &demo{a: a, o: o, rdb: rdb, newClient: newClient, live: live, st: newDemoState(), kinds: orderPlan(o.orders, o.poisonRate)}
	d.server = serverName(ctx, rdb) + " (" + where + ")"
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	d.stream = "{demo-orders-" + hex.EncodeToString(b) + "}"
	d.dlq = pelwarden.DeadLetterStreamFor(d.stream)
	if !o.keep {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = rdb.Del(cctx, d.stream).Err()
			_ = rdb.Del(cctx, d.dlq).Err()
		}()
	}
	if err := rdb.XGroupCreateMkStream(ctx, d.stream, demoGroup, "0").Err(); err != nil {
		return fmt.Errorf("create the demo's group: %w", err)
	}
	rep, err := d.play(ctx)
	if err != nil {
		return err
	}
	if a.json {
		if err := a.printJSON(rep); err != nil {
			return err
		}
	} else {
		live.Close()
		d.printReport(rep)
	}
	switch {
	case rep.Invariant.Lost > 0:
		return &exitError{code: ExitLost, err: fmt.Errorf("demo: %d order(s) lost: %s", rep.Invariant.Lost, strings.Join(firstStrings(rep.Invariant.LostIDs, 5), " "))}
	case !rep.Invariant.OK:
		return failuref("demo: not settled within --duration %v: %d order(s) unsettled, %d pending", o.duration, rep.Invariant.Unsettled, rep.Invariant.Pending)
	}
	return nil
}

// play runs the scenario and returns the verified report.
func (d *demo) play(ctx context.Context) (*demoReport, error) {
	o := d.o
	d.errs = &errorCounter{}
	var verbose io.Writer = io.Discard
	if o.verbose {
		verbose = lineWriter{live: d.live}
	}
	for _, name := range []string{"consumer-a", "consumer-b", "consumer-c"} {
		c := &demoConsumer{name: name, victim: name == "consumer-b", m: newDemoMetrics()}
		logger := slog.New(d.errs.wrap(slog.NewTextHandler(verbose, &slog.HandlerOptions{Level: slog.LevelWarn}), !c.victim))
		cfg := driver.Config{
			Stream: d.stream, Group: demoGroup, Consumer: name, Handler: d.st.handler(c),
			DeadLetterStream: d.dlq, MaxDeliveries: demoMaxDeliveries,
			MinIdle: demoMinIdle, ReclaimInterval: demoReclaimInterval,
			Concurrency: demoConcurrency, ReadBlock: 200 * time.Millisecond,
			ShutdownTimeout: 5 * time.Second, CreateGroup: true,
			Logger: logger, Metrics: c.m,
		}
		if c.victim {
			cfg.ShutdownTimeout = demoKillTimeout
			d.victim = c
		} else {
			cfg.ReapIdle = 2 * demoMinIdle // removes the dead consumer once its entries are reclaimed
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
		fmtCount(int64(o.orders)), d.stream, o.rate, demoGroup, demoMinIdle, demoReclaimInterval, demoMaxDeliveries))
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	for _, c := range d.cons {
		c.start(runCtx)
	}
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		if err := d.st.produce(runCtx, d.rdb, d.stream, d.kinds, o.rate); err != nil && runCtx.Err() == nil {
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
	deadline := time.NewTimer(d.o.duration)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var producerDone, firstMax, firstHandler, firstLease, allTaken, reaped bool
	lastSettleCheck := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return false, failuref("demo interrupted")
		case <-deadline.C:
			d.event(fmt.Sprintf("--duration %v is up: stopping before every order was settled", d.o.duration))
			return false, nil
		case <-tick.C:
		}
		if v := d.st.produced.Load(); !producerDone && v == int64(d.o.orders) {
			select {
			case <-prodDone:
				producerDone = true
				d.event(fmt.Sprintf("producer done: %s orders written", fmtCount(v)))
			default:
			}
		}
		if perr, _ := d.producerErr.Load().(error); perr != nil {
			return false, failuref("%v", perr)
		}
		if d.victim.killedAt == 0 {
			h := d.st.handled.Load()
			if (h >= int64(d.o.orders)/3 && d.victim.inflight.Load() > 0) || (producerDone && h >= int64(d.o.orders)/2) {
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
			d.event(fmt.Sprintf("a declined order failed %d times and was dead-lettered by the reclaim pass (reason %s)", demoMaxDeliveries, pelwarden.ReasonMaxDeliveries))
		}
		if !firstLease && leases > 0 {
			firstLease = true
			d.event(fmt.Sprintf("a bulk order is still in its handler (%v of work > MinIdle %v): its consumer extends the lease, nobody else takes it", demoSlowWork, demoMinIdle))
		}
		d.st.mu.Lock()
		taken, orphans, allAt := d.st.orphansTaken, len(d.st.orphans), d.st.allTakenAt
		d.st.mu.Unlock()
		if !allTaken && orphans > 0 && taken == orphans {
			allTaken = true
			d.event(fmt.Sprintf("all %d orders left by %s were reclaimed, %v after the kill", orphans, d.victim.name, fmtDuration(allAt.Sub(d.start)-d.victim.killedAt)))
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
		Stream: d.stream, Group: demoGroup, Start: "-", End: "+", Count: pelwarden.MaxCount, Consumer: v.name,
	}).Result()
	if err != nil {
		return failuref("XPENDING of %s: %v", v.name, err)
	}
	d.st.mu.Lock()
	d.st.orphans = map[string]string{}
	for _, p := range pending {
		d.st.orphans[p.ID] = ""
	}
	d.st.mu.Unlock()
	d.event(fmt.Sprintf("killed %s in the middle of its work: %d handler(s) cut off, %d entries left pending in its name (in flight or handled but not acked); reclaimable once idle %v",
		v.name, d.killedInFlight, len(pending), demoMinIdle))
	return nil
}

// settled reports whether every order has an outcome and the PEL is empty.
func (d *demo) settled(ctx context.Context) bool {
	d.st.mu.Lock()
	handled := len(d.st.successes)
	d.st.mu.Unlock()
	dead, err := d.rdb.XLen(ctx, d.dlq).Result()
	if err != nil || int64(handled)+dead < int64(d.o.orders) {
		return false
	}
	p, err := d.rdb.XPending(ctx, d.stream, demoGroup).Result()
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
		time.Since(d.start).Seconds(), fmtCount(d.st.produced.Load()), fmtCount(int64(d.o.orders)),
		fmtCount(d.st.handled.Load()), fmtCount(reclaimed), fmtCount(dead), fmtCount(d.st.inflight.Load()))
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
