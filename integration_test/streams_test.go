package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
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
	"github.com/pelwarden/pelwarden/internal/measure"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// partitionTest is one multi-stream run: a partitioned stream, a producer
// spreading keyed entries over its partitions (some of them poison), and a
// handler that records what it saw.
type partitionTest struct {
	parts []string
	group string

	mu       sync.Mutex
	poison   map[string]map[string]bool // partition -> poison ids
	poisonOf map[string]map[string]bool // partition -> poison keys
	healthy  map[string]map[string]bool // partition -> healthy ids
	handled  map[string]int             // "partition id" -> successful handler calls
	wrong    []string                   // entries whose Message.Stream did not match
	produced int

	succeeded atomic.Int64
}

func newPartitionTest(t *testing.T, n int) *partitionTest {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()) + "." + hex.EncodeToString(b)
	parts, err := pelwarden.Partitions(name, n)
	require.NoError(t, err)
	pt := &partitionTest{parts: parts, group: "g", poison: map[string]map[string]bool{}, poisonOf: map[string]map[string]bool{},
		healthy: map[string]map[string]bool{}, handled: map[string]int{}}
	for _, p := range parts {
		pt.poison[p], pt.poisonOf[p], pt.healthy[p] = map[string]bool{}, map[string]bool{}, map[string]bool{}
	}
	return pt
}

// produce writes n entries keyed "key-<i>" to their partitions
// (pelwarden.PartitionFor), pipelined; every poisonEvery-th is poison.
func (pt *partitionTest) produce(t *testing.T, ctx context.Context, rdb redis.UniversalClient, n, poisonEvery int) {
	t.Helper()
	const batch = 500
	for start := 0; start < n; start += batch {
		pipe := rdb.Pipeline()
		type sent struct {
			part, key string
			poison    bool
			cmd       *redis.StringCmd
		}
		var cmds []sent
		for i := start; i < min(n, start+batch); i++ {
			key := "key-" + strconv.Itoa(i)
			p := pelwarden.PartitionFor(key, len(pt.parts))
			poison := poisonEvery > 0 && i%poisonEvery == poisonEvery-1
			cmd := pipe.XAdd(ctx, &redis.XAddArgs{Stream: pt.parts[p], Values: []any{"key", key, "poison", strconv.FormatBool(poison)}})
			cmds = append(cmds, sent{pt.parts[p], key, poison, cmd})
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		pt.mu.Lock()
		for _, c := range cmds {
			if c.poison {
				pt.poison[c.part][c.cmd.Val()] = true
				pt.poisonOf[c.part][c.key] = true
			} else {
				pt.healthy[c.part][c.cmd.Val()] = true
			}
			pt.produced++
		}
		pt.mu.Unlock()
	}
}

// handler fails poison entries every time and records the others.
func (pt *partitionTest) handler() driver.Handler {
	return driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
		var poison bool
		var key string
		for _, f := range m.Fields {
			switch f.Name {
			case "poison":
				poison = f.Value == "true"
			case "key":
				key = f.Value
			}
		}
		if pt.parts[pelwarden.PartitionFor(key, len(pt.parts))] != m.Stream {
			pt.mu.Lock()
			pt.wrong = append(pt.wrong, m.Stream+" "+m.ID)
			pt.mu.Unlock()
		}
		if poison {
			return fmt.Errorf("poison entry %s", m.ID)
		}
		pt.mu.Lock()
		pt.handled[m.Stream+" "+m.ID]++
		pt.mu.Unlock()
		pt.succeeded.Add(1)
		return nil
	})
}

// config is a fast driver configuration over every partition.
//
// MinIdle is 2 s: with MaxDeliveries 2, a healthy entry whose consumer
// stalls past MinIdle twice (its heartbeat late, a claim by the other
// consumer, then late again) is dead-lettered, and a full run of the suite
// on two cores once did that to healthy entries with a MinIdle of 300 ms.
// Failed (poison) entries come back after ReclaimInterval either way.
func (pt *partitionTest) config(consumer string) driver.Config {
	return driver.Config{
		Streams: pt.parts, Group: pt.group, Consumer: consumer, Handler: pt.handler(),
		CreateGroup: true, MaxDeliveries: 2, MinIdle: 2 * time.Second,

		ShutdownTimeout: 10 * time.Second,
		Tuning:          driver.Tuning{ReclaimInterval: 100 * time.Millisecond, ReadBlock: 200 * time.Millisecond},
	}
}

// settled reports whether every healthy entry was handled, every poison
// entry sits in its partition's dead-letter stream, and no PEL holds
// anything.
func (pt *partitionTest) settled(ctx context.Context, rdb redis.UniversalClient) (bool, string) {
	pt.mu.Lock()
	healthy, poison := 0, 0
	for _, p := range pt.parts {
		healthy += len(pt.healthy[p])
		poison += len(pt.poison[p])
	}
	pt.mu.Unlock()
	if got := pt.succeeded.Load(); got < int64(healthy) {
		return false, fmt.Sprintf("%d of %d healthy entries handled", got, healthy)
	}
	var dead, pending int64
	for _, p := range pt.parts {
		n, err := rdb.XLen(ctx, pelwarden.DeadLetterStreamFor(p)).Result()
		if err != nil {
			return false, err.Error()
		}
		dead += n
		s, err := rdb.XPending(ctx, p, pt.group).Result()
		if err != nil {
			return false, err.Error()
		}
		pending += s.Count
	}
	if dead < int64(poison) || pending > 0 {
		return false, fmt.Sprintf("%d of %d poison entries dead-lettered, %d pending", dead, poison, pending)
	}
	return true, ""
}

// verify checks the end state entry by entry: every healthy entry handled
// at least once and acknowledged, every poison entry dead-lettered exactly
// once, in its own partition's dead-letter stream, and every handler saw
// the partition its entry came from.
func (pt *partitionTest) verify(t *testing.T, ctx context.Context, rdb redis.UniversalClient) {
	t.Helper()
	pt.mu.Lock()
	defer pt.mu.Unlock()
	require.Empty(t, pt.wrong, "Message.Stream named another partition")
	for _, p := range pt.parts {
		for id := range pt.healthy[p] {
			require.NotZero(t, pt.handled[p+" "+id], "healthy entry %s of %s was not handled", id, p)
		}
		recs, err := rdb.XRange(ctx, pelwarden.DeadLetterStreamFor(p), "-", "+").Result()
		require.NoError(t, err)
		// Every record is a poison entry of this partition (its key says
		// so), none is dead-lettered twice, and every poison entry the
		// producer wrote is there. Records beyond those entries are poison
		// entries the producer wrote twice: a cluster client retries a
		// pipeline whose replies timed out, and the XADDs it had applied
		// are added again under new ids the test never saw.
		seen := map[string]int{}
		for _, r := range recs {
			orig, _ := r.Values[pelwarden.FieldOriginalID].(string)
			key, _ := r.Values["key"].(string)
			require.True(t, pt.poisonOf[p][key], "dead-letter record of %s (entry %s, key %q) is not a poison entry of this partition", p, orig, key)
			seen[orig]++
			require.Equal(t, 1, seen[orig], "entry %s of %s dead-lettered twice", orig, p)
		}
		for id := range pt.poison[p] {
			require.Equal(t, 1, seen[id], "poison entry %s of %s: dead-letter records", id, p)
		}
		if extra := len(recs) - len(pt.poison[p]); extra > 0 {
			t.Logf("%s: %d dead letters of poison entries the producer's retried pipeline wrote twice", p, extra)
		}
		s, err := rdb.XPending(ctx, p, pt.group).Result()
		require.NoError(t, err)
		require.Zero(t, s.Count, "PEL of %s", p)
	}
}

// waitSettled polls settled until it holds or the deadline passes.
func (pt *partitionTest) waitSettled(t *testing.T, ctx context.Context, rdb redis.UniversalClient, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := pt.settled(ctx, rdb)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled within %v: %s", within, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startConsumer runs a driver consumer until the test ends; stop returns
// Run's error.
func startConsumer(t *testing.T, rdb redis.UniversalClient, cfg driver.Config) (stop func() error) {
	t.Helper()
	c, err := driver.New(rdb, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// One consumer over several streams of one server: entries of every
// partition are handled with Message.Stream naming their partition, poison
// entries are dead-lettered into their own partition's dead-letter stream,
// and an entry added later to an idle partition still reaches a handler.
func TestDriverStreams(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		pt := newPartitionTest(t, 4)
		stop := startConsumer(t, s.rdb, pt.config("c1"))
		pt.produce(t, ctx, s.rdb, 400, 20)
		pt.waitSettled(t, ctx, s.rdb, time.Minute)

		// Every partition is idle now; one entry in the last one.
		pt.produce(t, ctx, s.rdb, 1, 0)
		pt.waitSettled(t, ctx, s.rdb, 30*time.Second)
		require.NoError(t, stop())
		pt.verify(t, ctx, s.rdb)
	})
}

// Partitions on a three-primary Redis Cluster: Partitions("events", 6) puts
// two partitions on each primary; two consumers given all six drain 30,000
// entries with 3% poison, nothing lost, each poison entry dead-lettered once
// in its partition's dead-letter stream; and each primary does 15-55% of
// the run's server CPU. The test starts a cluster of its own: the shared
// one's topology changes while its tests run.
func TestPartitionsOnCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cluster, err := testserver.StartCluster(ctx, clusterImage(), testserver.ClusterOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Close() })
	rdb := cluster.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	shards, err := cluster.Shards(ctx)
	require.NoError(t, err)
	require.Len(t, shards, 3)

	parts, err := pelwarden.Partitions("events", 6)
	require.NoError(t, err)
	perPrimary := map[string]int{}
	for _, p := range parts {
		for _, sh := range shards {
			if sh.Owns(pelwarden.Slot(p)) {
				require.True(t, sh.Owns(pelwarden.Slot(pelwarden.DeadLetterStreamFor(p))), "%s and its dead-letter stream share a primary", p)
				perPrimary[sh.Primary.Addr()]++
			}
		}
	}
	require.Len(t, perPrimary, 3, "partitions of \"events\" by primary: %v", perPrimary)
	for addr, n := range perPrimary {
		require.Equal(t, 2, n, "partitions of \"events\" on %s", addr)
	}

	pt := newPartitionTest(t, 6)
	cpu := func() map[string]time.Duration {
		out := map[string]time.Duration{}
		for _, sh := range shards {
			c := sh.Primary.Client()
			cpu, err := measure.ServerCPU(ctx, c)
			_ = c.Close()
			require.NoError(t, err)
			out[sh.Primary.Addr()] = cpu
		}
		return out
	}
	before := cpu()
	stopA := startConsumer(t, rdb, pt.config("a"))
	stopB := startConsumer(t, rdb, pt.config("b"))
	const entries = 30_000
	pt.produce(t, ctx, rdb, entries, 33) // 909 poison entries: 3%
	pt.waitSettled(t, ctx, rdb, 5*time.Minute)
	after := cpu()
	require.NoError(t, stopA())
	require.NoError(t, stopB())
	pt.verify(t, ctx, rdb)

	var total time.Duration
	for addr := range after {
		total += after[addr] - before[addr]
	}
	for addr := range after {
		share := float64(after[addr]-before[addr]) / float64(total)
		t.Logf("primary %s: %v of server CPU (%.0f%%)", addr, after[addr]-before[addr], 100*share)
		require.True(t, share >= 0.15 && share <= 0.55, "primary %s did %.0f%% of the run's server CPU", addr, 100*share)
	}
}

// Streams take turns: entries of a quiet partition are handled while a
// flooded one is still draining, not after it.
func TestDriverStreamsTakeTurns(t *testing.T) {
	t.Parallel()
	s := servers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pt := newPartitionTest(t, 2)
	const flood, quiet = 20_000, 20
	for _, p := range pt.parts {
		require.NoError(t, s.rdb.XGroupCreateMkStream(ctx, p, pt.group, "0").Err())
	}
	pipe := s.rdb.Pipeline()
	for i := range flood {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: pt.parts[0], Values: []any{"n", i}})
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)

	var floodDone, quietDone atomic.Int64
	var floodAtQuietEnd atomic.Int64
	cfg := pt.config("turns")
	cfg.Handler = driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
		time.Sleep(time.Millisecond)
		if m.Stream == pt.parts[1] {
			if quietDone.Add(1) == quiet {
				floodAtQuietEnd.Store(floodDone.Load())
			}
			return nil
		}
		floodDone.Add(1)
		return nil
	})
	stop := startConsumer(t, s.rdb, cfg)
	for floodDone.Load() < flood/10 {
		time.Sleep(10 * time.Millisecond)
	}
	for i := range quiet {
		require.NoError(t, s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: pt.parts[1], Values: []any{"q", i}}).Err())
	}
	for quietDone.Load() < quiet || floodDone.Load() < flood {
		require.NoError(t, ctx.Err(), "flood %d/%d, quiet %d/%d", floodDone.Load(), flood, quietDone.Load(), quiet)
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, stop())
	require.Less(t, floodAtQuietEnd.Load(), int64(flood*3/4),
		"the quiet partition's entries waited for most of the flood (%d of %d handled before them)", floodAtQuietEnd.Load(), flood)
	t.Logf("the quiet partition's %d entries were done when %d of the flood's %d were", quiet, floodAtQuietEnd.Load(), flood)
}
