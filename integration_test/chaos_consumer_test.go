package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/driver"
)

// chaosConsumerEnv carries a consumer subprocess's configuration (JSON).
// When it is set, the test binary runs that one consumer instead of the tests
// (see TestMain): the harness re-executes itself to get consumers it can
// SIGKILL.
const chaosConsumerEnv = "PELWARDEN_CHAOS_CONSUMER"

// chaosKeys are one scenario's keys, under one hash tag.
type chaosKeys struct {
	Stream, DLQ, Group string
	// Runs is a hash: entry id -> handler executions (every delivery that
	// reached the handler, recorded before it does anything else).
	Runs string
	// OK is a hash: entry id -> successful handler executions, recorded
	// before the handler returns nil.
	OK string
	// Events is a hash of handler events ("panic").
	Events string
}

func newChaosKeys(tag string) chaosKeys {
	s := "{" + tag + "}"
	return chaosKeys{Stream: s, DLQ: s + ":dead", Group: "g", Runs: s + ":runs", OK: s + ":ok", Events: s + ":events"}
}

// chaosConsumerConfig configures one consumer subprocess.
type chaosConsumerConfig struct {
	// Addr is the proxy's address.
	Addr string
	// ClusterAddrs, when set, seed a cluster client instead (the nodes'
	// own addresses: no proxy); the ordered chaos test on the cluster.
	ClusterAddrs []string
	// ClientName names the consumer's connections (CLIENT SETNAME), so the
	// harness can cut them and no other client's.
	ClientName string
	Keys       chaosKeys
	// Consumer is its name in the group; a restarted consumer gets a new one.
	Consumer        string
	Concurrency     int
	MaxDeliveries   int
	MinIdle         time.Duration
	ReclaimInterval time.Duration
	ReadBlock       time.Duration
	ReapIdle        time.Duration
	ShutdownTimeout time.Duration
	// MaxWork bounds the random time a handler works.
	MaxWork time.Duration
	// SlowWork is the least time the handler of a slow entry works (up to
	// twice that): longer than MinIdle, so only the lease keeps it.
	SlowWork time.Duration
	// MetricsFile receives the driver's counters (JSON), rewritten every
	// 200ms and at exit.
	MetricsFile string
	// Ordered runs the consumer in ordered mode on Partitions (with
	// PartitionLease and Backoff) and its handler is an orderedChaosHandler
	// writing to OrderLog (see TestOrderedChaos); Keys gives only the group.
	Ordered        bool
	Partitions     []string
	PartitionLease time.Duration
	Backoff        []time.Duration
	OrderLog       string
	// Limit names the limit the consumer runs under (Config.Limit).
	Limit string
}

// The kinds of entries, derived from the producer's sequence number (a
// field of the entry), so the handler and the checker agree without a
// shared table: 1% poison (half fail with a plain error and reach
// MaxDeliveries, half ask to be dead-lettered at once), 1% panic on their
// first delivery and succeed afterwards, and 0.5% are slower than MinIdle.
type chaosKind int

const (
	kindOK chaosKind = iota
	kindPoison
	kindPoisonDL
	kindPanic
	kindSlow
)

func kindOf(seq int64) chaosKind {
	switch {
	case seq%200 == 0:
		return kindPoison
	case seq%200 == 100:
		return kindPoisonDL
	case seq%100 == 37:
		return kindPanic
	case seq%200 == 73:
		return kindSlow
	}
	return kindOK
}

func (k chaosKind) poison() bool { return k == kindPoison || k == kindPoisonDL }

// Handler error texts: the dead-letter records must carry them.
const (
	chaosPoisonError   = "chaos: poison entry, the handler always fails"
	chaosPoisonDLError = "chaos: poison entry, dead-letter it now"
)

// chaosHandler is the business handler of the consumer subprocesses. It
// records every execution and every success in Redis (through the same
// faulty proxy) before returning, so the checker can tell an entry acked
// after a success from one acked without.
type chaosHandler struct {
	rdb  redis.UniversalClient
	keys chaosKeys
	work time.Duration
	slow time.Duration
}

func (h *chaosHandler) Handle(ctx context.Context, m *driver.Message) error {
	v, ok := m.Value("seq")
	seq, err := strconv.ParseInt(v, 10, 64)
	if !ok || err != nil {
		return driver.DeadLetter(fmt.Errorf("chaos: entry without a valid seq field: %q", v))
	}
	if err := h.rdb.HIncrBy(ctx, h.keys.Runs, m.ID, 1).Err(); err != nil {
		return fmt.Errorf("record run: %w", err)
	}
	kind := kindOf(seq)
	work := time.Duration(0)
	switch {
	case kind == kindSlow && h.slow > 0:
		work = h.slow + rand.N(h.slow)
	case h.work > 0:
		work = rand.N(h.work)
	}
	if work > 0 {
		t := time.NewTimer(work)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	switch kind {
	case kindPoison:
		return errors.New(chaosPoisonError)
	case kindPoisonDL:
		return driver.DeadLetter(errors.New(chaosPoisonDLError))
	case kindPanic:
		if m.Deliveries == 1 {
			// Counted first, so the report's panic count is exact; if
			// counting fails the delivery fails without panicking.
			if err := h.rdb.HIncrBy(ctx, h.keys.Events, "panic", 1).Err(); err != nil {
				return fmt.Errorf("record panic: %w", err)
			}
			panic("chaos: handler panics on the first delivery of " + m.ID)
		}
	}
	if err := h.rdb.HIncrBy(ctx, h.keys.OK, m.ID, 1).Err(); err != nil {
		return fmt.Errorf("record success: %w", err)
	}
	return nil
}

// chaosMetrics counts the driver's events of one subprocess.
type chaosMetrics struct {
	ev   [16]atomic.Int64
	mu   sync.Mutex
	dead map[string]int64
}

func (m *chaosMetrics) Count(e driver.Event, n int) {
	if int(e) < len(m.ev) {
		m.ev[e].Add(int64(n))
	}
}
func (m *chaosMetrics) DeadLettered(reason string, n int) {
	m.mu.Lock()
	m.dead[reason] += int64(n)
	m.mu.Unlock()
}
func (m *chaosMetrics) HandlerDuration(time.Duration) {}

// snapshot returns the counters by name ("dead_lettered:<reason>" for
// dead-letters).
func (m *chaosMetrics) snapshot() map[string]int64 {
	out := map[string]int64{}
	for _, e := range driver.Events() {
		if int(e) < len(m.ev) {
			out[e.String()] = m.ev[e].Load()
		}
	}
	m.mu.Lock()
	for r, n := range m.dead {
		out["dead_lettered:"+r] = n
	}
	m.mu.Unlock()
	return out
}

func (m *chaosMetrics) write(path string) error {
	b, err := json.Marshal(m.snapshot())
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// chaosConsumerMain runs the consumer described by chaosConsumerEnv until
// SIGTERM, then returns the exit code: 0 when Run returned nil.
func chaosConsumerMain() int {
	var cfg chaosConsumerConfig
	if err := json.Unmarshal([]byte(os.Getenv(chaosConsumerEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "chaos consumer: bad config:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Tell the harness SIGTERM is handled now (fd 3: see chaosFleet).
	if ready := os.NewFile(3, "ready"); ready != nil {
		_, _ = ready.Write([]byte{1})
		_ = ready.Close()
	}
	// A client as a service would configure it: deadlines honoured, default
	// retries and pool.
	var rdb redis.UniversalClient
	if len(cfg.ClusterAddrs) > 0 {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: cfg.ClusterAddrs, ClientName: cfg.ClientName,
			DialTimeout: 2 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second,
			ContextTimeoutEnabled: true,
		})
	} else {
		rdb = redis.NewClient(&redis.Options{
			Addr: cfg.Addr, ClientName: cfg.ClientName,
			DialTimeout: 2 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second,
			ContextTimeoutEnabled: true,
		})
	}
	defer rdb.Close()
	m := &chaosMetrics{dead: map[string]int64{}}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dcfg := driver.Config{
		Stream: cfg.Keys.Stream, DeadLetterStream: cfg.Keys.DLQ, Group: cfg.Keys.Group, Consumer: cfg.Consumer,
		Handler:     &chaosHandler{rdb: rdb, keys: cfg.Keys, work: cfg.MaxWork, slow: cfg.SlowWork},
		Concurrency: cfg.Concurrency, MaxDeliveries: cfg.MaxDeliveries,
		MinIdle:  cfg.MinIdle,
		ReapIdle: cfg.ReapIdle, ShutdownTimeout: cfg.ShutdownTimeout,
		Logger: log, Metrics: m, Limit: cfg.Limit,
		Tuning: driver.Tuning{ReclaimInterval: cfg.ReclaimInterval, ReadBlock: cfg.ReadBlock},
	}
	var c *driver.Consumer
	var err error
	if cfg.Ordered {
		c, err = driver.NewOrdered(rdb, driver.OrderedConfig{Streams: cfg.Partitions, Group: cfg.Keys.Group, Consumer: cfg.Consumer,
			PartitionLease: cfg.PartitionLease, Backoff: cfg.Backoff,
			Handler:     &orderedChaosHandler{rdb: rdb, log: cfg.OrderLog, work: cfg.MaxWork},
			Concurrency: cfg.Concurrency, MaxDeliveries: cfg.MaxDeliveries, ShutdownTimeout: cfg.ShutdownTimeout,
			Logger: log, Metrics: m})
	} else {
		c, err = driver.New(rdb, dcfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos consumer:", err)
		return 2
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = m.write(cfg.MetricsFile)
			}
		}
	})
	err = c.Run(ctx)
	close(done)
	wg.Wait()
	if werr := m.write(cfg.MetricsFile); werr != nil {
		fmt.Fprintln(os.Stderr, "chaos consumer: metrics:", werr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos consumer: Run:", err)
		return 1
	}
	return 0
}
