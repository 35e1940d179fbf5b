package pelwardenwatermill_test

import (
	"os"
	"slices"
	"strings"
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

// Settings the suite needs that differ from the defaults (docs/guides/watermill.md lists
// them with the defaults a user gets):
//   - MaxDeliveries 100 (default 5): TestContinueAfterErrors has three
//     subscribers Nack 100 messages each out of 50, so each message is
//     delivered about 7 times before the final subscriber acks it.
const suiteMaxDeliveries = 100

// features are the Features that hold (docs/guides/watermill.md: "Coming from
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
// EnvSuiteEverywhere is set; leaving out those stressServers names, where
// the stress test runs the same suite ten times over.
func suiteServers() []*server {
	some := servers
	if os.Getenv(EnvSuiteEverywhere) == "" {
		var named []*server
		for _, s := range servers {
			if slices.Contains(suiteLabels, s.name) {
				named = append(named, s)
			}
		}
		if len(named) > 0 {
			some = named
		}
	}
	stressed := stressServers()
	var out []*server
	for _, s := range some {
		if !slices.Contains(stressed, s) {
			out = append(out, s)
		}
	}
	return out
}

// TestPubSub runs watermill's universal Pub/Sub suite (not -short) on the
// servers where it tests a path of its own (suiteLabels), but those where
// TestPubSubStressTest runs it. In parallel with the module's other tests:
// the suite's tests mostly wait.
func TestPubSub(t *testing.T) {
	if testing.Short() {
		t.Skip("watermill's suite is long; it runs without -short")
	}
	t.Parallel()
	some := suiteServers()
	if len(some) == 0 {
		t.Skipf("the stress test (%s) runs the suite on every server named", EnvStress)
	}
	for _, s := range some {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			tests.TestPubSub(t, features,
				func(t *testing.T) (message.Publisher, message.Subscriber) { return pubSub(t, s, suiteGroup) },
				func(t *testing.T, group string) (message.Publisher, message.Subscriber) { return pubSub(t, s, group) },
			)
		})
	}
}

// EnvStress turns TestPubSubStressTest on: "all" (or "1") runs it on every
// server of the matrix (make watermill-stress), otherwise on the servers
// it names, comma-separated (make integration: redis-8.0). TestPubSub
// leaves those servers out: the stress test runs the same suite there ten
// times at once, so the plain run would check nothing more.
const EnvStress = "PELWARDEN_WATERMILL_STRESS"

// stressServers returns the servers EnvStress names (none when unset).
func stressServers() []*server {
	v := strings.TrimSpace(os.Getenv(EnvStress))
	switch v {
	case "":
		return nil
	case "1", "all":
		return servers
	}
	var labels []string
	for l := range strings.SplitSeq(v, ",") {
		labels = append(labels, strings.TrimSpace(l))
	}
	var out []*server
	for _, s := range servers {
		if slices.Contains(labels, s.name) {
			out = append(out, s)
		}
	}
	return out
}

// serverNames lists the matrix's server names.
func serverNames() string {
	names := make([]string, len(servers))
	for i, s := range servers {
		names[i] = s.name
	}
	return strings.Join(names, ", ")
}

// TestPubSubStressTest runs watermill's stress test: the suite ten times
// at once (STRESS_TEST_COUNT) on each server EnvStress names, in parallel
// with the module's other tests.
func TestPubSubStressTest(t *testing.T) {
	v := os.Getenv(EnvStress)
	some := stressServers()
	if len(some) == 0 {
		if v != "" {
			t.Fatalf("%s=%q names no server of the matrix (%s)", EnvStress, v, serverNames())
		}
		t.Skipf("set %s=all (or a list of servers) to run it (make integration does, on Redis 8.0; make watermill-stress on the matrix)", EnvStress)
	}
	t.Parallel()
	eachOf(t, some, func(t *testing.T, s *server) {
		tests.TestPubSubStressTest(t, features,
			func(t *testing.T) (message.Publisher, message.Subscriber) { return pubSub(t, s, suiteGroup) },
			func(t *testing.T, group string) (message.Publisher, message.Subscriber) { return pubSub(t, s, group) },
		)
	})
}
