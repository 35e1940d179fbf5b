package integration_test

import (
	"context"
	"errors"
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
	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// failoverWait bounds each "eventually" of the failover test: a promotion
// takes the node timeout (2 s) plus an election, a restarted node a full
// sync, and the machine is small and busy.
const failoverWait = 3 * time.Minute

// poisonEvery: one produced entry in this many is poison (its handler asks
// for the dead-letter stream).
const poisonEvery = 50

// TestClusterFailover kills a primary of a Redis Cluster (three primaries,
// one replica each) while consumers run on one hash-tagged stream per shard:
//
//   - the replica is promoted and already has the library (replication):
//     FUNCTION LIST on it shows it before any Load, and the consumers'
//     client never sends FUNCTION LOAD;
//   - the consumers of the failed shard follow the promotion by themselves:
//     their client's periodic slot-map reload is set to an hour, and the old
//     primary stays down until they reach the new one;
//   - the old primary comes back as a replica, and everything drains.
//
// Producers make each write durable before counting it (XADD then WAIT 1 on
// the same connection), and handlers record their success the same way
// before returning nil. Redis replicates asynchronously, so an ack (or a
// dead-letter) acknowledged by the killed primary may vanish with it: the
// entry comes back and runs again. At the end every produced entry was
// acked after a durable handler success or sits in the dead-letter stream
// exactly once, no PEL holds anything, and the log says how many acks were
// lost and redone (duplicates, not losses).
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := testserver.StartCluster(ctx, clusterImage(), testserver.ClusterOptions{ReplicasPerPrimary: 1})
	require.NoError(t, err, "start a Redis Cluster with replicas of %s", clusterImage())
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	shards, err := c.Shards(ctx)
	require.NoError(t, err)
	require.Len(t, shards, testserver.DefaultClusterPrimaries)
	for _, s := range shards {
		require.Len(t, s.Replicas, 1, "shard of %s", s.Primary.Addr())
	}

	admin := c.Client() // the test's own reads and the initial Load
	t.Cleanup(func() { _ = admin.Close() })
	res, err := pelwarden.Load(ctx, admin)
	require.NoError(t, err)
	require.Len(t, res.Nodes, len(shards))
	for _, s := range shards {
		replica := nodeClient(t, s.Replicas[0])
		eventually(t, failoverWait, "the library replicated to "+s.Replicas[0].Addr(), func() (string, bool) {
			return libraryOn(ctx, replica)
		})
	}

	// The consumers' client. go-redis reloads a cluster client's slot map
	// on MOVED and every ClusterStateReloadInterval (60 s by default); with
	// an hour, following the promotion is the driver's own doing. It counts
	// FUNCTION LOAD on every node and records the ids the server confirmed
	// acked or dead-lettered.
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: c.Addrs(), DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		ClusterStateReloadInterval: time.Hour,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	var functionLoads atomic.Int64
	rdb.OnNewNode(func(n *redis.Client) { n.AddHook(functionLoadHook{&functionLoads}) })
	settled := newSettledLog()
	rdb.AddHook(settled)
	// The application's client, for producers and handlers: its own slot
	// map, so its reloads do not help the consumers.
	app := c.Client()
	t.Cleanup(func() { _ = app.Close() })

	streams := make([]*failoverStream, len(shards))
	for i, s := range shards {
		fs := &failoverStream{shard: i, k: clusterKeys(t, s.Owns), app: app, settled: settled,
			produced: map[string]bool{}, unconfirmed: map[string]bool{}, ok: map[string]int{},
			lostAcks: map[string]int{}, lostDLs: map[string]int{}}
		fs.runs = fs.k.Stream + ":runs"
		require.NoError(t, fs.createGroup(ctx))
		streams[i] = fs
	}
	m := &pelwardentest.Metrics{}
	kit := pelwardentest.Use(t, admin) // the library is loaded: Use finds it current
	var consumers []*pelwardentest.Consumer
	for _, fs := range streams {
		f := kit.FixtureFor(t, fs.k).WithClient(rdb)
		for _, name := range []string{"a", "b"} {
			consumers = append(consumers, f.RunConsumer(driver.Config{
				Consumer: fmt.Sprintf("%s-%d", name, fs.shard), Handler: driver.HandlerFunc(fs.handle),
				// CreateGroup stays false: a group vanishing in the failover
				// must fail the test.
				MaxDeliveries: driver.NoDeliveryLimit,
				MinIdle:       time.Second,
				Metrics:       m,
				Tuning:        driver.Tuning{ReclaimInterval: 200 * time.Millisecond, ReadBlock: 200 * time.Millisecond},
			}))
		}
	}
	stopProducers := make(chan struct{})
	var producers sync.WaitGroup
	for _, fs := range streams {
		producers.Go(func() { fs.produce(ctx, stopProducers) })
	}
	t.Cleanup(func() {
		select {
		case <-stopProducers:
		default:
			close(stopProducers)
		}
		producers.Wait()
	})
	progress := func(what string, min int) {
		eventually(t, failoverWait, what, func() (string, bool) {
			for _, fs := range streams {
				if n := fs.successes(); n < min {
					return fmt.Sprintf("stream %s: %d handler successes", fs.k.Stream, n), false
				}
			}
			return "", true
		})
	}
	progress("every stream consumed", 200)

	victim := shards[1]
	promoted := victim.Replicas[0]
	promotedClient := nodeClient(t, promoted)
	vs := streams[1]
	// Replication lag, made certain: the replica is cut off its primary (it
	// drops the link and cannot authenticate again) but keeps its cluster
	// bus links, so it is still promoted. What the primary accepts from now
	// on is lost with it: the writes WAIT does not confirm, the acks, reads
	// and releases of the consumers.
	require.NoError(t, promotedClient.ConfigSet(ctx, "masterauth", "not-the-password").Err())
	require.NoError(t, promotedClient.Do(ctx, "CLIENT", "KILL", "TYPE", "master").Err())
	eventually(t, failoverWait, "the replica "+promoted.Addr()+" cut off", func() (string, bool) {
		info, err := promotedClient.Info(ctx, "replication").Result()
		if err != nil {
			return err.Error(), false
		}
		return "link still up", strings.Contains(info, "master_link_status:down")
	})
	cut := vs.unconfirmedCount()
	eventually(t, failoverWait, "writes the replica does not have", func() (string, bool) {
		n := vs.unconfirmedCount() - cut
		return fmt.Sprintf("%d unconfirmed writes since the cut", n), n >= 20
	})
	require.NoError(t, victim.Primary.Kill(ctx))
	killed := time.Now()
	eventually(t, failoverWait, "the replica "+promoted.Addr()+" promoted", func() (string, bool) {
		info, err := promotedClient.Info(ctx, "replication").Result()
		if err != nil {
			return err.Error(), false
		}
		return "still a replica", strings.Contains(info, "role:master")
	})
	promotion := time.Since(killed)
	require.NoError(t, promotedClient.ConfigSet(ctx, "masterauth", "").Err())
	// Before anything could load it there: the library came by replication.
	why, ok := libraryOn(ctx, promotedClient)
	require.True(t, ok, why)
	require.Zero(t, functionLoads.Load(), "no FUNCTION LOAD was sent by the consumers' client")

	// The consumers of the failed shard reach the new primary while the old
	// one is still down (nothing answers MOVED for them).
	eventually(t, failoverWait, "both consumers of "+vs.k.Stream+" on the new primary", func() (string, bool) {
		cs, err := promotedClient.XInfoConsumers(ctx, vs.k.Stream, vs.k.Group).Result()
		if err != nil {
			return err.Error(), false
		}
		fresh := 0
		for _, c := range cs {
			if c.Idle < time.Second {
				fresh++
			}
		}
		return fmt.Sprintf("consumers: %+v", cs), fresh == 2
	})
	followed := time.Since(killed)

	require.NoError(t, victim.Primary.Start(ctx))
	require.NoError(t, c.Wait(ctx))
	after, err := c.Shards(ctx)
	require.NoError(t, err)
	var rejoined bool
	for _, s := range after {
		if s.Primary == promoted {
			for _, r := range s.Replicas {
				rejoined = rejoined || r == victim.Primary
			}
		}
	}
	require.True(t, rejoined, "the old primary %s rejoined as a replica of %s", victim.Primary.Addr(), promoted.Addr())
	base := make([]int, len(streams))
	for i, fs := range streams {
		base[i] = fs.successes()
	}
	eventually(t, failoverWait, "every stream consumed after the failover", func() (string, bool) {
		for i, fs := range streams {
			if n := fs.successes() - base[i]; n < 200 {
				return fmt.Sprintf("stream %s: %d handler successes since the old primary came back", fs.k.Stream, n), false
			}
		}
		return "", true
	})
	close(stopProducers)
	producers.Wait()

	lib := pelwarden.NewLibrary(admin)
	eventually(t, failoverWait, "every stream drained", func() (string, bool) {
		for _, fs := range streams {
			if why, ok := fs.drained(ctx, admin, lib); !ok {
				return why, false
			}
		}
		return "", true
	})
	for _, r := range consumers {
		require.NoError(t, r.Stop())
	}

	var total failoverReport
	for _, fs := range streams {
		r := fs.verify(t, ctx, admin)
		if fs == vs {
			require.Positive(t, r.unconfirmedLost, "writes the killed primary had accepted were lost (the failover lost data)")
		}
		t.Logf("stream %s (shard %d%s): %s", fs.k.Stream, fs.shard, map[bool]string{true: ", failed over"}[fs == vs], r)
		total.add(r)
	}
	require.Zero(t, functionLoads.Load(), "no FUNCTION LOAD was needed at any point")
	t.Logf("failover of %s: replica %s promoted %v after the kill; its consumers were on it %v after the kill; command errors %d",
		victim.Primary.Addr(), promoted.Addr(), promotion.Round(100*time.Millisecond), followed.Round(100*time.Millisecond), m.Total(driver.EventCommandError))
	t.Logf("all streams: %s", total)
}

// libraryOn reports whether FUNCTION LIST on the node shows the pelwarden
// library with its version function, and FCALL_RO of that function answers
// the embedded version.
func libraryOn(ctx context.Context, node *redis.Client) (string, bool) {
	libs, err := node.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: pelwarden.LibraryName}).Result()
	if err != nil {
		return "FUNCTION LIST: " + err.Error(), false
	}
	if len(libs) != 1 || libs[0].Name != pelwarden.LibraryName {
		return fmt.Sprintf("FUNCTION LIST: %+v", libs), false
	}
	found := false
	for _, f := range libs[0].Functions {
		found = found || f.Name == pelwarden.FunctionVersion
	}
	if !found {
		return fmt.Sprintf("FUNCTION LIST: no %s in %+v", pelwarden.FunctionVersion, libs[0].Functions), false
	}
	v, err := node.FCallRO(ctx, pelwarden.FunctionVersion, nil).Text()
	if err != nil || v != pelwarden.LibraryVersion {
		return fmt.Sprintf("FCALL_RO %s: %q, %v", pelwarden.FunctionVersion, v, err), false
	}
	return "", true
}

// eventually polls cond every 100 ms until it holds, failing the test with
// cond's last explanation after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() (why string, ok bool)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		why, ok := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting %v for %s; last: %s", d, what, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// failoverStream is one stream of the failover test, with its producer,
// its handler and what they saw.
type failoverStream struct {
	shard   int
	k       pelwardentest.Keys
	runs    string // hash of durable handler successes: id -> runs
	app     *redis.ClusterClient
	settled *settledLog

	mu sync.Mutex
	// produced ids were confirmed by WAIT; unconfirmed ones were written but
	// WAIT did not confirm them (they may have vanished in the failover).
	produced, unconfirmed map[string]bool
	// ok counts handler successes per id (durable: WAIT confirmed the
	// success record); calls counts every handler call.
	ok    map[string]int
	calls int
	// lostAcks and lostDLs: ids delivered again after the server had
	// confirmed them acked (dead-lettered), with how many such deliveries.
	lostAcks, lostDLs map[string]int
}

// createGroup creates the group at 0 and waits for a replica to have it.
func (fs *failoverStream) createGroup(ctx context.Context) error {
	node, err := fs.app.MasterForKey(ctx, fs.k.Stream)
	if err != nil {
		return err
	}
	pipe := node.Pipeline()
	pipe.XGroupCreateMkStream(ctx, fs.k.Stream, fs.k.Group, "0")
	wait := pipe.Do(ctx, "WAIT", 1, 10000)
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	if n, err := wait.Int64(); err != nil || n < 1 {
		return fmt.Errorf("group of %s not replicated: WAIT %d, %v", fs.k.Stream, n, err)
	}
	return nil
}

// Replica confirmations: a handler's success record waits up to
// successWait for one; a producer's batch waits produceWait, so that a
// producer cut off with its primary keeps writing while the primary still
// takes writes (see TestClusterPartition). An entry whose WAIT timed out
// counts as unconfirmed, nothing worse.
const (
	successWait = 1000 // ms
	produceWait = 100  // ms
)

// durable runs cmds then WAIT 1 in one pipeline on the node that serves the
// stream (as app sees the cluster), so WAIT covers them; it reports whether
// a replica has them within waitMS.
func (fs *failoverStream) durable(ctx context.Context, app *redis.ClusterClient, waitMS int, cmds func(redis.Pipeliner)) (bool, error) {
	node, err := app.MasterForKey(ctx, fs.k.Stream)
	if err != nil {
		return false, err
	}
	pipe := node.Pipeline()
	cmds(pipe)
	wait := pipe.Do(ctx, "WAIT", 1, waitMS)
	_, err = pipe.Exec(ctx)
	if err != nil {
		// A stale slot map (MOVED, a dead node): ask the client to reload.
		app.ReloadState(ctx)
		return false, err
	}
	n, err := wait.Int64()
	return err == nil && n >= 1, err
}

// produce adds batches of 10 entries through fs.app until stop is closed.
func (fs *failoverStream) produce(ctx context.Context, stop <-chan struct{}) {
	fs.produceWith(ctx, fs.app, stop, 0)
}

// produceWith adds batches of 10 entries through app until stop is closed;
// an entry counts as produced once WAIT 1 confirmed a replica has it. Its
// "n" fields start at first (so two producers write distinct ones).
func (fs *failoverStream) produceWith(ctx context.Context, app *redis.ClusterClient, stop <-chan struct{}, first int) {
	const batch = 10
	for n := first; ; {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
		adds := make([]*redis.StringCmd, batch)
		ok, err := fs.durable(ctx, app, produceWait, func(p redis.Pipeliner) {
			for i := range adds {
				poison := (n+i)%poisonEvery == poisonEvery-1
				adds[i] = p.XAdd(ctx, &redis.XAddArgs{Stream: fs.k.Stream,
					Values: []string{"n", strconv.Itoa(n + i), "poison", strconv.FormatBool(poison)}})
			}
		})
		fs.mu.Lock()
		for _, a := range adds {
			if a == nil || a.Err() != nil {
				continue
			}
			if ok {
				fs.produced[a.Val()] = true
			} else {
				fs.unconfirmed[a.Val()] = true
			}
		}
		fs.mu.Unlock()
		if err == nil {
			n += batch
		}
	}
}

var errPoison = errors.New("poison entry")

// handle is handleWith(fs.app).
func (fs *failoverStream) handle(ctx context.Context, m *driver.Message) error {
	return fs.handleWith(ctx, fs.app, m)
}

// handleWith records the success durably through app (HINCRBY runs, then
// WAIT 1) before returning nil; poison entries are dead-lettered.
func (fs *failoverStream) handleWith(ctx context.Context, app *redis.ClusterClient, m *driver.Message) error {
	acked, deadLettered := fs.settled.has(fs.k.Stream, m.ID)
	fs.mu.Lock()
	fs.calls++
	if acked {
		fs.lostAcks[m.ID]++
	}
	if deadLettered {
		fs.lostDLs[m.ID]++
	}
	fs.mu.Unlock()
	if p, _ := m.Value("poison"); p == "true" {
		return driver.DeadLetter(errPoison)
	}
	ok, err := fs.durable(ctx, app, successWait, func(p redis.Pipeliner) { p.HIncrBy(ctx, fs.runs, m.ID, 1) })
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("success record not confirmed by a replica")
	}
	fs.mu.Lock()
	fs.ok[m.ID]++
	fs.mu.Unlock()
	return nil
}

func (fs *failoverStream) unconfirmedCount() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.unconfirmed)
}

func (fs *failoverStream) successes() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.ok)
}

// drained reports whether the group delivered every entry of the stream and
// its PEL is empty.
func (fs *failoverStream) drained(ctx context.Context, rdb *redis.ClusterClient, lib *pelwarden.Library) (string, bool) {
	st, err := lib.Stats(ctx, pelwarden.StatsArgs{Stream: fs.k.Stream, DeadLetterStream: fs.k.DeadLetterStream, Group: fs.k.Group})
	if err != nil {
		return err.Error(), false
	}
	last, err := rdb.XRevRangeN(ctx, fs.k.Stream, "+", "-", 1).Result()
	if err != nil || len(last) != 1 {
		return fmt.Sprintf("last entry of %s: %v %v", fs.k.Stream, last, err), false
	}
	if st.Pending != 0 || st.LastDeliveredID != last[0].ID {
		return fmt.Sprintf("%s: %d pending, last delivered %s, last entry %s", fs.k.Stream, st.Pending, st.LastDeliveredID, last[0].ID), false
	}
	return "", true
}

// failoverReport sums up one stream (or all of them).
type failoverReport struct {
	produced, unconfirmedKept, unconfirmedLost, entries int
	deadLettered, calls, successes, unique              int
	// lostAcks, lostDLs: entries delivered again after their ack
	// (dead-letter) was confirmed, and how many deliveries that made.
	lostAcks, lostAckRuns, lostDLs, lostDLRuns int
}

func (r *failoverReport) add(o failoverReport) {
	r.produced += o.produced
	r.unconfirmedKept += o.unconfirmedKept
	r.unconfirmedLost += o.unconfirmedLost
	r.entries += o.entries
	r.deadLettered += o.deadLettered
	r.calls += o.calls
	r.successes += o.successes
	r.unique += o.unique
	r.lostAcks += o.lostAcks
	r.lostAckRuns += o.lostAckRuns
	r.lostDLs += o.lostDLs
	r.lostDLRuns += o.lostDLRuns
}

func (r failoverReport) String() string {
	return fmt.Sprintf("%d entries produced (WAIT-confirmed), %d more written without confirmation (%d kept, %d lost in the failover); "+
		"%d in the stream: %d dead-lettered once, %d acked after a durable success; %d handler calls, %d successes, "+
		"%d duplicates (successes - unique); acks lost in the failover and redone: %d entries (%d deliveries); "+
		"dead-letters lost and redone: %d entries (%d deliveries)",
		r.produced, r.unconfirmedKept+r.unconfirmedLost, r.unconfirmedKept, r.unconfirmedLost, r.entries, r.deadLettered,
		r.unique, r.calls, r.successes, r.successes-r.unique, r.lostAcks, r.lostAckRuns, r.lostDLs, r.lostDLRuns)
}

// verify checks the invariant on the drained stream: every entry in it (every
// produced entry among them) was acked after a durable handler success, or
// is poison and sits in the dead-letter stream exactly once.
func (fs *failoverStream) verify(t *testing.T, ctx context.Context, rdb *redis.ClusterClient) failoverReport {
	t.Helper()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	entries, err := rdb.XRange(ctx, fs.k.Stream, "-", "+").Result()
	require.NoError(t, err)
	inStream := map[string]bool{}
	for _, e := range entries {
		inStream[e.ID] = true
	}
	for id := range fs.produced {
		require.True(t, inStream[id], "%s: WAIT-confirmed entry %s vanished", fs.k.Stream, id)
	}
	recs, err := rdb.XRange(ctx, fs.k.DeadLetterStream, "-", "+").Result()
	require.NoError(t, err)
	dead := map[string]int{}
	for _, r := range recs {
		require.Equal(t, fs.k.Stream, r.Values[pelwarden.FieldStream])
		require.Equal(t, pelwarden.ReasonHandler, r.Values[pelwarden.FieldReason])
		dead[r.Values[pelwarden.FieldOriginalID].(string)]++
	}
	runs, err := rdb.HGetAll(ctx, fs.runs).Result()
	require.NoError(t, err)
	var r failoverReport
	for _, e := range entries {
		if e.Values["poison"] == "true" {
			require.Equal(t, 1, dead[e.ID], "%s: poison %s dead-lettered exactly once", fs.k.Stream, e.ID)
			require.Zero(t, fs.ok[e.ID], "%s: poison %s succeeded", fs.k.Stream, e.ID)
			r.deadLettered++
			continue
		}
		require.Zero(t, dead[e.ID], "%s: %s dead-lettered", fs.k.Stream, e.ID)
		require.Positive(t, fs.ok[e.ID], "%s: %s never succeeded", fs.k.Stream, e.ID)
		n, _ := strconv.Atoi(runs[e.ID])
		require.Positive(t, n, "%s: the durable success record of %s vanished", fs.k.Stream, e.ID)
		r.unique++
	}
	for id, n := range dead {
		require.True(t, inStream[id], "%s: dead-letter record of %s, not in the stream", fs.k.Stream, id)
		require.Equal(t, 1, n)
	}
	for id := range fs.unconfirmed {
		if inStream[id] {
			r.unconfirmedKept++
		} else {
			r.unconfirmedLost++
		}
	}
	for _, n := range fs.ok {
		r.successes += n
	}
	r.produced = len(fs.produced)
	r.entries = len(entries)
	r.calls = fs.calls
	r.lostAcks, r.lostDLs = len(fs.lostAcks), len(fs.lostDLs)
	for _, n := range fs.lostAcks {
		r.lostAckRuns += n
	}
	for _, n := range fs.lostDLs {
		r.lostDLRuns += n
	}
	return r
}

// settledLog records, per stream, the ids the server confirmed acked (by
// pelwarden_v1_ack) or dead-lettered (pelwarden_v1_deadletter) through the
// client it hooks. A later delivery of such an id means the server forgot
// it: the write was lost in a failover.
type settledLog struct {
	mu           sync.Mutex
	acked, moved map[string]map[string]bool // stream -> ids
}

func newSettledLog() *settledLog {
	return &settledLog{acked: map[string]map[string]bool{}, moved: map[string]map[string]bool{}}
}

func (l *settledLog) has(stream, id string) (acked, deadLettered bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked[stream][id], l.moved[stream][id]
}

func (l *settledLog) record(dst map[string]map[string]bool, stream string, ids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if dst[stream] == nil {
		dst[stream] = map[string]bool{}
	}
	for _, id := range ids {
		dst[stream][id] = true
	}
}

// DialHook implements redis.Hook.
func (l *settledLog) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook: it reads the replies of the ack and
// dead-letter functions. FCALL fn numkeys keys... args...
func (l *settledLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		c, ok := cmd.(*redis.Cmd)
		if err != nil || !ok || cmd.Name() != "fcall" {
			return err
		}
		args := cmd.Args()
		reply, _ := c.Val().([]any)
		switch {
		case len(args) > 7 && args[1] == pelwarden.FunctionAck && len(reply) == 2:
			// ARGV: group, consumer, delete, id...
			refused := map[string]bool{}
			for _, id := range anyStrings(asSlice(reply[1])) {
				refused[id] = true
			}
			var ids []string
			for _, a := range args[7:] {
				if id := fmt.Sprint(a); !refused[id] {
					ids = append(ids, id)
				}
			}
			l.record(l.acked, fmt.Sprint(args[3]), ids)
		case len(args) > 3 && args[1] == pelwarden.FunctionDeadLetter && len(reply) > 0:
			l.record(l.moved, fmt.Sprint(args[3]), anyStrings(asSlice(reply[0])))
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook; the library sends no pipelines.
func (l *settledLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// functionLoadHook counts FUNCTION LOAD commands.
type functionLoadHook struct{ n *atomic.Int64 }

func (h functionLoadHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h functionLoadHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && cmd.Name() == "function" && strings.EqualFold(fmt.Sprint(args[1]), "load") {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h functionLoadHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
