package integration_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// leaseOf is a fixture's lease arguments for consumer c.
func leaseOf(f *pelwardentest.Fixture, c string, ttl time.Duration) pelwarden.LeaseArgs {
	return pelwarden.LeaseArgs{Stream: f.Stream, Lease: pelwarden.LeaseKeyFor(f.Stream), Group: f.Group, Consumer: c, TTL: ttl}
}

func nextOf(f *pelwardentest.Fixture, c string, token int64, ack string) pelwarden.LeaseNextArgs {
	return pelwarden.LeaseNextArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Lease: pelwarden.LeaseKeyFor(f.Stream),
		Group: f.Group, Consumer: c, Token: token, TTL: time.Minute, AckIDs: idList(ack)}
}

// heldBatch produces n entries on a fresh fixture, acquires its lease for
// consumer "a" (token 1) and returns the ids with lease_next arguments
// asking for count entries per call.
func heldBatch(t *testing.T, s *target, lib *pelwarden.Library, n, count int) (*pelwardentest.Fixture, []string, pelwarden.LeaseNextArgs) {
	t.Helper()
	f := s.fixture(t)
	ids := f.Produce(n, order)
	_, err := lib.AcquireLease(t.Context(), leaseOf(f, "a", time.Hour))
	require.NoError(t, err)
	args := nextOf(f, "a", 1, "")
	args.Count = count
	return f, ids, args
}

// idList is the ack list of one id ("" for none).
func idList(id string) []string {
	if id == "" {
		return nil
	}
	return []string{id}
}

// A batch: with nothing pending, one call hands out up to Count new
// entries in stream order; the next call acks those handled and gives back
// the rest behind a head that failed, and hands the head out again alone.
// The given-back entries then come with delivery 1 (their counts were set
// back), one at a time, before anything new; a release gives back and acks
// the same way for the next owner; a foreign consumer's ids are neither
// acked nor given back.
func TestLeaseNextBatch(t *testing.T) {
	eachMode(t, func(t *testing.T, s *target, lib *pelwarden.Library) {
		ctx := t.Context()
		f, ids, args := heldBatch(t, s, lib, 8, 5)
		n, err := lib.LeaseNext(ctx, args)
		require.NoError(t, err)
		require.Len(t, n.Entries, 5)
		for i, e := range n.Entries {
			require.Equal(t, ids[i], e.ID)
			require.EqualValues(t, 1, e.Deliveries)
			require.NotEmpty(t, e.Fields)
		}

		// ids[0] and ids[1] handled, ids[2] failed: ids[3] and ids[4] go back.
		args.AckIDs, args.GiveBack = ids[:2], ids[3:5]
		n, err = lib.LeaseNext(ctx, args)
		require.NoError(t, err)
		require.EqualValues(t, 2, n.Acked)
		require.EqualValues(t, 2, n.GivenBack)
		require.Len(t, n.Entries, 1, "a pending head comes alone")
		require.Equal(t, ids[2], n.Entries[0].ID)
		require.EqualValues(t, 2, n.Entries[0].Deliveries)
		pend, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: f.Stream, Group: f.Group, Start: ids[3], End: ids[4], Count: 10}).Result()
		require.NoError(t, err)
		require.Len(t, pend, 2)
		for _, p := range pend {
			require.Equal(t, "a", p.Consumer)
			require.Zero(t, p.RetryCount, "given back: not counted as delivered")
		}

		args.AckIDs, args.GiveBack = []string{ids[2]}, nil
		n, err = lib.LeaseNext(ctx, args)
		require.NoError(t, err)
		require.EqualValues(t, 1, n.Acked)
		require.Len(t, n.Entries, 1)
		require.Equal(t, ids[3], n.Entries[0].ID, "the given-back entries before anything new")
		require.EqualValues(t, 1, n.Entries[0].Deliveries, "its first attempt is delivery 1")

		// A foreign consumer's ids are left alone by give-backs.
		_, err = s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: f.Group, Consumer: "other", Streams: []string{f.Stream, ">"}, Count: 1}).Result()
		require.NoError(t, err)
		args.AckIDs, args.GiveBack = []string{ids[3]}, []string{ids[5]}
		n, err = lib.LeaseNext(ctx, args)
		require.NoError(t, err)
		require.EqualValues(t, 1, n.Acked)
		require.Zero(t, n.GivenBack, "ids[5] is other's")
		require.Equal(t, ids[4], n.Entries[0].ID)
		pend, err = s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: f.Stream, Group: f.Group, Start: ids[5], End: ids[5], Count: 1}).Result()
		require.NoError(t, err)
		require.Equal(t, "other", pend[0].Consumer)
		require.EqualValues(t, 1, pend[0].RetryCount)

		// The release acks ids[4] and gives the rest of a new batch back.
		_, err = s.rdb.XAck(ctx, f.Stream, f.Group, ids[5]).Result()
		require.NoError(t, err)
		args.AckIDs, args.GiveBack = nil, nil
		_, err = lib.LeaseNext(ctx, pelwarden.LeaseNextArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Lease: args.Lease,
			Group: f.Group, Consumer: "a", Token: 1, TTL: time.Minute, AckIDs: []string{ids[4]}, Count: 10})
		require.NoError(t, err)
		rel, err := lib.ReleaseLease(ctx, pelwarden.ReleaseLeaseArgs{Stream: f.Stream, Lease: args.Lease, Group: f.Group, Consumer: "a", Token: 1,
			AckIDs: []string{ids[6]}, GiveBack: []string{ids[7]}})
		require.NoError(t, err)
		require.Equal(t, &pelwarden.ReleaseLeaseResult{Released: true, Acked: 1, GivenBack: 1}, rel)
		_, err = lib.AcquireLease(ctx, leaseOf(f, "b", time.Hour))
		require.NoError(t, err)
		n, err = lib.LeaseNext(ctx, nextOf(f, "b", 2, ""))
		require.NoError(t, err)
		require.Equal(t, ids[7], n.Entries[0].ID)
		require.EqualValues(t, 1, n.Entries[0].Deliveries, "given back at the hand-over: the next owner's first attempt")
		done, err := lib.LeaseNext(ctx, nextOf(f, "b", 2, ids[7]))
		require.NoError(t, err)
		require.EqualValues(t, 1, done.Acked)
		require.Empty(t, done.Entries)
		left, err := s.rdb.XPending(ctx, f.Stream, f.Group).Result()
		require.NoError(t, err)
		require.Zero(t, left.Count, "everything acked")
	})
}

// LeaseNextRead reads new entries apart from the function, in one
// MULTI/EXEC: with nothing pending, the read's entries are handed out
// (delivery 1) and acked by the next call. When the function hands out a
// pending head instead (another consumer's entry here), the read's
// entries are deferred, and once given back they come out again in order
// from delivery 1. A caller that no longer holds the lease gets nothing
// to run; what its read took stays pending to it for the next owner.
// Under EVALSHA, a server that lost its scripts is healed in the call.
func TestLeaseNextRead(t *testing.T) {
	eachMode(t, func(t *testing.T, s *target, lib *pelwarden.Library) {
		ctx := t.Context()
		f, ids, args := heldBatch(t, s, lib, 10, 3)
		n, err := lib.LeaseNextRead(ctx, args)
		require.NoError(t, err)
		require.True(t, n.Held)
		require.True(t, n.NonePending)
		require.Empty(t, n.Deferred)
		require.Equal(t, ids[:3], leaseEntryIDs(n.Entries))
		for _, e := range n.Entries {
			require.EqualValues(t, 1, e.Deliveries)
			require.NotEmpty(t, e.Fields)
		}

		// Another consumer holds ids[3] (as a former owner's late read
		// would): it comes first, alone; the read's ids[4..6] wait.
		_, err = s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: f.Group, Consumer: "z", Streams: []string{f.Stream, ">"}, Count: 1}).Result()
		require.NoError(t, err)
		args.AckIDs = ids[:3]
		n, err = lib.LeaseNextRead(ctx, args)
		require.NoError(t, err)
		require.EqualValues(t, 3, n.Acked)
		require.False(t, n.NonePending)
		require.Len(t, n.Entries, 1)
		require.Equal(t, ids[3], n.Entries[0].ID)
		require.EqualValues(t, 2, n.Entries[0].Deliveries, "z's entry: its second delivery")
		require.Equal(t, ids[4:7], n.Deferred)

		args.AckIDs, args.GiveBack = []string{ids[3]}, n.Deferred
		for i := 4; i < 7; i++ {
			n, err = lib.LeaseNext(ctx, args)
			require.NoError(t, err)
			require.Len(t, n.Entries, 1)
			require.Equal(t, ids[i], n.Entries[0].ID, "the deferred entries, in order")
			require.EqualValues(t, 1, n.Entries[0].Deliveries, "given back: from delivery 1")
			args.AckIDs, args.GiveBack = []string{ids[i]}, nil
		}

		// A caller without the lease: nothing to run, nothing changed by
		// the function; the read's entry stays pending to the caller.
		stale := args
		stale.Token, stale.AckIDs, stale.Count = 7, nil, 1
		n, err = lib.LeaseNextRead(ctx, stale)
		require.NoError(t, err)
		require.False(t, n.Held)
		require.Empty(t, n.Entries)
		require.Equal(t, ids[7:8], n.Deferred)
		n, err = lib.LeaseNextRead(ctx, args)
		require.NoError(t, err)
		require.EqualValues(t, 1, n.Acked)
		require.Equal(t, ids[7], n.Entries[0].ID, "the stale read's entry, handed out in order")
		require.EqualValues(t, 2, n.Entries[0].Deliveries)
		require.Equal(t, ids[8:], n.Deferred, "read behind a pending head: deferred")
		args.AckIDs, args.GiveBack = []string{ids[7]}, n.Deferred
		n, err = lib.LeaseNext(ctx, args)
		require.NoError(t, err)
		require.Equal(t, ids[8], n.Entries[0].ID)
		args.AckIDs, args.GiveBack = []string{ids[8]}, nil
		n, err = lib.LeaseNext(ctx, args)
		require.NoError(t, err)
		require.Equal(t, ids[9], n.Entries[0].ID)
		args.AckIDs = []string{ids[9]}
		ids = append(ids, f.Produce(2, order)...)

		if lib.Mode() == pelwarden.ModeEval {
			// The server lost its scripts: the call loads them again, and
			// the read's entries go back in that call.
			require.NoError(t, s.rdb.ScriptFlush(ctx).Err())
			n, err = lib.LeaseNextRead(ctx, args)
			require.NoError(t, err)
			require.EqualValues(t, 1, n.Acked)
			require.Equal(t, ids[10], n.Entries[0].ID)
			require.EqualValues(t, 1, n.Entries[0].Deliveries)
			args.AckIDs = []string{ids[10]}
		} else {
			n, err = lib.LeaseNextRead(ctx, args)
			require.NoError(t, err)
			require.Equal(t, ids[10:], leaseEntryIDs(n.Entries))
			args.AckIDs = ids[10:]
		}
		for range 3 {
			n, err = lib.LeaseNextRead(ctx, args)
			require.NoError(t, err)
			args.AckIDs = leaseEntryIDs(n.Entries)
		}
		left, err := s.rdb.XPending(ctx, f.Stream, f.Group).Result()
		require.NoError(t, err)
		require.Zero(t, left.Count, "everything acked")
	})
}

// leaseEntryIDs returns the ids of entries.
func leaseEntryIDs(entries []pelwarden.Entry) []string {
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.ID)
	}
	return ids
}

// One owner at a time: a held lease is refused to others, renewed by its
// holder with the same token, handed over at once by a release with the
// next token, and the old token is fenced off everywhere.
func TestLeaseOwnerAndFence(t *testing.T) {
	eachMode(t, func(t *testing.T, s *target, lib *pelwarden.Library) {
		ctx := t.Context()
		f := s.fixture(t)
		f.Produce(1, order)

		a, err := lib.AcquireLease(ctx, leaseOf(f, "a", time.Hour))
		require.NoError(t, err)
		require.Equal(t, &pelwarden.Lease{Held: true, Owner: "a", Token: 1, TTL: time.Hour}, a)

		b, err := lib.AcquireLease(ctx, leaseOf(f, "b", time.Hour))
		require.NoError(t, err)
		require.False(t, b.Held)
		require.Equal(t, "a", b.Owner)
		require.EqualValues(t, 1, b.Token)
		require.Positive(t, b.TTL)

		again, err := lib.AcquireLease(ctx, leaseOf(f, "a", time.Hour))
		require.NoError(t, err)
		require.True(t, again.Held)
		require.EqualValues(t, 1, again.Token, "a renewal keeps the token")

		n, err := lib.LeaseNext(ctx, nextOf(f, "a", 1, ""))
		require.NoError(t, err)
		require.True(t, n.Held)
		require.Len(t, n.Entries, 1)
		first := n.Entries[0].ID

		// A stale or foreign token changes nothing.
		stale, err := lib.ReleaseLease(ctx, pelwarden.ReleaseLeaseArgs{Stream: f.Stream, Lease: pelwarden.LeaseKeyFor(f.Stream), Group: f.Group, Consumer: "a", Token: 2})
		require.NoError(t, err)
		require.False(t, stale.Released)
		foreign, err := lib.LeaseNext(ctx, nextOf(f, "b", 1, first))
		require.NoError(t, err)
		require.False(t, foreign.Held)
		require.Empty(t, foreign.Entries)
		require.Zero(t, foreign.Acked)
		require.EqualValues(t, 1, f.PendingCount(), "b's ack changed nothing")

		// The graceful hand-over: a releases, b acquires at once with token 2.
		rel, err := lib.ReleaseLease(ctx, pelwarden.ReleaseLeaseArgs{Stream: f.Stream, Lease: pelwarden.LeaseKeyFor(f.Stream), Group: f.Group, Consumer: "a", Token: 1})
		require.NoError(t, err)
		require.Equal(t, &pelwarden.ReleaseLeaseResult{Released: true}, rel)
		b, err = lib.AcquireLease(ctx, leaseOf(f, "b", time.Hour))
		require.NoError(t, err)
		require.Equal(t, &pelwarden.Lease{Held: true, Owner: "b", Token: 2, TTL: time.Hour}, b)

		// a's late ack of the entry it held is refused by the fence: the
		// entry stays pending, and b gets it next, redelivered.
		late, err := lib.LeaseNext(ctx, nextOf(f, "a", 1, first))
		require.NoError(t, err)
		require.False(t, late.Held)
		require.EqualValues(t, 1, f.PendingCount())
		nb, err := lib.LeaseNext(ctx, nextOf(f, "b", 2, ""))
		require.NoError(t, err)
		require.True(t, nb.Held)
		require.Equal(t, first, nb.Entries[0].ID)
		require.EqualValues(t, 2, nb.Entries[0].Deliveries)
		done, err := lib.LeaseNext(ctx, nextOf(f, "b", 2, first))
		require.NoError(t, err)
		require.EqualValues(t, 1, done.Acked)
		require.Empty(t, done.Entries)
		require.Zero(t, f.PendingCount())

		// Going back to a consumer that held the lease before still moves
		// the token forward.
		_, err = lib.ReleaseLease(ctx, pelwarden.ReleaseLeaseArgs{Stream: f.Stream, Lease: pelwarden.LeaseKeyFor(f.Stream), Group: f.Group, Consumer: "b", Token: 2})
		require.NoError(t, err)
		a, err = lib.AcquireLease(ctx, leaseOf(f, "a", time.Hour))
		require.NoError(t, err)
		require.EqualValues(t, 3, a.Token)
	})
}

// A lease that is not renewed expires and another consumer takes it with
// the next token; the old holder is fenced off from then on.
func TestLeaseExpires(t *testing.T) {
	eachMode(t, func(t *testing.T, s *target, lib *pelwarden.Library) {
		ctx := t.Context()
		f := s.fixture(t)
		a, err := lib.AcquireLease(ctx, leaseOf(f, "a", 20*time.Millisecond))
		require.NoError(t, err)
		require.True(t, a.Held)
		var b *pelwarden.Lease
		f.Eventually("b acquires the expired lease", func() bool {
			b, err = lib.AcquireLease(ctx, leaseOf(f, "b", time.Hour))
			require.NoError(t, err)
			return b.Held
		})
		require.EqualValues(t, 2, b.Token)
		n, err := lib.LeaseNext(ctx, nextOf(f, "a", 1, ""))
		require.NoError(t, err)
		require.False(t, n.Held)
	})
}

// The ordered step hands out one entry at a time in stream order, acking
// the previous one in the same call; a new owner first gets the previous
// owner's pending entries in id order, then new ones.
func TestLeaseNextInOrder(t *testing.T) {
	eachMode(t, func(t *testing.T, s *target, lib *pelwarden.Library) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(6, order)
		_, err := lib.AcquireLease(ctx, leaseOf(f, "a", time.Hour))
		require.NoError(t, err)
		ack := ""
		for _, want := range ids[:3] {
			n, err := lib.LeaseNext(ctx, nextOf(f, "a", 1, ack))
			require.NoError(t, err)
			require.Equal(t, ack != "", n.Acked == 1)
			require.Equal(t, want, n.Entries[0].ID)
			require.EqualValues(t, 1, n.Entries[0].Deliveries)
			ack = n.Entries[0].ID
		}
		// a "crashes" holding ids[2], with ids[3] and ids[4] also delivered
		// to it by a plain read (a stale prefetch): all three are pending.
		require.Len(t, f.LeavePending("a", 2), 2)
		_, err = s.rdb.HSet(ctx, pelwarden.LeaseKeyFor(f.Stream), "expires", "0").Result()
		require.NoError(t, err)
		b, err := lib.AcquireLease(ctx, leaseOf(f, "b", time.Hour))
		require.NoError(t, err)
		require.True(t, b.Held)
		ack = ""
		var got []string
		for range 4 {
			n, err := lib.LeaseNext(ctx, nextOf(f, "b", b.Token, ack))
			require.NoError(t, err)
			require.Len(t, n.Entries, 1)
			got = append(got, n.Entries[0].ID)
			ack = n.Entries[0].ID
		}
		require.Equal(t, ids[2:], got)
		n, err := lib.LeaseNext(ctx, nextOf(f, "b", b.Token, ack))
		require.NoError(t, err)
		require.EqualValues(t, 1, n.Acked)
		require.Empty(t, n.Entries)
		require.Zero(t, f.PendingCount())
	})
}

// A failing head blocks its partition through its backoff and only until
// MaxDeliveries: then it is dead-lettered in the same call that hands out
// the entry behind it.
func TestLeaseNextPoison(t *testing.T) {
	eachMode(t, func(t *testing.T, s *target, lib *pelwarden.Library) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(2, order)
		_, err := lib.AcquireLease(ctx, leaseOf(f, "a", time.Hour))
		require.NoError(t, err)
		args := nextOf(f, "a", 1, "")
		args.MaxDeliveries = 2
		for d := int64(1); d <= 2; d++ {
			n, err := lib.LeaseNext(ctx, args)
			require.NoError(t, err)
			require.Equal(t, ids[0], n.Entries[0].ID, "the head again, not the entry behind it")
			require.Equal(t, d, n.Entries[0].Deliveries)
		}
		// At MaxDeliveries the head is dead-lettered whatever its backoff,
		// and the entry behind it comes in the same call.
		blocked := args
		blocked.Backoff = []time.Duration{time.Hour}
		n, err := lib.LeaseNext(ctx, blocked)
		require.NoError(t, err)
		require.Equal(t, []string{ids[0]}, n.DeadLettered)
		require.Equal(t, ids[1], n.Entries[0].ID)
		require.EqualValues(t, 1, n.Entries[0].Deliveries)
		recs, err := s.rdb.XRange(ctx, f.DeadLetterStream, "-", "+").Result()
		require.NoError(t, err)
		require.Len(t, recs, 1)
		require.Equal(t, ids[0], recs[0].Values[pelwarden.FieldOriginalID])
		require.Equal(t, pelwarden.ReasonMaxDeliveries, recs[0].Values[pelwarden.FieldReason])
		require.Equal(t, "2", recs[0].Values[pelwarden.FieldDeliveries])

		// ids[1] fails once: with a backoff it blocks the partition for the
		// time left, naming itself.
		blocked.MaxDeliveries = 5
		n, err = lib.LeaseNext(ctx, blocked)
		require.NoError(t, err)
		require.Empty(t, n.Entries)
		require.Equal(t, ids[1], n.Blocked)
		require.EqualValues(t, 1, n.BlockedDeliveries)
		require.Positive(t, n.Wait)
		require.LessOrEqual(t, n.Wait, time.Hour)

		// The blocked head is recorded in the lease hash for tools (the
		// dashboard): its id, deliveries and when it may be tried again.
		key := pelwarden.LeaseKeyFor(f.Stream)
		now, err := s.rdb.Time(ctx).Result()
		require.NoError(t, err)
		h, err := s.rdb.HGetAll(ctx, key).Result()
		require.NoError(t, err)
		require.Equal(t, ids[1], h["blocked"])
		require.Equal(t, "1", h["blocked_deliveries"])
		until, err := strconv.ParseInt(h["blocked_until"], 10, 64)
		require.NoError(t, err, h)
		require.Greater(t, until, now.UnixMilli())
		require.LessOrEqual(t, until, now.Add(time.Hour).UnixMilli())
		l, err := ops.ReadLease(ctx, s.rdb, key)
		require.NoError(t, err)
		require.Equal(t, "a", l.Owner)
		require.Equal(t, ids[1], l.Blocked)
		require.EqualValues(t, 1, l.BlockedDeliveries)
		require.False(t, l.TooLarge)
		require.Positive(t, l.RetryIn)
		require.LessOrEqual(t, l.RetryIn, time.Hour)
		require.Positive(t, l.Left)
		// Asked again while still blocked, the record stays as it was.
		_, err = lib.LeaseNext(ctx, blocked)
		require.NoError(t, err)
		again, err := s.rdb.HGetAll(ctx, key).Result()
		require.NoError(t, err)
		require.Equal(t, h["blocked_until"], again["blocked_until"])

		// Handed out (no backoff now), the head no longer blocks: cleared.
		free := blocked
		free.Backoff = nil
		n, err = lib.LeaseNext(ctx, free)
		require.NoError(t, err)
		require.Equal(t, ids[1], n.Entries[0].ID)
		vals, err := s.rdb.HMGet(ctx, key, "blocked", "blocked_deliveries", "blocked_until").Result()
		require.NoError(t, err)
		require.Equal(t, []any{"", "", ""}, vals)
		l, err = ops.ReadLease(ctx, s.rdb, key)
		require.NoError(t, err)
		require.Empty(t, l.Blocked)
	})
}

// A head at max-deliveries too large to dead-letter blocks the partition
// for an operator: the lease hash records it with blocked_until -1, and
// once the operator removed it the next lease_next clears the record. A
// lease key holding another type reads as ErrWrongType; a missing one as
// no lease.
func TestLeaseNextRecordsTooLargeHead(t *testing.T) {
	eachMode(t, func(t *testing.T, s *target, lib *pelwarden.Library) {
		ctx := t.Context()
		f := s.fixture(t)
		key := pelwarden.LeaseKeyFor(f.Stream)
		l, err := ops.ReadLease(ctx, s.rdb, key)
		require.NoError(t, err)
		require.Nil(t, l, "no lease hash: not a partition in ordered mode")
		big := addTooLarge(t, s.rdb, f.Stream)
		_, err = lib.AcquireLease(ctx, leaseOf(f, "a", time.Hour))
		require.NoError(t, err)
		args := nextOf(f, "a", 1, "")
		args.MaxDeliveries = 1
		n, err := lib.LeaseNext(ctx, args)
		require.NoError(t, err)
		require.Equal(t, big, n.Entries[0].ID)
		n, err = lib.LeaseNext(ctx, args) // not acked: at max-deliveries, too large
		require.NoError(t, err)
		require.Equal(t, big, n.Blocked)
		require.Negative(t, n.Wait, "too large to dead-letter: Wait < 0")
		h, err := s.rdb.HGetAll(ctx, key).Result()
		require.NoError(t, err)
		require.Equal(t, big, h["blocked"])
		require.Equal(t, "1", h["blocked_deliveries"])
		require.Equal(t, "-1", h["blocked_until"])
		l, err = ops.ReadLease(ctx, s.rdb, key)
		require.NoError(t, err)
		require.True(t, l.TooLarge)
		require.Equal(t, big, l.Blocked)

		// The operator acks it away: nothing pending, the record is cleared.
		require.NoError(t, s.rdb.XAck(ctx, f.Stream, f.Group, big).Err())
		n, err = lib.LeaseNext(ctx, args)
		require.NoError(t, err)
		require.Empty(t, n.Blocked)
		require.Empty(t, n.Entries)
		l, err = ops.ReadLease(ctx, s.rdb, key)
		require.NoError(t, err)
		require.Empty(t, l.Blocked)
		require.False(t, l.TooLarge)

		wrong := f.Stream + ":not-a-lease"
		require.NoError(t, s.rdb.Set(ctx, wrong, "x", 0).Err())
		_, err = ops.ReadLease(ctx, s.rdb, wrong)
		require.True(t, pelwarden.Matches(err, pelwarden.ErrWrongType), "%v", err)
	})
}

// Bad input is refused before any round trip, naming the field.
func TestLeaseArguments(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	lib := pelwarden.NewLibrary(rdb)
	ctx := t.Context()
	_, err := lib.AcquireLease(ctx, pelwarden.LeaseArgs{Stream: "{s}", Lease: "{s}", Group: "g", Consumer: "c", TTL: time.Second})
	require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
	_, err = lib.AcquireLease(ctx, pelwarden.LeaseArgs{Stream: "{s}", Lease: "{s}:lease", Group: "g", Consumer: "c"})
	require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
	require.ErrorContains(t, err, "TTL")
	_, err = lib.LeaseNext(ctx, pelwarden.LeaseNextArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: "{s}", DeadLetterStream: "{s}:lease", Lease: "{s}:lease", Group: "g", Consumer: "c", Token: 1, TTL: time.Second})
	require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
	_, err = lib.ReleaseLease(ctx, pelwarden.ReleaseLeaseArgs{Stream: "{s}", Lease: "{s}:lease", Group: "g", Consumer: "c"})
	require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
	require.ErrorContains(t, err, "Token")
	next := pelwarden.LeaseNextArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: "{s}", DeadLetterStream: "{s}:dlq", Lease: "{s}:lease", Group: "g", Consumer: "c", Token: 1, TTL: time.Second}
	for field, mod := range map[string]func(*pelwarden.LeaseNextArgs){
		"Count":       func(a *pelwarden.LeaseNextArgs) { a.Count = pelwarden.MaxCount + 1 },
		"AckIDs[1]":   func(a *pelwarden.LeaseNextArgs) { a.AckIDs = []string{"1-0", "x"} },
		"GiveBack[0]": func(a *pelwarden.LeaseNextArgs) { a.GiveBack = []string{"1"} },
		"GiveBack":    func(a *pelwarden.LeaseNextArgs) { a.GiveBack = make([]string, pelwarden.MaxCount+1) },
	} {
		a := next
		mod(&a)
		_, err = lib.LeaseNext(ctx, a)
		require.ErrorIs(t, err, pelwarden.ErrInvalidArgument, field)
		require.ErrorContains(t, err, field)
	}
	_, err = lib.ReleaseLease(ctx, pelwarden.ReleaseLeaseArgs{Stream: "{s}", Lease: "{s}:lease", Group: "g", Consumer: "c", Token: 1, AckIDs: []string{"bad"}})
	require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
	require.ErrorContains(t, err, "AckIDs[0]")
}

// A user missing a command the lease functions need gets ErrNoPermission
// naming it, before anything changed.
func TestLeaseNoPermission(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		f.Produce(1, order)
		tag := strings.NewReplacer("/", ".", ":", ".").Replace(t.Name())
		lib := pelwarden.NewLibrary(restrictedClient(t, ctx, s, "lease-nohset-"+tag, "-hset"))
		_, err := lib.AcquireLease(ctx, leaseOf(f, "a", time.Hour))
		require.ErrorIs(t, err, pelwarden.ErrNoPermission)
		require.ErrorContains(t, err, "hset")
		n, err := s.rdb.Exists(ctx, pelwarden.LeaseKeyFor(f.Stream)).Result()
		require.NoError(t, err)
		require.Zero(t, n, "no lease written")

		_, err = s.lib.AcquireLease(ctx, leaseOf(f, "a", time.Hour))
		require.NoError(t, err)
		lib = pelwarden.NewLibrary(restrictedClient(t, ctx, s, "lease-noread-"+tag, "-xreadgroup"))
		_, err = lib.LeaseNext(ctx, nextOf(f, "a", 1, ""))
		require.ErrorIs(t, err, pelwarden.ErrNoPermission)
		require.ErrorContains(t, err, "xreadgroup")
		require.Zero(t, f.PendingCount(), "nothing delivered")
	})
}
