package integration_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/producer"
)

// The producer sends every key to its partition, pipelined, with the
// injector's fields; a retried publish with an IdempotencyID adds one entry
// on servers with XADD IDMP (Redis 8.6+) and two elsewhere, as documented.
func TestProducer(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pt := newPartitionTest(t, 3)
		inject := producer.InjectorFunc(func(_ context.Context, stream string, fs []pelwarden.Field) []pelwarden.Field {
			return append(fs, pelwarden.Field{Name: "injected-for", Value: stream})
		})
		p, err := producer.New(s.rdb, producer.Config{Partitions: pt.parts, Injector: inject, MaxBatch: 7, ProducerID: "test-producer"})
		require.NoError(t, err)

		msgs := make([]producer.Message, 50)
		for i := range msgs {
			msgs[i] = producer.Message{Key: "k" + strconv.Itoa(i), Fields: []pelwarden.Field{{Name: "n", Value: strconv.Itoa(i)}}}
		}
		res, err := p.PublishBatch(ctx, msgs)
		require.NoError(t, err)
		for i, r := range res {
			require.NoError(t, r.Err)
			require.Equal(t, pt.parts[pelwarden.PartitionFor(msgs[i].Key, 3)], r.Stream)
			got, err := s.rdb.XRange(ctx, r.Stream, r.ID, r.ID).Result()
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, strconv.Itoa(i), got[0].Values["n"])
			require.Equal(t, r.Stream, got[0].Values["injected-for"])
		}

		idmp, err := p.Idempotent(ctx)
		require.NoError(t, err)
		require.Equal(t, strings.HasPrefix(s.srv.Name, "redis-8.6"), idmp, "XADD IDMP support on %s", s.srv.Name)
		one := producer.Message{Key: "retried", Fields: []pelwarden.Field{{Name: "n", Value: "once"}}, IdempotencyID: "order-1"}
		first, err := p.PublishBatch(ctx, []producer.Message{one})
		require.NoError(t, err)
		again, err := p.PublishBatch(ctx, []producer.Message{one})
		require.NoError(t, err)
		n, err := s.rdb.XLen(ctx, first[0].Stream).Result()
		require.NoError(t, err)
		before := int64(0)
		for _, r := range res {
			if r.Stream == first[0].Stream {
				before++
			}
		}
		if idmp {
			require.Equal(t, first[0].ID, again[0].ID, "the retry is answered with the first entry's id")
			require.Equal(t, before+1, n)
		} else {
			require.NotEqual(t, first[0].ID, again[0].ID)
			require.Equal(t, before+2, n, "without IDMP a retried publish adds a second entry")
		}
	})
}

// With TrimEvery the producer trims safely: nothing while the group has
// not read the entries; after the group acknowledges the first 30 of 50,
// the next trim removes exactly those, and never an entry the group still
// needs.
func TestProducerTrims(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		f := s.fixture(t)
		p, err := producer.New(s.rdb, producer.Config{Stream: f.Stream, TrimEvery: 10})
		require.NoError(t, err)
		publish := func(n int) []string {
			ids := make([]string, n)
			for i := range n {
				r, err := p.Publish(ctx, "", "n", strconv.Itoa(i))
				require.NoError(t, err)
				ids[i] = r.ID
			}
			return ids
		}
		ids := publish(50)
		require.EqualValues(t, 50, s.rdb.XLen(ctx, f.Stream).Val(), "nothing delivered: nothing trimmed")

		got, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: f.Group, Consumer: "c", Streams: []string{f.Stream, ">"}, Count: 30}).Result()
		require.NoError(t, err)
		require.Len(t, got[0].Messages, 30)
		require.NoError(t, s.rdb.XAck(ctx, f.Stream, f.Group, ids[:30]...).Err())
		more := publish(10)
		left, err := s.rdb.XRange(ctx, f.Stream, "-", "+").Result()
		require.NoError(t, err)
		var leftIDs []string
		for _, m := range left {
			leftIDs = append(leftIDs, m.ID)
		}
		require.Equal(t, append(append([]string(nil), ids[30:]...), more...), leftIDs,
			"the acknowledged entries went, every entry the group still needs stayed")
	})
}
