package pelwardenwatermill_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardenwatermill"
)

// The next message comes only after the previous one was acked (what the
// suite's TestNoAck checks, which it runs only with GuaranteedOrder).
func TestNextMessageOnlyAfterAck(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		sent := e.publish(e.publisher(pelwardenwatermill.PublisherConfig{}), 3)
		ch, err := e.subscriber(pelwardenwatermill.SubscriberConfig{}).Subscribe(context.Background(), e.topic)
		require.NoError(t, err)
		var got []string
		f := e.fixture()
		for range sent {
			m := receive(t, ch)
			// A negative check's window: the next entry is in the stream,
			// one read away, so a subscriber that broke the rule would hand
			// it out within a round trip or two (a millisecond on
			// loopback); 200 ms are a hundred times that.
			requireNothing(t, ch, 200*time.Millisecond)
			got = append(got, m.UUID)
			require.True(t, m.Ack())
		}
		require.Equal(t, []string{sent[0].UUID, sent[1].UUID, sent[2].UUID}, got, "one subscription delivers in stream order")
		f.RequirePELEmpty()
	})
}

// A Nack redelivers promptly and counts as a delivery on the server; at
// MaxDeliveries the entry is dead-lettered with reason max_deliveries
// instead of being delivered again, atomically with its ack.
func TestNackCountsOnServerAndDeadLetters(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		sent := e.publish(e.publisher(pelwardenwatermill.PublisherConfig{}), 1)
		ch, err := e.subscriber(pelwardenwatermill.SubscriberConfig{Driver: driver.Config{MaxDeliveries: 3}}).Subscribe(context.Background(), e.topic)
		require.NoError(t, err)
		var id string
		for want := 1; want <= 3; want++ {
			start := time.Now()
			m := receive(t, ch)
			require.Equal(t, sent[0].UUID, m.UUID)
			require.Equal(t, strconv.Itoa(want), m.Metadata.Get(pelwardenwatermill.MetadataDeliveries))
			if want > 1 {
				// A wall-clock bound, kept: the Nack's promise is a time
				// (the next reclaim pass, DefaultReclaimInterval). 3 s
				// leaves 2 s for a loaded machine; a message the Nack
				// failed to release would come back after MinIdle (1 min).
				require.Less(t, time.Since(start), 3*pelwardenwatermill.DefaultReclaimInterval, "a Nack comes back at the next reclaim pass")
			}
			id = m.Metadata.Get(pelwardenwatermill.MetadataStreamID)
			require.True(t, m.Nack())
		}
		f := e.fixture()
		f.RequireDeadLettered(id, pelwardentest.DeadLettered{Reason: pelwarden.ReasonMaxDeliveries})
		f.RequirePELEmpty()
		requireDrained(t, f, ch)
	})
}

// The delivery count lives on the server: a new Subscriber (another
// process, after a crash) sees the deliveries of the one before.
func TestDeliveryCountSurvivesTheSubscriber(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		e.publish(e.publisher(pelwardenwatermill.PublisherConfig{}), 1)
		// NackDelay keeps the Nacked message from its own subscriber's next
		// reclaim pass while that subscriber closes: with none, a pass
		// between Nack and Close took it back (a third delivery) and
		// handed it to the channel nobody read, and Close waited its
		// CloseTimeout for it (a failure seen once in the suite).
		first, err := pelwardenwatermill.NewSubscriber(e.rdb, pelwardenwatermill.SubscriberConfig{Group: e.group, Logger: testLogger(),
			NackDelay: 2 * time.Second})
		require.NoError(t, err)
		ch, err := first.Subscribe(context.Background(), e.topic)
		require.NoError(t, err)
		m := receive(t, ch)
		require.Equal(t, "1", m.Metadata.Get(pelwardenwatermill.MetadataDeliveries))
		require.True(t, m.Nack())
		require.NoError(t, first.Close())

		ch, err = e.subscriber(pelwardenwatermill.SubscriberConfig{}).Subscribe(context.Background(), e.topic)
		require.NoError(t, err)
		m = receive(t, ch)
		require.Equal(t, "2", m.Metadata.Get(pelwardenwatermill.MetadataDeliveries))
		require.True(t, m.Ack())
		e.fixture().RequirePELEmpty()
	})
}

// A message's context is cancelled on Ack, on Nack and on Close, and
// carries the values of Subscribe's context.
func TestMessageContext(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		e.publish(e.publisher(pelwardenwatermill.PublisherConfig{}), 3)
		sub, err := pelwardenwatermill.NewSubscriber(e.rdb, pelwardenwatermill.SubscriberConfig{Group: e.group, Logger: testLogger(), CloseTimeout: 100 * time.Millisecond})
		require.NoError(t, err)
		type key struct{}
		ch, err := sub.Subscribe(context.WithValue(context.Background(), key{}, "v"), e.topic)
		require.NoError(t, err)

		m := receive(t, ch)
		require.Equal(t, "v", m.Context().Value(key{}))
		require.NoError(t, m.Context().Err())
		m.Ack()
		requireDone(t, m.Context(), "after Ack")

		m = receive(t, ch)
		m.Nack()
		requireDone(t, m.Context(), "after Nack")

		m = receive(t, ch)
		closed := make(chan error, 1)
		go func() { closed <- sub.Close() }()
		requireDone(t, m.Context(), "on Close")
		require.NoError(t, <-closed)
		requireClosed(t, ch, time.Second)
	})
}

// Cancelling Subscribe's context closes the channel; the entries the
// subscription held go back to the group at once.
func TestCancelClosesChannel(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		sent := e.publish(e.publisher(pelwardenwatermill.PublisherConfig{}), 20)
		sub := e.subscriber(pelwardenwatermill.SubscriberConfig{})
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := sub.Subscribe(ctx, e.topic)
		require.NoError(t, err)
		first := receive(t, ch)
		require.True(t, first.Ack())
		second := receive(t, ch)
		cancel()
		requireDone(t, second.Context(), "when Subscribe's context is cancelled")
		second.Nack() // answered after the cancel: given back to the group
		deadline := time.After(10 * time.Second)
	drain:
		for {
			select {
			case m, ok := <-ch:
				if !ok {
					break drain
				}
				m.Nack()
			case <-deadline:
				t.Fatal("the channel did not close within 10s of the cancel")
			}
		}

		ch, err = sub.Subscribe(context.Background(), e.topic)
		require.NoError(t, err)
		got := map[string]bool{first.UUID: true}
		for len(got) < len(sent) {
			m := receive(t, ch)
			got[m.UUID] = true
			m.Ack()
		}
		e.fixture().RequirePELEmpty()
	})
}

// Close waits for the message handed out: an Ack that comes during Close
// is on the server when Close returns; an unanswered message is released
// after CloseTimeout, for another consumer at once (not after MinIdle).
func TestCloseWaitsForInFlightWork(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		e.publish(e.publisher(pelwardenwatermill.PublisherConfig{}), 2)
		f := e.fixture()

		sub, err := pelwardenwatermill.NewSubscriber(e.rdb, pelwardenwatermill.SubscriberConfig{Group: e.group, Logger: testLogger()})
		require.NoError(t, err)
		ch, err := sub.Subscribe(context.Background(), e.topic)
		require.NoError(t, err)
		m := receive(t, ch)
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			require.NoError(t, sub.Close())
		}()
		requireDone(t, m.Context(), "on Close")
		// A negative check's window: Close has begun (it cancelled the
		// message's context), so a Close that did not wait for the answer
		// would return within microseconds; 300 ms are thousands of times
		// that.
		select {
		case <-closed:
			t.Fatal("Close returned before the message handed out was answered")
		case <-time.After(300 * time.Millisecond):
		}
		require.True(t, m.Ack())
		<-closed
		f.WithT(t).Within(0).RequireAcked(m.Metadata.Get(pelwardenwatermill.MetadataStreamID))

		sub, err = pelwardenwatermill.NewSubscriber(e.rdb, pelwardenwatermill.SubscriberConfig{Group: e.group, Logger: testLogger(), CloseTimeout: 200 * time.Millisecond})
		require.NoError(t, err)
		ch, err = sub.Subscribe(context.Background(), e.topic)
		require.NoError(t, err)
		unanswered := receive(t, ch)
		start := time.Now()
		require.NoError(t, sub.Close())
		// A lower bound (it cannot fail from a slow machine): Close waited
		// its CloseTimeout for the unanswered message.
		require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
		unanswered.Ack() // too late: the entry was released, and is delivered again below

		ch, err = e.subscriber(pelwardenwatermill.SubscriberConfig{}).Subscribe(context.Background(), e.topic)
		require.NoError(t, err)
		again := receive(t, ch)
		require.Equal(t, unanswered.UUID, again.UUID)
		// Tells the two ways apart with room: released at Close, it comes
		// back within a reclaim interval; left pending, after MinIdle
		// (1 min).
		require.Less(t, time.Since(start), 10*time.Second, "released at once, not after MinIdle")
		require.True(t, again.Ack())
		f.RequirePELEmpty()
	})
}

// An entry that is no watermill message is dead-lettered at once.
func TestForeignEntryIsDeadLettered(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		f := e.fixture()
		id := f.Add("order", "42")
		sent := e.publish(e.publisher(pelwardenwatermill.PublisherConfig{}), 1)
		ch, err := e.subscriber(pelwardenwatermill.SubscriberConfig{}).Subscribe(context.Background(), e.topic)
		require.NoError(t, err)
		m := receive(t, ch)
		require.Equal(t, sent[0].UUID, m.UUID)
		require.True(t, m.Ack())
		f.RequireDeadLettered(id, pelwardentest.DeadLettered{Reason: pelwarden.ReasonHandler, ErrorContains: pelwardenwatermill.ErrNotWatermill.Error()})
		f.RequirePELEmpty()
	})
}

// DeadLetter sends a message to the dead-letter stream at once: one
// delivery, the handler's error text in the record, reason handler, and
// the next message comes without waiting for a reclaim pass.
func TestDeadLetterAtOnce(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		f := e.fixture()
		sent := e.publish(e.publisher(pelwardenwatermill.PublisherConfig{}), 3)
		outcomes := make(chan error, 3)
		sub := e.subscriber(pelwardenwatermill.SubscriberConfig{
			Driver: driver.Config{MaxDeliveries: 5},
			WrapHandler: func(next driver.Handler) driver.Handler {
				return driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
					err := next.Handle(ctx, m)
					outcomes <- err
					return err
				})
			},
		})
		ch, err := sub.Subscribe(context.Background(), e.topic)
		require.NoError(t, err)

		poison := receive(t, ch)
		require.Equal(t, sent[0].UUID, poison.UUID)
		cause := errors.New(`malformed order "forty-two"`)
		start := time.Now()
		require.True(t, pelwardenwatermill.DeadLetter(poison, cause))
		requireDone(t, poison.Context(), "after DeadLetter")
		require.False(t, poison.Ack(), "DeadLetter nacked it")
		var dl *driver.DeadLetterError
		require.ErrorAs(t, <-outcomes, &dl, "driver middleware sees the dead-letter outcome")
		require.ErrorIs(t, dl, cause)
		id := poison.Metadata.Get(pelwardenwatermill.MetadataStreamID)
		rec := f.RequireDeadLettered(id, pelwardentest.DeadLettered{Reason: pelwarden.ReasonHandler, Error: cause.Error()})
		require.EqualValues(t, 1, rec.Deliveries, "no retries before it")
		// Tells the two ways apart: at once takes one call; through
		// MaxDeliveries (5) failed deliveries it would take at least four
		// reclaim passes (4 s).
		require.Less(t, time.Since(start), 3*pelwardenwatermill.DefaultReclaimInterval, "at once, not after MaxDeliveries reclaim passes")

		// Too late once acked: the Ack stands, nothing is dead-lettered.
		acked := receive(t, ch)
		require.Equal(t, sent[1].UUID, acked.UUID)
		require.True(t, acked.Ack())
		require.False(t, pelwardenwatermill.DeadLetter(acked, cause))
		require.NoError(t, <-outcomes)

		// A nil error records ErrDeadLettered.
		last := receive(t, ch)
		require.True(t, pelwardenwatermill.DeadLetter(last, nil))
		require.Error(t, <-outcomes)
		f.RequireDeadLettered(last.Metadata.Get(pelwardenwatermill.MetadataStreamID),
			pelwardentest.DeadLettered{Reason: pelwarden.ReasonHandler, Error: pelwardenwatermill.ErrDeadLettered.Error()})
		f.RequireAcked(acked.Metadata.Get(pelwardenwatermill.MetadataStreamID))
		f.RequireDeadLetterIDs(id, last.Metadata.Get(pelwardenwatermill.MetadataStreamID))
		f.RequirePELEmpty()
		requireDrained(t, f, ch)
	})
}

// In a Router, a handler that calls DeadLetter and returns nil has its
// message dead-lettered, not acked (the router's Ack after it does
// nothing), and never called again.
func TestDeadLetterInRouter(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		f := e.fixture()
		sent := e.publish(e.publisher(pelwardenwatermill.PublisherConfig{}), 2)
		sub := e.subscriber(pelwardenwatermill.SubscriberConfig{})
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		require.NoError(t, err)
		var calls atomic.Int64
		handled := make(chan string, 2)
		router.AddConsumerHandler("h", e.topic, sub, func(msg *message.Message) error {
			calls.Add(1)
			if string(msg.Payload) == "0" {
				require.True(t, pelwardenwatermill.DeadLetter(msg, errors.New("poison")))
			}
			handled <- msg.Metadata.Get(pelwardenwatermill.MetadataStreamID)
			return nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- router.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			require.NoError(t, router.Close())
			require.NoError(t, <-done)
		})
		<-router.Running()
		poison, good := <-handled, <-handled
		f.RequireDeadLettered(poison, pelwardentest.DeadLettered{Reason: pelwarden.ReasonHandler, Error: "poison"})
		f.RequireAcked(good)
		f.RequireDeadLetterIDs(poison)
		f.RequirePELEmpty()
		require.EqualValues(t, len(sent), calls.Load(), "one call each: no retry, no redelivery")
	})
}

// DeadLetter on a message no Subscriber handed out (or a copy) nacks it and
// says it dead-letters nothing: a message meant for the dead-letter stream
// is never acked.
func TestDeadLetterForeignMessage(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage(watermill.NewUUID(), nil)
	require.False(t, pelwardenwatermill.DeadLetter(msg, errors.New("x")))
	select {
	case <-msg.Nacked():
	default:
		t.Fatal("not nacked")
	}
	require.False(t, msg.Ack())
}

// A new group reads the stream from its first entry: messages consumed by
// another group are delivered again to it.
func TestNewGroupReadsFromStart(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		sent := e.publish(e.publisher(pelwardenwatermill.PublisherConfig{}), 5)
		for _, group := range []string{"first", "second"} {
			ch, err := e.subscriber(pelwardenwatermill.SubscriberConfig{Group: group}).Subscribe(context.Background(), e.topic)
			require.NoError(t, err)
			for _, want := range sent {
				m := receive(t, ch)
				require.Equal(t, want.UUID, m.UUID, group)
				m.Ack()
			}
		}
	})
}

// With a fixed Consumer name a topic is subscribed once at a time.
func TestFixedConsumerSubscribesOnce(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		sub := e.subscriber(pelwardenwatermill.SubscriberConfig{Consumer: "billing-1"})
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := sub.Subscribe(ctx, e.topic)
		require.NoError(t, err)
		_, err = sub.Subscribe(context.Background(), e.topic)
		var ce *pelwarden.ArgumentError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "SubscriberConfig.Consumer", ce.Field)
		cancel()
		requireClosed(t, ch, 10*time.Second)
		ch, err = sub.Subscribe(context.Background(), e.topic)
		require.NoError(t, err, "the topic is free again once the first subscription closed")
		require.NoError(t, sub.Close())
		requireClosed(t, ch, time.Second)
		_, err = sub.Subscribe(context.Background(), e.topic)
		require.ErrorIs(t, err, pelwardenwatermill.ErrClosed)
	})
}

// RequireGroup: a missing group stops the subscription (its channel
// closes) instead of creating the group; SubscribeInitialize reports it.
func TestRequireGroup(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		sub := e.subscriber(pelwardenwatermill.SubscriberConfig{RequireGroup: true})
		require.ErrorIs(t, sub.SubscribeInitialize(e.topic), pelwarden.ErrNoGroup)
		ch, err := sub.Subscribe(context.Background(), e.topic)
		require.NoError(t, err)
		requireClosed(t, ch, 10*time.Second)

		require.NoError(t, e.subscriber(pelwardenwatermill.SubscriberConfig{}).SubscribeInitialize(e.topic))
		require.NoError(t, sub.SubscribeInitialize(e.topic))
		sent := e.publish(e.publisher(pelwardenwatermill.PublisherConfig{}), 1)
		ch, err = sub.Subscribe(context.Background(), e.topic)
		require.NoError(t, err)
		require.Equal(t, sent[0].UUID, receive(t, ch).UUID)
	})
}

// Driver middleware (WrapHandler) sees each message's outcome as the
// driver's: nil for Ack, a *driver.RetryAfterError wrapping ErrNacked for
// Nack; what it puts in the context reaches the message's context.
func TestWrapHandler(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		e.publish(e.publisher(pelwardenwatermill.PublisherConfig{}), 1)
		type key struct{}
		outcomes := make(chan error, 4)
		sub := e.subscriber(pelwardenwatermill.SubscriberConfig{WrapHandler: func(next driver.Handler) driver.Handler {
			return driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
				err := next.Handle(context.WithValue(ctx, key{}, m.ID), m)
				outcomes <- err
				return err
			})
		}})
		ch, err := sub.Subscribe(context.Background(), e.topic)
		require.NoError(t, err)
		m := receive(t, ch)
		require.Equal(t, m.Metadata.Get(pelwardenwatermill.MetadataStreamID), m.Context().Value(key{}))
		m.Nack()
		var ra *driver.RetryAfterError
		require.ErrorAs(t, <-outcomes, &ra)
		require.True(t, errors.Is(ra, pelwardenwatermill.ErrNacked))
		receive(t, ch).Ack()
		require.NoError(t, <-outcomes)
	})
}

// Config errors name the field and match pelwarden.ErrInvalidArgument.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	rdb := servers[0].rdb
	for _, c := range []struct {
		field string
		cfg   pelwardenwatermill.SubscriberConfig
	}{
		{"SubscriberConfig.Group", pelwardenwatermill.SubscriberConfig{}},
		{"SubscriberConfig.NackDelay", pelwardenwatermill.SubscriberConfig{Group: "g", NackDelay: -1}},
		{"SubscriberConfig.CloseTimeout", pelwardenwatermill.SubscriberConfig{Group: "g", CloseTimeout: -1}},
		{"SubscriberConfig.Driver.Stream", pelwardenwatermill.SubscriberConfig{Group: "g", Driver: driver.Config{Stream: "s"}}},
		{"SubscriberConfig.Driver.Handler", pelwardenwatermill.SubscriberConfig{Group: "g", Driver: driver.Config{Handler: driver.HandlerFunc(nil)}}},
		{"SubscriberConfig.Driver.ShutdownTimeout", pelwardenwatermill.SubscriberConfig{Group: "g", Driver: driver.Config{ShutdownTimeout: time.Second}}},
		{"SubscriberConfig.Topics.Partitions", pelwardenwatermill.SubscriberConfig{Group: "g", Topics: pelwardenwatermill.Topics{Partitions: -1}}},
		{"SubscriberConfig.Driver.Concurrency", pelwardenwatermill.SubscriberConfig{Group: "g", Driver: driver.Config{Concurrency: 4}}},
		{"SubscriberConfig.Driver.Concurrency", pelwardenwatermill.SubscriberConfig{Group: "g", Driver: driver.Config{Concurrency: -1}}},
	} {
		_, err := pelwardenwatermill.NewSubscriber(rdb, c.cfg)
		var ce *pelwarden.ArgumentError
		require.ErrorAs(t, err, &ce, c.field)
		require.Equal(t, c.field, ce.Field)
		require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
	}
	for _, n := range []int{0, 1} {
		sub, err := pelwardenwatermill.NewSubscriber(rdb, pelwardenwatermill.SubscriberConfig{Group: "g", Driver: driver.Config{Concurrency: n}})
		require.NoError(t, err, "Concurrency %d", n)
		require.NoError(t, sub.Close())
	}
	_, err := pelwardenwatermill.NewSubscriber(nil, pelwardenwatermill.SubscriberConfig{Group: "g"})
	require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
	_, err = pelwardenwatermill.NewPublisher(rdb, pelwardenwatermill.PublisherConfig{MaxBatch: -1})
	require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)

	// The driver's own checks come back from Subscribe, naming the field.
	sub, err := pelwardenwatermill.NewSubscriber(rdb, pelwardenwatermill.SubscriberConfig{Group: "g", Driver: driver.Config{MinIdle: time.Millisecond}})
	require.NoError(t, err)
	_, err = sub.Subscribe(context.Background(), "topic-"+watermill.NewUUID())
	var de *pelwarden.ArgumentError
	require.ErrorAs(t, err, &de)
	require.Equal(t, "Config.MinIdle", de.Field)
	require.NoError(t, sub.Close())

	// A topic the Publisher cannot map fails the publish before any I/O.
	pub, err := pelwardenwatermill.NewPublisher(rdb, pelwardenwatermill.PublisherConfig{Topics: pelwardenwatermill.Topics{Partitions: 2}})
	require.NoError(t, err)
	err = pub.Publish("{braces}", message.NewMessage(watermill.NewUUID(), nil))
	require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
	require.NoError(t, pub.Close())
}

// The driver's Limit passes through the Driver template: two subscribers
// of the topic under one limit with a cap of 1 never hold a message at
// once (each holds its permit from delivery to Ack), and every message
// is delivered; the permit goes back at the close.
func TestLimitPassesThrough(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		ctx := t.Context()
		lib := pelwarden.NewLibrary(e.rdb)
		name := "wm-" + e.group
		t.Cleanup(func() {
			h, z := pelwarden.LimitKeysFor(name)
			e.rdb.Del(context.Background(), h, z)
		})
		_, err := lib.SetLimit(ctx, name, pelwarden.LimitSettings{Concurrency: 1})
		require.NoError(t, err)
		const n = 20
		e.publish(e.publisher(pelwardenwatermill.PublisherConfig{}), n)
		var held, most atomic.Int64
		got := make(chan string, n)
		for i := range 2 {
			sub := e.subscriber(pelwardenwatermill.SubscriberConfig{Consumer: fmt.Sprint("c", i), Driver: driver.Config{Limit: name}})
			ch, err := sub.Subscribe(ctx, e.topic)
			require.NoError(t, err)
			go func() {
				for m := range ch {
					h := held.Add(1)
					for old := most.Load(); h > old && !most.CompareAndSwap(old, h); old = most.Load() {
					}
					time.Sleep(2 * time.Millisecond)
					held.Add(-1)
					m.Ack()
					got <- m.UUID
				}
			}()
		}
		seen := map[string]bool{}
		for len(seen) < n {
			select {
			case id := <-got:
				seen[id] = true
			case <-time.After(time.Minute):
				t.Fatalf("%d of %d messages after a minute", len(seen), n)
			}
		}
		require.Equal(t, int64(1), most.Load(), "one message held at a time across the two subscribers")
	})
}
