package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// The package's Redis Cluster: three primaries in containers, started by the
// first test that needs it and removed by run (main_test.go) after the tests.
var (
	clusterOnce sync.Once
	clusterSrv  *testserver.Cluster
	clusterErr  error

	// clusterGrown is set once a test has added a fourth primary.
	clusterGrown bool
)

// newPrimarySlots are the slots the NewPrimary phase moves to the node it
// adds. Fixtures keep out of them; but a partitioned stream or a limit
// named at random by a test of the parallel group can hash there (16 of a
// partition's 2,048 slots), and a fresh-clone run met one: the NewPrimary
// phase removes such leftovers first (clearSlots; their tests have ended),
// so the slots move without migrating data.
var newPrimarySlots = testserver.SlotRange{Start: 16368, End: 16383}

// clusterImage is PELWARDEN_CLUSTER_IMAGE, or pelwarden/redis:8.0.
func clusterImage() string {
	if v := strings.TrimSpace(os.Getenv("PELWARDEN_CLUSTER_IMAGE")); v != "" {
		return v
	}
	return "pelwarden/redis:8.0"
}

// sharedCluster starts the package's cluster on first use.
func sharedCluster(t *testing.T) *testserver.Cluster {
	t.Helper()
	clusterOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		clusterSrv, clusterErr = testserver.StartCluster(ctx, clusterImage(), testserver.ClusterOptions{})
	})
	require.NoError(t, clusterErr, "start a Redis Cluster of %s", clusterImage())
	return clusterSrv
}

// closeCluster removes the cluster's containers, if a test started it.
func closeCluster() error {
	if clusterSrv == nil {
		return nil
	}
	return clusterSrv.Close()
}

// TestCluster runs pelwarden on a three-primary Redis Cluster. It runs in
// parallel with the rest of the package; its phases run in order because
// they share the cluster's library state: the first checks that no primary
// has the library before Load, each self-heal phase must be the only one to
// reload it after flushing it, and the last ones change the topology. The
// tests of the middle phase run in parallel.
func TestCluster(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	ctx := t.Context()
	rdb := c.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	shards, err := c.Shards(ctx)
	require.NoError(t, err)
	want := testserver.DefaultClusterPrimaries
	if clusterGrown { // an earlier run in this process (-count) added one
		want++
	}
	require.Len(t, shards, want)
	usable := keyShards(shards)
	require.Len(t, usable, testserver.DefaultClusterPrimaries)

	t.Run("LoadReachesEveryPrimary", func(t *testing.T) {
		testClusterLoad(t, t.Context(), rdb, shards)
	})
	t.Run("Parallel", func(t *testing.T) {
		t.Run("ClaimAckDeadLetterPerShard", func(t *testing.T) {
			t.Parallel()
			for i, s := range usable {
				t.Run(fmt.Sprintf("shard%d", i), func(t *testing.T) {
					t.Parallel()
					testClusterShard(t, t.Context(), rdb, s)
				})
			}
		})
		t.Run("CrossSlot", func(t *testing.T) {
			t.Parallel()
			testClusterCrossSlot(t, t.Context(), c, rdb, usable[0])
		})
		t.Run("DriverLeastPrivilege", func(t *testing.T) {
			t.Parallel()
			testClusterLeastPrivilege(t, t.Context(), c, rdb, usable[1])
		})
		t.Run("Trim", func(t *testing.T) {
			t.Parallel()
			trimSuite(t, clusterTrimEnv(c)) // trim_test.go
		})
		t.Run("DriverOrdered", func(t *testing.T) {
			t.Parallel()
			// 8 partitions spread over the three primaries (Partitions
			// gives each an equal slot range), the membership key in the
			// first one's slot: TestDriverOrdered's scenario on the cluster.
			runDriverOrdered(t, orderedEnv{name: "cluster", admin: rdb, base: "ordered-cluster-" + strconv.FormatInt(time.Now().UnixNano(), 36), group: "g",
				client: func() redis.UniversalClient { return c.Client() }})
		})
		t.Run("OrderedChaos", func(t *testing.T) {
			t.Parallel()
			testClusterOrderedChaos(t, t.Context(), c, rdb)
		})
		t.Run("Limits", func(t *testing.T) {
			t.Parallel()
			testClusterLimits(t, t.Context(), rdb, usable)
		})
		t.Run("ConsumersUnderLimit", func(t *testing.T) {
			t.Parallel()
			testClusterConsumerLimits(t, t.Context(), rdb, usable)
		})
		t.Run("DriverPerShard", func(t *testing.T) {
			t.Parallel()
			for i, s := range usable {
				t.Run(fmt.Sprintf("shard%d", i), func(t *testing.T) {
					t.Parallel()
					testClusterDriver(t, t.Context(), rdb, s)
				})
			}
		})
	})
	t.Run("SelfHealAfterFlush", func(t *testing.T) {
		testClusterSelfHeal(t, t.Context(), rdb, usable)
	})
	t.Run("DriverSelfHealAfterFlush", func(t *testing.T) {
		testClusterDriverSelfHeal(t, t.Context(), rdb, usable[2])
	})
	t.Run("NewPrimaryGetsLibraryFromLoad", func(t *testing.T) {
		testClusterNewPrimary(t, t.Context(), c, rdb)
	})
	t.Run("CommandLine", func(t *testing.T) {
		testCLICluster(t, t.Context(), c, rdb) // cli_test.go
	})
}

// Load visits every primary: none has the library before, each answers with
// the embedded version after.
func testClusterLoad(t *testing.T, ctx context.Context, rdb *redis.ClusterClient, shards []testserver.Shard) {
	var addrs []string
	for _, s := range shards {
		node := nodeClient(t, s.Primary)
		// A fresh cluster has no library; the flush only matters when the
		// test runs again in this process (-count).
		require.NoError(t, node.FunctionFlush(ctx).Err())
		err := node.FCallRO(ctx, pelwarden.FunctionVersion, nil).Err()
		require.ErrorContains(t, err, "Function not found", "%s before Load", s.Primary.Addr())
		addrs = append(addrs, s.Primary.Addr())
	}

	lib := pelwarden.NewLibrary(rdb)
	res, err := lib.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, pelwarden.ModeFunction, res.Mode)
	require.Len(t, res.Nodes, len(shards), "one NodeLoad per primary")
	var loaded []string
	for _, n := range res.Nodes {
		require.Equal(t, pelwarden.NodeLoad{Addr: n.Addr, After: pelwarden.LibraryVersion, Action: pelwarden.ActionLoaded}, n)
		loaded = append(loaded, n.Addr)
	}
	require.ElementsMatch(t, addrs, loaded)
	for _, s := range shards {
		v, err := nodeClient(t, s.Primary).FCallRO(ctx, pelwarden.FunctionVersion, nil).Text()
		require.NoError(t, err, s.Primary.Addr())
		require.Equal(t, pelwarden.LibraryVersion, v, s.Primary.Addr())
	}

	res, err = lib.Load(ctx)
	require.NoError(t, err)
	require.Len(t, res.Nodes, len(shards))
	for _, n := range res.Nodes {
		require.Equal(t, pelwarden.ActionCurrent, n.Action, n.Addr)
	}
}

// Claim (with dead-lettering at MaxDeliveries), DeadLetter and Ack work on
// hash-tagged keys that live on one shard's primary.
func testClusterShard(t *testing.T, ctx context.Context, rdb *redis.ClusterClient, s testserver.Shard) {
	f := clusterFixture(t, rdb, func(slot int) bool { return s.Owns(slot) && !newPrimarySlots.Contains(slot) })
	lib := pelwarden.NewLibrary(rdb)
	ids := f.Produce(10, order)
	f.LeavePending("dead-consumer", 10)
	// The first three were delivered twice (a retry that crashed too).
	require.NoError(t, rdb.XClaim(ctx, &redis.XClaimArgs{Stream: f.Stream, Group: f.Group, Consumer: "dead-consumer", Messages: ids[:3]}).Err())

	all := f.Reclaim(pelwardentest.ReclaimArgs{Consumer: "rescuer", MaxDeliveries: 2, Count: 4})
	require.Equal(t, ids[:3], all.DeadLettered)
	require.Empty(t, all.Deleted)
	var live []string
	for _, e := range all.Claimed {
		live = append(live, e.ID)
		require.EqualValues(t, 2, e.Deliveries, e.ID)
	}
	require.Equal(t, ids[3:], live)

	dl, err := lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group,
		Consumer: "rescuer", IDs: ids[3:4], Reason: "invalid_order", Error: "unknown sku"})
	require.NoError(t, err)
	require.Equal(t, ids[3:4], dl.DeadLettered)
	require.NoError(t, dl.Err())
	ack, err := lib.Ack(ctx, pelwarden.AckArgs{Stream: f.Stream, Group: f.Group, Consumer: "rescuer", IDs: ids[4:]})
	require.NoError(t, err)
	require.EqualValues(t, 6, ack.Acked)
	require.NoError(t, ack.Err())

	// The shard's primary holds the keys: it answers for them itself, where
	// any other node would answer MOVED.
	node := nodeClient(t, s.Primary)
	p, err := node.XPending(ctx, f.Stream, f.Group).Result()
	require.NoError(t, err)
	require.Zero(t, p.Count, "PEL empty")
	n, err := node.XLen(ctx, f.Stream).Result()
	require.NoError(t, err)
	require.EqualValues(t, 10, n)
	recs, err := node.XRange(ctx, f.DeadLetterStream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, recs, 4)
	for i, r := range recs {
		m := r.Values
		require.Equal(t, ids[i], m[pelwarden.FieldOriginalID])
		require.Equal(t, fmt.Sprint(i), m["n"])
		require.Equal(t, fmt.Sprintf("order-%d", i), m["payload"])
		require.Equal(t, f.Stream, m[pelwarden.FieldStream])
		require.Equal(t, f.Group, m[pelwarden.FieldGroup])
		require.Equal(t, "2", m[pelwarden.FieldDeliveries])
		if i < 3 {
			require.Equal(t, pelwarden.ReasonMaxDeliveries, m[pelwarden.FieldReason])
			require.Equal(t, "dead-consumer", m[pelwarden.FieldConsumer])
			require.Equal(t, "", m[pelwarden.FieldError])
		} else {
			require.Equal(t, "invalid_order", m[pelwarden.FieldReason])
			require.Equal(t, "rescuer", m[pelwarden.FieldConsumer])
			require.Equal(t, "unknown sku", m[pelwarden.FieldError])
		}
	}
}

// Keys in different slots are refused by the Go side before any round trip
// on a cluster client, and by the server otherwise.
func testClusterCrossSlot(t *testing.T, ctx context.Context, c *testserver.Cluster, rdb *redis.ClusterClient, s testserver.Shard) {
	require.NotEqual(t, pelwarden.Slot("{a}"), pelwarden.Slot("{b}"))

	counted := c.Client()
	t.Cleanup(func() { _ = counted.Close() })
	var cmds atomic.Int64
	counted.AddHook(countHook{&cmds})
	lib := pelwarden.NewLibrary(counted)
	_, err := lib.Claim(ctx, pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: "{a}", DeadLetterStream: "{b}", Group: "g", Consumer: "c"})
	require.ErrorIs(t, err, pelwarden.ErrCrossSlot)
	require.ErrorContains(t, err, "{orders}:dead", "the message suggests a hash tag")
	_, err = lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: "{a}", DeadLetterStream: "{b}", Group: "g", Consumer: "c", IDs: []string{"1-0"}})
	require.ErrorIs(t, err, pelwarden.ErrCrossSlot)
	_, err = lib.Stats(ctx, pelwarden.StatsArgs{Stream: "{a}", DeadLetterStream: "{b}", Group: "g"})
	require.ErrorIs(t, err, pelwarden.ErrCrossSlot)
	_, err = lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: "{b}", Stream: "{a}"})
	require.ErrorIs(t, err, pelwarden.ErrCrossSlot)
	require.Zero(t, cmds.Load(), "no command was sent")
	require.NoError(t, counted.Ping(ctx).Err())
	require.NotZero(t, cmds.Load(), "the hook counts what is sent")

	// The server answers a raw FCALL with keys in two slots CROSSSLOT.
	err = rdb.FCall(ctx, pelwarden.FunctionClaim, []string{"{a}", "{b}"}, "g", "c", 0, "0-0", 10, 0, "0", "1", 0).Err()
	require.Error(t, err)
	require.True(t, redis.HasErrorPrefix(err, "CROSSSLOT"), "got %v", err)

	// A plain client to one node cannot check slots; the server's CROSSSLOT
	// comes back as ErrCrossSlot.
	_, err = pelwarden.NewLibrary(nodeClient(t, s.Primary)).Claim(ctx, pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: "{a}", DeadLetterStream: "{b}", Group: "g", Consumer: "c"})
	require.ErrorIs(t, err, pelwarden.ErrCrossSlot)
	var perr *pelwarden.Error
	require.ErrorAs(t, err, &perr)
	require.Equal(t, "CROSSSLOT", perr.Code)
}

// A Library that has loaded heals shards that lost the library (FUNCTION
// FLUSH): the call answered "Function not found" reloads on every primary,
// not only on the one that answered, and is retried.
func testClusterSelfHeal(t *testing.T, ctx context.Context, rdb *redis.ClusterClient, shards []testserver.Shard) {
	lib := pelwarden.NewLibrary(rdb)
	_, err := lib.Load(ctx)
	require.NoError(t, err)
	target, other := shards[1], shards[2]
	f := clusterFixture(t, rdb, func(slot int) bool { return target.Owns(slot) && !newPrimarySlots.Contains(slot) })
	ids := f.Produce(3, order)
	f.LeavePending("dead-consumer", 3)

	for _, s := range []testserver.Shard{target, other} {
		node := nodeClient(t, s.Primary)
		require.NoError(t, node.FunctionFlush(ctx).Err())
		require.ErrorContains(t, node.FCallRO(ctx, pelwarden.FunctionVersion, nil).Err(), "Function not found", s.Primary.Addr())
	}

	page, err := lib.Claim(ctx, pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "rescuer"})
	require.NoError(t, err)
	require.True(t, page.Done())
	var got []string
	for _, e := range page.Entries {
		got = append(got, e.ID)
	}
	require.Equal(t, ids, got)
	f.RequirePending(ids[0], pelwardentest.Pending{Consumer: "rescuer"})

	for _, s := range shards {
		v, err := nodeClient(t, s.Primary).FCallRO(ctx, pelwarden.FunctionVersion, nil).Text()
		require.NoError(t, err, s.Primary.Addr())
		require.Equal(t, pelwarden.LibraryVersion, v, s.Primary.Addr())
	}
}

// A running driver heals a shard that lost the library (FUNCTION FLUSH on
// its primary): its next function call there answers "Function not found",
// the library is loaded again on every primary and the call retried, and
// the consumer goes on without an error reaching Run.
func testClusterDriverSelfHeal(t *testing.T, ctx context.Context, rdb *redis.ClusterClient, s testserver.Shard) {
	f := clusterFixture(t, rdb, func(slot int) bool { return s.Owns(slot) && !newPrimarySlots.Contains(slot) })
	m := &pelwardentest.Metrics{}
	// After the flush every entry fails once: its release and its reclaim
	// are function calls (reads and quick acks are not).
	var failOnce atomic.Bool
	seen := &pelwardentest.Calls{}
	cfg := driver.Config{Consumer: "healer", MaxDeliveries: 3, Handler: driver.HandlerFunc(func(_ context.Context, msg *driver.Message) error {
		if seen.Add(msg.ID) == 1 && failOnce.Load() {
			return errors.New("first delivery fails")
		}
		return nil
	})}
	cfg.Metrics = m
	r := f.RunConsumer(cfg)
	f.Produce(100, order)
	f.Eventually("100 acked", func() bool { return m.Total(driver.EventAcked) == 100 })

	node := nodeClient(t, s.Primary)
	require.NoError(t, node.FunctionFlush(ctx).Err())
	require.ErrorContains(t, node.FCallRO(ctx, pelwarden.FunctionVersion, nil).Err(), "Function not found")
	failOnce.Store(true)
	f.Produce(100, order)
	f.Eventually("200 acked", func() bool { return m.Total(driver.EventAcked) == 200 })
	require.NoError(t, r.Stop())
	require.Zero(t, m.Total(driver.EventCommandError), "the reload happened inside the calls, invisibly")
	require.Zero(t, f.PendingCount())
	v, err := node.FCallRO(ctx, pelwarden.FunctionVersion, nil).Text()
	require.NoError(t, err, "the library is back on %s", s.Primary.Addr())
	require.Equal(t, pelwarden.LibraryVersion, v)
}

// A primary added to the cluster has no library; Load finds it and loads it
// there, and the library works on keys of the slots it was given.
func testClusterNewPrimary(t *testing.T, ctx context.Context, c *testserver.Cluster, rdb *redis.ClusterClient) {
	clearSlots(t, ctx, c, newPrimarySlots)
	n, err := c.AddPrimary(ctx, newPrimarySlots)
	require.NoError(t, err)
	clusterGrown = true
	node := nodeClient(t, n)
	require.ErrorContains(t, node.FCallRO(ctx, pelwarden.FunctionVersion, nil).Err(), "Function not found", "a new node starts empty")
	shards, err := c.Shards(ctx)
	require.NoError(t, err)
	require.Len(t, shards, testserver.DefaultClusterPrimaries+1)

	lib := pelwarden.NewLibrary(rdb)
	res, err := lib.Load(ctx)
	require.NoError(t, err)
	require.Len(t, res.Nodes, len(shards), "one NodeLoad per primary")
	var found bool
	for _, nl := range res.Nodes {
		if nl.Addr == n.Addr() {
			found = true
			require.Equal(t, pelwarden.NodeLoad{Addr: n.Addr(), After: pelwarden.LibraryVersion, Action: pelwarden.ActionLoaded}, nl)
		} else {
			require.Equal(t, pelwarden.ActionCurrent, nl.Action, nl.Addr)
		}
	}
	require.True(t, found, "Load visited the new primary %s: %+v", n.Addr(), res.Nodes)
	v, err := node.FCallRO(ctx, pelwarden.FunctionVersion, nil).Text()
	require.NoError(t, err)
	require.Equal(t, pelwarden.LibraryVersion, v)

	// Keys of the moved slots live on the new primary, and the library
	// works there.
	f := clusterFixture(t, rdb, newPrimarySlots.Contains)
	t.Cleanup(func() { // keep the slots empty for a later run (-count)
		_ = rdb.Del(context.Background(), f.Stream, f.DeadLetterStream).Err()
	})
	ids := f.Produce(2, order)
	f.LeavePending("dead-consumer", 2)
	page, err := lib.Claim(ctx, pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "rescuer"})
	require.NoError(t, err)
	require.Len(t, page.Entries, 2)
	ack, err := lib.Ack(ctx, pelwarden.AckArgs{Stream: f.Stream, Group: f.Group, Consumer: "rescuer", IDs: ids})
	require.NoError(t, err)
	require.EqualValues(t, 2, ack.Acked)
	l, err := node.XLen(ctx, f.Stream).Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, l, "the stream lives on the new primary")
}

// keyShards are the shards with slots outside newPrimarySlots (every shard,
// unless an earlier run in this process added a primary).
func keyShards(shards []testserver.Shard) []testserver.Shard {
	var out []testserver.Shard
	for _, s := range shards {
		for _, r := range s.Ranges {
			if r.Start < newPrimarySlots.Start || r.End > newPrimarySlots.End {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// clusterKeys returns the test's own keys under a hash tag whose slot
// satisfies want.
func clusterKeys(t *testing.T, want func(slot int) bool) pelwardentest.Keys {
	t.Helper()
	base := strings.Trim(pelwardentest.NewKeys(t).Stream, "{}")
	for i := range 1 << 20 {
		tag := fmt.Sprintf("{%s.%d}", base, i)
		if want(pelwarden.Slot(tag)) {
			return pelwardentest.Keys{Stream: tag, DeadLetterStream: pelwarden.DeadLetterStreamFor(tag), Group: pelwardentest.DefaultGroup}
		}
	}
	t.Fatal("no hash tag found for the wanted slots")
	return pelwardentest.Keys{}
}

// clusterFixture returns a pelwardentest fixture on the cluster, on
// clusterKeys(t, want), with its group created at "0".
func clusterFixture(t *testing.T, rdb *redis.ClusterClient, want func(slot int) bool) *pelwardentest.Fixture {
	t.Helper()
	f := pelwardentest.Use(t, rdb).FixtureFor(t, clusterKeys(t, want))
	require.NoError(t, rdb.XGroupCreateMkStream(f.Context(), f.Stream, f.Group, "0").Err())
	return f
}

// clearSlots deletes the keys that tests which have ended left in the
// slots of r, on the primaries that own them, naming them in the log.
func clearSlots(t *testing.T, ctx context.Context, c *testserver.Cluster, r testserver.SlotRange) {
	t.Helper()
	shards, err := c.Shards(ctx)
	require.NoError(t, err)
	nodes := make([]*redis.Client, len(shards)) // one client per primary, made on first use
	for slot := r.Start; slot <= r.End; slot++ {
		for i, s := range shards {
			if !s.Owns(slot) {
				continue
			}
			if nodes[i] == nil {
				nodes[i] = nodeClient(t, s.Primary)
			}
			node := nodes[i]
			keys, err := node.ClusterGetKeysInSlot(ctx, slot, 1000).Result()
			require.NoError(t, err)
			if len(keys) > 0 {
				t.Logf("slot %d: removing %d keys earlier tests left: %q", slot, len(keys), keys)
				require.NoError(t, node.Del(ctx, keys...).Err())
			}
		}
	}
}

// nodeClient returns a client for one node, closed when the test ends.
func nodeClient(t *testing.T, n *testserver.ClusterNode) *redis.Client {
	c := n.Client()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// countHook counts the commands a client sends.
type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// The driver runs on a ClusterClient when the stream and its dead-letter
// stream share a hash tag: reads, acks, reclaims and dead-letters reach the
// shard that owns them.
func testClusterDriver(t *testing.T, ctx context.Context, rdb *redis.ClusterClient, s testserver.Shard) {
	f := clusterFixture(t, rdb, func(slot int) bool { return s.Owns(slot) && !newPrimarySlots.Contains(slot) })
	ids := f.Produce(200, order)
	poison := ids[7]
	m := &pelwardentest.Metrics{}
	cfg := driver.Config{Consumer: "cluster-worker", MaxDeliveries: 3, Handler: driver.HandlerFunc(func(ctx context.Context, msg *driver.Message) error {
		if msg.ID == poison {
			return errors.New("poison")
		}
		return nil
	})}
	cfg.Metrics = m
	r := f.RunConsumer(cfg)
	f.Eventually("199 acked and the poison entry dead-lettered", func() bool {
		n, _ := rdb.XLen(ctx, f.DeadLetterStream).Result()
		return m.Total(driver.EventAcked) == 199 && n == 1
	})
	require.NoError(t, r.Stop())
	require.Zero(t, f.PendingCount())
}

// The ACL guide's consumer role works on a Redis Cluster too, with the two
// rules the ACL guide says go-redis's cluster client adds (CLUSTER SLOTS and
// COMMAND); without them the consumer stops with an error naming what is
// missing. ACL users are per node: the user is created on every node.
func testClusterLeastPrivilege(t *testing.T, ctx context.Context, c *testserver.Cluster, admin *redis.ClusterClient, s testserver.Shard) {
	f := clusterFixture(t, admin, func(slot int) bool { return s.Owns(slot) && !newPrimarySlots.Contains(slot) })
	ids := f.Produce(100, order)
	poison := ids[3]

	b := make([]byte, 6)
	_, _ = rand.Read(b)
	user, pass := "pw-cluster-consumer-"+hex.EncodeToString(b), newSecret()
	setUser := func(extra ...string) {
		args := []any{"ACL", "SETUSER", user}
		for _, r := range readmeACL(t)["consumer"] {
			if strings.HasPrefix(r, ">") {
				r = ">" + pass
			}
			args = append(args, strings.ReplaceAll(r, readmeStream, f.Stream))
		}
		for _, r := range extra {
			args = append(args, r)
		}
		for _, n := range c.Nodes() {
			if !n.Stopped() {
				require.NoError(t, nodeClient(t, n).Do(ctx, args...).Err(), "%s: %v", n.Addr(), args)
			}
		}
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, n := range c.Nodes() {
			if !n.Stopped() {
				nc := n.Client()
				nc.Do(cctx, "ACL", "DELUSER", user)
				_ = nc.Close()
			}
		}
	})
	consumerClient := func() *redis.ClusterClient {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Username: user, Password: pass,
			DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	m := &pelwardentest.Metrics{}
	cfg := driver.Config{Consumer: "cluster-least-privilege", MaxDeliveries: 3, Handler: driver.HandlerFunc(func(ctx context.Context, msg *driver.Message) error {
		if msg.ID == poison {
			return driver.DeadLetter(errors.New("poison"))
		}
		return nil
	})}
	cfg.CreateGroup = false // the ACL guide's consumer line has no +xgroup|create
	cfg.Metrics = m

	setUser() // the ACL guide's line alone
	err := runUntilError(t, f.WithClient(consumerClient()), cfg)
	require.ErrorContains(t, err, "cluster|slots", "the refused command is named")

	setUser("+cluster|slots", "+command")
	r := f.WithClient(consumerClient()).RunConsumer(cfg)
	f.Eventually("99 acked and the poison entry dead-lettered", func() bool {
		n, _ := admin.XLen(ctx, f.DeadLetterStream).Result()
		return m.Total(driver.EventAcked) == len(ids)-1 && n == 1
	})
	require.NoError(t, r.Stop())
	require.Zero(t, f.PendingCount())
}
