package integration_test

import (
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// Dead-letter records read with go-redis's typed commands (XRange, XRead:
// fields in a map) decode with pelwarden.ParseDeadLetterMessage into what
// pelwarden.ParseDeadLetter makes of the same records read in order (a raw
// XRANGE through Do), but for the original fields' order: sorted by name.
// The records come from the library: a handler's dead letter, one at
// MaxDeliveries, and one of an entry redriven before (its FieldRedrives is
// an original field, not metadata).
func TestParseDeadLetterMessageFromGoRedis(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		before := time.Now().Add(-time.Minute)
		ids := f.Produce(3, func(i int) []string {
			return []string{"sku", "A-" + strconv.Itoa(i), "amount", "oops", "customer", "c-7"}
		})
		f.LeavePending("billing-1", 3)

		// A handler's permanent failure.
		dl, err := s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream,
			Group: f.Group, Consumer: "billing-1", IDs: ids[:1], Error: `malformed amount "oops"`})
		require.NoError(t, err)
		require.Equal(t, ids[:1], dl.DeadLettered)
		// Delivered MaxDeliveries times: the claim function dead-letters.
		p, err := s.lib.Claim(ctx, pelwarden.ClaimArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream,
			Group: f.Group, Consumer: "billing-2", MaxDeliveries: 1, DeadLetterOnly: true})
		require.NoError(t, err)
		require.Equal(t, ids[1:], p.DeadLettered)
		// The last one redriven, delivered again and dead-lettered again.
		page, err := s.lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: f.DeadLetterStream, Stream: f.Stream, Cursor: ""})
		require.NoError(t, err)
		require.Len(t, page.Moved, 3)
		redriven := page.Moved[2].To
		require.ElementsMatch(t, []string{page.Moved[0].To, page.Moved[1].To, redriven}, f.LeavePending("billing-3", 3))
		for _, m := range page.Moved[:2] {
			require.NoError(t, s.rdb.XAck(ctx, f.Stream, f.Group, m.To).Err()) // out of the way
		}
		dl, err = s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream,
			Group: f.Group, Consumer: "billing-3", IDs: []string{redriven}, Reason: "audit", Error: "still bad"})
		require.NoError(t, err)
		require.Equal(t, []string{redriven}, dl.DeadLettered)

		// In order: a raw XRANGE reply, as ParseDeadLetter takes it.
		raw, err := s.rdb.Do(ctx, "XRANGE", f.DeadLetterStream, "-", "+").Slice()
		require.NoError(t, err)
		require.Len(t, raw, 1, "only the last record: the redrive moved the others")
		want, ok := pelwarden.ParseDeadLetter(rawFields(t, raw[0]))
		require.True(t, ok)
		require.Equal(t, pelwarden.DeadLetter{
			Fields: []pelwarden.Field{{Name: "sku", Value: "A-2"}, {Name: "amount", Value: "oops"}, {Name: "customer", Value: "c-7"},
				{Name: pelwarden.FieldRedrives, Value: "1"}},
			OriginalID: redriven, Stream: f.Stream, Group: f.Group, Consumer: "billing-3", Deliveries: 1,
			Reason: "audit", Error: "still bad", DeadLetteredAt: want.DeadLetteredAt, Redrives: 1,
		}, want)
		require.WithinRange(t, want.DeadLetteredAt, before, time.Now().Add(time.Minute))

		// With go-redis: XRange and XRead give the same DeadLetter, its
		// original fields sorted by name.
		sorted := append([]pelwarden.Field(nil), want.Fields...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
		wantSorted := want
		wantSorted.Fields = sorted
		recs, err := s.rdb.XRange(ctx, f.DeadLetterStream, "-", "+").Result()
		require.NoError(t, err)
		require.Len(t, recs, 1)
		d, ok := pelwarden.ParseDeadLetterMessage(recs[0])
		require.True(t, ok)
		require.Equal(t, wantSorted, d)
		streams, err := s.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{f.DeadLetterStream, "0"}, Block: -1}).Result()
		require.NoError(t, err)
		require.Len(t, streams, 1)
		require.Len(t, streams[0].Messages, 1)
		d, ok = pelwarden.ParseDeadLetterMessage(streams[0].Messages[0])
		require.True(t, ok)
		require.Equal(t, wantSorted, d)

		// The two records the redrive took, read before it on a second
		// stream the same way: a handler's and a max_deliveries one.
		f2 := s.fixture(t)
		ids = f2.Produce(2, nil)
		f2.LeavePending("c", 2)
		_, err = s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f2.Stream, DeadLetterStream: f2.DeadLetterStream,
			Group: f2.Group, Consumer: "c", IDs: ids[:1], Error: "boom"})
		require.NoError(t, err)
		_, err = s.lib.Claim(ctx, pelwarden.ClaimArgs{Stream: f2.Stream, DeadLetterStream: f2.DeadLetterStream,
			Group: f2.Group, Consumer: "c2", MaxDeliveries: 1, DeadLetterOnly: true})
		require.NoError(t, err)
		recs, err = s.rdb.XRange(ctx, f2.DeadLetterStream, "-", "+").Result()
		require.NoError(t, err)
		require.Len(t, recs, 2)
		for i, want := range []pelwarden.DeadLetter{
			{OriginalID: ids[0], Consumer: "c", Reason: pelwarden.ReasonHandler, Error: "boom"},
			{OriginalID: ids[1], Consumer: "c", Reason: pelwarden.ReasonMaxDeliveries},
		} {
			d, ok := pelwarden.ParseDeadLetterMessage(recs[i])
			require.True(t, ok)
			require.Equal(t, []pelwarden.Field{{Name: "n", Value: strconv.Itoa(i)}}, d.Fields)
			require.Equal(t, want.OriginalID, d.OriginalID)
			require.Equal(t, f2.Stream, d.Stream)
			require.Equal(t, f2.Group, d.Group)
			require.Equal(t, want.Consumer, d.Consumer)
			require.EqualValues(t, 1, d.Deliveries)
			require.Equal(t, want.Reason, d.Reason)
			require.Equal(t, want.Error, d.Error)
			require.Zero(t, d.Redrives)
			require.WithinRange(t, d.DeadLetteredAt, before, time.Now().Add(time.Minute))
		}

		// A record that is not pelwarden's: ok is false, every field kept.
		_, err = s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f2.DeadLetterStream, Values: []string{"b", "1", "a", "2"}}).Result()
		require.NoError(t, err)
		recs, err = s.rdb.XRange(ctx, f2.DeadLetterStream, "-", "+").Result()
		require.NoError(t, err)
		d, ok = pelwarden.ParseDeadLetterMessage(recs[2])
		require.False(t, ok)
		require.Equal(t, []pelwarden.Field{{Name: "a", Value: "2"}, {Name: "b", Value: "1"}}, d.Fields)
	})
}

// rawFields takes apart one entry of a raw XRANGE reply ([id, [name,
// value, ...]]) into its fields, in order.
func rawFields(t *testing.T, e any) []pelwarden.Field {
	t.Helper()
	pair, ok := e.([]any)
	require.True(t, ok, "entry %T", e)
	require.Len(t, pair, 2)
	flat, ok := pair[1].([]any)
	require.True(t, ok, "fields %T", pair[1])
	require.Zero(t, len(flat)%2)
	out := make([]pelwarden.Field, 0, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		name, ok := flat[i].(string)
		require.True(t, ok)
		value, ok := flat[i+1].(string)
		require.True(t, ok)
		out = append(out, pelwarden.Field{Name: name, Value: value})
	}
	return out
}
