package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// The order checker (issue 23 §5, in the style of Jepsen's Kafka workload)
// on the partition lease protocol of the function library: producers write
// per-key sequence numbers to partitions, consumers take partitions through
// leases (AcquireLease), handle them one entry at a time (LeaseNext, which
// acks the previous entry in the same call) and hand them over as the
// membership changes: two join, a third joins, one is killed (it stops at
// once, without ack or release: its leases free at expiry), one stops
// gracefully (release with the last ack), a fourth joins. The checker then
// asserts, for every key: the first handling is of sequence 0; each next
// handling is of the next sequence, or a repeat of the same one only when
// the partition's lease changed hands in between (the documented
// redelivery after a crash or a lost lease); never an earlier one; every
// sequence was handled; nothing is left pending or dead-lettered.
//
// Membership is the test's own (a shared count of live consumers), standing
// in for the driver's: each consumer holds at most ceil(partitions/live)
// partitions and gives the extra ones back.
func TestOrderCheckerLeases(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		const parts, keys, perKey = 8, 24, 30
		names, err := pelwarden.Partitions(f.Stream[1:len(f.Stream)-1], parts)
		require.NoError(t, err)
		for _, p := range names {
			require.NoError(t, s.rdb.XGroupCreateMkStream(ctx, p, f.Group, "0").Err())
		}
		produce := func(from, to int) { produceKeySeq(t, ctx, s.rdb, names, keys, from, to) }
		produce(0, perKey/2)

		chk := &orderLog{events: map[int][]orderEvent{}}
		var live atomic.Int64
		run := func(name string) (stop func(graceful bool)) {
			cctx, cancel := context.WithCancel(ctx)
			var graceful atomic.Bool
			done := make(chan error, 1)
			live.Add(1)
			go func() {
				done <- leaseConsumer(cctx, s.lib, leaseSetup{names: names, group: f.Group, consumer: name, live: &live}, chk, &graceful)
			}()
			return func(g bool) {
				graceful.Store(g)
				live.Add(-1)
				cancel()
				require.NoError(t, <-done, "consumer %s", name)
			}
		}
		total := keys * perKey
		waitHandled := func(n int) {
			f.Eventually(fmt.Sprintf("%d distinct entries handled", n), func() bool { return chk.distinct() >= n })
		}

		stop1 := run("c1")
		stop2 := run("c2")
		waitHandled(total / 6)
		stop3 := run("c3")
		waitHandled(total / 4)
		stop1(false) // killed: no ack, no release
		waitHandled(total / 3)
		produce(perKey/2, perKey)
		stop2(true) // graceful: release with the last ack
		stop4 := run("c4")
		waitHandled(total)
		f.Eventually("every partition drained", func() bool {
			for _, p := range names {
				n, err := s.rdb.XPending(ctx, p, f.Group).Result()
				require.NoError(t, err)
				if n.Count != 0 {
					return false
				}
			}
			return true
		})
		stop3(true)
		stop4(true)

		chk.check(t, keys, perKey)
		for _, p := range names {
			n, err := s.rdb.XLen(ctx, pelwarden.DeadLetterStreamFor(p)).Result()
			require.NoError(t, err)
			require.Zero(t, n, "nothing dead-lettered on %s", p)
		}
	})
}

type orderEvent struct {
	seq      int
	consumer string
	token    int64
	// lease is the partition lease's token the handling ran under, where
	// recorded (recordUnder), else 0.
	lease int64
}

// orderLog records every handling, per key, in the order handlers started.
type orderLog struct {
	mu     sync.Mutex
	events map[int][]orderEvent
	seen   map[[2]int]bool
}

func (l *orderLog) record(key, seq int, consumer string, token int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events[key] = append(l.events[key], orderEvent{seq, consumer, token, 0})
	if l.seen == nil {
		l.seen = map[[2]int]bool{}
	}
	l.seen[[2]int{key, seq}] = true
}

// recordUnder records a handling that ran under the partition lease with
// token lease.
func (l *orderLog) recordUnder(key, seq int, consumer string, token, lease int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events[key] = append(l.events[key], orderEvent{seq, consumer, token, lease})
	if l.seen == nil {
		l.seen = map[[2]int]bool{}
	}
	l.seen[[2]int{key, seq}] = true
}

func (l *orderLog) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

func (l *orderLog) check(t *testing.T, keys, perKey int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	repeats := 0
	for k := range keys {
		ev := l.events[k]
		require.NotEmpty(t, ev, "key %d never handled", k)
		require.Zero(t, ev[0].seq, "key %d starts with sequence 0", k)
		for i := 1; i < len(ev); i++ {
			prev, cur := ev[i-1], ev[i]
			switch {
			case cur.seq == prev.seq+1:
			case cur.seq == prev.seq && cur.token != prev.token:
				repeats++ // a redelivery after the lease moved
			default:
				require.Failf(t, "order violated", "key %d: sequence %d (%s, token %d) handled after %d (%s, token %d)",
					k, cur.seq, cur.consumer, cur.token, prev.seq, prev.consumer, prev.token)
			}
		}
		require.Equal(t, perKey-1, ev[len(ev)-1].seq, "key %d: every sequence handled", k)
	}
	t.Logf("order checker: %d keys x %d sequences, %d documented redeliveries", keys, perKey, repeats)
}

type leaseSetup struct {
	names           []string
	group, consumer string
	live            *atomic.Int64
}

// leaseTTL is the lease of the checker's consumers. A consumer stops
// handling a partition once a lease it has not renewed may have expired
// (leaseTTL - leaseMargin after the renewing call was sent), so no two
// consumers ever run one partition at once.
const (
	leaseTTL    = 3 * time.Second
	leaseMargin = time.Second
)

type heldLease struct {
	token    int64
	ack      string
	deadline time.Time
}

// leaseConsumer runs the ordered protocol on the library until ctx is
// done. A graceful stop releases every lease with its last ack; otherwise
// it returns at once, as a killed process would.
func leaseConsumer(ctx context.Context, lib *pelwarden.Library, c leaseSetup, log *orderLog, graceful *atomic.Bool) error {
	held := map[int]*heldLease{}
	bg := context.WithoutCancel(ctx)
	for round := 0; ; round++ {
		if ctx.Err() != nil {
			if !graceful.Load() {
				return nil
			}
			for p, h := range held {
				_, err := lib.ReleaseLease(bg, pelwarden.ReleaseLeaseArgs{Stream: c.names[p], Lease: pelwarden.LeaseKeyFor(c.names[p]),
					Group: c.group, Consumer: c.consumer, Token: h.token, AckIDs: idList(h.ack)})
				if err != nil {
					return fmt.Errorf("release %s: %w", c.names[p], err)
				}
			}
			return nil
		}
		members := max(c.live.Load(), 1)
		share := (int64(len(c.names)) + members - 1) / members
		idle := true
		for i := range c.names {
			p := (i + round) % len(c.names)
			stream := c.names[p]
			lease := pelwarden.LeaseKeyFor(stream)
			h := held[p]
			sent := time.Now()
			if h == nil || time.Now().After(h.deadline) {
				if int64(len(held)) >= share && h == nil {
					continue
				}
				l, err := lib.AcquireLease(bg, pelwarden.LeaseArgs{Stream: stream, Lease: lease, Group: c.group, Consumer: c.consumer, TTL: leaseTTL})
				if err != nil {
					return fmt.Errorf("acquire %s: %w", stream, err)
				}
				if !l.Held {
					delete(held, p)
					continue
				}
				if h == nil || h.token != l.Token {
					h = &heldLease{token: l.Token}
					held[p] = h
				}
				h.deadline = sent.Add(leaseTTL - leaseMargin)
				sent = time.Now()
			}
			if int64(len(held)) > share {
				_, err := lib.ReleaseLease(bg, pelwarden.ReleaseLeaseArgs{Stream: stream, Lease: lease, Group: c.group, Consumer: c.consumer, Token: h.token, AckIDs: idList(h.ack)})
				if err != nil {
					return fmt.Errorf("release %s: %w", stream, err)
				}
				delete(held, p)
				continue
			}
			n, err := lib.LeaseNext(bg, pelwarden.LeaseNextArgs{Stream: stream, DeadLetterStream: pelwarden.DeadLetterStreamFor(stream), Lease: lease,
				Group: c.group, Consumer: c.consumer, Token: h.token, TTL: leaseTTL, AckIDs: idList(h.ack), MaxDeliveries: 10})
			if err != nil {
				return fmt.Errorf("next %s: %w", stream, err)
			}
			if !n.Held {
				delete(held, p)
				continue
			}
			h.ack = ""
			h.deadline = sent.Add(leaseTTL - leaseMargin)
			if len(n.Entries) == 0 || ctx.Err() != nil || time.Now().After(h.deadline) {
				// Not handled: a killed consumer never gets here, a stopping
				// one leaves the entry pending for the next owner.
				continue
			}
			idle = false
			key, seq, err := keySeq(&n.Entries[0])
			if err != nil {
				return err
			}
			log.record(key, seq, c.consumer, h.token)
			h.ack = n.Entries[0].ID
		}
		if idle {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// produceKeySeq adds, for every sequence number in [from, to), one entry
// per key (fields key and seq) to the key's partition, names[key %
// len(names)], all in one pipeline.
func produceKeySeq(t *testing.T, ctx context.Context, rdb redis.Cmdable, names []string, keys, from, to int) {
	t.Helper()
	pipe := rdb.Pipeline()
	for seq := from; seq < to; seq++ {
		for k := range keys {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: names[k%len(names)], Values: []string{"key", strconv.Itoa(k), "seq", strconv.Itoa(seq)}})
		}
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
}

func keySeq(e *pelwarden.Entry) (key, seq int, err error) {
	key, seq = -1, -1
	for _, fl := range e.Fields {
		n, perr := strconv.Atoi(fl.Value)
		if perr != nil {
			continue
		}
		switch fl.Name {
		case "key":
			key = n
		case "seq":
			seq = n
		}
	}
	if key < 0 || seq < 0 {
		return 0, 0, errors.New("entry " + e.ID + " lacks key or seq")
	}
	return key, seq, nil
}
