package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

func testPartitions(t *testing.T, n int) []string {
	t.Helper()
	names, err := pelwarden.Partitions("orders", n)
	require.NoError(t, err)
	return names
}

// ownedCounts is how many partitions each named consumer's lease holds.
func ownedCounts(w *fakeWorld, names ...string) []int {
	o := w.owners()
	out := make([]int, len(names))
	for i, n := range names {
		out[i] = o[n]
	}
	return out
}

// The shares add up to the partitions and differ by at most one; the
// first members in byte order take the extra ones; a consumer whose own
// heartbeat is not in the view counts itself in.
func TestShareOf(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			members []string
			n       int
			want    []int
		}{
			{[]string{"a", "b", "c"}, 8, []int{3, 3, 2}},
			{[]string{"a", "b", "c", "d"}, 10, []int{3, 3, 2, 2}},
			{[]string{"a", "b", "c"}, 2, []int{1, 1, 0}},
			{[]string{"a"}, 16, []int{16}},
			{[]string{"a", "b"}, 64, []int{32, 32}},
		} {
			sum := 0
			for i, self := range tc.members {
				got := shareOf(tc.members, self, tc.n)
				require.Equal(t, tc.want[i], got, "%v: %s of %d", tc.members, self, tc.n)
				sum += got
			}
			require.Equal(t, tc.n, sum, "%v: the shares cover every partition", tc.members)
		}
		require.Equal(t, 4, shareOf([]string{"a"}, "b", 8), "b not yet seen: one more member")
		require.Equal(t, 7, shareOf(nil, "b", 7), "no view at all: b alone")
	})
}

// Consumers joining and leaving: each takes its share (shareOf) and no
// more, so counts differ by at most one; a graceful stop releases its
// leases at once (with the last ack) and leaves the membership, and the
// others take the partitions over. Entries produced all along are each
// handled once, in order per partition, never by two handlers at once.
func TestOrderedSpreadAndGracefulHandOver(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 8)
		w := newFakeWorld(streams...)
		hs := newHandlings(t)
		handler := func(c *Config) { c.Handler = hs.wrap(func(context.Context, *Message) error { return nil }) }
		produced := 0
		produce := func() {
			for _, s := range streams {
				w.add(s, 5)
			}
			produced += 5 * len(streams)
		}

		produce()
		a := w.start(t, streams, "a", handler)
		b := w.start(t, streams, "b", handler)
		eventually(t, "a and b share 8 partitions 4/4", func() bool { return slices.Equal(ownedCounts(w, "a", "b"), []int{4, 4}) })
		c := w.start(t, streams, "c", handler)
		eventually(t, "a, b and c share them 3/3/2", func() bool { return slices.Equal(ownedCounts(w, "a", "b", "c"), []int{3, 3, 2}) })
		produce()
		eventually(t, "every entry so far handled", func() bool { return hs.count() == produced })
		require.Positive(t, a.m.get(EventLeaseReleased)+b.m.get(EventLeaseReleased), "a or b gave partitions back to c")

		c.stop(t)
		require.Equal(t, 2, c.m.get(EventLeaseReleased), "c released both its leases on its graceful stop")
		require.Zero(t, c.m.get(EventLeaseLost))
		eventually(t, "a and b take c's partitions: 4/4", func() bool { return slices.Equal(ownedCounts(w, "a", "b", "c"), []int{4, 4, 0}) })
		produce()
		eventually(t, "every entry handled", func() bool { return hs.count() == produced })

		for _, s := range streams {
			require.Equal(t, w.ids(s), hs.of(s), "%s: each entry once, in stream order", s)
			eventually(t, "the last entries acked", func() bool { return len(w.pendingOf(s)) == 0 })
		}
		for _, x := range []*orderedConsumer{a, b, c} {
			require.Zero(t, x.m.get(EventLeaseLost), "%s lost no lease", x.name)
			require.Zero(t, x.m.get(EventLostOwnership), "%s lost no entry", x.name)
		}
	})
}

// A new holder handles the partition's pending entries first (an old
// holder's, in id order, each delivered once more), then new ones; every
// one is acked by the call that fetches the next, and the last by the
// release of a graceful stop.
func TestOrderedHandlesInOrderPendingFirst(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 2)
		w := newFakeWorld(streams...)
		w.add(streams[0], 6)
		w.deliver(streams[0], "gone", 3) // 1-0, 2-0, 3-0 pending with a dead consumer
		w.add(streams[1], 2)
		hs := newHandlings(t)
		var mu sync.Mutex
		deliveries := map[string]int64{}
		a := w.start(t, streams, "a", func(c *Config) {
			c.Handler = hs.wrap(func(_ context.Context, m *Message) error {
				mu.Lock()
				deliveries[m.Stream+" "+m.ID] = m.Deliveries
				mu.Unlock()
				return nil
			})
		})
		eventually(t, "all 8 handled", func() bool { return hs.count() == 8 })
		require.Equal(t, []string{"1-0", "2-0", "3-0", "4-0", "5-0", "6-0"}, hs.of(streams[0]))
		require.Equal(t, []string{"1-0", "2-0"}, hs.of(streams[1]))
		mu.Lock()
		require.Equal(t, int64(2), deliveries[streams[0]+" 1-0"], "the old owner's entry: its second delivery")
		require.Equal(t, int64(1), deliveries[streams[0]+" 4-0"], "a new entry: its first")
		mu.Unlock()
		a.stop(t)
		for _, s := range streams {
			require.Empty(t, w.pendingOf(s), "%s: everything acked", s)
			owner, _ := w.lease(s)
			require.Empty(t, owner, "%s: lease released", s)
		}
		require.Equal(t, 8, a.m.get(EventHandled))
		require.Equal(t, 8, a.m.get(EventAcked))
	})
}

// A graceful stop while a handler runs: the holder waits for it, then the
// release call carries its ack (lease_release acks in the same call).
func TestOrderedStopReleasesWithTheLastAck(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 1)
		w := newFakeWorld(streams...)
		w.add(streams[0], 1)
		started, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		a := w.start(t, streams, "a", func(c *Config) {
			c.Handler = HandlerFunc(func(context.Context, *Message) error {
				once.Do(func() { close(started) })
				<-release // still running when the stop begins
				return nil
			})
		})
		<-started
		a.cancel()
		// The shutdown's first step is leaving the membership: once the fake
		// saw it, the stop has begun with the handler still running. (The
		// bound only turns a hang into a failure; the condition is positive.)
		eventually(t, "the stop began", func() bool { return w.callCount("leave", "a", "") > 0 })
		close(release)
		a.stop(t)
		require.Equal(t, []string{"1-0"}, w.releaseAcks("a", streams[0]), "the release carried the handled entry's ack")
		require.Empty(t, w.pendingOf(streams[0]))
		owner, token := w.lease(streams[0])
		require.Empty(t, owner, "the lease is free at once")
		require.Equal(t, int64(1), token, "its token stays: the next owner's will be greater")
		require.Equal(t, 1, a.m.get(EventLeaseReleased))
		require.Equal(t, 1, a.m.get(EventAcked))
	})
}

// A slow handler keeps its partition: the holder renews the lease every
// PartitionLease/3 while it runs, with the same token, however long it
// takes; no lease is lost and the entry is acked once it returns.
func TestOrderedRenewsWhileTheHandlerRuns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 1)
		w := newFakeWorld(streams...)
		w.add(streams[0], 1)
		started, finish := make(chan struct{}), make(chan struct{})
		var cancelled error
		a := w.start(t, streams, "a", func(c *Config) {
			c.Handler = HandlerFunc(func(ctx context.Context, _ *Message) error {
				close(started)
				<-finish
				cancelled = ctx.Err()
				return nil
			})
		})
		<-started
		renewals := w.callCount("acquire", "a", streams[0])
		w.pass(3 * testPartitionLease)
		eventually(t, "renewed about every 10s of 90s", func() bool { return w.callCount("acquire", "a", streams[0])-renewals >= 8 })
		owner, token := w.lease(streams[0])
		require.Equal(t, "a", owner)
		require.Equal(t, int64(1), token, "renewals keep the token")
		close(finish)
		eventually(t, "acked", func() bool { return len(w.pendingOf(streams[0])) == 0 })
		require.NoError(t, cancelled, "the handler's context was never cancelled")
		require.Zero(t, a.m.get(EventLeaseLost))
		require.Equal(t, 1, a.m.get(EventHandled))
	})
}

// A crashed holder (cut off: it cannot renew, release or heartbeat): its
// partitions free when their leases expire, by the server's clock, and
// the survivor takes them all (the crashed member's heartbeat lapses too)
// and handles what was left, from the crashed holder's pending entry on.
// The crashed holder stops handling once its local validity passed.
func TestOrderedCrashedOwnerFreesAtExpiry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 4)
		w := newFakeWorld(streams...)
		hs := newHandlings(t)
		a := w.start(t, streams, "a", func(c *Config) {
			c.Handler = hs.wrap(func(context.Context, *Message) error { return nil })
		})
		b := w.start(t, streams, "b", func(c *Config) { c.Handler = hs.wrap(func(context.Context, *Message) error { return nil }) })
		eventually(t, "2/2", func() bool { return slices.Equal(ownedCounts(w, "a", "b"), []int{2, 2}) })
		aParts := map[string]int64{} // a's partitions and their tokens
		for _, s := range streams {
			if o, token := w.lease(s); o == "a" {
				aParts[s] = token
			}
		}

		w.cutOff("a", true)
		for _, s := range streams {
			w.add(s, 3)
		}
		w.pass(testPartitionLease / 2)
		require.Equal(t, 2, w.owners()["a"], "a's leases hold until they expire")
		for s := range aParts {
			require.Empty(t, hs.of(s), "%s: nobody handles a's partitions meanwhile", s)
		}
		w.pass(testPartitionLease)
		eventually(t, "b owns all 4", func() bool { return slices.Equal(ownedCounts(w, "a", "b"), []int{0, 4}) })
		eventually(t, "all 12 handled", func() bool { return hs.count() == 12 })
		for _, s := range streams {
			require.Equal(t, []string{"1-0", "2-0", "3-0"}, hs.of(s), "%s in order", s)
			if was, ok := aParts[s]; ok {
				owner, token := w.lease(s)
				require.Equal(t, "b", owner)
				require.Equal(t, was+1, token, "%s: passed from a to b, the token moved on", s)
			}
		}
		require.Equal(t, 2, a.m.get(EventLeaseLost), "a gave up both leases once they could not be renewed")
		for s := range aParts {
			require.Equal(t, 1, w.callCount("releaseLease", "a", s), "%s: one release tried after the lapse, not retried", s)
		}
		require.Zero(t, b.m.get(EventLeaseLost))
		w.cutOff("a", false)
	})
}

// The server answers a renewal that another consumer holds the lease now
// (it lapsed and was taken): the running handler's context is cancelled
// with ErrLostOwnership, its success is dropped (not acked: the entry
// stays pending for the new holder), and the partition is not touched
// again while the other consumer holds it.
func TestOrderedLostLeaseCancelsTheHandler(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 1)
		w := newFakeWorld(streams...)
		w.add(streams[0], 2)
		started := make(chan struct{})
		causes := make(chan error, 1)
		a := w.start(t, streams, "a", func(c *Config) {
			c.Handler = HandlerFunc(func(ctx context.Context, _ *Message) error {
				close(started)
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return nil // a success the holder must drop
			})
		})
		<-started
		w.steal(streams[0], "thief")
		nexts := w.callCount("next", "a", streams[0])
		w.pass(testPartitionLease / 3) // the next renewal is due
		require.ErrorIs(t, cancelledWith(t, causes), ErrLostOwnership)
		eventually(t, "counted", func() bool { return a.m.get(EventLostOwnership) == 1 })
		require.Equal(t, 1, a.m.get(EventLeaseLost))
		require.Zero(t, a.m.get(EventHandled), "the outcome was dropped")
		require.Equal(t, []string{"1-0", "2-0"}, w.pendingOf(streams[0]), "not acked: still pending (with the rest of its batch) for the new owner")
		eventually(t, "a tries to take it back", func() bool { return w.callCount("acquire", "a", streams[0]) > 3 })
		require.Equal(t, nexts, w.callCount("next", "a", streams[0]), "no next call on a partition another consumer holds")
		require.Zero(t, w.callCount("releaseLease", "a", streams[0]), "no release with a token that lost")
		owner, _ := w.lease(streams[0])
		require.Equal(t, "thief", owner)
	})
}

// The fence: the lease moved while the holder ran a batch (no renewal was
// due, and the lease was valid by the holder's clock, which a real server's
// expiry never allows: the test moves it by hand), so the next call, which
// carries the handled entries' acks, is refused whole: nothing acked,
// nothing more handed out, the partition left to its new holder.
func TestOrderedFenceRefusesTheOldOwnersAck(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 1)
		w := newFakeWorld(streams...)
		w.add(streams[0], 2)
		hs := newHandlings(t)
		a := w.start(t, streams, "a", func(c *Config) {
			c.Handler = hs.wrap(func(_ context.Context, m *Message) error {
				w.steal(m.Stream, "thief")
				return nil
			})
		})
		eventually(t, "the refused acks counted", func() bool { return a.m.get(EventLostOwnership) == 2 })
		require.Equal(t, 1, a.m.get(EventLeaseLost))
		require.Equal(t, 2, a.m.get(EventHandled), "the handlers of the batch succeeded")
		require.Zero(t, a.m.get(EventAcked), "but their acks were refused")
		require.Equal(t, []string{"1-0", "2-0"}, w.pendingOf(streams[0]), "still pending, for the new owner to run")
		require.Equal(t, []string{"1-0", "2-0"}, hs.of(streams[0]), "each handled once: the refused call handed nothing out")
	})
}

// A refusal retrying cannot fix (the ACL refuses lease_next) stops the
// consumer: Run returns it, matching pelwarden.ErrNoPermission.
func TestOrderedStopsOnNoPermission(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 2)
		w := newFakeWorld(streams...)
		w.failAlways("next", "a", fmt.Errorf("lease_next: %w", pelwarden.ErrNoPermission))
		a := w.start(t, streams, "a", nil)
		select {
		case err := <-a.done:
			require.ErrorIs(t, err, pelwarden.ErrNoPermission)
			a.done = nil
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not stop")
		}
		for _, s := range streams {
			owner, _ := w.lease(s)
			require.Empty(t, owner, "%s: the stop released its leases", s)
		}
	})
}

// Cut off while a handler runs, the holder cannot renew: it cancels the
// handler with ErrLostOwnership once PartitionLease less its margin has
// passed since it SENT its last successful renewal (here a renewal that
// took 5s of the clock: the validity runs from before it), not before.
// The handler's success is dropped: the release that follows (the server
// is reachable again, and the lease not yet expired there) acks nothing.
func TestOrderedLeaseLapsesByTheLocalClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 1)
		w := newFakeWorld(streams...)
		w.add(streams[0], 1)
		started := make(chan time.Duration)
		causes := make(chan error, 1)
		var calls atomic.Int32
		later := make(chan struct{})
		a := w.start(t, streams, "a", func(c *Config) {
			c.Handler = HandlerFunc(func(ctx context.Context, _ *Message) error {
				if calls.Add(1) > 1 {
					<-later // a took the partition again: hold it there
					return nil
				}
				started <- w.clock.now()
				<-ctx.Done()
				w.cutOff("a", false) // the server is back: the release lands
				causes <- context.Cause(ctx)
				return nil // a success the holder must drop
			})
		})
		t.Cleanup(func() { close(later) }) // before the stop
		// The handler started just after the lease was taken; the first
		// renewal is due 10s after that. It takes 5s; then a is cut off.
		slow := w.slowCall("acquire", "a", <-started+time.Second, 5*time.Second)
		<-slow.done
		w.cutOff("a", true)
		tries := w.callCount("acquire", "a", streams[0])
		// Valid until the renewal was sent + 30s - 7.5s.
		validUntil := slow.sent + testPartitionLease - testPartitionLease/4
		advance(validUntil - time.Second/2 - w.clock.now())
		synctest.Wait()
		require.Greater(t, w.callCount("acquire", "a", streams[0]), tries+2, "a tried to renew meanwhile")
		select {
		case err := <-causes:
			t.Fatalf("cancelled before its validity ran out: %v", err)
		default:
		}
		advance(validUntil + time.Second/2 - w.clock.now())
		require.ErrorIs(t, cancelledWith(t, causes), ErrLostOwnership)
		eventually(t, "counted", func() bool { return a.m.get(EventLostOwnership) == 1 })
		require.Equal(t, 1, a.m.get(EventLeaseLost))
		eventually(t, "released", func() bool { return a.m.get(EventLeaseReleased) == 1 })
		require.Equal(t, []string{""}, w.releaseAcks("a", streams[0]), "the release carried no ack: the outcome was dropped")
		require.Equal(t, []string{"1-0"}, w.pendingOf(streams[0]), "not acked")
		require.Zero(t, a.m.get(EventHandled))
	})
}

// A failing head blocks only its partition: it is tried MaxDeliveries
// times, then lease_next dead-letters it (reason max_deliveries) and the
// partition moves on; the other partition is handled meanwhile.
func TestOrderedPoisonHeadDeadLettered(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 2)
		w := newFakeWorld(streams...)
		w.add(streams[0], 3)
		w.add(streams[1], 3)
		hs := newHandlings(t)
		a := w.start(t, streams, "a", func(c *Config) {
			c.MaxDeliveries = 3
			c.Handler = hs.wrap(func(_ context.Context, m *Message) error {
				if m.Stream == streams[0] && m.ID == "1-0" {
					return errHandler
				}
				return nil
			})
		})
		eventually(t, "all handled", func() bool { return len(hs.of(streams[0])) == 5 && len(hs.of(streams[1])) == 3 })
		require.Equal(t, []string{"1-0", "1-0", "1-0", "2-0", "3-0"}, hs.of(streams[0]), "the head 3 times, then the rest in order")
		require.Equal(t, []string{"1-0", "2-0", "3-0"}, hs.of(streams[1]))
		require.Equal(t, []string{"1-0"}, w.deadOf(streams[0]))
		eventually(t, "acked", func() bool { return len(w.pendingOf(streams[0])) == 0 })
		require.Equal(t, 1, a.m.deadLettered(pelwarden.ReasonMaxDeliveries))
		require.Equal(t, 3, a.m.get(EventHandlerError))
		require.Contains(t, a.logs.String(), "dead-lettered the partition's head after MaxDeliveries")
	})
}

// With Backoff, a failed head blocks its partition for its delay: the
// partition is reported blocked once (EventPartitionBlocked, one log line
// naming the stream and the entry) while the other partition goes on;
// once the delay passed the head is tried again and the partition
// unblocks.
func TestOrderedBackoffBlocksOnlyItsPartition(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 2)
		w := newFakeWorld(streams...)
		w.add(streams[0], 2)
		hs := newHandlings(t)
		var mu sync.Mutex
		failed := false
		a := w.start(t, streams, "a", func(c *Config) {
			c.Backoff = []time.Duration{20 * time.Second}
			c.Handler = hs.wrap(func(_ context.Context, m *Message) error {
				mu.Lock()
				defer mu.Unlock()
				if m.Stream == streams[0] && !failed {
					failed = true
					return errHandler
				}
				return nil
			})
		})
		eventually(t, "blocked", func() bool { return a.m.get(EventPartitionBlocked) == 1 })
		owned, blocked := a.m.state(streams[0])
		require.True(t, owned, "PartitionMetrics: owned")
		require.True(t, blocked, "PartitionMetrics: blocked")
		w.add(streams[1], 2)
		eventually(t, "the other partition goes on", func() bool { return len(hs.of(streams[1])) == 2 })
		require.Equal(t, []string{"1-0"}, hs.of(streams[0]), "nothing behind the blocked head")
		line := logLine(t, a.logs.String(), "partition blocked by its head")
		require.Contains(t, line, streams[0], "the line names the partition")
		require.Contains(t, line, "id=1-0", "and its head")
		w.pass(20 * time.Second)
		eventually(t, "retried, then the rest", func() bool { return len(hs.of(streams[0])) == 3 })
		require.Equal(t, []string{"1-0", "1-0", "2-0"}, hs.of(streams[0]))
		require.Equal(t, 1, a.m.get(EventPartitionBlocked), "reported once")
		eventually(t, "unblocked", func() bool { return len(w.pendingOf(streams[0])) == 0 })
		require.Contains(t, a.logs.String(), "partition unblocked")
		require.Empty(t, w.deadOf(streams[0]))
		_, blocked = a.m.state(streams[0])
		require.False(t, blocked, "PartitionMetrics: unblocked")
		_, blocked = a.m.state(streams[1])
		require.False(t, blocked, "the other partition never blocked")
		a.stop(t)
		owned, _ = a.m.state(streams[0])
		require.False(t, owned, "PartitionMetrics: handed over at the stop")
	})
}

// DeadLetter from a handler: the entry goes to the dead-letter stream at
// once and the partition moves on; RetryAfter: the partition waits, then
// the same head comes back.
func TestOrderedHandlerOutcomes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 1)
		w := newFakeWorld(streams...)
		w.add(streams[0], 3)
		hs := newHandlings(t)
		var mu sync.Mutex
		retried := false
		w.start(t, streams, "a", func(c *Config) {
			c.Handler = hs.wrap(func(_ context.Context, m *Message) error {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case m.ID == "1-0":
					return DeadLetter(errors.New("bad order"))
				case m.ID == "2-0" && !retried:
					retried = true
					return RetryAfter(5*time.Millisecond, errors.New("later"))
				}
				return nil
			})
		})
		eventually(t, "all handled", func() bool { return len(hs.of(streams[0])) == 4 })
		require.Equal(t, []string{"1-0", "2-0", "2-0", "3-0"}, hs.of(streams[0]))
		require.Equal(t, []string{"1-0"}, w.deadOf(streams[0]))
		eventually(t, "acked", func() bool { return len(w.pendingOf(streams[0])) == 0 })
	})
}

// OrderedConfig's errors name the field, as every Config error does; the
// fields that do not apply to ordered mode have no place in it.
func TestNewOrderedValidates(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		defer rdb.Close()
		ok := OrderedConfig{Streams: testPartitions(t, 4), Group: "billing", Handler: nopHandler()}
		_, err := NewOrdered(rdb, ok)
		require.NoError(t, err)
		for _, tc := range []struct {
			field string
			mod   func(*OrderedConfig)
		}{
			{"PartitionLease", func(c *OrderedConfig) { c.PartitionLease = 50 * time.Millisecond }},
			{"PartitionLease", func(c *OrderedConfig) { c.PartitionLease = -time.Second }},
			{"Streams[1]", func(c *OrderedConfig) { c.Streams = []string{"{a}", "b"} }},
			{"Group", func(c *OrderedConfig) { c.Group = "" }},
			{"MaxDeliveries", func(c *OrderedConfig) { c.MaxDeliveries = -2 }},
			{"DeadLetterStream", func(c *OrderedConfig) { c.DeadLetterStream = "{x}:dead" }},
		} {
			cfg := ok
			tc.mod(&cfg)
			_, err := NewOrdered(rdb, cfg)
			var ae *pelwarden.ArgumentError
			require.True(t, errors.As(err, &ae), "%s: %v", tc.field, err)
			require.Equal(t, "OrderedConfig."+tc.field, ae.Field, "%v", err)
			require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
		}
		c, err := NewOrdered(rdb, ok)
		require.NoError(t, err)
		require.Equal(t, DefaultPartitionLease, c.OrderedConfig().PartitionLease, "the default lease")
		require.Equal(t, Config{}, c.Config(), "an ordered consumer has no unordered Config")
		require.Equal(t, fmt.Sprint(slices.Min(ok.Streams), ":members:billing"), MembersKey(ok.Streams, "billing"))
	})
}

// logLine returns the one line of logs that contains msg.
func logLine(t *testing.T, logs, msg string) string {
	t.Helper()
	var found []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, msg) {
			found = append(found, l)
		}
	}
	require.Len(t, found, 1, "one line %q in:\n%s", msg, logs)
	return found[0]
}

// Until its heartbeats land a consumer has no view of the group and
// acquires nothing (blind, it would take every partition); once two have
// landed (a round for consumers started together to see each other), it
// takes its share.
func TestOrderedAcquiresNothingWithoutAView(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 4)
		w := newFakeWorld(streams...)
		w.failAlways("heartbeat", "a", errCut)
		a := w.start(t, streams, "a", nil)
		eventually(t, "heartbeats tried", func() bool { return w.callCount("heartbeat", "a", "") > 5 })
		for _, s := range streams {
			require.Zero(t, w.callCount("acquire", "a", s), "%s: no acquisition without a view", s)
		}
		require.Positive(t, a.m.get(EventCommandError))
		// One heartbeat lands, the next ones fail: a view, but no second round.
		w.mu.Lock()
		delete(w.fails, "heartbeat a")
		landed := false
		w.hook = func(op, consumer string) {
			if op == "heartbeat" && consumer == "a" {
				if landed {
					w.fails["heartbeat a"] = errCut
				}
				landed = true
			}
		}
		w.mu.Unlock()
		tries := w.callCount("heartbeat", "a", "")
		eventually(t, "more heartbeats tried", func() bool { return w.callCount("heartbeat", "a", "") > tries+5 })
		w.mu.Lock()
		_, member := w.members["a"]
		w.mu.Unlock()
		require.True(t, member, "one heartbeat landed")
		for _, s := range streams {
			require.Zero(t, w.callCount("acquire", "a", s), "%s: no acquisition after a single heartbeat", s)
		}
		w.mu.Lock()
		w.hook = nil
		delete(w.fails, "heartbeat a")
		w.mu.Unlock()
		eventually(t, "a owns all 4", func() bool { return w.owners()["a"] == 4 })
	})
}

// A server at maxmemory refuses lease_next (it may dead-letter) but runs
// the lease function: the holder keeps renewing between its retries, so it
// keeps the partition through a long refusal, and goes on where it was.
func TestOrderedKeepsTheLeaseWhileTheServerIsFull(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 1)
		w := newFakeWorld(streams...)
		hs := newHandlings(t)
		a := w.start(t, streams, "a", func(c *Config) { c.Handler = hs.wrap(func(context.Context, *Message) error { return nil }) })
		eventually(t, "owned", func() bool { return w.owners()["a"] == 1 })
		w.failAlways("next", "a", replyErr("OOM command not allowed when used memory > 'maxmemory'."))
		w.add(streams[0], 3)
		renewals := w.callCount("acquire", "a", streams[0])
		w.pass(3 * testPartitionLease)
		require.GreaterOrEqual(t, w.callCount("acquire", "a", streams[0])-renewals, 8, "renewed between the refused calls")
		require.Positive(t, a.m.get(EventCommandError))
		w.failAlways("next", "a", nil)
		eventually(t, "handled once the server accepts", func() bool { return len(hs.of(streams[0])) == 3 })
		require.Equal(t, []string{"1-0", "2-0", "3-0"}, hs.of(streams[0]))
		require.Zero(t, a.m.get(EventLeaseLost))
		_, token := w.lease(streams[0])
		require.Equal(t, int64(1), token)
	})
}

// A rebalance while the partition given back has a handler running: the
// holder lets it finish (the lease stays its own, renewed, so the joining
// consumer cannot take it), then releases with its ack; the new holder
// goes on from the next entry. Never two handlers of the partition.
func TestOrderedHandOverWaitsForTheRunningHandler(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 2)
		w := newFakeWorld(streams...)
		w.add(streams[0], 3)
		hs := newHandlings(t)
		started, finish := make(chan struct{}), make(chan struct{})
		handler := func(c *Config) {
			c.Handler = hs.wrap(func(_ context.Context, m *Message) error {
				if m.Stream == streams[0] && m.ID == "1-0" {
					close(started)
					<-finish
				}
				return nil
			})
		}
		w.start(t, streams, "a", handler)
		<-started
		eventually(t, "a owns both", func() bool { return w.owners()["a"] == 2 })
		w.start(t, streams, "b", handler) // share 1 each: a gives back streams[0], its lowest
		eventually(t, "b tries streams[0]", func() bool { return w.callCount("acquire", "b", streams[0]) > 3 })
		owner, _ := w.lease(streams[0])
		require.Equal(t, "a", owner, "held by a while its handler runs")
		w.pass(testPartitionLease) // and renewed meanwhile
		owner, _ = w.lease(streams[0])
		require.Equal(t, "a", owner)
		close(finish)
		eventually(t, "b goes on", func() bool { return len(hs.of(streams[0])) == 3 })
		require.Equal(t, []string{"1-0", "2-0", "3-0"}, hs.of(streams[0]))
		hs.mu.Lock()
		require.Equal(t, []string{"a", "b", "b"}, hs.by[streams[0]])
		hs.mu.Unlock()
		require.Equal(t, []string{"1-0"}, w.releaseAcks("a", streams[0]), "a's release acked the entry its handler finished")
		require.Equal(t, []int{1, 1}, ownedCounts(w, "a", "b"))
	})
}

// cancelledWith waits up to 10s for a handler to report the cause of its
// cancelled context.
func cancelledWith(t *testing.T, causes <-chan error) error {
	t.Helper()
	select {
	case err := <-causes:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context was not cancelled")
		return nil
	}
}

// A batch: one lease_next hands out several new entries, run one at a
// time. A head that fails gives the rest of its batch back with the next
// call, which hands the head out again first; the entries behind it then
// come with delivery 1, as if never handed out (the give-back reset their
// counts), and everything is acked.
func TestOrderedFailedHeadGivesBackItsBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 1)
		w := newFakeWorld(streams...)
		w.add(streams[0], 5)
		hs := newHandlings(t)
		var mu sync.Mutex
		deliveries := map[string][]int64{}
		a := w.start(t, streams, "a", func(c *Config) {
			c.Handler = hs.wrap(func(_ context.Context, m *Message) error {
				mu.Lock()
				defer mu.Unlock()
				deliveries[m.ID] = append(deliveries[m.ID], m.Deliveries)
				if m.ID == "2-0" && len(deliveries[m.ID]) == 1 {
					return errors.New("not yet")
				}
				return nil
			})
		})
		eventually(t, "all acked", func() bool { return len(hs.of(streams[0])) == 6 && len(w.pendingOf(streams[0])) == 0 })
		require.Equal(t, []string{"1-0", "2-0", "2-0", "3-0", "4-0", "5-0"}, hs.of(streams[0]))
		mu.Lock()
		require.Equal(t, map[string][]int64{"1-0": {1}, "2-0": {1, 2}, "3-0": {1}, "4-0": {1}, "5-0": {1}}, deliveries)
		mu.Unlock()
		require.Equal(t, 5, a.m.get(EventHandled))
		require.Equal(t, 5, a.m.get(EventAcked))
	})
}

// A graceful stop in the middle of a batch: the release acks what was
// handled and gives the rest back, so the next holder runs it from
// delivery 1, in order, after the entries the first holder finished.
func TestOrderedStopGivesBackTheRestOfTheBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 1)
		w := newFakeWorld(streams...)
		w.add(streams[0], 4)
		hs := newHandlings(t)
		started := make(chan struct{})
		release := make(chan struct{})
		var mu sync.Mutex
		deliveries := map[string]int64{}
		handler := func(_ context.Context, m *Message) error {
			mu.Lock()
			deliveries[m.ID] = m.Deliveries
			mu.Unlock()
			if m.ID == "2-0" && m.Consumer == "a" {
				close(started)
				<-release
			}
			return nil
		}
		a := w.start(t, streams, "a", func(c *Config) { c.Handler = hs.wrap(handler) })
		<-started
		stopped := make(chan struct{})
		go func() { defer close(stopped); a.stop(t) }()
		eventually(t, "a leaves the membership", func() bool { return w.callCount("leave", "a", "") > 0 })
		close(release)
		<-stopped
		require.Equal(t, []string{"1-0,2-0"}, w.releaseAcks("a", streams[0]), "the release acked what a handled")
		require.Equal(t, []string{"3-0", "4-0"}, w.pendingOf(streams[0]), "the rest stays pending, given back")
		w.start(t, streams, "b", func(c *Config) { c.Handler = hs.wrap(handler) })
		eventually(t, "b runs the rest", func() bool { return len(w.pendingOf(streams[0])) == 0 && len(hs.of(streams[0])) == 4 })
		require.Equal(t, []string{"1-0", "2-0", "3-0", "4-0"}, hs.of(streams[0]))
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[string]int64{"1-0": 1, "2-0": 1, "3-0": 1, "4-0": 1}, deliveries, "given back: b's first attempt is delivery 1")
	})
}

// Behind a call that found nothing pending, the holder reads new entries
// apart from the function (LeaseNextRead). When entries turn up pending
// meanwhile (here another consumer's, as a former holder's late read
// would leave them), the function hands the lowest out first and the
// entries the read took are deferred: given back with the next call, they
// run after the pending ones, in order, from delivery 1.
func TestOrderedReadApartDefersBehindAPendingHead(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 1)
		s := streams[0]
		w := newFakeWorld(streams...)
		w.add(s, 2)
		hs := newHandlings(t)
		inSecond := make(chan struct{})
		release := make(chan struct{})
		var mu sync.Mutex
		deliveries := map[string]int64{}
		a := w.start(t, streams, "a", func(c *Config) {
			c.Handler = hs.wrap(func(_ context.Context, m *Message) error {
				mu.Lock()
				deliveries[m.ID] = m.Deliveries
				mu.Unlock()
				if m.ID == "2-0" {
					close(inSecond)
					<-release
				}
				return nil
			})
		})
		<-inSecond
		w.add(s, 6)
		w.deliver(s, "z", 2) // 3-0 and 4-0 pending to z
		close(release)
		eventually(t, "all 8 handled and acked", func() bool { return hs.count() == 8 && len(w.pendingOf(s)) == 0 })
		require.Equal(t, []string{"1-0", "2-0", "3-0", "4-0", "5-0", "6-0", "7-0", "8-0"}, hs.of(s))
		mu.Lock()
		require.Equal(t, map[string]int64{"1-0": 1, "2-0": 1, "3-0": 2, "4-0": 2, "5-0": 1, "6-0": 1, "7-0": 1, "8-0": 1}, deliveries,
			"z's entries come as their second delivery; the deferred ones, given back, as their first")
		mu.Unlock()
		require.Positive(t, w.callCount("readApart", "a", s), "the owner read apart behind a call that found nothing pending")
		a.stop(t)
		require.Equal(t, 8, a.m.get(EventAcked))
	})
}
