package integration_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// What new users hit first (issue 32): each test failed before its fix.

// untaggedKeys returns keys for a stream without a hash tag, as a
// Watermill topic's default stream is, and its dead-letter stream by the
// one rule.
func untaggedKeys(t *testing.T) pelwardentest.Keys {
	name := "orders-" + strings.ToLower(rand.Text()[:10])
	return pelwardentest.Keys{Stream: name, DeadLetterStream: pelwarden.DeadLetterStreamFor(name), Group: pelwardentest.DefaultGroup}
}

// A stream without a hash tag: the driver with its default dead-letter
// stream, the Watermill adapter's rule and the CLI all name the same
// stream, in the stream's slot; records an older version wrote under the
// former name are found by status, with what to do about them.
func TestDeadLetterStreamOneName(t *testing.T) {
	t.Parallel()
	s := servers[0]
	k := untaggedKeys(t)
	require.Equal(t, "{"+k.Stream+"}:dead", k.DeadLetterStream)
	require.Equal(t, pelwarden.Slot(k.Stream), pelwarden.Slot(k.DeadLetterStream))
	f := s.kit(t).FixtureFor(t, k).Within(30 * time.Second)
	t.Cleanup(func() { s.rdb.Del(context.Background(), k.Stream, k.DeadLetterStream, k.Stream+":dead") })
	require.NoError(t, s.rdb.XGroupCreateMkStream(t.Context(), k.Stream, k.Group, "0").Err())
	ids := f.Produce(3, nil)

	cfg := f.ConsumerConfig(driver.Config{Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
		if m.ID == ids[1] {
			return driver.DeadLetter(errors.New("malformed"))
		}
		return nil
	})})
	cfg.DeadLetterStream = "" // the driver's default
	c, err := driver.New(s.rdb, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(2 * time.Second):
	}
	f.RequireDeadLetterIDs(ids[1])
	f.RequirePELEmpty()
	cancel()
	require.NoError(t, <-done)

	// The CLI's default is the same stream.
	v := pwJSON(t, s, "status", k.Stream, k.Group)
	require.Equal(t, k.DeadLetterStream, v["dead_letter_stream"])
	require.EqualValues(t, 1, num(t, v["dead_letter_length"]))
	require.Nil(t, v["legacy_dead_letter_stream"], "nothing under the former name")

	// Records under the former name ("orders-x:dead") are shown, with how
	// to move them.
	legacy := k.Stream + ":dead"
	for range 2 {
		require.NoError(t, s.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: legacy, Values: []string{"n", "old"}}).Err())
	}
	v = pwJSON(t, s, "status", k.Stream, k.Group)
	require.Equal(t, legacy, v["legacy_dead_letter_stream"])
	require.EqualValues(t, 2, num(t, v["legacy_dead_letter_length"]))
	r := pw(t, s, "status", k.Stream, k.Group)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, legacy+": 2 records")
	require.Contains(t, r.stdout, "pelwarden dlq redrive '"+legacy+"'")
	// An explicit --dlq is the user's choice: no advice about the former name.
	v = pwJSON(t, s, "status", k.Stream, k.Group, "--dlq", k.DeadLetterStream)
	require.Nil(t, v["legacy_dead_letter_stream"])
}

// attempts records when each attempt of an entry started and ended.
type attempts struct {
	mu    sync.Mutex
	start map[string][]time.Time
	end   map[string][]time.Time
}

func newAttempts() *attempts {
	return &attempts{start: map[string][]time.Time{}, end: map[string][]time.Time{}}
}

func (a *attempts) begin(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.start[id] = append(a.start[id], time.Now())
	return len(a.start[id])
}

func (a *attempts) done(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.end[id] = append(a.end[id], time.Now())
}

// gaps returns, for each retry of id, the time from the end of the
// attempt before it to its start.
func (a *attempts) gaps(id string) []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []time.Duration
	for i := 1; i < len(a.start[id]) && i <= len(a.end[id]); i++ {
		out = append(out, a.start[id][i].Sub(a.end[id][i-1]))
	}
	return out
}

// modes runs fn once per mode of the driver: unordered, then ordered.
func modes(t *testing.T, fn func(t *testing.T, ordered bool)) {
	for _, ordered := range []bool{false, true} {
		name := "unordered"
		if ordered {
			name = "ordered"
		}
		t.Run(name, func(t *testing.T) { fn(t, ordered) })
	}
}

// runIn runs cfg on f's stream, unordered, or when ordered is set as an
// ordered consumer of the stream as its one partition with a 1 s lease
// (inOrder).
func runIn(f *pelwardentest.Fixture, cfg driver.Config, ordered bool) *pelwardentest.Consumer {
	if ordered {
		return f.RunOrderedConsumer(inOrder(cfg, time.Second))
	}
	return f.RunConsumer(cfg)
}

// inOrder is the ordered configuration with cfg's fields that apply to
// both modes and a lease of lease.
func inOrder(cfg driver.Config, lease time.Duration) driver.OrderedConfig {
	return driver.OrderedConfig{Stream: cfg.Stream, Streams: cfg.Streams, Group: cfg.Group, Consumer: cfg.Consumer,
		Handler: cfg.Handler, MaxDeliveries: cfg.MaxDeliveries, Backoff: cfg.Backoff, PartitionLease: lease,
		Concurrency: cfg.Concurrency, CreateGroup: cfg.CreateGroup, GroupStartID: cfg.GroupStartID,
		ShutdownTimeout: cfg.ShutdownTimeout, Logger: cfg.Logger, Metrics: cfg.Metrics}
}

// Backoff[n-1] counts from the end of the failed attempt, in both modes:
// the entry of a batch that fails after the others ran waits its whole
// backoff (ordered mode retried it within milliseconds: the idle time it
// compared counted from the batch's read).
func TestBackoffCountsFromTheFailure(t *testing.T) {
	modes(t, func(t *testing.T, ordered bool) {
		each(t, func(t *testing.T, s *target) {
			f := s.fixture(t).Within(30 * time.Second)
			ids := f.Produce(20, nil)
			failing := ids[19] // runs after 19 handlers of 20 ms in ordered mode
			const backoff = 800 * time.Millisecond
			at := newAttempts()
			cfg := driver.Config{Consumer: "w", Concurrency: 1, Backoff: []time.Duration{backoff},
				Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
					n := at.begin(m.ID)
					defer at.done(m.ID)
					time.Sleep(20 * time.Millisecond)
					if m.ID == failing && n == 1 {
						return errors.New("first attempt fails")
					}
					return nil
				})}
			cfg.MinIdle = 2 * backoff // unordered: the backoff is below MinIdle
			c := runIn(f, cfg, ordered)
			f.RequireAcked(ids...)
			require.NoError(t, c.Stop())
			gaps := at.gaps(failing)
			require.Len(t, gaps, 1, "one retry")
			// The server counts idle time in whole milliseconds.
			require.GreaterOrEqual(t, gaps[0], backoff-2*time.Millisecond, "the retry came %v after the failure", gaps[0])
		})
	})
}

// A dead letter for max_deliveries carries the error of the entry's last
// failed attempt, whichever consumer made it and though a later attempt
// crashed; the kept error is bounded, and dropped with the dead letter.
func TestDeadLetterKeepsTheLastError(t *testing.T) {
	eachMode(t, func(t *testing.T, s *target, lib *pelwarden.Library) {
		ctx := t.Context()
		f := s.fixture(t)
		errs := pelwarden.LastErrorsKeyFor(f.Stream)
		require.Equal(t, pelwarden.Slot(f.Stream), pelwarden.Slot(errs))
		ids := f.Produce(2, nil)
		f.LeavePending("a", 2) // delivery 1 of both, on a
		long := strings.Repeat("x", 3*pelwarden.MaxErrorBytes)
		res, err := lib.Fail(ctx, pelwarden.FailArgs{Stream: f.Stream, LastErrors: errs, Group: f.Group, Consumer: "a", IDs: ids[:1], Error: "failed on a"})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.Released)
		_, err = lib.Fail(ctx, pelwarden.FailArgs{Stream: f.Stream, LastErrors: errs, Group: f.Group, Consumer: "a", IDs: ids[1:], Error: long})
		require.NoError(t, err)
		claim := func(consumer string, maxDeliveries int) *pelwarden.ClaimPage {
			p, err := lib.Claim(ctx, pelwarden.ClaimArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group,
				Consumer: consumer, MaxDeliveries: maxDeliveries, LastErrors: errs})
			require.NoError(t, err)
			return p
		}
		require.Len(t, claim("b", 3).Entries, 2) // delivery 2, on b
		_, err = lib.Fail(ctx, pelwarden.FailArgs{Stream: f.Stream, LastErrors: errs, Group: f.Group, Consumer: "b", IDs: ids[:1], Error: "failed on b"})
		require.NoError(t, err)
		require.Len(t, claim("c", 3).Entries, 2) // delivery 3, on c, which crashes: nothing recorded
		p := claim("d", 3)
		require.ElementsMatch(t, ids, p.DeadLettered)
		rec := f.RequireDeadLettered(ids[0], pelwardentest.DeadLettered{Reason: pelwarden.ReasonMaxDeliveries, Error: "failed on b"})
		require.EqualValues(t, 3, rec.Deliveries)
		r := pw(t, s, "dlq", "show", f.DeadLetterStream, rec.ID)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "failed on b", "dlq show prints the kept error")
		rec = f.RequireDeadLettered(ids[1], pelwardentest.DeadLettered{Reason: pelwarden.ReasonMaxDeliveries})
		require.LessOrEqual(t, len(rec.Error), pelwarden.MaxErrorBytes)
		require.True(t, strings.HasSuffix(rec.Error, pelwarden.TruncatedMarker), "bounded")
		n, err := s.rdb.Exists(ctx, errs).Result()
		require.NoError(t, err)
		require.Zero(t, n, "the dead letters dropped the kept errors")
	})
}

// A kept error whose entry then succeeded (acks never touch the hash) is
// dropped by a later failure's pruning, so the hash does not grow with
// the entries that once failed.
func TestLastErrorsArePruned(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		errs := pelwarden.LastErrorsKeyFor(f.Stream)
		ids := f.Produce(2, nil)
		f.LeavePending("a", 2)
		fail := func(id string) {
			_, err := s.lib.Fail(ctx, pelwarden.FailArgs{Stream: f.Stream, LastErrors: errs, Group: f.Group, Consumer: "a", IDs: []string{id}, Error: "boom"})
			require.NoError(t, err)
		}
		fail(ids[0])
		require.NoError(t, s.rdb.XAck(ctx, f.Stream, f.Group, ids[0]).Err()) // a retry succeeded
		fail(ids[1])
		fields, err := s.rdb.HKeys(ctx, errs).Result()
		require.NoError(t, err)
		require.Equal(t, []string{f.Group + " " + ids[1]}, fields)
	})
}

// The driver keeps the last error in both modes: a handler that always
// fails leaves a max_deliveries record with its last attempt's error.
func TestDriverDeadLetterKeepsTheLastError(t *testing.T) {
	modes(t, func(t *testing.T, ordered bool) {
		each(t, func(t *testing.T, s *target) {
			f := s.fixture(t).Within(30 * time.Second)
			ids := f.Produce(3, nil)
			at := newAttempts()
			cfg := driver.Config{Consumer: "w", MaxDeliveries: 3,
				Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
					n := at.begin(m.ID)
					defer at.done(m.ID)
					if m.ID == ids[1] {
						return fmt.Errorf("attempt %d of %s failed", n, m.ID)
					}
					return nil
				})}
			c := runIn(f, cfg, ordered)
			f.RequireDeadLetterIDs(ids[1])
			f.RequireAcked(ids[0], ids[2])
			require.NoError(t, c.Stop())
			f.RequireDeadLettered(ids[1], pelwardentest.DeadLettered{Reason: pelwarden.ReasonMaxDeliveries,
				Error: fmt.Sprintf("attempt 3 of %s failed", ids[1])})
		})
	})
}

// A graceful stop gives back the entries read ahead but never started
// with the delivery that handed them out taken back: five restarts over a
// backlog with MaxDeliveries 3 dead-letter nothing (they dead-lettered
// entries that never reached a handler).
func TestGracefulStopsSpendNoDelivery(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		f := s.fixture(t).Within(60 * time.Second)
		ids := f.Produce(200, nil)
		calls := &pelwardentest.Calls{}
		cfg := driver.Config{Consumer: "w", MaxDeliveries: 3, Concurrency: 1,
			Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
				calls.Add(m.ID)
				time.Sleep(10 * time.Millisecond)
				return nil
			}), Tuning: driver.Tuning{Prefetch: 100}}
		for range 5 {
			c := f.RunConsumer(cfg)
			time.Sleep(150 * time.Millisecond)
			require.NoError(t, c.Stop())
		}
		c := f.RunConsumer(cfg)
		f.RequireAcked(ids...)
		require.NoError(t, c.Stop())
		require.Empty(t, f.DeadLetters(), "no entry was dead-lettered")
		for _, id := range ids {
			require.GreaterOrEqual(t, calls.Count(id), 1, id)
		}
	})
}

// Acks that delete leave the entries a second group has not read (or
// still holds): they go once every group is done with them, on every
// server (XDELEX ... ACKED on Redis 8.2+, a check of every group
// elsewhere).
func TestAckDeleteKeepsOtherGroupsEntries(t *testing.T) {
	eachMode(t, func(t *testing.T, s *target, lib *pelwarden.Library) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(4, nil)
		const other = "other"
		require.NoError(t, s.rdb.XGroupCreate(ctx, f.Stream, other, "0").Err())
		f.LeavePending("a", 4)
		length := func() int64 {
			n, err := s.rdb.XLen(ctx, f.Stream).Result()
			require.NoError(t, err)
			return n
		}
		res, err := lib.Ack(ctx, pelwarden.AckArgs{Stream: f.Stream, Group: f.Group, Consumer: "a", IDs: ids[:2], Delete: true})
		require.NoError(t, err)
		require.EqualValues(t, 2, res.Acked)
		dl, err := lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group,
			Consumer: "a", IDs: ids[2:3], Error: "bad", Delete: true})
		require.NoError(t, err)
		require.Len(t, dl.DeadLettered, 1)
		require.EqualValues(t, 4, length(), "the other group has read nothing: nothing deleted")

		// The other group reads two and holds them: still nothing goes.
		read, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: other, Consumer: "b", Streams: []string{f.Stream, ">"}, Count: 2, Block: -1}).Result()
		require.NoError(t, err)
		require.Len(t, read[0].Messages, 2)
		_, err = lib.Ack(ctx, pelwarden.AckArgs{Stream: f.Stream, Group: f.Group, Consumer: "a", IDs: ids[3:], Delete: true})
		require.NoError(t, err)
		require.EqualValues(t, 4, length())
		// It acks them with Delete: both groups are done with ids[0:2].
		res, err = lib.Ack(ctx, pelwarden.AckArgs{Stream: f.Stream, Group: other, Consumer: "b", IDs: ids[:2], Delete: true})
		require.NoError(t, err)
		require.EqualValues(t, 2, res.Acked)
		require.EqualValues(t, 2, length())
		rest, err := s.rdb.XRange(ctx, f.Stream, "-", "+").Result()
		require.NoError(t, err)
		require.Equal(t, ids[2:], []string{rest[0].ID, rest[1].ID})
	})
}

// errorLog records the messages of log records at level ERROR or above.
type errorLog struct {
	mu   sync.Mutex
	recs []string
}

func (h *errorLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (h *errorLog) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		msg += " " + a.String()
		return true
	})
	h.mu.Lock()
	h.recs = append(h.recs, msg)
	h.mu.Unlock()
	return nil
}
func (h *errorLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *errorLog) WithGroup(string) slog.Handler      { return h }

func (h *errorLog) records() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.recs)
}

// A clean shutdown logs no error, in both modes, whether Run's context is
// cancelled or its deadline passes, while the server is slow (paused by
// CLIENT PAUSE, so the calls in flight end with the run), on a loaded
// machine (the suite runs it among the others, -race -parallel 8 on two
// cores): a failure caused by the run's own end is not an error. The
// socket-deadline race of that rule is driver's TestEndedByRun.
func TestCleanShutdownLogsNoError(t *testing.T) {
	eachDedicated(t, testserver.Options{}, func(t *testing.T, srv *testserver.Server) {
		admin := srv.Client()
		t.Cleanup(func() { _ = admin.Close() })
		for _, ordered := range []bool{false, true} {
			for _, end := range []string{"cancel", "deadline"} {
				t.Run(fmt.Sprintf("ordered=%v/%s", ordered, end), func(t *testing.T) {
					opts := srv.Options()
					opts.ContextTimeoutEnabled = true // as the shutdown docs recommend
					rdb := redis.NewClient(opts)
					t.Cleanup(func() { _ = rdb.Close() })
					f := pelwardentest.Use(t, rdb).NewFixture(t).Within(30 * time.Second)
					ids := f.Produce(50, nil)
					logs := &errorLog{}
					cfg := f.ConsumerConfig(driver.Config{Consumer: "w",
						Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error { return nil })})
					cfg.Logger = slog.New(logs)
					c, err := driver.New(rdb, cfg)
					if ordered {
						// The pause stays within the default lease.
						c, err = driver.NewOrdered(rdb, inOrder(cfg, driver.DefaultPartitionLease))
					}
					require.NoError(t, err)
					ctx, cancel := context.WithCancel(t.Context())
					if end == "deadline" {
						ctx, cancel = context.WithTimeout(t.Context(), 3*time.Second)
					}
					defer cancel()
					done := make(chan error, 1)
					go func() { done <- c.Run(ctx) }()
					f.RequireAcked(ids...)

					// The pause (1.5 s, well within the partition lease and
					// the shutdown timeout) spans the run's end, 800 ms in:
					// its deadline, or a cancel then. Every periodic call
					// (reads, heartbeats) is in flight when it comes.
					if d, ok := ctx.Deadline(); ok {
						time.Sleep(time.Until(d) - 800*time.Millisecond)
					}
					require.NoError(t, admin.Do(t.Context(), "CLIENT", "PAUSE", 1500, "ALL").Err())
					if end == "cancel" {
						time.Sleep(800 * time.Millisecond)
						cancel()
					}
					require.NoError(t, <-done)
					require.NoError(t, admin.Do(t.Context(), "CLIENT", "UNPAUSE").Err())
					require.Empty(t, logs.records(), "a clean shutdown logs no error")
				})
			}
		}
	})
}
