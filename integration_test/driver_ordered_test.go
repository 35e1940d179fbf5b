package integration_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
)

// The driver's ordered mode (NewOrdered) on a real server, checked by
// the order checker of TestOrderCheckerLeases: 8 partitions, per-key
// sequence numbers produced in two halves, consumers c1 and c2, then c3
// joins, the second half is produced, c1 crashes mid-stream (its client
// is closed: no ack, no release, no heartbeat, so its leases free at
// expiry), c2 stops gracefully (release with the last acks), c4 joins. For
// every key: handling starts at sequence 0 and goes up by one, going back
// only where the partition changed hands (a new lease token: c1's crash,
// or a lease lost under load): the entries the previous holder handled
// since its last lease_next were never acked (at most a batch, 100), so
// the next holder runs them again, in order, as redeliveries; no two
// handlers of a partition ever run at once; nothing
// is left pending or dead-lettered; once membership is stable the owned
// counts are even (4/4, then 3/3/2, then 4/4).
func TestDriverOrdered(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		f := s.fixture(t)
		runDriverOrdered(t, orderedEnv{name: s.srv.Name, admin: s.rdb, base: f.Stream[1 : len(f.Stream)-1], group: f.Group,
			client: func() redis.UniversalClient {
				opts := s.srv.Options()
				opts.MaxRetries = -1
				return redis.NewClient(opts)
			}})
	})
}

// orderedEnv is where runDriverOrdered runs: a server or a cluster.
type orderedEnv struct {
	name   string
	admin  redis.UniversalClient
	client func() redis.UniversalClient // a new client for one consumer
	base   string                       // the partitions' base name
	group  string
}

func runDriverOrdered(t *testing.T, env orderedEnv) {
	ctx := t.Context()
	eventually := func(what string, cond func() bool) {
		t.Helper()
		require.Eventually(t, cond, time.Minute, 10*time.Millisecond, what)
	}
	{
		const parts, keys, perKey = 8, 24, 20
		const lease = time.Second
		names, err := pelwarden.Partitions(env.base, parts)
		require.NoError(t, err)
		t.Cleanup(func() {
			for _, p := range names {
				env.admin.Del(context.Background(), p, pelwarden.DeadLetterStreamFor(p), pelwarden.LeaseKeyFor(p))
			}
		})
		produce := func(from, to int) { produceKeySeq(t, ctx, env.admin, names, keys, from, to) }
		produce(0, perKey/2)

		chk := &orderLog{events: map[int][]orderEvent{}}
		var mu sync.Mutex
		running := map[string]int{}
		handler := driver.HandlerFunc(func(_ context.Context, m *driver.Message) error {
			key, seq, err := keySeq(&pelwarden.Entry{ID: m.ID, Fields: m.Fields})
			if err != nil {
				return driver.DeadLetter(err)
			}
			mu.Lock()
			running[m.Stream]++
			if running[m.Stream] > 1 {
				t.Errorf("two handlers of %s at once (%s on %s)", m.Stream, m.ID, m.Consumer)
			}
			mu.Unlock()
			// The partition lease's token now: while this handler runs,
			// its consumer holds it (a handler whose lease is lost is
			// cancelled, and no two handlers of a partition overlap: see
			// running).
			lease, err := env.admin.HGet(context.Background(), pelwarden.LeaseKeyFor(m.Stream), "token").Int64()
			if err != nil {
				t.Errorf("read the lease of %s: %v", m.Stream, err)
			}
			chk.recordUnder(key, seq, m.Consumer, m.Deliveries, lease)
			time.Sleep(2 * time.Millisecond) // so a crash finds handlers mid-stream
			mu.Lock()
			running[m.Stream]--
			mu.Unlock()
			return nil
		})
		type consumer struct {
			cancel context.CancelFunc
			done   chan error
			rdb    redis.UniversalClient
		}
		run := func(name string) *consumer {
			rdb := env.client()
			c, err := driver.NewOrdered(rdb, driver.OrderedConfig{Streams: names, Group: env.group, Consumer: name, CreateGroup: true,
				PartitionLease: lease, Handler: handler, ShutdownTimeout: 2 * time.Second})
			require.NoError(t, err)
			cctx, cancel := context.WithCancel(ctx)
			x := &consumer{cancel: cancel, done: make(chan error, 1), rdb: rdb}
			go func() { x.done <- c.Run(cctx) }()
			return x
		}
		stop := func(x *consumer) {
			x.cancel()
			require.NoError(t, <-x.done)
			_ = x.rdb.Close()
		}
		owners := func() map[string]int {
			out := map[string]int{}
			for _, p := range names {
				o, err := env.admin.HGet(ctx, pelwarden.LeaseKeyFor(p), "owner").Result()
				if err == nil && o != "" {
					out[o]++
				}
			}
			return out
		}
		total := keys * perKey
		waitHandled := func(n int) {
			eventually(fmt.Sprintf("%d distinct entries handled", n), func() bool { return chk.distinct() >= n })
		}

		c1, c2 := run("c1"), run("c2")
		eventually("c1 and c2 own 4 each", func() bool { o := owners(); return o["c1"] == 4 && o["c2"] == 4 })
		waitHandled(total / 6)
		c3 := run("c3")
		eventually("c1, c2, c3 own 3/3/2", func() bool { o := owners(); return o["c1"] == 3 && o["c2"] == 3 && o["c3"] == 2 })
		waitHandled(total / 4)
		produce(perKey/2, perKey)
		waitHandled(total/2 + total/8) // into the second half: c1 is mid-stream

		crashed := map[string]bool{}
		for _, p := range names {
			if o, _ := env.admin.HGet(ctx, pelwarden.LeaseKeyFor(p), "owner").Result(); o == "c1" {
				crashed[p] = true
			}
		}
		require.NoError(t, c1.rdb.Close()) // c1 crashes: every call it makes fails from now on
		killed := time.Now()
		eventually("c1's partitions taken over", func() bool {
			o := owners()
			return o["c1"] == 0 && o["c2"]+o["c3"] == 8
		})
		t.Logf("%s: c1's %d partitions owned again %v after the crash (PartitionLease %v)", env.name, len(crashed), time.Since(killed).Round(time.Millisecond), lease)
		c1.cancel()
		require.NoError(t, <-c1.done)

		waitHandled(total / 2)
		stop(c2)
		c4 := run("c4")
		waitHandled(total)
		eventually("every partition drained", func() bool {
			for _, p := range names {
				n, err := env.admin.XPending(ctx, p, env.group).Result()
				require.NoError(t, err)
				if n.Count != 0 {
					return false
				}
			}
			return true
		})
		eventually("c3 and c4 own 4 each", func() bool { o := owners(); return o["c3"] == 4 && o["c4"] == 4 })
		stop(c3)
		stop(c4)
		require.Empty(t, owners(), "graceful stops released every lease")

		// The checker: in order per key; going back only where the
		// partition changed hands (a new lease token: c1's crash, a
		// hand-over, or a lease lost under load), to run again as
		// redeliveries (delivery 2 or more) what the previous holder
		// handled and never acked: at most a batch (100) each time.
		chk.mu.Lock()
		repeats, rewinds := 0, 0
		for k := range keys {
			ev := chk.events[k]
			require.NotEmpty(t, ev, "key %d never handled", k)
			require.Zero(t, ev[0].seq, "key %d starts with sequence 0", k)
			high := 0
			for i := 1; i < len(ev); i++ {
				prev, cur := ev[i-1], ev[i]
				switch {
				case cur.seq == prev.seq+1:
				case cur.seq <= prev.seq && cur.lease != prev.lease && cur.token > 1:
					rewinds++
				default:
					require.Failf(t, "order violated", "key %d: sequence %d (%s, delivery %d, lease %d) handled after %d (%s, delivery %d, lease %d)",
						k, cur.seq, cur.consumer, cur.token, cur.lease, prev.seq, prev.consumer, prev.token, prev.lease)
				}
				if cur.seq <= high {
					repeats++
					require.Greater(t, cur.token, int64(1), "key %d: sequence %d ran again as a redelivery", k, cur.seq)
				}
				high = max(high, cur.seq)
			}
			require.Equal(t, perKey-1, ev[len(ev)-1].seq, "key %d: every sequence handled", k)
		}
		chk.mu.Unlock()
		require.LessOrEqual(t, repeats, 100*rewinds, "at most a batch of handled entries runs again each time a partition changes hands")
		t.Logf("%s: %d entries ran again, over %d changes of hands (c1 held %d partitions at its crash)", env.name, repeats, rewinds, len(crashed))
		t.Logf("%s: ordered driver: %d keys x %d sequences", env.name, keys, perKey)
		for _, p := range names {
			n, err := env.admin.XLen(ctx, pelwarden.DeadLetterStreamFor(p)).Result()
			require.NoError(t, err)
			require.Zero(t, n, "nothing dead-lettered on %s", p)
		}
	}
}

// An ACL user without MULTI/EXEC: the driver's probe finds out before any
// read apart from lease_next (which a refused MULTI would leave outside a
// transaction), and the owners read inside the function instead. Every
// entry is handled once, in stream order, and acked.
func TestDriverOrderedWithoutMulti(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		names, err := pelwarden.Partitions(f.Stream[1:len(f.Stream)-1], 2)
		require.NoError(t, err)
		t.Cleanup(func() {
			for _, p := range names {
				s.rdb.Del(context.Background(), p, pelwarden.DeadLetterStreamFor(p), pelwarden.LeaseKeyFor(p))
			}
		})
		want := map[string][]string{}
		for _, p := range names {
			for i := range 150 {
				id, err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: p, Values: []any{"n", i}}).Result()
				require.NoError(t, err)
				want[p] = append(want[p], id)
			}
		}
		tag := strings.NewReplacer("/", ".", ":", ".").Replace(t.Name())
		rdb := restrictedClient(t, ctx, s, "nomulti-"+tag, "-multi", "-exec")
		var mu sync.Mutex
		got := map[string][]string{}
		c, err := driver.NewOrdered(rdb, driver.OrderedConfig{Streams: names, Group: f.Group, Consumer: "c", CreateGroup: true,
			PartitionLease: time.Second,
			Handler: driver.HandlerFunc(func(_ context.Context, m *driver.Message) error {
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
			return len(got[names[0]])+len(got[names[1]]) >= 300
		}, time.Minute, 10*time.Millisecond, "every entry handled and acked")
		stop()
		require.NoError(t, <-done)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, want, got, "each partition once, in stream order")
	})
}
