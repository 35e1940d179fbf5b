package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// leakLabel is the pprof label key that marks the goroutines of one test's
// consumer: goroutines inherit the labels of the goroutine that starts them,
// so every goroutine Run starts carries it, and none of another test does.
const leakLabel = "pelwarden-resources"

// A consumer started and stopped 100 times on one shared client leaks no
// goroutine and no connection. Each cycle runs the consumer until it has
// acked the entries added for it, then cancels it; after each cycle:
//   - no goroutine started by Run is left (counted precisely through a pprof
//     label, whatever the tests running in parallel do);
//   - every connection of the client's pool is back in it (TotalConns ==
//     IdleConns), and the server sees exactly those connections under the
//     client's name (CLIENT LIST), so none was abandoned open;
//   - the pool stays within a bound set by the consumer's concurrency
//     (readers, reclaim, lease and ack loops), whatever the cycle count.
//
// The client is the matrix's first server only: what leaks would leak in
// the driver and go-redis, whatever the server.
//
// go-redis sends a connection's handshake (HELLO with the client name) on
// its first use, and when a caller stops waiting for a dial (Run's context
// cancelled while a loop waited for a connection) the dial still completes
// and the new connection goes to the idle pool without a handshake: the
// server lists it without the name. Under load dials are slower and that
// happens in some cycles, so before counting, every idle connection is used
// once (touchIdle). A connection the client dropped without closing would
// still show: the server would list more named connections than the pool
// holds.
func TestDriverStartStopLeaksNothing(t *testing.T) {
	t.Parallel()
	s := servers[0]
	ctx := t.Context()
	f := s.fixture(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "pw-resources-" + hex.EncodeToString(b)
	opts := s.srv.Options()
	opts.ClientName = name // CLIENT SETNAME on every connection of the pool
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })

	const cycles, perCycle = 100, 5
	m := &pelwardentest.Metrics{}
	cfg := f.ConsumerConfig(driver.Config{Consumer: "cycler", MaxDeliveries: 3, Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })})
	cfg.Concurrency = 4
	cfg.ReadBlock = 20 * time.Millisecond
	cfg.ReclaimInterval = 50 * time.Millisecond
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.Metrics = m
	c, err := driver.New(rdb, cfg)
	require.NoError(t, err)
	// Every loop of Run on a connection of its own, plus the handlers'
	// settling calls (none here: the handler succeeds) and one spare.
	maxConns := uint32(cfg.Concurrency + 4)

	var peak uint32
	running := 0 // goroutines of the running consumer, in the first cycle
	for i := range cycles {
		f.Produce(perCycle, order)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go pprof.Do(runCtx, pprof.Labels(leakLabel, name), func(ctx context.Context) { done <- c.Run(ctx) })
		f.Eventually(fmt.Sprintf("cycle %d: %d acked", i, (i+1)*perCycle), func() bool {
			return m.Total(driver.EventAcked) == (i+1)*perCycle
		})
		if i == 0 {
			// The count sees the running consumer (Run, its loops, its
			// handler workers), so zero after a cycle means something.
			running, _ = labeledGoroutines(t, name)
			require.GreaterOrEqual(t, running, 1+3+cfg.Concurrency, "goroutines of the running consumer")
		}
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, "cycle %d", i)
		case <-time.After(30 * time.Second):
			t.Fatalf("cycle %d: Run did not return within 30s", i)
		}

		f.EventuallyState(fmt.Sprintf("cycle %d: the consumer's goroutines gone", i), func() (string, bool) {
			n, stacks := labeledGoroutines(t, name)
			return fmt.Sprintf("%d left:\n%s", n, stacks), n == 0
		})
		require.NoError(t, touchIdle(ctx, rdb), "cycle %d", i)
		f.EventuallyState(fmt.Sprintf("cycle %d: every connection back in the pool and seen by the server", i), func() (string, bool) {
			st := rdb.PoolStats()
			server, err := namedConnections(ctx, s.rdb, name)
			if err != nil {
				return err.Error(), false
			}
			peak = max(peak, st.TotalConns)
			return fmt.Sprintf("pool %+v, server %d", *st, server), st.TotalConns == st.IdleConns && uint32(server) == st.TotalConns
		})
		st := rdb.PoolStats()
		require.LessOrEqual(t, st.TotalConns, maxConns, "cycle %d: pool %+v", i, *st)
	}
	require.Zero(t, f.PendingCount())
	st := rdb.PoolStats()
	t.Logf("%d cycles: %d goroutines while running, none left after any cycle; pool at the end: %d connections, %d idle; at most %d after a cycle (bound %d)",
		cycles, running, st.TotalConns, st.IdleConns, peak, maxConns)
}

// touchIdle takes every idle connection of rdb's pool at once and sends a
// PING on each, so that each has sent its handshake (and so its name), then
// puts them back. Holding them all while taking the next makes each Get
// take another idle connection rather than dial.
func touchIdle(ctx context.Context, rdb *redis.Client) error {
	st := rdb.PoolStats()
	if st.TotalConns != st.IdleConns {
		return fmt.Errorf("connections in use while the consumer is stopped: pool %+v", *st)
	}
	conns := make([]*redis.Conn, 0, st.IdleConns)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range st.IdleConns {
		c := rdb.Conn()
		conns = append(conns, c)
		if err := c.Ping(ctx).Err(); err != nil {
			return err
		}
	}
	if after := rdb.PoolStats(); after.TotalConns != st.TotalConns {
		return fmt.Errorf("touching the idle connections dialed new ones: pool %+v before, %+v after", *st, *after)
	}
	return nil
}

// labeledGoroutines counts the goroutines carrying leakLabel=value, with
// their stacks for the failure message (the goroutine profile groups
// identical stacks and prints each group's labels).
func labeledGoroutines(t *testing.T, value string) (int, string) {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&buf, 1))
	want := fmt.Sprintf("%q:%q", leakLabel, value)
	total := 0
	var out strings.Builder
	// Groups: "N @ pc pc ...", then "# labels: {...}" when labelled, then
	// "#\tpc\tfunction+off\tfile:line" lines, then a blank line.
	var count int
	var group strings.Builder
	match := false
	flush := func() {
		if match {
			total += count
			out.WriteString(group.String())
		}
		count, match = 0, false
		group.Reset()
	}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			flush()
		case strings.Contains(line, " @ ") && !strings.HasPrefix(line, "#"):
			flush()
			_, _ = fmt.Sscanf(line, "%d @", &count)
		case strings.HasPrefix(line, "# labels:") && strings.Contains(line, want):
			match = true
		}
		group.WriteString(line + "\n")
	}
	flush()
	require.NoError(t, sc.Err())
	return total, out.String()
}

// namedConnections counts the server's connections named name (CLIENT
// LIST).
func namedConnections(ctx context.Context, rdb *redis.Client, name string) (int, error) {
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(line) {
			if f == "name="+name {
				n++
			}
		}
	}
	return n, nil
}
