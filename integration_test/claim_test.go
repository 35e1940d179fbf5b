package integration_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// An entry reaches handlers at most MaxDeliveries times; the following pass
// dead-letters it with its fields unchanged and complete metadata.
func TestClaimMaxDeliveries(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(20, order)
		deliveries := map[string]int{}
		for _, id := range f.LeavePending("dead-consumer", 20) {
			deliveries[id]++
		}
		args := pelwardentest.ReclaimArgs{Consumer: "rescuer", MaxDeliveries: 3, Count: 7}
		for pass := 1; pass <= 2; pass++ {
			all := f.Reclaim(args)
			require.Len(t, all.Claimed, 20, "pass %d hands out every entry", pass)
			require.Empty(t, all.DeadLettered, "pass %d", pass)
			for _, e := range all.Claimed {
				deliveries[e.ID]++
				require.EqualValues(t, deliveries[e.ID], e.Deliveries, "delivery count of %s", e.ID)
				require.Equal(t, []pelwarden.Field{{Name: "n", Value: e.Fields[0].Value}, {Name: "payload", Value: "order-" + e.Fields[0].Value}}, e.Fields)
			}
		}
		all := f.Reclaim(args)
		require.Empty(t, all.Claimed, "no entry reaches a handler a fourth time")
		require.ElementsMatch(t, ids, all.DeadLettered)
		for _, n := range deliveries {
			require.Equal(t, 3, n)
		}
		require.Zero(t, f.PendingCount(), "dead-lettered entries are acked")

		recs, err := s.rdb.XRange(ctx, f.DeadLetterStream, "-", "+").Result()
		require.NoError(t, err)
		require.Len(t, recs, 20)
		for i, r := range recs {
			m := r.Values
			require.Equal(t, ids[i], m[pelwarden.FieldOriginalID])
			require.Equal(t, fmt.Sprint(i), m["n"])
			require.Equal(t, fmt.Sprintf("order-%d", i), m["payload"])
			require.Equal(t, f.Stream, m[pelwarden.FieldStream])
			require.Equal(t, f.Group, m[pelwarden.FieldGroup])
			require.Equal(t, "rescuer", m[pelwarden.FieldConsumer])
			require.Equal(t, "3", m[pelwarden.FieldDeliveries])
			require.Equal(t, pelwarden.ReasonMaxDeliveries, m[pelwarden.FieldReason])
			at, err := strconv.ParseInt(m[pelwarden.FieldDeadLetteredAt].(string), 10, 64)
			require.NoError(t, err)
			require.InDelta(t, time.Now().UnixMilli(), at, float64(5*time.Minute/time.Millisecond))
			require.Equal(t, "9", m[pelwarden.FieldMetaCount])
		}
		// The source entries stay in the stream unless asked to delete.
		n, err := s.rdb.XLen(ctx, f.Stream).Result()
		require.NoError(t, err)
		require.EqualValues(t, 20, n)
	})
}

// Fields keep their order, duplicates and binary values in dead-letter
// records, and DeleteDeadLettered removes the source entry.
func TestClaimDeadLetterKeepsFieldsExactly(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		values := []string{"b", "2", "a", "1", "b", "dup", "bin", "\x00\xff\xfe nul", "", "empty-name"}
		id, err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.Stream, Values: values}).Result()
		require.NoError(t, err)
		f.LeavePending("c1", 1)
		p, err := s.lib.Claim(ctx, pelwarden.ClaimArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group,
			Consumer: "c2", MaxDeliveries: 1, DeleteDeadLettered: true})
		require.NoError(t, err)
		require.Equal(t, []string{id}, p.DeadLettered)
		raw, err := s.rdb.Do(ctx, "XRANGE", f.DeadLetterStream, "-", "+").Slice()
		require.NoError(t, err)
		require.Len(t, raw, 1)
		flat := raw[0].([]any)[1].([]any)
		got := make([]string, len(flat))
		for i, v := range flat {
			got[i] = v.(string)
		}
		require.Equal(t, values, got[:len(values)], "original fields first, unchanged and in order")
		require.Equal(t, "c1", fieldAfter(got, pelwarden.FieldConsumer), "the consumer that last held it")
		n, err := s.rdb.XLen(ctx, f.Stream).Result()
		require.NoError(t, err)
		require.Zero(t, n, "DeleteDeadLettered removes the source entry")
	})
}

func fieldAfter(flat []string, name string) string {
	for i := 0; i+1 < len(flat); i += 2 {
		if flat[i] == name {
			return flat[i+1]
		}
	}
	return ""
}

// Entries deleted from the stream while pending are cleared from the PEL and
// reported as deleted, never as claimed or dead-lettered.
func TestClaimDeletedWhilePending(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(10, order)
		f.LeavePending("c1", 10)
		// ids[0..2] will be live, ids[3..4] at max deliveries; delete some of each.
		require.NoError(t, s.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: f.Stream, Group: f.Group, Consumer: "c1", Messages: ids[3:5]}).Err())
		require.NoError(t, s.rdb.XDel(ctx, f.Stream, ids[1], ids[4], ids[7]).Err())
		all := f.Reclaim(pelwardentest.ReclaimArgs{Consumer: "c2", MaxDeliveries: 2, Count: 3})
		require.ElementsMatch(t, []string{ids[1], ids[4], ids[7]}, all.Deleted)
		require.Equal(t, []string{ids[3]}, all.DeadLettered)
		var live []string
		for _, e := range all.Claimed {
			live = append(live, e.ID)
		}
		require.ElementsMatch(t, []string{ids[0], ids[2], ids[5], ids[6], ids[8], ids[9]}, live)
		for _, id := range []string{ids[1], ids[4], ids[7], ids[3]} {
			_, pending := f.PendingEntry(id)
			require.False(t, pending, "%s left the PEL", id)
		}
		require.EqualValues(t, 6, f.PendingCount())
		n, err := s.rdb.XLen(ctx, f.DeadLetterStream).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "a deleted entry is never dead-lettered")
	})
}

// The backoff schedule leaves entries alone until their delay has passed,
// without bumping their delivery count.
func TestClaimBackoff(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(2, order)
		f.LeavePending("c1", 2)
		// ids[1] has been delivered twice.
		require.NoError(t, s.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: f.Stream, Group: f.Group, Consumer: "c1", Messages: ids[1:2]}).Err())
		args := pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "c2",
			Backoff: []time.Duration{0, time.Hour}}
		p, err := s.lib.Claim(ctx, args)
		require.NoError(t, err)
		require.True(t, p.Done())
		require.Len(t, p.Entries, 1)
		require.Equal(t, ids[0], p.Entries[0].ID, "one delivery: delay 0")
		require.Equal(t, 1, p.BackedOff, "two deliveries: delay 1h")
		pe, _ := f.PendingEntry(ids[1])
		require.Equal(t, "c1", pe.Consumer)
		require.EqualValues(t, 2, pe.RetryCount, "a backed-off entry's count is not bumped")

		// Backoff clamps to its last element: ids[0] now has 2 deliveries.
		time.Sleep(20 * time.Millisecond)
		args.Backoff = []time.Duration{10 * time.Millisecond}
		p, err = s.lib.Claim(ctx, args)
		require.NoError(t, err)
		require.Len(t, p.Entries, 2)
		require.Zero(t, p.BackedOff)
	})
}

// MinIdle leaves recently delivered entries alone.
func TestClaimMinIdle(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		f := s.fixture(t)
		f.Produce(5, order)
		f.LeavePending("c1", 5)
		all := f.Reclaim(pelwardentest.ReclaimArgs{Consumer: "c2", MinIdle: time.Hour, MaxDeliveries: 1})
		require.Empty(t, all.Claimed)
		require.Empty(t, all.DeadLettered, "an entry not idle long enough is not dead-lettered either")
		require.EqualValues(t, 5, f.PendingCount())
	})
}

// Work per call is bounded: a page scans at most Count*10 PEL entries, so a
// large PEL of busy entries takes many cheap calls, not one long one.
func TestClaimBoundedScan(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		f.Produce(5000, order)
		f.LeavePending("c1", 5000)
		p, err := s.lib.Claim(ctx, pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group,
			Consumer: "c2", MinIdle: time.Hour, Count: 10})
		require.NoError(t, err)
		require.False(t, p.Done(), "one call stops after 100 PEL entries")
		calls := f.Reclaim(pelwardentest.ReclaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Consumer: "c2", MinIdle: time.Hour, Count: 10}).Pages
		require.Equal(t, 51, calls, "5000 entries / 100 per call, plus the empty last page")
	})
}

// MaxBytes bounds a page's field bytes; Count bounds its entries.
func TestClaimPageBounds(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		big := strings.Repeat("x", 1000)
		for range 10 {
			require.NoError(t, s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.Stream, Values: []string{"v", big}}).Err())
		}
		f.LeavePending("c1", 10)
		args := pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "c2", MaxBytes: 2500}
		p, err := s.lib.Claim(ctx, args)
		require.NoError(t, err)
		require.Len(t, p.Entries, 3, "stops once 2500 bytes are reached")
		require.False(t, p.Done())
		all := f.Reclaim(pelwardentest.ReclaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Consumer: "c2", MaxBytes: 2500})
		require.Len(t, all.Claimed, 10, "a fresh pass reaches every entry (the 3 above are idle again at MinIdle 0)")
	})
}

// DeadLetterOnly moves the entries at max deliveries and leaves the others
// with their owners, counts unchanged.
func TestClaimDeadLetterOnly(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(4, order)
		f.LeavePending("c1", 4)
		require.NoError(t, s.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: f.Stream, Group: f.Group, Consumer: "c1", Messages: ids[:2]}).Err())
		all := f.Reclaim(pelwardentest.ReclaimArgs{Consumer: "operator", MaxDeliveries: 2, DeadLetterOnly: true})
		require.ElementsMatch(t, ids[:2], all.DeadLettered)
		require.Empty(t, all.Claimed)
		for _, id := range ids[2:] {
			pe, _ := f.PendingEntry(id)
			require.Equal(t, "c1", pe.Consumer)
			require.EqualValues(t, 1, pe.RetryCount)
		}
	})
}

// Two claimers racing over the same PEL never both receive an entry in one
// pass and never write duplicate dead-letter records.
func TestClaimRace(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		const n = 2000
		ids := f.Produce(n, order)
		f.LeavePending("dead", n)
		// Every fourth entry is already at max deliveries.
		var poison []string
		for i := 0; i < n; i += 4 {
			poison = append(poison, ids[i])
		}
		require.NoError(t, s.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: f.Stream, Group: f.Group, Consumer: "dead", Messages: poison}).Err())
		time.Sleep(2200 * time.Millisecond) // make every entry idle past MinIdle

		var wg sync.WaitGroup
		results := make([]pelwardentest.ReclaimResult, 4)
		for i := range results {
			wg.Go(func() {
				rdb := s.srv.Client()
				defer rdb.Close()
				results[i] = f.WithClient(rdb).Reclaim(pelwardentest.ReclaimArgs{Consumer: fmt.Sprintf("rescuer-%d", i),
					MinIdle: 2 * time.Second, MaxDeliveries: 2, Count: 50})
			})
		}
		wg.Wait()
		seen := map[string]int{}
		dead := map[string]int{}
		for _, r := range results {
			for _, e := range r.Claimed {
				seen[e.ID]++
			}
			for _, id := range r.DeadLettered {
				dead[id]++
			}
		}
		for id, c := range seen {
			require.Equal(t, 1, c, "entry %s handed to %d claimers", id, c)
		}
		for id, c := range dead {
			require.Equal(t, 1, c, "entry %s dead-lettered %d times", id, c)
		}
		require.Len(t, seen, n-len(poison))
		require.Len(t, dead, len(poison))
		recs, err := s.rdb.XRange(ctx, f.DeadLetterStream, "-", "+").Result()
		require.NoError(t, err)
		require.Len(t, recs, len(poison), "one dead-letter record per poison entry")
	})
}
