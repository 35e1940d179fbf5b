package integration_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// Ack is fenced: ids whose ownership moved are reported, not acked.
func TestAckFenced(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(6, order)
		f.LeavePending("a", 6)
		require.NoError(t, s.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: f.Stream, Group: f.Group, Consumer: "b", Messages: ids[:2]}).Err())
		require.NoError(t, s.rdb.XAck(ctx, f.Stream, f.Group, ids[2]).Err())

		r, err := s.lib.Ack(ctx, pelwarden.AckArgs{Stream: f.Stream, Group: f.Group, Consumer: "a", IDs: ids})
		require.NoError(t, err)
		require.EqualValues(t, 3, r.Acked)
		require.ElementsMatch(t, ids[:3], r.NotOwned)
		require.Equal(t, []string{ids[2]}, r.NotPending, "acked before: no consumer holds it")
		require.ElementsMatch(t, ids[:2], r.OwnedElsewhere())
		require.ErrorIs(t, r.Err(), pelwarden.ErrNotOwner)

		// The same call again (a retry whose first attempt was applied):
		// nothing acked, and every id is reported as no longer pending, not
		// as taken over.
		r, err = s.lib.Ack(ctx, pelwarden.AckArgs{Stream: f.Stream, Group: f.Group, Consumer: "a", IDs: ids[2:]})
		require.NoError(t, err)
		require.Zero(t, r.Acked)
		require.ElementsMatch(t, ids[2:], r.NotPending)
		require.Empty(t, r.OwnedElsewhere())
		for _, id := range ids[:2] {
			f.RequirePending(id, pelwardentest.Pending{Consumer: "b"})
		}
		require.EqualValues(t, 2, f.PendingCount())

		r, err = s.lib.Ack(ctx, pelwarden.AckArgs{Stream: f.Stream, Group: f.Group, Consumer: "b", IDs: ids[:2], Delete: true})
		require.NoError(t, err)
		require.EqualValues(t, 2, r.Acked)
		require.NoError(t, r.Err())
		n, err := s.rdb.XLen(ctx, f.Stream).Result()
		require.NoError(t, err)
		require.EqualValues(t, 4, n, "Delete removed the two acked entries")
	})
}

// The ack function is exact whatever the order of its ids. The Go wrapper
// puts the lowest first and the highest last, so one range read of the
// consumer's pending entries covers the batch; a raw FCALL may not (the
// function then reads the range of the ids it did not see, and looks up
// the rest one by one). A malformed id anywhere fails the call before
// anything is acked.
func TestAckAnyOrder(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		for _, via := range []string{"fcall", "wrapper"} {
			f := s.fixture(t)
			ids := f.Produce(300, order)
			f.LeavePending("a", 300)
			want := map[string]bool{} // id -> acked by this call
			var moved []string
			ackedBefore := 0
			for i, id := range ids {
				switch {
				case i%7 == 3:
					moved = append(moved, id)
					want[id] = false
				case i%11 == 5:
					require.NoError(t, s.rdb.XAck(ctx, f.Stream, f.Group, id).Err())
					ackedBefore++
					want[id] = false
				default:
					want[id] = true
				}
			}
			require.NoError(t, s.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: f.Stream, Group: f.Group, Consumer: "b", Messages: moved}).Err())
			batch := append([]string(nil), ids...)
			rand.New(rand.NewPCG(uint64(len(via)), 7)).Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
			// One owned id written unnormalised: "0" before its milliseconds.
			for i, id := range batch {
				if want[id] {
					batch[i] = "0" + id
					break
				}
			}

			bad := append(append(append([]string(nil), batch[:150]...), "bogus"), batch[150:]...)
			if via == "fcall" {
				err := s.rdb.FCall(ctx, pelwarden.FunctionAck, []string{f.Stream}, append([]any{f.Group, "a", "0"}, anys(bad)...)...).Err()
				require.True(t, redis.HasErrorPrefix(err, "PWBADID"), "got %v", err)
			} else {
				_, err := s.lib.Ack(ctx, pelwarden.AckArgs{Stream: f.Stream, Group: f.Group, Consumer: "a", IDs: bad})
				require.ErrorIs(t, err, pelwarden.ErrInvalidID)
			}
			before := f.PendingCount()
			require.EqualValues(t, 300-ackedBefore, before, "nothing acked by the refused call")

			var acked int64
			var notOwned []string
			if via == "fcall" {
				v, err := s.rdb.FCall(ctx, pelwarden.FunctionAck, []string{f.Stream}, append([]any{f.Group, "a", "0"}, anys(batch)...)...).Slice()
				require.NoError(t, err)
				acked = v[0].(int64)
				for _, x := range v[1].([]any) {
					notOwned = append(notOwned, x.(string))
				}
			} else {
				r, err := s.lib.Ack(ctx, pelwarden.AckArgs{Stream: f.Stream, Group: f.Group, Consumer: "a", IDs: batch})
				require.NoError(t, err)
				acked, notOwned = r.Acked, r.NotOwned
			}
			var wantAcked int64
			var wantNotOwned []string
			for _, id := range ids {
				if want[id] {
					wantAcked++
				} else {
					wantNotOwned = append(wantNotOwned, id)
				}
			}
			require.Equal(t, wantAcked, acked, via)
			require.ElementsMatch(t, wantNotOwned, notOwned, via)
			require.EqualValues(t, len(moved), f.PendingCount(), "only b's entries stay pending")
			for _, id := range moved {
				f.RequirePending(id, pelwardentest.Pending{Consumer: "b"})
			}
		}
	})
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// DeadLetter is atomic, fenced and idempotent, and bounds the error text.
func TestDeadLetter(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(4, order)
		f.LeavePending("a", 4)
		require.NoError(t, s.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: f.Stream, Group: f.Group, Consumer: "b", Messages: ids[3:]}).Err())
		require.NoError(t, s.rdb.XDel(ctx, f.Stream, ids[2]).Err())
		long := strings.Repeat("é", 3000) // 6000 bytes, 2-byte characters
		args := pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "a",
			IDs: ids, Reason: "invalid_order", Error: long}
		r, err := s.lib.DeadLetter(ctx, args)
		require.NoError(t, err)
		require.Equal(t, ids[:2], r.DeadLettered)
		require.Equal(t, []string{ids[3]}, r.NotOwned)
		require.Empty(t, r.NotPending)
		require.Equal(t, []string{ids[3]}, r.OwnedElsewhere())
		require.Equal(t, []string{ids[2]}, r.Deleted)
		f.RequirePending(ids[3], pelwardentest.Pending{Consumer: "b"})

		again, err := s.lib.DeadLetter(ctx, args)
		require.NoError(t, err)
		require.Empty(t, again.DeadLettered, "a second call writes nothing")
		require.Equal(t, ids[:3], again.NotPending, "a retry finds its ids no longer pending, not taken over")
		require.Equal(t, []string{ids[3]}, again.OwnedElsewhere())
		recs, err := s.rdb.XRange(ctx, f.DeadLetterStream, "-", "+").Result()
		require.NoError(t, err)
		require.Len(t, recs, 2)
		for i, rec := range recs {
			require.Equal(t, ids[i], rec.Values[pelwarden.FieldOriginalID])
			require.Equal(t, "invalid_order", rec.Values[pelwarden.FieldReason])
			require.Equal(t, "1", rec.Values[pelwarden.FieldDeliveries])
			require.Equal(t, "a", rec.Values[pelwarden.FieldConsumer])
			e := rec.Values[pelwarden.FieldError].(string)
			require.LessOrEqual(t, len(e), pelwarden.MaxErrorBytes)
			require.True(t, strings.HasSuffix(e, pelwarden.TruncatedMarker))
			require.True(t, utf8.ValidString(e), "cut on a character boundary")
		}
		_, pending := f.PendingEntry(ids[0])
		require.False(t, pending)
	})
}

// The library bounds the error text on its own too (raw FCALL).
func TestDeadLetterBoundsErrorServerSide(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(1, order)
		f.LeavePending("a", 1)
		err := s.rdb.FCall(ctx, pelwarden.FunctionDeadLetter, []string{f.Stream, f.DeadLetterStream}, f.Group, "a", "0", "handler",
			strings.Repeat("x", 100000), ids[0]).Err()
		require.NoError(t, err)
		recs, err := s.rdb.XRange(ctx, f.DeadLetterStream, "-", "+").Result()
		require.NoError(t, err)
		require.Len(t, recs, 1)
		require.Len(t, recs[0].Values[pelwarden.FieldError], pelwarden.MaxErrorBytes)
	})
}

// Extend resets idle time without bumping the delivery count, and reports
// ids no longer owned.
func TestExtend(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(3, order)
		f.LeavePending("a", 3)
		require.NoError(t, s.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: f.Stream, Group: f.Group, Consumer: "b", Messages: ids[2:]}).Err())
		time.Sleep(1500 * time.Millisecond)
		r, err := s.lib.Extend(ctx, pelwarden.ExtendArgs{Stream: f.Stream, Group: f.Group, Consumer: "a", IDs: ids})
		require.NoError(t, err)
		require.EqualValues(t, 2, r.Extended)
		require.Equal(t, []string{ids[2]}, r.NotOwned)
		require.ErrorIs(t, r.Err(), pelwarden.ErrNotOwner)
		for _, id := range ids[:2] {
			pe, _ := f.PendingEntry(id)
			require.Less(t, pe.Idle, time.Second, "idle reset (it was 1.5s)")
			require.EqualValues(t, 1, pe.RetryCount, "delivery count not bumped")
			require.Equal(t, "a", pe.Consumer)
		}
		f.RequirePending(ids[2], pelwardentest.Pending{Consumer: "b"})
	})
}

// Reap deletes idle consumers that own nothing and never one with pending
// entries.
func TestReap(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(2, order)
		f.LeavePending("holder", 2)
		require.NoError(t, s.rdb.XAck(ctx, f.Stream, f.Group, ids[0]).Err())
		for _, c := range []string{"gone-1", "gone-2", "me"} {
			require.NoError(t, s.rdb.XGroupCreateConsumer(ctx, f.Stream, f.Group, c).Err())
		}
		time.Sleep(2 * time.Second)
		require.NoError(t, s.rdb.XGroupCreateConsumer(ctx, f.Stream, f.Group, "fresh").Err())

		r, err := s.lib.Reap(ctx, pelwarden.ReapArgs{Stream: f.Stream, Group: f.Group, Idle: 1500 * time.Millisecond, Keep: []string{"me"}})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"gone-1", "gone-2"}, r.Deleted)
		require.Equal(t, []pelwarden.ConsumerPending{{Name: "holder", Pending: 1}}, r.Kept)
		cs, err := s.rdb.XInfoConsumers(ctx, f.Stream, f.Group).Result()
		require.NoError(t, err)
		var names []string
		for _, c := range cs {
			names = append(names, c.Name)
		}
		require.ElementsMatch(t, []string{"holder", "me", "fresh"}, names)
		f.RequirePending(ids[1], pelwardentest.Pending{Consumer: "holder"})
	})
}

// Redrive moves records back with every original field, removes them from
// the dead-letter stream and skips foreign and other-source records.
func TestRedriveRoundTrip(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		values := []string{"b", "2", "a", "1", "b", "dup", "bin", "\x00\xff"}
		var ids []string
		for range 5 {
			id, err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.Stream, Values: values}).Result()
			require.NoError(t, err)
			ids = append(ids, id)
		}
		f.LeavePending("a", 5)
		_, err := s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group,
			Consumer: "a", IDs: ids, Error: "boom"})
		require.NoError(t, err)
		foreign, err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.DeadLetterStream, Values: []string{"not", "ours"}}).Result()
		require.NoError(t, err)
		other, err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.DeadLetterStream, Values: []string{"x", "1",
			pelwarden.FieldStream, "{elsewhere}", pelwarden.FieldMetaCount, "2"}}).Result()
		require.NoError(t, err)

		var moved []pelwarden.Redriven
		var skippedForeign, skippedOther []string
		cursor := ""
		for {
			p, err := s.lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: f.DeadLetterStream, Stream: f.Stream, Cursor: cursor, Count: 2})
			require.NoError(t, err)
			moved = append(moved, p.Moved...)
			skippedForeign = append(skippedForeign, p.Foreign...)
			skippedOther = append(skippedOther, p.OtherSource...)
			if p.Done() {
				break
			}
			cursor = p.Cursor
		}
		require.Len(t, moved, 5)
		require.Equal(t, []string{foreign}, skippedForeign)
		require.Equal(t, []string{other}, skippedOther)
		left, err := s.rdb.XRange(ctx, f.DeadLetterStream, "-", "+").Result()
		require.NoError(t, err)
		require.Len(t, left, 2, "only the skipped records stay")

		for _, m := range moved {
			raw, err := s.rdb.Do(ctx, "XRANGE", f.Stream, m.To, m.To).Slice()
			require.NoError(t, err)
			require.Len(t, raw, 1)
			flat := raw[0].([]any)[1].([]any)
			var got []string
			for _, v := range flat {
				got = append(got, v.(string))
			}
			require.Equal(t, append(append([]string{}, values...), pelwarden.FieldRedrives, "1"), got)
		}

		// A second round trip bumps the counter instead of adding a field.
		e := moved[0].To
		f.LeavePending("a", 5)
		_, err = s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "a", IDs: []string{e}})
		require.NoError(t, err)
		p, err := s.lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: f.DeadLetterStream, Stream: f.Stream, Count: 10})
		require.NoError(t, err)
		require.Len(t, p.Moved, 1)
		rec, err := s.rdb.XRange(ctx, f.Stream, p.Moved[0].To, p.Moved[0].To).Result()
		require.NoError(t, err)
		require.Equal(t, "2", rec[0].Values[pelwarden.FieldRedrives])

		// AnySource moves the other-source record too; never the foreign one.
		p, err = s.lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: f.DeadLetterStream, Stream: f.Stream, AnySource: true})
		require.NoError(t, err)
		require.Len(t, p.Moved, 1)
		require.Equal(t, []string{foreign}, p.Foreign)
	})
}

// Stats is a one-call snapshot.
func TestStats(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(10, order)
		f.LeavePending("a", 4)
		f.LeavePending("b", 2)
		_, err := s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "a", IDs: ids[:1]})
		require.NoError(t, err)
		st, err := s.lib.Stats(ctx, pelwarden.StatsArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group})
		require.NoError(t, err)
		require.EqualValues(t, 5, st.Pending)
		require.Equal(t, ids[1], st.LowestID)
		require.Equal(t, ids[5], st.HighestID)
		require.EqualValues(t, 10, st.Length)
		require.EqualValues(t, 1, st.DeadLetterLength)
		require.EqualValues(t, 4, st.Lag)
		require.EqualValues(t, 6, st.EntriesRead)
		require.Equal(t, ids[5], st.LastDeliveredID)
		require.Len(t, st.Consumers, 2)
		byName := map[string]pelwarden.ConsumerStats{}
		for _, c := range st.Consumers {
			byName[c.Name] = c
		}
		require.EqualValues(t, 3, byName["a"].Pending)
		require.EqualValues(t, 2, byName["b"].Pending)
		require.Less(t, byName["b"].Idle, time.Minute)

		// An empty group.
		k2 := pelwardentest.NewKeys(t)
		require.NoError(t, s.rdb.XGroupCreateMkStream(ctx, k2.Stream, k2.Group, "$").Err())
		st, err = s.lib.Stats(ctx, pelwarden.StatsArgs{Stream: k2.Stream, DeadLetterStream: k2.DeadLetterStream, Group: k2.Group})
		require.NoError(t, err)
		require.Zero(t, st.Pending)
		require.Empty(t, st.LowestID)
		require.Empty(t, st.Consumers)
		require.Zero(t, st.DeadLetterLength)
	})
}

func TestVersion(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		v, err := s.lib.Version(t.Context())
		require.NoError(t, err)
		require.Equal(t, pelwarden.LibraryVersion, v)
	})
}

// Release gives entries back for a retry after a delay: fenced, delivery
// count unchanged, claimable once the delay has passed.
func TestRelease(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(3, order)
		f.LeavePending("a", 3)
		require.NoError(t, s.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: f.Stream, Group: f.Group, Consumer: "b", Messages: ids[2:]}).Err())
		minIdle := time.Hour
		r, err := s.lib.Release(ctx, pelwarden.ReleaseArgs{Stream: f.Stream, Group: f.Group, Consumer: "a", IDs: ids[:1], MinIdle: minIdle, Delay: 0})
		require.NoError(t, err)
		require.EqualValues(t, 1, r.Released)
		r, err = s.lib.Release(ctx, pelwarden.ReleaseArgs{Stream: f.Stream, Group: f.Group, Consumer: "a", IDs: ids[1:], MinIdle: minIdle, Delay: 10 * time.Minute})
		require.NoError(t, err)
		require.EqualValues(t, 1, r.Released)
		require.Equal(t, []string{ids[2]}, r.NotOwned)

		p, err := s.lib.Claim(ctx, pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "c", MinIdle: minIdle})
		require.NoError(t, err)
		require.Len(t, p.Entries, 1, "delay 0: claimable at once; delay 10m: not yet")
		require.Equal(t, ids[0], p.Entries[0].ID)
		require.EqualValues(t, 2, p.Entries[0].Deliveries, "release did not bump the count")
		pe, _ := f.PendingEntry(ids[1])
		require.Equal(t, "a", pe.Consumer)
		require.EqualValues(t, 1, pe.RetryCount)
		require.InDelta(t, float64(50*time.Minute), float64(pe.Idle), float64(time.Minute))
	})
}
