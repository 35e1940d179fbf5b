package pelwardenwatermill_test

import (
	"os"
	"slices"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardenwatermill"
)

// suiteGroup is the consumer group of the suite's PubSubConstructor: every
// subscriber it makes is one more consumer of one group, as the suite
// expects (ConcurrentSubscribe splits 5,000 messages over 50 of them).
const suiteGroup = "watermill-suite"

// Settings the suite needs that differ from the defaults (the README lists
// them with the defaults a user gets):
//   - MaxDeliveries 100 (default 5): TestContinueAfterErrors has three
//     subscribers Nack 100 messages each out of 50, so each message is
//     delivered about 7 times before the final subscriber acks it.
const suiteMaxDeliveries = 100

// features are the Features that hold (README: "Coming from
// watermill-redisstream", the suite's skipped tests). RestartServiceCommand
// is left out: the suite's TestReconnect races with itself (a goroutine
// appends to its list of published messages, test_pubsub.go:1086, while
// the test reads the list, :1120, with nothing ordering the two), so
// under -race it fails for any Pub/Sub that delivers every message, and
// without -race it fails when the last message arrives before that
// goroutine recorded it. TestReconnectRestartsServer (reconnect_test.go)
// runs the same scenario with the bookkeeping ordered.
var features = tests.Features{
	ConsumerGroups: true,
	Persistent:     true,
}

// pubSub is the suite's constructor on s, for group.
func pubSub(t *testing.T, s *server, group string) (message.Publisher, message.Subscriber) {
	rdb := s.client()
	t.Cleanup(func() { _ = rdb.Close() })
	pub, err := pelwardenwatermill.NewPublisher(rdb, pelwardenwatermill.PublisherConfig{})
	require.NoError(t, err)
	sub, err := pelwardenwatermill.NewSubscriber(rdb, pelwardenwatermill.SubscriberConfig{
		Group:  group,
		Logger: testLogger(),
		Driver: driver.Config{MaxDeliveries: suiteMaxDeliveries},
	})
	require.NoError(t, err)
	return pub, sub
}

// suiteLabels are the servers on which watermill's universal suite tests
// a path of its own: Redis 8.0 (the reclaim passes, deletes checked
// against every group), Redis 8.6 (reads that claim, XDELEX) and Valkey 9.1
// (the other server). Redis 7.0 takes 8.0's paths and Valkey 8.1 9.1's;
// the adapter's own tests run on every server of the matrix.
var suiteLabels = []string{"redis-8.0", "redis-8.6", "valkey-9.1"}

// EnvSuiteEverywhere runs the universal suite on every server of the
// matrix (make watermill-matrix), not only suiteLabels'.
const EnvSuiteEverywhere = "PELWARDEN_WATERMILL_SUITE_EVERYWHERE"

// suiteServers returns the servers of the matrix that suiteLabels names,
// or every server when the matrix (PELWARDEN_IMAGES) has none of them or
// EnvSuiteEverywhere is set.
func suiteServers() []*server {
	if os.Getenv(EnvSuiteEverywhere) != "" {
		return servers
	}
	var out []*server
	for _, s := range servers {
		if slices.Contains(suiteLabels, s.name) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return servers
	}
	return out
}

// TestPubSub runs watermill's universal Pub/Sub suite (not -short) on the
// servers where it tests a path of its own (suiteLabels).
func TestPubSub(t *testing.T) {
	if testing.Short() {
		t.Skip("watermill's suite is long; it runs without -short")
	}
	eachOf(t, suiteServers(), func(t *testing.T, s *server) {
		tests.TestPubSub(t, features,
			func(t *testing.T) (message.Publisher, message.Subscriber) { return pubSub(t, s, suiteGroup) },
			func(t *testing.T, group string) (message.Publisher, message.Subscriber) { return pubSub(t, s, group) },
		)
	})
}

// EnvStress turns TestPubSubStressTest on: make integration sets it for
// Redis 8.0 alone (PELWARDEN_IMAGES), make watermill-stress for the
// matrix.
const EnvStress = "PELWARDEN_WATERMILL_STRESS"

// TestPubSubStressTest runs watermill's stress test: the suite ten times
// at once (STRESS_TEST_COUNT) per server.
func TestPubSubStressTest(t *testing.T) {
	if os.Getenv(EnvStress) == "" {
		t.Skipf("set %s=1 to run it (make integration does, on Redis 8.0; make watermill-stress on the matrix)", EnvStress)
	}
	each(t, func(t *testing.T, s *server) {
		tests.TestPubSubStressTest(t, features,
			func(t *testing.T) (message.Publisher, message.Subscriber) { return pubSub(t, s, suiteGroup) },
			func(t *testing.T, group string) (message.Publisher, message.Subscriber) { return pubSub(t, s, group) },
		)
	})
}
