package pelwardenwatermill_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardenwatermill"
)

// env is one test's client, topic and group on a server.
type env struct {
	t     *testing.T
	s     *server
	rdb   *redis.Client
	topic string
	group string
}

func newEnv(t *testing.T, s *server) *env {
	t.Helper()
	rdb := s.client()
	t.Cleanup(func() { _ = rdb.Close() })
	return &env{t: t, s: s, rdb: rdb, topic: "topic-" + watermill.NewUUID(), group: "group-" + watermill.NewShortUUID()}
}

// subscriber returns a Subscriber of the env's group, closed at cleanup.
func (e *env) subscriber(cfg pelwardenwatermill.SubscriberConfig) *pelwardenwatermill.Subscriber {
	e.t.Helper()
	if cfg.Group == "" {
		cfg.Group = e.group
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	sub, err := pelwardenwatermill.NewSubscriber(e.rdb, cfg)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { require.NoError(e.t, sub.Close()) })
	return sub
}

// publisher returns a Publisher, closed at cleanup.
func (e *env) publisher(cfg pelwardenwatermill.PublisherConfig) *pelwardenwatermill.Publisher {
	e.t.Helper()
	pub, err := pelwardenwatermill.NewPublisher(e.rdb, cfg)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { require.NoError(e.t, pub.Close()) })
	return pub
}

// publish publishes n messages with payload "0".."n-1" and returns them.
func (e *env) publish(pub message.Publisher, n int) message.Messages {
	e.t.Helper()
	msgs := make(message.Messages, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), []byte{byte('0' + i%10)})
	}
	require.NoError(e.t, pub.Publish(e.topic, msgs...))
	return msgs
}

// fixture is a pelwardentest fixture on the env's topic (a single stream)
// and group, for assertions on the server's state.
func (e *env) fixture() *pelwardentest.Fixture {
	e.t.Helper()
	dead, err := pelwardenwatermill.DeadLetterStream(e.topic)
	require.NoError(e.t, err)
	return pelwardentest.Use(e.t, e.rdb).FixtureFor(e.t, pelwardentest.Keys{Stream: e.topic, DeadLetterStream: dead, Group: e.group}).Within(20 * time.Second)
}

// receive waits for the next message on ch.
func receive(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		require.True(t, ok, "the channel closed")
		return m
	case <-time.After(20 * time.Second):
		t.Fatal("no message within 20s")
	}
	return nil
}

// requireNothing checks that no message arrives on ch within d.
func requireNothing(t *testing.T, ch <-chan *message.Message, d time.Duration) {
	t.Helper()
	select {
	case m, ok := <-ch:
		if ok {
			t.Fatalf("unexpected message %s", m.UUID)
		}
		t.Fatal("the channel closed")
	case <-time.After(d):
	}
}

// requireDrained checks that nothing is left for ch to deliver, from the
// server's state rather than by waiting: the group has read the whole
// stream (its last-delivered id is the stream's last id) and holds
// nothing pending, so no entry is in hand or still to read; and nothing
// waits in ch now.
func requireDrained(t *testing.T, f *pelwardentest.Fixture, ch <-chan *message.Message) {
	t.Helper()
	ctx := f.Context()
	info, err := f.Client().XInfoStream(ctx, f.Stream).Result()
	require.NoError(t, err)
	groups, err := f.Client().XInfoGroups(ctx, f.Stream).Result()
	require.NoError(t, err)
	var found bool
	for _, g := range groups {
		if g.Name == f.Group {
			found = true
			require.Zero(t, g.Pending, "nothing pending in group %s", g.Name)
			require.Equal(t, info.LastGeneratedID, g.LastDeliveredID, "group %s read the whole stream", g.Name)
		}
	}
	require.True(t, found, "group %s on %s", f.Group, f.Stream)
	select {
	case m, ok := <-ch:
		if ok {
			t.Fatalf("unexpected message %s", m.UUID)
		}
		t.Fatal("the channel closed")
	default:
	}
}

// requireClosed waits for ch to close, acking what it still delivers.
func requireClosed(t *testing.T, ch <-chan *message.Message, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				return
			}
			m.Ack()
		case <-deadline:
			t.Fatalf("the channel did not close within %v", within)
		}
	}
}

// requireDone waits for ctx to be cancelled.
func requireDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the message's context was not cancelled %s", what)
	}
}
