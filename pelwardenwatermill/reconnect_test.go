package pelwardenwatermill_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/subscriber"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardenwatermill"
)

// reconnectMinIdle: a read whose reply is lost to a restart leaves its
// entries pending, owned by a consumer that never saw them; they are
// reclaimed once idle this long (the default, 1m, would outlast the test's
// wait for the next message).
const reconnectMinIdle = 5 * time.Second

// TestReconnectRestartsServer is watermill's TestReconnect with its
// bookkeeping ordered (see features): 100 publishers publish 10,000
// messages while the server's container is restarted (stopped and started: the
// append-only file keeps the data) after a third and after half of them;
// one subscription must receive every message a Publish confirmed.
// Publishes that fail during a restart are retried, as the suite does.
func TestReconnectRestartsServer(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts the server")
	}
	each(t, func(t *testing.T, s *server) {
		const messagesCount, publishersCount = 10000, 100
		rdb := s.client()
		defer func() { _ = rdb.Close() }()
		pub, err := pelwardenwatermill.NewPublisher(rdb, pelwardenwatermill.PublisherConfig{})
		require.NoError(t, err)
		sub, err := pelwardenwatermill.NewSubscriber(rdb, pelwardenwatermill.SubscriberConfig{
			Group: "reconnect", Logger: testLogger(), Driver: driver.Config{MinIdle: reconnectMinIdle}})
		require.NoError(t, err)
		topic := "topic-" + watermill.NewUUID()
		require.NoError(t, sub.SubscribeInitialize(topic))
		messages, err := sub.Subscribe(context.Background(), topic)
		require.NoError(t, err)

		var (
			mu        sync.Mutex
			published message.Messages
			restarts  sync.WaitGroup
			pubs      sync.WaitGroup
		)
		work := make(chan int)
		for range publishersCount {
			pubs.Go(func() {
				for range work {
					msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
					for pub.Publish(topic, msg) != nil {
						time.Sleep(100 * time.Millisecond)
					}
					mu.Lock()
					published = append(published, msg)
					mu.Unlock()
				}
			})
		}
		// The feeder starts each restart, then waits until the server is
		// down before handing out more work, so the publishes after it
		// meet the outage and the subscription is cut mid-stream. A
		// restart starts once the one before it has ended: the second
		// one's stop must not meet the first one's start still waiting
		// for the server (its check then sees the container exit).
		down := 0
		go func() {
			defer close(work)
			for i := range messagesCount {
				if i == messagesCount/3 || i == messagesCount/2 {
					restarts.Wait() // the restart before this one
					probe := downProbe(s)
					restarted := make(chan struct{})
					restarts.Go(func() {
						defer close(restarted)
						require.NoError(t, s.srv.Restart(context.Background()))
					})
					if probe.wait(restarted) {
						down++
					}
				}
				work <- i
			}
		}()

		received, all := subscriber.BulkReadWithDeduplication(messages, messagesCount, 60*time.Second)
		pubs.Wait()
		restarts.Wait()
		require.True(t, all, "received %d of %d", len(received), messagesCount)
		require.Equal(t, 2, down, "the server went down in both restarts (a PING failed, or its run_id changed)")
		mu.Lock()
		tests.AssertAllMessagesReceived(t, published, received)
		mu.Unlock()
		require.NoError(t, pub.Close())
		require.NoError(t, sub.Close())
	})
}

// probeDown watches one restart of a server: made before the restart
// starts, it holds the server's run_id from then (read after the restart
// had begun, it could be the new process's already: an in-process stop
// starts within a millisecond).
type probeDown struct {
	rdb    *redis.Client
	before string
}

// downProbe returns a probe of s whose client does not retry (go-redis
// retries a failed PING on a new connection by default, which hides a
// short outage).
func downProbe(s *server) *probeDown {
	o := s.options()
	o.MaxRetries = -1
	rdb := redis.NewClient(o)
	return &probeDown{rdb: rdb, before: runID(rdb)}
}

// wait waits until the server stops answering PING, or the restart is
// over (done); it reports whether the server went down: a PING failed, or,
// when the restart ended first, the server answers as another process (its
// run_id changed). The outage of a restart lasts about 150-200 ms, which a
// poll every 20 ms can miss when the loaded machine delays the poller that
// long; the run_id cannot miss it. It closes the probe's client.
func (p *probeDown) wait(done <-chan struct{}) bool {
	defer func() { _ = p.rdb.Close() }()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := p.rdb.Ping(ctx).Err()
		cancel()
		if err != nil {
			return true
		}
		select {
		case <-done:
			after := runID(p.rdb)
			return p.before != "" && after != "" && after != p.before
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runID is the server process's run_id (INFO server), "" when it cannot
// be read.
func runID(rdb *redis.Client) string {
	for range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := rdb.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			for _, line := range strings.Split(info, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
					return v
				}
			}
			return ""
		}
		time.Sleep(100 * time.Millisecond) // the restarted server is not up yet
	}
	return ""
}
