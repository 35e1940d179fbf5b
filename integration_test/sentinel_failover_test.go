package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// sentinelWait bounds each wait of the Sentinel test: a failover takes the
// down-after time (2 s), an election and the reconfiguration of the other
// replica, on a small and busy machine.
const sentinelWait = 3 * time.Minute

// TestSentinelFailover runs driver consumers on a redis.NewFailoverClient
// against a primary with two replicas watched by three sentinels, and kills
// the primary (SIGKILL: it cannot send its replicas anything more) while
// producers write and the consumers work:
//
//   - producers count an entry as confirmed only once WAIT 1 says a
//     replica has it (XADD and WAIT in one pipeline, on one connection);
//   - before the kill both replicas are cut off the primary, so writes
//     only the primary has (unconfirmed ones, reads, acks) are certain to
//     exist and to be lost with it;
//   - the sentinels promote a replica; the consumers' client follows by
//     itself and the consumers go on, no Run returns;
//   - at the end every confirmed entry is in the stream and was handled
//     (at least once: an ack the killed primary had not passed on is lost,
//     and its entry runs again), the group's PEL is empty, and every Run
//     returns nil. The log gives the counts.
//
// The command line connects through the sentinels too (--sentinel), after
// the failover.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dep, err := testserver.StartSentinel(ctx, clusterImage(), testserver.SentinelOptions{})
	require.NoError(t, err, "start a primary, two replicas and three sentinels of %s", clusterImage())
	t.Cleanup(func() { require.NoError(t, dep.Close()) })

	admin := dep.Client() // the test's own calls
	t.Cleanup(func() { _ = admin.Close() })
	_, err = pelwarden.Load(ctx, admin)
	require.NoError(t, err)
	k := pelwardentest.NewKeys(t)
	old, err := dep.Primary(ctx)
	require.NoError(t, err)
	require.Equal(t, dep.Servers[0], old, "the first server starts as the primary")
	// The group (and the library, loaded above) on a replica before the
	// run: WAIT covers everything the connection wrote before it.
	pipe := admin.Pipeline()
	pipe.XGroupCreateMkStream(ctx, k.Stream, k.Group, "0")
	wait := pipe.Do(ctx, "WAIT", 2, 10000)
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, wait.Val(), "both replicas have the group")

	sf := &sentinelRun{k: k, confirmed: map[string]bool{}, unconfirmed: map[string]bool{}, handled: map[string]int{}}
	m := &trMetrics{}
	var consumers []*sentinelConsumer
	for _, name := range []string{"a", "b"} {
		rdb := dep.Client()
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := driver.New(rdb, driver.Config{
			Stream: k.Stream, Group: k.Group, Consumer: name, Handler: driver.HandlerFunc(sf.handle),
			MaxDeliveries: driver.NoDeliveryLimit, MinIdle: time.Second,
			Metrics: m, Logger: sentinelLogger(t),
			Tuning: driver.Tuning{ReclaimInterval: 200 * time.Millisecond, ReadBlock: 200 * time.Millisecond},
		})
		require.NoError(t, err)
		sc := &sentinelConsumer{done: make(chan struct{})}
		runCtx, stop := context.WithCancel(context.Background())
		sc.stop = stop
		go func() {
			defer close(sc.done)
			sc.err = c.Run(runCtx)
		}()
		t.Cleanup(func() { stop(); <-sc.done })
		consumers = append(consumers, sc)
	}

	producer := dep.Client()
	t.Cleanup(func() { _ = producer.Close() })
	stopProducing := make(chan struct{})
	var producing sync.WaitGroup
	producing.Go(func() { sf.produce(ctx, producer, stopProducing) })
	t.Cleanup(func() {
		select {
		case <-stopProducing:
		default:
			close(stopProducing)
		}
		producing.Wait()
	})

	retWait(t, sentinelWait, "300 entries handled before the failover", func() (string, bool) {
		n := sf.handledCount()
		return fmt.Sprint(n, " handled"), n >= 300
	})
	// Replication lag, made certain: both replicas are cut off the
	// primary (they drop the link and cannot authenticate again) but stay
	// eligible for promotion. What the primary accepts from now on is lost
	// with it: writes WAIT does not confirm, the consumers' reads and acks.
	var replicas []*redis.Client
	for _, n := range dep.Servers[1:] {
		c := n.Client()
		t.Cleanup(func() { _ = c.Close() })
		replicas = append(replicas, c)
		require.NoError(t, c.ConfigSet(ctx, "masterauth", "not-the-password").Err())
		require.NoError(t, c.Do(ctx, "CLIENT", "KILL", "TYPE", "master").Err())
	}
	for i, c := range replicas {
		retWait(t, sentinelWait, "replica "+dep.Servers[1+i].Addr()+" cut off", func() (string, bool) {
			info, err := c.Info(ctx, "replication").Result()
			if err != nil {
				return err.Error(), false
			}
			return "link still up", strings.Contains(info, "master_link_status:down")
		})
	}
	cut := sf.unconfirmedCount()
	retWait(t, sentinelWait, "writes no replica has", func() (string, bool) {
		n := sf.unconfirmedCount() - cut
		return fmt.Sprint(n, " unconfirmed writes since the cut"), n >= 20
	})
	before := sf.confirmedCount()
	require.NoError(t, old.Kill(ctx))
	killed := time.Now()
	var promoted *testserver.ClusterNode
	retWait(t, sentinelWait, "the sentinels to promote a replica", func() (string, bool) {
		p, err := dep.Primary(ctx)
		if err != nil {
			return err.Error(), false
		}
		promoted = p
		return "still " + p.Addr(), p != old
	})
	promotion := time.Since(killed)
	for _, c := range replicas { // the other replica may follow the new primary
		require.NoError(t, c.ConfigSet(ctx, "masterauth", "").Err())
	}
	// Work goes on on the new primary: 300 entries confirmed after the
	// promotion are handled.
	after := sf.confirmedCount()
	retWait(t, sentinelWait, "300 entries confirmed after the promotion and handled", func() (string, bool) {
		n := sf.handledSince(after)
		return fmt.Sprint(n, " handled"), n >= 300
	})
	close(stopProducing)
	producing.Wait()

	lib := pelwarden.NewLibrary(admin)
	retWait(t, sentinelWait, "the stream drained", func() (string, bool) {
		st, err := lib.Stats(ctx, pelwarden.StatsArgs{Stream: k.Stream, DeadLetterStream: k.DeadLetterStream, Group: k.Group})
		if err != nil {
			return err.Error(), false
		}
		last, err := admin.XRevRangeN(ctx, k.Stream, "+", "-", 1).Result()
		if err != nil || len(last) != 1 {
			return fmt.Sprintf("last entry: %v %v", last, err), false
		}
		return fmt.Sprintf("%d pending, last delivered %s, last entry %s", st.Pending, st.LastDeliveredID, last[0].ID),
			st.Pending == 0 && st.LastDeliveredID == last[0].ID
	})
	for i, sc := range consumers {
		sc.stop()
		<-sc.done
		require.NoError(t, sc.err, "Run of consumer %d", i)
	}

	// The invariant: no confirmed write lost, every one handled.
	entries, err := admin.XRange(ctx, k.Stream, "-", "+").Result()
	require.NoError(t, err)
	inStream := map[string]bool{}
	for _, e := range entries {
		inStream[e.ID] = true
	}
	rep := sf.report(inStream)
	require.Zero(t, rep.confirmedLost, "confirmed writes lost in the failover")
	require.Positive(t, rep.unconfirmedLost, "writes only the killed primary had were lost (the failover lost data)")
	require.Zero(t, rep.confirmedUnhandled, "confirmed entries never handled")
	for id := range inStream {
		require.Positive(t, sf.handled[id], "entry %s in the stream was never handled", id)
	}
	dead, err := admin.XLen(ctx, k.DeadLetterStream).Result()
	require.NoError(t, err)
	require.Zero(t, dead)
	t.Logf("sentinel failover: primary %s killed after %d confirmed writes; %s promoted %v later", old.Addr(), before, promoted.Addr(), promotion.Round(100*time.Millisecond))
	t.Logf("sentinel failover: %s; command errors retried %d", rep, m.get(driver.EventCommandError))

	// The command line finds the new primary through the sentinels.
	url := "redis-sentinel://" + strings.Join(dep.SentinelAddrs(), ",") + "/" + dep.MasterName
	var out, errb bytes.Buffer
	code := executeCLI(ctx, []string{"--sentinel", url, "status", k.Stream, k.Group, "--json"}, &out, &errb)
	require.Equal(t, exitOK, code, errb.String())
	var v map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &v), out.String())
	require.EqualValues(t, len(entries), v["length"])
	require.EqualValues(t, 0, v["pending"])
	out.Reset()
	errb.Reset()
	code = executeCLI(ctx, []string{"--sentinel", url, "trim", k.Stream, "--json"}, &out, &errb)
	require.Equal(t, exitOK, code, errb.String())
	require.NoError(t, json.Unmarshal(out.Bytes(), &v), out.String())
	require.EqualValues(t, len(entries), v["trimmed"], "every entry was acknowledged")
	require.EqualValues(t, 0, v["length"])
	out.Reset()
	errb.Reset()
	code = executeCLI(ctx, []string{"--sentinel", url, "load", "--json"}, &out, &errb)
	require.Equal(t, exitOK, code, errb.String())
	require.NoError(t, json.Unmarshal(out.Bytes(), &v), out.String())
	require.Equal(t, []any{map[string]any{"addr": "primary " + dep.MasterName + " (via sentinels)", "before": pelwarden.LibraryVersion,
		"after": pelwarden.LibraryVersion, "action": string(pelwarden.ActionCurrent)}}, v["nodes"])
	out.Reset()
	errb.Reset()
	code = executeCLI(ctx, []string{"--sentinel", "redis-sentinel://" + dep.SentinelAddrs()[0] + "/no-such-master", "status", k.Stream, k.Group}, &out, &errb)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errb.String(), "check the sentinel addresses and the master name")
}

// sentinelConsumer is one running driver consumer of the Sentinel test.
type sentinelConsumer struct {
	stop context.CancelFunc
	done chan struct{}
	err  error // Run's result, set before done is closed
}

// sentinelRun is the Sentinel test's producer and handler, and what they saw.
type sentinelRun struct {
	k pelwardentest.Keys

	mu sync.Mutex
	// confirmed ids were confirmed by WAIT 1 (in order: order); unconfirmed
	// ones were written without that confirmation.
	confirmed, unconfirmed map[string]bool
	order                  []string
	// handled counts handler runs per id; calls counts them all.
	handled map[string]int
	calls   int
}

// produce adds batches of 10 entries, each batch followed by WAIT 1 on the
// same connection, until stop is closed.
func (sf *sentinelRun) produce(ctx context.Context, rdb *redis.Client, stop <-chan struct{}) {
	for n := 0; ; {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
		pipe := rdb.Pipeline()
		adds := make([]*redis.StringCmd, 10)
		for i := range adds {
			adds[i] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: sf.k.Stream, Values: []string{"n", strconv.Itoa(n + i)}})
		}
		wait := pipe.Do(ctx, "WAIT", 1, 1000)
		_, err := pipe.Exec(ctx)
		ok := err == nil && wait.Val() != nil
		if ok {
			r, _ := wait.Int64()
			ok = r >= 1
		}
		sf.mu.Lock()
		for _, a := range adds {
			if a.Err() != nil {
				continue
			}
			if ok {
				sf.confirmed[a.Val()] = true
				sf.order = append(sf.order, a.Val())
			} else {
				sf.unconfirmed[a.Val()] = true
			}
		}
		sf.mu.Unlock()
		if err == nil {
			n += len(adds)
		}
	}
}

// handle takes 5 ms (entries are in flight when the primary dies) and
// records the run.
func (sf *sentinelRun) handle(ctx context.Context, m *driver.Message) error {
	select {
	case <-time.After(5 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	sf.mu.Lock()
	defer sf.mu.Unlock()
	sf.calls++
	sf.handled[m.ID]++
	return nil
}

func (sf *sentinelRun) handledCount() int {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	return len(sf.handled)
}

func (sf *sentinelRun) unconfirmedCount() int {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	return len(sf.unconfirmed)
}

func (sf *sentinelRun) confirmedCount() int {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	return len(sf.order)
}

// handledSince counts the handled entries among those confirmed after the
// first n.
func (sf *sentinelRun) handledSince(n int) int {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	got := 0
	for _, id := range sf.order[n:] {
		if sf.handled[id] > 0 {
			got++
		}
	}
	return got
}

// sentinelReport sums up the run.
type sentinelReport struct {
	confirmed, confirmedLost, confirmedUnhandled int
	unconfirmedKept, unconfirmedLost             int
	calls, unique                                int
	// handledGone: handled entries that are not in the stream after the
	// failover (written to the killed primary alone, confirmed or not,
	// their XADD reply lost with it or not).
	handledGone int
}

func (r sentinelReport) String() string {
	return fmt.Sprintf("%d writes confirmed by WAIT 1, %d of them lost, %d never handled; %d more written without confirmation (%d kept, %d lost with the primary); "+
		"%d handler calls for %d entries (%d duplicates: deliveries or acks the killed primary did not pass on), %d of them gone with the killed primary",
		r.confirmed, r.confirmedLost, r.confirmedUnhandled, r.unconfirmedKept+r.unconfirmedLost, r.unconfirmedKept, r.unconfirmedLost,
		r.calls, r.unique, r.calls-r.unique, r.handledGone)
}

func (sf *sentinelRun) report(inStream map[string]bool) sentinelReport {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	r := sentinelReport{confirmed: len(sf.confirmed), calls: sf.calls, unique: len(sf.handled)}
	for id := range sf.confirmed {
		if !inStream[id] {
			r.confirmedLost++
		}
		if sf.handled[id] == 0 {
			r.confirmedUnhandled++
		}
	}
	for id := range sf.handled {
		if !inStream[id] {
			r.handledGone++
		}
	}
	for id := range sf.unconfirmed {
		if inStream[id] {
			r.unconfirmedKept++
		} else {
			r.unconfirmedLost++
		}
	}
	return r
}

// sentinelLogger sends the driver's warnings and errors to the test log.
func sentinelLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(sentinelLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type sentinelLogWriter struct{ t *testing.T }

func (w sentinelLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
