package integration_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// fillStream adds n entries ("n": 0..n-1) to stream, pipelined.
func fillStream(t *testing.T, ctx context.Context, rdb redis.UniversalClient, stream string, n int) {
	t.Helper()
	for from := 0; from < n; from += 1000 {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := from; i < min(from+1000, n); i++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"n", i}})
			}
			return nil
		})
		require.NoError(t, err)
	}
}

// startLog records handler starts ("<consumer>:<unix µs>") in memory and
// writes them to a Redis list at the end (flush), so recording a start
// costs the handler no round trip: the measure is the handlers' start
// times, kept in Redis.
type startLog struct {
	rdb redis.UniversalClient
	key string

	mu     *sync.Mutex
	starts *[]string
}

func newStartLog(rdb redis.UniversalClient, key string) startLog {
	return startLog{rdb: rdb, key: key, mu: &sync.Mutex{}, starts: &[]string{}}
}

func (l startLog) record(consumer int) {
	v := fmt.Sprintf("%d:%d", consumer, time.Now().UnixMicro())
	l.mu.Lock()
	*l.starts = append(*l.starts, v)
	l.mu.Unlock()
}

// count is the number of starts recorded.
func (l startLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(*l.starts)
}

// flush writes the starts recorded to the list.
func (l startLog) flush(t *testing.T, ctx context.Context) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for from := 0; from < len(*l.starts); from += 1000 {
		batch := (*l.starts)[from:min(from+1000, len(*l.starts))]
		require.NoError(t, l.rdb.RPush(ctx, l.key, batch).Err())
	}
}

// read returns the starts by consumer, in µs.
func (l startLog) read(t *testing.T, ctx context.Context) map[int][]int64 {
	t.Helper()
	all, err := l.rdb.LRange(ctx, l.key, 0, -1).Result()
	require.NoError(t, err)
	out := map[int][]int64{}
	for _, v := range all {
		c, at, ok := strings.Cut(v, ":")
		require.True(t, ok, v)
		ci, err := strconv.Atoi(c)
		require.NoError(t, err)
		us, err := strconv.ParseInt(at, 10, 64)
		require.NoError(t, err)
		out[ci] = append(out[ci], us)
	}
	return out
}

// window counts the starts in [from, from+span) by consumer.
func window(starts map[int][]int64, from int64, span time.Duration) (total int, each map[int]int) {
	each = map[int]int{}
	for c, ts := range starts {
		for _, at := range ts {
			if at >= from && at < from+span.Microseconds() {
				each[c]++
				total++
			}
		}
	}
	return total, each
}

// firstStart is the earliest start of all.
func firstStart(starts map[int][]int64) int64 {
	first := int64(-1)
	for _, ts := range starts {
		for _, at := range ts {
			if first < 0 || at < first {
				first = at
			}
		}
	}
	return first
}

// measureStarts lets the consumers stopped by stops run for span after
// the first start, and one second more, then stops them and counts the
// starts in span from the first, in all and by consumer.
func measureStarts(t *testing.T, ctx context.Context, log startLog, span time.Duration, stops []func() error) (total int, each map[int]int) {
	t.Helper()
	require.Eventually(t, func() bool { return log.count() > 0 }, time.Minute, 10*time.Millisecond)
	time.Sleep(span + time.Second) // the measure's span
	for _, stop := range stops {
		require.NoError(t, stop())
	}
	log.flush(t, ctx)
	starts := log.read(t, ctx)
	return window(starts, firstStart(starts), span)
}

// gauge is a counter the handlers raise and lower on the server, keeping
// its highest value: how many handlers ran at once across processes.
type gauge struct {
	rdb       redis.UniversalClient
	cur, most string
}

var raiseScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
return n`)

func (g gauge) raise(ctx context.Context) error {
	return raiseScript.Run(ctx, g.rdb, []string{g.cur, g.most}).Err()
}

func (g gauge) lower(ctx context.Context) error { return g.rdb.Decr(ctx, g.cur).Err() }

// run is a handler's work of d, counted by the gauge.
func (g gauge) run(ctx context.Context, d time.Duration) error {
	if err := g.raise(ctx); err != nil {
		return err
	}
	time.Sleep(d)
	return g.lower(ctx)
}

func (g gauge) highest(t *testing.T, ctx context.Context) int {
	t.Helper()
	n, err := g.rdb.Get(ctx, g.most).Int()
	require.NoError(t, err)
	return n
}

// requireLimitIdle checks that no permit of the limit is held and no lease
// is left: every consumer gave its permits back and ended its lease.
func requireLimitIdle(t *testing.T, ctx context.Context, lib *pelwarden.Library, name string) {
	t.Helper()
	st, err := lib.ReadLimit(ctx, name)
	require.NoError(t, err)
	require.Zero(t, st.InUse, "no permit held after the stops")
	require.Zero(t, st.Leases, "every consumer ended its lease at its stop")
}

// requireFair checks each consumer's share is within ±20% of an even
// split.
func requireFair(t *testing.T, total int, each map[int]int, n int) {
	t.Helper()
	even := float64(total) / float64(n)
	for c := range n {
		assert.InDelta(t, even, float64(each[c]), 0.2*even, "consumer %d's share of %d (even: %.0f): %v", c, total, even, each)
	}
}

// Four consumers under a limit of 500 a second (burst 1) hold 500 ±5%
// over 30 s, measured from the handlers' starts as recorded in Redis;
// each one's share is within ±20% of an even split; no entry is delivered
// twice (entries waiting for a permit stay in the stream, undelivered);
// at the stops every permit and lease goes back.
func TestLimitConsumersRate(t *testing.T) {
	eachAlone(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		name := limitName(t)
		const rate, span, consumers = 500, 30 * time.Second, 4
		_, err := s.lib.SetLimit(ctx, name, pelwarden.LimitSettings{Rate: rate})
		require.NoError(t, err)
		fillStream(t, ctx, s.rdb, f.Stream, rate*int(span/time.Second)*5/4)
		log := newStartLog(s.rdb, f.Stream+":starts")
		var redelivered atomic.Int64
		stops := make([]func() error, consumers)
		for i := range consumers {
			stops[i] = startConsumer(t, s.rdb, driver.Config{Stream: f.Stream, Group: f.Group, Consumer: fmt.Sprint("c", i),
				CreateGroup: true, Limit: name,
				Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
					if m.Deliveries > 1 {
						redelivered.Add(1)
					}
					log.record(i)
					return nil
				})})
		}
		total, counts := measureStarts(t, ctx, log, span, stops)
		want := rate * span.Seconds()
		t.Logf("%d starts in %v (%.1f a second; limit %d), by consumer %v", total, span, float64(total)/span.Seconds(), rate, counts)
		require.InDelta(t, want, float64(total), 0.05*want, "the limit's rate over %v", span)
		requireFair(t, total, counts, consumers)
		require.Zero(t, redelivered.Load(), "no entry delivered twice")
		requireLimitIdle(t, ctx, s.lib, name)
	})
}

// A cap of 8 shared by four consumers of 16 handlers each is never
// exceeded, checked with a counter the handlers raise and lower on the
// server; once all four hold leases, none runs more than its share of the
// cap, ceil(8 / 4) = 2, at once (what the share rule guarantees), and none
// is starved: each handles at least half an even split of the entries
// handled from then on. (How evenly the entries spread beyond that
// depends on how fast each consumer cycles its permits, which CPU
// contention skews: ±23% was seen with twenty consumers on two cores.)
// Everything is handled once and acked.
func TestLimitConsumersCap(t *testing.T) {
	eachAlone(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		name := limitName(t)
		const cap, entries, consumers = 8, 2400, 4
		_, err := s.lib.SetLimit(ctx, name, pelwarden.LimitSettings{Concurrency: cap})
		require.NoError(t, err)
		fillStream(t, ctx, s.rdb, f.Stream, entries)
		g := gauge{rdb: s.rdb, cur: f.Stream + ":running", most: f.Stream + ":most"}
		var handled, running, mostRunning [consumers]atomic.Int64
		var measuring atomic.Bool // set once the shares hold: see below
		var redelivered atomic.Int64
		stops := make([]func() error, consumers)
		for i := range consumers {
			stops[i] = startConsumer(t, s.rdb, driver.Config{Stream: f.Stream, Group: f.Group, Consumer: fmt.Sprint("c", i),
				CreateGroup: true, Limit: name,
				Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
					if m.Deliveries > 1 {
						redelivered.Add(1)
					}
					if n := running[i].Add(1); measuring.Load() {
						for most := mostRunning[i].Load(); n > most && !mostRunning[i].CompareAndSwap(most, n); most = mostRunning[i].Load() {
						}
					}
					defer running[i].Add(-1)
					if err := g.run(ctx, 5*time.Millisecond); err != nil {
						return err
					}
					handled[i].Add(1)
					return nil
				})})
		}
		require.Eventually(t, func() bool {
			for i := range handled {
				if handled[i].Load() == 0 {
					return false
				}
			}
			return true
		}, time.Minute, time.Millisecond, "every consumer handling")
		var base [consumers]int64
		for i := range handled {
			base[i] = handled[i].Load()
		}
		// A consumer may still hold permits taken before the others asked
		// (the first alone had the whole cap); they go back as its
		// handlers end. Once each has handled 16 more, every permit it
		// holds was taken under the four-way share.
		require.Eventually(t, func() bool {
			for i := range handled {
				if handled[i].Load() < base[i]+16 {
					return false
				}
			}
			return true
		}, time.Minute, time.Millisecond, "every consumer handling under the share")
		measuring.Store(true)
		require.Eventually(t, func() bool {
			n := int64(0)
			for i := range handled {
				n += handled[i].Load()
			}
			return n >= entries
		}, 3*time.Minute, 10*time.Millisecond, "every entry handled")
		for _, stop := range stops {
			require.NoError(t, stop())
		}
		most := g.highest(t, ctx)
		counts, total := map[int]int{}, 0
		for i := range handled {
			counts[i] = int(handled[i].Load() - base[i])
			total += counts[i]
		}
		var mostEach [consumers]int64
		for i := range mostRunning {
			mostEach[i] = mostRunning[i].Load()
		}
		t.Logf("at most %d handlers at once under a cap of %d, each consumer at most %v; by consumer once all ran %v (before: %v)", most, cap, mostEach, counts, base)
		require.LessOrEqual(t, most, cap, "never more than the cap at once, across consumers")
		share := int64((cap + consumers - 1) / consumers)
		for i, n := range mostEach {
			require.LessOrEqual(t, n, share, "consumer %d ran at most its share of the cap at once", i)
		}
		require.Greater(t, total, entries/2, "most entries handled once all four ran")
		for i, n := range counts {
			require.GreaterOrEqual(t, n, total/consumers/2, "consumer %d not starved: %v", i, counts)
		}
		require.Zero(t, redelivered.Load(), "no entry delivered twice")
		pending, err := s.rdb.XPending(ctx, f.Stream, f.Group).Result()
		require.NoError(t, err)
		require.Zero(t, pending.Count)
		requireLimitIdle(t, ctx, s.lib, name)
	})
}

// Two groups of two consumers, each group reading the whole stream, share
// one limit of 200 a second: together they hold 200 ±5% over 10 s.
func TestLimitTwoGroups(t *testing.T) {
	eachAlone(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		name := limitName(t)
		const rate, span = 200, 10 * time.Second
		_, err := s.lib.SetLimit(ctx, name, pelwarden.LimitSettings{Rate: rate})
		require.NoError(t, err)
		fillStream(t, ctx, s.rdb, f.Stream, rate*int(span/time.Second)*3/2)
		log := newStartLog(s.rdb, f.Stream+":starts")
		var stops []func() error
		for i := range 4 {
			group := fmt.Sprint(f.Group, "-", i/2)
			stops = append(stops, startConsumer(t, s.rdb, driver.Config{Stream: f.Stream, Group: group, Consumer: fmt.Sprint("c", i),
				CreateGroup: true, Limit: name,
				Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
					log.record(i / 2) // by group
					return nil
				})}))
		}
		total, byGroup := measureStarts(t, ctx, log, span, stops)
		want := rate * span.Seconds()
		t.Logf("%d starts in %v by two groups (limit %d a second), by group %v", total, span, rate, byGroup)
		require.InDelta(t, want, float64(total), 0.05*want, "the two groups hold the limit in sum")
		require.Positive(t, byGroup[0])
		require.Positive(t, byGroup[1])
		requireLimitIdle(t, ctx, s.lib, name)
	})
}

// A consumer SIGKILLed while its handlers hold the whole cap: its permits
// come back when its lease expires, within the limit's Lease of its death
// by the server's clock, and another consumer then uses them (it could
// take none before) and handles every entry, those the dead one held
// included.
func TestLimitCrashedHolder(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		name := limitName(t)
		const cap, lease, entries = 4, time.Second, 200
		_, err := s.lib.SetLimit(ctx, name, pelwarden.LimitSettings{Concurrency: cap, Lease: lease})
		require.NoError(t, err)
		tag := strings.NewReplacer("/", ".", ":", ".").Replace(t.Name())
		keys := newChaosKeys("limitcrash." + tag)
		t.Cleanup(func() {
			s.rdb.Del(context.Background(), keys.Stream, keys.DLQ, keys.Runs, keys.OK, keys.Events, keys.Stream+":running", keys.Stream+":most")
		})
		require.NoError(t, s.rdb.XGroupCreateMkStream(ctx, keys.Stream, keys.Group, "0").Err())
		for i := range entries {
			// Slow entries of the chaos handler (see kindOf): each works at
			// least SlowWork.
			require.NoError(t, s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Stream, Values: []any{"seq", i*200 + 73}}).Err())
		}
		// The victim: its handlers work a minute or more, so it holds the
		// whole cap until it dies.
		addr, err := s.srv.Addr(ctx)
		require.NoError(t, err)
		fleet, err := newChaosFleet(t.TempDir(), chaosConsumerConfig{Addr: addr, Keys: keys, Concurrency: 8,
			MinIdle: 2 * time.Second, ReclaimInterval: time.Second, ReadBlock: time.Second, ShutdownTimeout: 5 * time.Second,
			SlowWork: time.Minute, Limit: name}, 1)
		t.Cleanup(fleet.close)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			// cap handlers started (each works a minute or more: each
			// holds its permit until the kill).
			return s.rdb.HLen(ctx, keys.Runs).Val() == cap
		}, time.Minute, 10*time.Millisecond, "the victim's handlers hold the whole cap")
		st, err := s.lib.ReadLimit(ctx, name)
		require.NoError(t, err)
		require.Equal(t, cap, st.InUse)
		victim := fleet.slots[0]
		fleet.mu.Lock()
		fleet.stopping = true // no replacement
		victim.killed = true
		fleet.mu.Unlock()
		require.NoError(t, victim.cmd.Process.Signal(syscall.SIGKILL))
		<-victim.done
		killed := time.Now()
		// The dead holder's lease (the only one) expires within the
		// limit's Lease of its death, by the server's clock: its permits
		// come back then.
		_, leasesKey := pelwarden.LimitKeysFor(name)
		leases, err := s.rdb.ZRangeWithScores(ctx, leasesKey, 0, -1).Result()
		require.NoError(t, err)
		require.Len(t, leases, 1, "the victim's lease")
		require.LessOrEqual(t, int64(leases[0].Score), serverMillis(t, s)+lease.Milliseconds(),
			"the dead holder's permits come back within the lease")

		g := gauge{rdb: s.rdb, cur: keys.Stream + ":running", most: keys.Stream + ":most"}
		var firstStart atomic.Int64
		var mu sync.Mutex
		handled := map[string]bool{}
		stop := startConsumer(t, s.rdb, driver.Config{Stream: keys.Stream, Group: keys.Group, Consumer: "survivor",
			Limit: name, MinIdle: 2 * time.Second, Concurrency: 8, Tuning: driver.Tuning{ReclaimInterval: time.Second},
			Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
				firstStart.CompareAndSwap(0, time.Now().UnixNano())
				if err := g.run(ctx, 20*time.Millisecond); err != nil {
					return err
				}
				mu.Lock()
				handled[m.ID] = true
				mu.Unlock()
				return nil
			})})
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(handled) == entries
		}, 2*time.Minute, 10*time.Millisecond, "the survivor handles every entry, the dead one's included")
		require.NoError(t, stop())
		t.Logf("the survivor's first handler started %v after the kill (the limit's lease: %v)",
			time.Duration(firstStart.Load()-killed.UnixNano()).Round(time.Millisecond), lease)
		// Every entry handled: the survivor got permits, which it could
		// only once the dead holder's came back (they were the whole cap).
		most := g.highest(t, ctx)
		t.Logf("the survivor ran at most %d handlers at once", most)
		require.LessOrEqual(t, most, cap)
		requireLimitIdle(t, ctx, s.lib, name)
	})
}

// Ordered mode under a cap of 2: over four partitions and a Concurrency of
// 4, never more than 2 handlers at once; every entry handled in its
// partition's order and acked; the permits all go back at the stop.
func TestLimitOrdered(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		name := limitName(t)
		_, err := s.lib.SetLimit(ctx, name, pelwarden.LimitSettings{Concurrency: 2, Rate: 400, Burst: 4})
		require.NoError(t, err)
		names, err := pelwarden.Partitions(f.Stream[1:len(f.Stream)-1], 4)
		require.NoError(t, err)
		t.Cleanup(func() {
			for _, p := range names {
				s.rdb.Del(context.Background(), p, pelwarden.DeadLetterStreamFor(p), pelwarden.LeaseKeyFor(p), p+":running", p+":most")
			}
		})
		const per = 60
		want := map[string][]string{}
		for _, p := range names {
			for i := range per {
				id, err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: p, Values: []any{"n", i}}).Result()
				require.NoError(t, err)
				want[p] = append(want[p], id)
			}
		}
		g := gauge{rdb: s.rdb, cur: names[0] + ":running", most: names[0] + ":most"}
		var mu sync.Mutex
		got := map[string][]string{}
		c, err := driver.NewOrdered(s.rdb, driver.OrderedConfig{Streams: names, Group: f.Group, Consumer: "c", CreateGroup: true,
			Concurrency: 4, Limit: name, PartitionLease: 2 * time.Second,
			Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
				if err := g.run(ctx, 2*time.Millisecond); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				got[m.Stream] = append(got[m.Stream], m.ID)
				return nil
			})})
		require.NoError(t, err)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(runCtx) }()
		require.Eventually(t, func() bool {
			for _, p := range names {
				if n, err := s.rdb.XPending(ctx, p, f.Group).Result(); err != nil || n.Count > 0 {
					return false
				}
			}
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, ids := range got {
				n += len(ids)
			}
			return n >= per*len(names)
		}, 2*time.Minute, 10*time.Millisecond, "every entry handled and acked")
		stop()
		require.NoError(t, <-done)
		for _, p := range names {
			require.True(t, slices.Equal(want[p], got[p]), "partition %s handled once each, in order", p)
		}
		most := g.highest(t, ctx)
		t.Logf("at most %d handlers at once under a cap of 2", most)
		require.LessOrEqual(t, most, 2)
		requireLimitIdle(t, ctx, s.lib, name)
	})
}

// A limit that is not set: Run returns an error matching
// pelwarden.ErrNoLimit at once and reads nothing; a bad name is refused
// by New.
func TestLimitNotSet(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		fillStream(t, ctx, s.rdb, f.Stream, 3)
		c, err := driver.New(s.rdb, driver.Config{Stream: f.Stream, Group: f.Group, CreateGroup: true, Limit: limitName(t),
			Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })})
		require.NoError(t, err)
		err = c.Run(ctx)
		require.ErrorIs(t, err, pelwarden.ErrNoLimit)
		require.Contains(t, err.Error(), limitName(t))
		pending, err := s.rdb.XPending(ctx, f.Stream, f.Group).Result()
		if err == nil {
			require.Zero(t, pending.Count, "nothing read")
		}
		_, err = driver.New(s.rdb, driver.Config{Stream: f.Stream, Group: f.Group, Limit: "a{b}",
			Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })})
		require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
	})
}

// A limit changed while consumers run: two consumers under a cap of 2 run
// 2 handlers at once; raised to 6, they run more, having picked the
// change up without a restart (the time it took is logged: at most about
// a second, the longest wait between two calls of a throttled consumer).
func TestLimitChangePickedUp(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		name := limitName(t)
		_, err := s.lib.SetLimit(ctx, name, pelwarden.LimitSettings{Concurrency: 2})
		require.NoError(t, err)
		fillStream(t, ctx, s.rdb, f.Stream, 5000)
		g := gauge{rdb: s.rdb, cur: f.Stream + ":running", most: f.Stream + ":most"}
		var running atomic.Int64
		var raisedAt, sawAt atomic.Int64
		for i := range 2 {
			startConsumer(t, s.rdb, driver.Config{Stream: f.Stream, Group: f.Group, Consumer: fmt.Sprint("c", i),
				CreateGroup: true, Limit: name,
				Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
					if n := running.Add(1); n > 2 && raisedAt.Load() != 0 {
						sawAt.CompareAndSwap(0, time.Now().UnixNano())
					}
					defer running.Add(-1)
					if err := g.raise(ctx); err != nil {
						return err
					}
					time.Sleep(20 * time.Millisecond)
					return g.lower(ctx)
				})})
		}
		require.Eventually(t, func() bool { return g.rdb.Get(ctx, g.most).Val() == "2" }, time.Minute, 10*time.Millisecond,
			"the consumers run the cap's 2 at once")
		require.LessOrEqual(t, g.highest(t, ctx), 2, "never more than the cap before the change")
		raisedAt.Store(time.Now().UnixNano())
		_, err = s.lib.SetLimit(ctx, name, pelwarden.LimitSettings{Concurrency: 6})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return sawAt.Load() != 0 }, time.Minute, 10*time.Millisecond,
			"more than 2 at once after the cap was raised to 6")
		t.Logf("the raised cap was picked up %v after the change", time.Duration(sawAt.Load()-raisedAt.Load()).Round(time.Millisecond))
		require.LessOrEqual(t, g.highest(t, ctx), 6)
	})
}

// testClusterConsumerLimits: on the cluster, consumers of streams on two
// shards run under one limit whose keys are on a third: a cap of 4 is
// never exceeded across them (a gauge on the server), every entry is
// handled once and acked, and the permits all come back at the stops.
func testClusterConsumerLimits(t *testing.T, ctx context.Context, rdb *redis.ClusterClient, shards []testserver.Shard) {
	require.GreaterOrEqual(t, len(shards), 3)
	// A name (a stream's hash tag, or the limit's) whose key lands on shard i.
	on := func(i int, key func(string) string) string {
		for n := 0; ; n++ {
			name := fmt.Sprintf("clusterlimit.%d.%d", i, n)
			if shards[i].Owns(pelwarden.Slot(key(name))) {
				return name
			}
		}
	}
	limit := on(2, func(n string) string { h, _ := pelwarden.LimitKeysFor(n); return h })
	streams := []string{"{" + on(0, func(n string) string { return "{" + n + "}" }) + "}",
		"{" + on(1, func(n string) string { return "{" + n + "}" }) + "}"}
	g := gauge{rdb: rdb, cur: "{" + limit + "}:running", most: "{" + limit + "}:most"}
	t.Cleanup(func() {
		h, z := pelwarden.LimitKeysFor(limit)
		for _, k := range append(streams, h, z, g.cur, g.most, streams[0]+":dead", streams[1]+":dead") {
			rdb.Del(context.Background(), k)
		}
	})
	lib := pelwarden.NewLibrary(rdb)
	const cap, per = 4, 300
	_, err := lib.SetLimit(ctx, limit, pelwarden.LimitSettings{Concurrency: cap, Rate: 2000, Burst: 10})
	require.NoError(t, err)
	for _, st := range streams {
		fillStream(t, ctx, rdb, st, per)
	}
	var mu sync.Mutex
	handled := map[string]int{}
	var stops []func() error
	for i := range 4 {
		stops = append(stops, startConsumer(t, rdb, driver.Config{Stream: streams[i%2], Group: "g", Consumer: fmt.Sprint("c", i),
			CreateGroup: true, Limit: limit,
			Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
				if err := g.run(ctx, 2*time.Millisecond); err != nil {
					return err
				}
				mu.Lock()
				handled[m.Stream+"/"+m.ID]++
				mu.Unlock()
				return nil
			})}))
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 2*per
	}, 2*time.Minute, 10*time.Millisecond, "every entry of both streams handled")
	for _, stop := range stops {
		require.NoError(t, stop())
	}
	for id, n := range handled {
		require.Equal(t, 1, n, "%s handled once", id)
	}
	most := g.highest(t, ctx)
	t.Logf("at most %d handlers at once across two shards under a cap of %d", most, cap)
	require.LessOrEqual(t, most, cap)
	requireLimitIdle(t, ctx, lib, limit)
}
