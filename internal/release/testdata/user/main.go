// Command user is the release check's user program: it requires the
// released modules from a module proxy, as a user's build does, and runs
// them against a real server: a producer with the tracing injector
// publishes entries, a driver consumer with Prometheus metrics and the
// tracing handler consumes them, and the Watermill adapter's Publisher and
// Subscriber pass messages.
package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/driver/prommetrics"
	"github.com/pelwarden/pelwarden/pelwardenotel"
	"github.com/pelwarden/pelwarden/pelwardenwatermill"
	"github.com/pelwarden/pelwarden/producer"
)

const entries = 10

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "user:", err)
		os.Exit(1)
	}
}

func run() error {
	opts, err := redis.ParseURL(os.Getenv("PELWARDEN_TEST_REDIS_URL"))
	if err != nil {
		return fmt.Errorf("PELWARDEN_TEST_REDIS_URL: %w", err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream := fmt.Sprintf("{release-check-%d}", time.Now().UnixNano())
	defer rdb.Del(context.Background(), stream, pelwarden.DeadLetterStreamFor(stream))

	p, err := producer.New(rdb, producer.Config{Stream: stream, Injector: pelwardenotel.Injector()})
	if err != nil {
		return err
	}
	for i := range entries {
		if _, err := p.Publish(ctx, "", "n", fmt.Sprint(i)); err != nil {
			return err
		}
	}

	metrics := prommetrics.New(prommetrics.Options{})
	if err := prometheus.NewRegistry().Register(metrics); err != nil {
		return err
	}
	var handled atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	c, err := driver.New(rdb, driver.Config{
		Stream: stream, Group: "release-check", CreateGroup: true, GroupStartID: "0", Metrics: metrics,
		Handler: pelwardenotel.Handler(driver.HandlerFunc(func(context.Context, *driver.Message) error {
			if handled.Add(1) == entries {
				stop()
			}
			return nil
		})),
	})
	if err != nil {
		return err
	}
	if err := c.Run(runCtx); err != nil {
		return err
	}
	if n := handled.Load(); n != entries {
		return fmt.Errorf("handled %d entries, want %d", n, entries)
	}
	if err := throughWatermill(ctx, rdb, stream+".wm"); err != nil {
		return fmt.Errorf("watermill: %w", err)
	}
	fmt.Printf("user: %d entries published and handled, and %d watermill messages\n", entries, entries)
	return nil
}

// throughWatermill publishes messages with the adapter's Publisher and
// receives and acks them with its Subscriber.
func throughWatermill(ctx context.Context, rdb *redis.Client, topic string) error {
	defer rdb.Del(context.Background(), topic, pelwarden.DeadLetterStreamFor(topic))
	pub, err := pelwardenwatermill.NewPublisher(rdb, pelwardenwatermill.PublisherConfig{})
	if err != nil {
		return err
	}
	defer pub.Close()
	sub, err := pelwardenwatermill.NewSubscriber(rdb, pelwardenwatermill.SubscriberConfig{Group: "release-check"})
	if err != nil {
		return err
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		return err
	}
	for i := range entries {
		if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))); err != nil {
			return err
		}
	}
	for range entries {
		select {
		case m := <-msgs:
			m.Ack()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
