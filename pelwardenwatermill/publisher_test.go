package pelwardenwatermill_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardenwatermill"
	"github.com/pelwarden/pelwarden/producer"
)

// A Publish of many messages is one pipeline; the entries keep the order
// and carry the documented fields.
func TestPublishBatch(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		sent := e.publish(e.publisher(pelwardenwatermill.PublisherConfig{}), 1200)
		entries, err := e.rdb.XRange(context.Background(), e.topic, "-", "+").Result()
		require.NoError(t, err)
		require.Len(t, entries, len(sent))
		for i, en := range entries {
			require.Equal(t, sent[i].UUID, en.Values[pelwardenwatermill.FieldUUID])
			require.Equal(t, string(sent[i].Payload), en.Values[pelwardenwatermill.FieldPayload])
		}
	})
}

// Close waits for publishes in progress; later ones return ErrClosed.
func TestPublisherCloseWaitsForPublishes(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		pub, err := pelwardenwatermill.NewPublisher(e.rdb, pelwardenwatermill.PublisherConfig{})
		require.NoError(t, err)
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			published int
		)
		started := make(chan struct{}, 20)
		for range 20 {
			wg.Go(func() {
				started <- struct{}{}
				for {
					msgs := make([]*message.Message, 50)
					for i := range msgs {
						msgs[i] = message.NewMessage(watermill.NewUUID(), []byte("x"))
					}
					err := pub.Publish(e.topic, msgs...)
					if err != nil {
						require.ErrorIs(t, err, pelwardenwatermill.ErrClosed)
						return
					}
					mu.Lock()
					published += len(msgs)
					mu.Unlock()
				}
			})
		}
		for range 20 {
			<-started
		}
		require.NoError(t, pub.Close())
		n, err := e.rdb.XLen(context.Background(), e.topic).Result()
		require.NoError(t, err)
		// A publish that returned nil finished before Close returned (Close
		// waits for it); one that began later got ErrClosed. The goroutines
		// count theirs after Publish returns, so wait for them to finish.
		wg.Wait()
		require.Equal(t, int64(published), n, "every publish that returned nil is in the stream when Close returns")
		n2, err := e.rdb.XLen(context.Background(), e.topic).Result()
		require.NoError(t, err)
		require.Equal(t, n, n2, "nothing is added after Close returned")
		require.NoError(t, pub.Close())
	})
}

// With partitions, a key's messages go to one partition, in order, and a
// Subscriber over the partitions gets them all.
func TestPartitions(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		topics := pelwardenwatermill.Topics{Partitions: 4}
		pub := e.publisher(pelwardenwatermill.PublisherConfig{Topics: topics, PartitionKey: "customer"})
		var msgs []*message.Message
		for i := range 200 {
			m := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "%d", i))
			m.Metadata.Set("customer", fmt.Sprintf("c%d", i%7))
			msgs = append(msgs, m)
		}
		require.NoError(t, pub.Publish(e.topic, msgs...))
		parts, err := pelwarden.Partitions(e.topic, 4)
		require.NoError(t, err)
		total := int64(0)
		for _, p := range parts {
			n, err := e.rdb.XLen(context.Background(), p).Result()
			require.NoError(t, err)
			total += n
		}
		require.Equal(t, int64(len(msgs)), total)

		ch, err := e.subscriber(pelwardenwatermill.SubscriberConfig{Topics: topics}).Subscribe(context.Background(), e.topic)
		require.NoError(t, err)
		partitionOf := map[string]string{}
		last := map[string]int{}
		for range msgs {
			m := receive(t, ch)
			c := m.Metadata.Get("customer")
			stream := m.Metadata.Get(pelwardenwatermill.MetadataStream)
			require.Equal(t, parts[pelwarden.PartitionFor(c, 4)], stream)
			if prev, ok := partitionOf[c]; ok {
				require.Equal(t, prev, stream, "one key, one partition")
			}
			partitionOf[c] = stream
			var n int
			_, err := fmt.Sscan(string(m.Payload), &n)
			require.NoError(t, err)
			if prev, ok := last[c]; ok {
				require.Greater(t, n, prev, "a key's messages arrive in order")
			}
			last[c] = n
			m.Ack()
		}
		require.Len(t, partitionOf, 7)
	})
}

// The trace context travels as the W3C fields: from metadata without an
// Injector, from the Injector (the message's context) with one.
func TestTraceContextFields(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		m := message.NewMessage(watermill.NewUUID(), nil)
		m.Metadata.Set(pelwarden.FieldTraceParent, parent)
		require.NoError(t, e.publisher(pelwardenwatermill.PublisherConfig{}).Publish(e.topic, m))

		type key struct{}
		injected := "00-11111111111111111111111111111111-2222222222222222-01"
		inj := producer.InjectorFunc(func(ctx context.Context, stream string, fields []pelwarden.Field) []pelwarden.Field {
			out := fields[:0:0]
			for _, f := range fields {
				if f.Name != pelwarden.FieldTraceParent {
					out = append(out, f)
				}
			}
			return append(out, pelwarden.Field{Name: pelwarden.FieldTraceParent, Value: ctx.Value(key{}).(string) + "@" + stream})
		})
		m2 := message.NewMessage(watermill.NewUUID(), nil)
		m2.SetContext(context.WithValue(context.Background(), key{}, injected))
		require.NoError(t, e.publisher(pelwardenwatermill.PublisherConfig{Injector: inj}).Publish(e.topic, m2))

		entries, err := e.rdb.XRange(context.Background(), e.topic, "-", "+").Result()
		require.NoError(t, err)
		require.Len(t, entries, 2)
		require.Equal(t, parent, entries[0].Values[pelwarden.FieldTraceParent])
		require.Equal(t, injected+"@"+e.topic, entries[1].Values[pelwarden.FieldTraceParent])

		ch, err := e.subscriber(pelwardenwatermill.SubscriberConfig{}).Subscribe(context.Background(), e.topic)
		require.NoError(t, err)
		got := receive(t, ch)
		require.Equal(t, parent, got.Metadata.Get(pelwarden.FieldTraceParent))
		got.Ack()
		got = receive(t, ch)
		require.Equal(t, injected+"@"+e.topic, got.Metadata.Get(pelwarden.FieldTraceParent))
		got.Ack()
	})
}
