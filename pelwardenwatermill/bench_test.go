package pelwardenwatermill_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/subscriber"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/pelwardenwatermill"
)

// The benchmarks of BENCHMARKS.md ("Watermill"): this package's Publisher
// and Subscriber with their defaults against watermill-redisstream's with
// its defaults, on the first server of the matrix, in one run:
//
//	PELWARDEN_IMAGES=pelwarden/redis:8.0 go test -run '^$' -bench . -benchtime 20000x -count 3
//
// Each reports msgs/s: messages received (and acked) per second of the
// measured time (b.Elapsed).

// implementation makes a Publisher and a Subscriber of one group on its
// own clients (watermill-redisstream's Publisher closes its client).
type implementation struct {
	name string
	make func(b *testing.B, group string) (message.Publisher, message.Subscriber)
}

func implementations(s *server) []implementation {
	return []implementation{
		{"pelwarden", func(b *testing.B, group string) (message.Publisher, message.Subscriber) {
			rdb := s.client()
			b.Cleanup(func() { _ = rdb.Close() })
			pub, err := pelwardenwatermill.NewPublisher(rdb, pelwardenwatermill.PublisherConfig{})
			if err != nil {
				b.Fatal(err)
			}
			sub, err := pelwardenwatermill.NewSubscriber(rdb, pelwardenwatermill.SubscriberConfig{Group: group, Logger: testLogger()})
			if err != nil {
				b.Fatal(err)
			}
			return pub, sub
		}},
		{"redisstream", func(b *testing.B, group string) (message.Publisher, message.Subscriber) {
			// Its Publisher closes its client on Close, even while a
			// Publish of BenchSubscriber's goroutine (which nothing joins)
			// waits for its reply: the client is closed at cleanup instead,
			// after the Subscriber's Close.
			rdb := s.client()
			b.Cleanup(func() { _ = rdb.Close() })
			pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: keepOpen{rdb}}, watermill.NopLogger{})
			if err != nil {
				b.Fatal(err)
			}
			subClient := s.client()
			b.Cleanup(func() { _ = subClient.Close() })
			sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
				Client: subClient, Consumer: watermill.NewShortUUID(), ConsumerGroup: group}, watermill.NopLogger{})
			if err != nil {
				b.Fatal(err)
			}
			return pub, sub
		}},
	}
}

// keepOpen is a client whose Close does nothing.
type keepOpen struct{ redis.UniversalClient }

func (keepOpen) Close() error { return nil }

// BenchmarkSubscriber is watermill's BenchSubscriber: one goroutine
// publishes b.N messages one Publish at a time while the subscription
// reads and acks them.
func BenchmarkSubscriber(b *testing.B) {
	for _, impl := range implementations(servers[0]) {
		b.Run(impl.name, func(b *testing.B) {
			var pub message.Publisher
			var sub message.Subscriber
			tests.BenchSubscriber(b, func(n int) (message.Publisher, message.Subscriber) {
				pub, sub = impl.make(b, "bench-"+watermill.NewShortUUID())
				return pub, sub
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			_ = pub.Close()
			_ = sub.Close()
		})
	}
}

// BenchmarkSubscriberBatchPublish is BenchSubscriber with the publishing
// goroutine handing Publish 100 messages at a time: this package's
// Publisher pipelines them (one round trip), watermill-redisstream's sends
// one XADD after the other.
func BenchmarkSubscriberBatchPublish(b *testing.B) {
	for _, impl := range implementations(servers[0]) {
		b.Run(impl.name, func(b *testing.B) {
			pub, sub := impl.make(b, "bench-"+watermill.NewShortUUID())
			topic := "bench-" + watermill.NewUUID()
			messages, err := sub.Subscribe(context.Background(), topic)
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				batch := make([]*message.Message, 0, 100)
				for i := range b.N {
					batch = append(batch, message.NewMessage("1", nil))
					if len(batch) == cap(batch) || i == b.N-1 {
						if err := pub.Publish(topic, batch...); err != nil {
							panic(err)
						}
						batch = batch[:0]
					}
				}
			}()
			b.ResetTimer()
			if got, all := subscriber.BulkRead(messages, b.N, time.Minute); !all {
				b.Fatalf("not all messages received, have %d, expected %d", len(got), b.N)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			_ = pub.Close()
			_ = sub.Close()
		})
	}
}

// BenchmarkRouter is end to end through a watermill Router with a no-op
// handler: b.N messages are published first (batches of 500 for
// pelwarden, one Publish per message for watermill-redisstream, which has
// no batch), then the timer runs from the router's start until its
// handler has seen all of them (each acked by the router).
func BenchmarkRouter(b *testing.B) {
	for _, impl := range implementations(servers[0]) {
		b.Run(impl.name, func(b *testing.B) {
			pub, sub := impl.make(b, "router-"+watermill.NewShortUUID())
			topic := "bench-" + watermill.NewUUID()
			if init, ok := sub.(message.SubscribeInitializer); ok {
				if err := init.SubscribeInitialize(topic); err != nil {
					b.Fatal(err)
				}
			}
			batch := make([]*message.Message, 0, 500)
			flush := func() {
				if err := pub.Publish(topic, batch...); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
			for range b.N {
				batch = append(batch, message.NewMessage(watermill.NewUUID(), []byte("payload")))
				if len(batch) == cap(batch) || impl.name == "redisstream" {
					flush()
				}
			}
			if len(batch) > 0 {
				flush()
			}
			router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
			if err != nil {
				b.Fatal(err)
			}
			var seen atomic.Int64
			done := make(chan struct{})
			router.AddConsumerHandler("noop", topic, sub, func(*message.Message) error {
				if seen.Add(1) == int64(b.N) {
					close(done)
				}
				return nil
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b.ResetTimer()
			go func() { _ = router.Run(ctx) }()
			select {
			case <-done:
			case <-time.After(10 * time.Minute):
				b.Fatalf("the router handled %d of %d messages", seen.Load(), b.N)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			_ = router.Close()
			_ = pub.Close()
			_ = sub.Close()
		})
	}
}
