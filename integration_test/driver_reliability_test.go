package integration_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// ledger records, per entry id, successful handler runs.
type ledger struct {
	mu sync.Mutex
	ok map[string]int
}

func (l *ledger) success(id string) { l.mu.Lock(); l.ok[id]++; l.mu.Unlock() }

// At least once, nothing lost: three consumers share 20,000 entries; one is
// cancelled in the middle of its handlers (with no time to finish), another
// stops hard (its connection is closed under it, so its acks cannot be
// sent). At the end every entry was acked after a successful handler or sits
// in the dead-letter stream; duplicates are counted and reported.
func TestDriverAtLeastOnceNothingLost(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		const n = 20000
		ids := f.Produce(n, order)
		poison := map[string]bool{}
		for i := 0; i < n; i += 100 { // 1% poison: the handler always fails
			poison[ids[i]] = true
		}
		led := &ledger{ok: map[string]int{}}
		handler := func(delay time.Duration) driver.Handler {
			return driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
				if poison[m.ID] {
					return errors.New("poison")
				}
				if delay > 0 {
					select {
					case <-time.After(time.Duration(rand.Int64N(int64(delay)))):
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				led.success(m.ID)
				return nil
			})
		}
		cfg := func(name string, delay time.Duration) driver.Config {
			c := driver.Config{Consumer: name, MaxDeliveries: 3, Handler: handler(delay)}
			c.MinIdle = 500 * time.Millisecond
			c.ReclaimInterval = 200 * time.Millisecond
			return c
		}
		// "cancelled": slow handlers, no shutdown grace.
		cc := cfg("cancelled", 50*time.Millisecond)
		cc.ShutdownTimeout = time.Nanosecond
		cancelled := f.RunConsumer(cc)
		// "hard": its own connection, closed under it.
		hardRDB := s.srv.Client()
		hc := cfg("hard", 5*time.Millisecond)
		hc.AckInterval = time.Hour // acks wait for a full batch
		hc.ShutdownTimeout = 200 * time.Millisecond
		hard := f.WithClient(hardRDB).RunConsumer(hc)
		survivor := f.RunConsumer(cfg("survivor", 0))

		time.Sleep(300 * time.Millisecond)
		require.NoError(t, cancelled.Stop())
		require.NoError(t, hardRDB.Close())
		_ = hard.Stop()

		f.Eventually("PEL empty and every entry settled", func() bool {
			if f.PendingCount() != 0 {
				return false
			}
			dl, _ := s.rdb.XLen(ctx, f.DeadLetterStream).Result()
			led.mu.Lock()
			defer led.mu.Unlock()
			return len(led.ok)+int(dl) >= n
		})
		require.NoError(t, survivor.Stop())

		recs, err := s.rdb.XRange(ctx, f.DeadLetterStream, "-", "+").Result()
		require.NoError(t, err)
		dead := map[string]int{}
		for _, r := range recs {
			dead[r.Values[pelwarden.FieldOriginalID].(string)]++
		}
		lost, dup := 0, 0
		for _, id := range ids {
			okRuns := led.ok[id]
			switch {
			case poison[id]:
				require.Equal(t, 1, dead[id], "poison %s dead-lettered exactly once", id)
				require.Zero(t, okRuns)
			case okRuns == 0:
				lost++
			default:
				require.Zero(t, dead[id], "%s succeeded and was dead-lettered too", id)
				dup += okRuns - 1
			}
		}
		require.Zero(t, lost, "entries neither handled nor dead-lettered")
		require.Len(t, dead, len(poison), "no foreign or duplicate dead-letter record")
		t.Logf("%d entries, %d poison dead-lettered, %d duplicate handler runs (at-least-once redeliveries)", n, len(poison), dup)
	})
}

// With the heartbeat disabled, a handler slower than MinIdle is stolen by
// another consumer, and the first one's ack is refused (lost ownership).
func TestDriverSlowHandlerStolenWithoutLease(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		f := s.fixture(t)
		ids := f.Produce(1, order)
		calls := &pelwardentest.Calls{}
		slow := driver.HandlerFunc(func(ctx context.Context, msg *driver.Message) error {
			calls.Add(msg.ID)
			time.Sleep(1500 * time.Millisecond)
			return nil
		})
		m := &pelwardentest.Metrics{}
		cfgA := driver.Config{Consumer: "slow", MaxDeliveries: 3, Handler: slow}
		cfgA.HeartbeatInterval = driver.NoHeartbeat
		// Its own reclaim pass, or its own read where reads claim (Redis
		// 8.4+), would take the entry back from itself (and so act as a
		// lease); only the thief reclaims here.
		cfgA.ReclaimInterval = time.Hour
		cfgA.ReadClaim = driver.ReadClaimOff
		cfgA.Metrics = m
		a := f.RunConsumer(cfgA)
		f.Eventually("slow handler started", func() bool { return calls.Count(ids[0]) == 1 })
		mb := &pelwardentest.Metrics{}
		cfgB := driver.Config{Consumer: "thief", MaxDeliveries: 3, Handler: slow}
		cfgB.Metrics = mb
		b := f.RunConsumer(cfgB)
		f.Eventually("stolen and handled twice", func() bool { return calls.Count(ids[0]) == 2 })
		f.Eventually("the thief acks", func() bool { return mb.Total(driver.EventAcked) == 1 })
		f.Eventually("the first ack refused", func() bool { return m.Total(driver.EventLostOwnership) == 1 })
		require.NoError(t, a.Stop())
		require.NoError(t, b.Stop())
		require.Zero(t, m.Total(driver.EventAcked))
	})
}

// FUNCTION FLUSH while consumers run: the library comes back by itself.
func TestDriverSurvivesFunctionFlush(t *testing.T) {
	eachDedicated(t, testserver.Options{}, func(t *testing.T, srv *testserver.Server) {
		ctx := t.Context()
		rdb := srv.Client()
		defer rdb.Close()
		f := pelwardentest.Use(t, rdb).FixtureFor(t, pelwardentest.NewKeys(t)) // the consumer creates the group
		m := &pelwardentest.Metrics{}
		// After the flush some entries fail once: their release and their
		// reclaim need the library (reads and quick acks do not).
		var failSome atomic.Bool
		seen := &pelwardentest.Calls{}
		cfg := driver.Config{Consumer: "w", MaxDeliveries: 3, Handler: driver.HandlerFunc(func(_ context.Context, msg *driver.Message) error {
			if seen.Add(msg.ID) == 1 && failSome.Load() && strings.HasSuffix(msg.ID, "0") {
				return errors.New("first delivery fails")
			}
			return nil
		})}
		cfg.Metrics = m
		cfg.CreateGroup = true
		r := f.RunConsumer(cfg)
		f.Eventually("group created", func() bool { return rdb.Exists(ctx, f.Stream).Val() == 1 })
		f.Produce(100, order)
		f.Eventually("100 acked", func() bool { return m.Total(driver.EventAcked) == 100 })
		require.NoError(t, rdb.FunctionFlush(ctx).Err())
		failSome.Store(true)
		f.Produce(100, order)
		f.Eventually("200 acked", func() bool { return m.Total(driver.EventAcked) == 200 })
		require.NoError(t, r.Stop())
		v, err := rdb.FCallRO(ctx, pelwarden.FunctionVersion, nil).Text()
		require.NoError(t, err)
		require.Equal(t, pelwarden.LibraryVersion, v)
	})
}

// A server restart (AOF on) while a consumer runs: it reconnects, keeps its
// unsent acks, and everything produced ends up acked.
func TestDriverReconnectsAfterRestart(t *testing.T) {
	eachDedicated(t, testserver.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always", "--dir", "/tmp"}}, func(t *testing.T, srv *testserver.Server) {
		ctx := t.Context()
		rdb := srv.Client()
		defer rdb.Close()
		f := pelwardentest.Use(t, rdb).FixtureFor(t, pelwardentest.NewKeys(t)) // the consumer creates the group
		led := &ledger{ok: map[string]int{}}
		m := &pelwardentest.Metrics{}
		cfg := driver.Config{Consumer: "w", MaxDeliveries: 3, Handler: driver.HandlerFunc(func(ctx context.Context, msg *driver.Message) error {
			led.success(msg.ID)
			return nil
		})}
		cfg.Metrics = m
		cfg.CreateGroup = true
		r := f.RunConsumer(cfg)
		f.Eventually("group created", func() bool { return rdb.Exists(ctx, f.Stream).Val() == 1 })
		first := f.Produce(200, order)
		f.Eventually("200 handled", func() bool { led.mu.Lock(); defer led.mu.Unlock(); return len(led.ok) == 200 })
		require.NoError(t, srv.Restart(ctx))
		require.Eventually(t, func() bool { return rdb.Ping(ctx).Err() == nil }, 30*time.Second, 100*time.Millisecond)
		second := f.Produce(200, order)
		f.Eventually("PEL empty, 400 handled", func() bool {
			led.mu.Lock()
			handled := len(led.ok)
			led.mu.Unlock()
			return handled == 400 && f.PendingCount() == 0
		})
		require.NoError(t, r.Stop())
		for _, id := range append(first, second...) {
			require.GreaterOrEqual(t, led.ok[id], 1, fmt.Sprintf("%s handled", id))
		}
	})
}

// Shutdown stays bounded when the server stops answering: acks that cannot
// be sent are reported and their entries stay pending, never lost.
func TestDriverShutdownBoundedWhenServerHangs(t *testing.T) {
	eachDedicated(t, testserver.Options{}, func(t *testing.T, srv *testserver.Server) {
		ctx := t.Context()
		opts := srv.Options()
		opts.ContextTimeoutEnabled = true
		rdb := redis.NewClient(opts)
		defer rdb.Close()
		admin := srv.Client()
		defer admin.Close()
		f := pelwardentest.Use(t, admin).NewFixture(t)
		ids := f.Produce(20, order)
		started := make(chan string, 20)
		gate := make(chan struct{})
		cfg := driver.Config{Consumer: "w", MaxDeliveries: 3, Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
			started <- m.ID
			<-gate // the handlers succeed once the server hangs
			return nil
		})}
		cfg.Concurrency = 20
		cfg.AckInterval = time.Hour
		cfg.AckBatch = 1000 // acks wait for the shutdown flush
		cfg.ShutdownTimeout = 300 * time.Millisecond
		cfg.MinIdle = time.Hour
		r := f.WithClient(rdb).RunConsumer(cfg)
		for range ids {
			<-started
		}
		require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", "20000", "ALL").Err())
		t.Cleanup(func() { admin.Do(context.Background(), "CLIENT", "UNPAUSE") })
		close(gate)
		began := time.Now()
		stopped := make(chan error, 1)
		go func() { stopped <- r.Stop() }()
		var err error
		select {
		case err = <-stopped:
		case <-time.After(5 * time.Second):
			// Where a slow shutdown waits, for the failure below.
			var stacks bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 2)
			t.Logf("Run has not returned after 5s; goroutines:\n%s", stacks.String())
			err = <-stopped
		}
		require.NoError(t, err)
		require.Less(t, time.Since(began), 10*time.Second, "Run returned while the server hung")
		require.NoError(t, admin.Do(ctx, "CLIENT", "UNPAUSE").Err())
		require.EqualValues(t, 20, f.PendingCount(), "unsent acks: entries stay pending, none lost")
	})
}

// An entry with too many fields to dead-letter from a server-side function
// is never lost: the driver counts it and leaves it pending.
func TestDriverTooLargeToDeadLetterStaysPending(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		id := addTooLarge(t, s.rdb, f.Stream)
		m := &pelwardentest.Metrics{}
		cfg := driver.Config{Consumer: "w", MaxDeliveries: 3, Handler: driver.HandlerFunc(func(ctx context.Context, msg *driver.Message) error {
			return driver.DeadLetter(errors.New("cannot parse"))
		})}
		cfg.Metrics = m
		r := f.RunConsumer(cfg)
		f.Eventually("too large reported", func() bool { return m.Total(driver.EventTooLarge) >= 1 })
		require.NoError(t, r.Stop())
		f.RequirePending(id, pelwardentest.Pending{})
		n, err := s.rdb.XLen(ctx, f.Stream).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "still in the stream")
		require.Zero(t, s.rdb.Exists(ctx, f.DeadLetterStream).Val(), "no partial dead-letter record")
	})
}

// addTooLarge appends an entry with 10,000 fields, too many to copy into a
// dead-letter record from a server-side function, and returns its id.
func addTooLarge(t *testing.T, rdb redis.UniversalClient, stream string) string {
	t.Helper()
	values := make([]string, 0, 20000)
	for i := range 10000 {
		values = append(values, fmt.Sprintf("f%d", i), "v")
	}
	id, err := rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: stream, Values: values}).Result()
	require.NoError(t, err)
	return id
}

// replyError is an error reply as go-redis returns it (a redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// selfHealCut is a go-redis hook that, while armed, makes the library look
// flushed (FCALL answers "Function not found") and the connection fail
// whenever the library tries to load itself again (FUNCTION LOAD, EVAL).
type selfHealCut struct {
	armed atomic.Bool
	loads atomic.Int64 // FUNCTION LOAD attempts cut
}

func (h *selfHealCut) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *selfHealCut) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *selfHealCut) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.armed.Load() {
			return next(ctx, cmd)
		}
		var err error
		switch name := strings.ToUpper(cmd.Name()); {
		case name == "FCALL" || name == "FCALL_RO":
			err = replyError("ERR Function not found")
		case name == "FUNCTION" && strings.EqualFold(fmt.Sprint(cmd.Args()[1]), "load"):
			h.loads.Add(1)
			err = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		case name == "EVAL" || name == "EVALSHA":
			err = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		default:
			return next(ctx, cmd)
		}
		cmd.SetErr(err)
		return err
	}
}

// The library missing while the connection fails each time it is loaded
// again (a FUNCTION FLUSH followed by a cut, as the chaos suite produced) is
// transient: the consumer keeps retrying, at start and while running, and
// handles everything once the connection is back. It used to stop with
// ErrServerUnsupported ("is Lua disabled on this server?").
func TestDriverSurvivesFailedSelfHeal(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		f := s.fixture(t)
		rdb := s.srv.Client()
		defer rdb.Close()
		cut := &selfHealCut{}
		rdb.AddHook(cut)
		m := &pelwardentest.Metrics{}
		// In the second half every entry fails once: giving it back for a
		// retry (the release function) and reclaiming it (the claim
		// function) need the library; reads and quick acks do not.
		var failOnce atomic.Bool
		seen := &pelwardentest.Calls{}
		cfg := driver.Config{Consumer: "w", MaxDeliveries: 3, Handler: driver.HandlerFunc(func(_ context.Context, msg *driver.Message) error {
			if seen.Add(msg.ID) == 1 && failOnce.Load() {
				return errors.New("first delivery fails")
			}
			return nil
		})}
		cfg.Metrics = m
		f.Produce(20, order)

		cut.armed.Store(true) // at start
		r := f.WithClient(rdb).RunConsumer(cfg)
		f.Eventually("3 loads cut at start", func() bool { return cut.loads.Load() >= 3 || isDone(r.Done()) })
		require.False(t, isDone(r.Done()), "Run returned: %v", r.Err())
		cut.armed.Store(false)
		f.Eventually("20 acked", func() bool { return m.Total(driver.EventAcked) == 20 })

		failOnce.Store(true)
		cut.armed.Store(true) // while running: releases and claims need the library
		before := cut.loads.Load()
		f.Produce(20, order)
		f.Eventually("3 more loads cut", func() bool { return cut.loads.Load() >= before+3 || isDone(r.Done()) })
		require.False(t, isDone(r.Done()), "Run returned: %v", r.Err())
		cut.armed.Store(false)
		f.Eventually("40 acked", func() bool { return m.Total(driver.EventAcked) == 40 })
		require.NoError(t, r.Stop())
		require.Zero(t, f.PendingCount())
	})
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A consumer shut down while it is still starting (the library cannot be
// loaded yet: the server is unreachable) returns nil from Run, like one shut
// down later: a requested stop is not a failure. The chaos suite found Run
// returning "load library: ... context canceled" for a consumer stopped
// with SIGTERM during a server restart.
func TestDriverStoppedWhileStartingReturnsNil(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		f := s.fixture(t)
		rdb := s.srv.Client()
		defer rdb.Close()
		cut := &selfHealCut{}
		rdb.AddHook(cut)
		cfg := f.ConsumerConfig(driver.Config{Consumer: "w", MaxDeliveries: 3, Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })})

		cut.armed.Store(true)
		r := f.WithClient(rdb).RunConsumer(cfg)
		f.Eventually("2 loads cut", func() bool { return cut.loads.Load() >= 2 || isDone(r.Done()) })
		require.False(t, isDone(r.Done()), "Run returned while starting: %v", r.Err())
		require.NoError(t, r.Stop(), "stopped while loading the library")

		// Cancelled before Run is even called.
		c, err := driver.New(rdb, cfg)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.NoError(t, c.Run(ctx))
	})
}
