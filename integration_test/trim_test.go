package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/ops"
	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// The retention tests (issue 13 §5): the library's trim function, the
// driver's TrimInterval and dead-letter retention, and `pelwarden trim`,
// on every server of the matrix and on the cluster (TestCluster runs
// trimSuite there). Self-contained: pelwardentest's fixtures and the
// helpers below.

// trimWait bounds the waits of the driver tests (conditions, never sleeps).
const trimWait = 2 * time.Minute

// TestTrim runs the retention suite on every server of the matrix.
func TestTrim(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		addr, err := s.srv.Addr(t.Context())
		require.NoError(t, err)
		trimSuite(t, trimEnv{
			client: func(t *testing.T) redis.UniversalClient {
				c := s.srv.Client()
				t.Cleanup(func() { _ = c.Close() })
				return c
			},
			keys: func(t *testing.T) pelwardentest.Keys { return pelwardentest.NewKeys(t) },
			conn: []string{"--redis", "redis://" + addr},
		})
		t.Run("ReadOnlyOperatorPlans", func(t *testing.T) {
			t.Parallel()
			testTrimReadOnlyPlan(t, s, addr)
		})
	})
}

// A user with the ACL guide's operator rights (read-only key access, read
// commands, FCALL_RO) sees the plan (the read-only twin of the trim
// function) but may not trim.
func testTrimReadOnlyPlan(t *testing.T, s *target, addr string) {
	f := pelwardentest.Use(t, s.rdb).FixtureFor(t, pelwardentest.NewKeys(t))
	trGroup(t, f, "g", "0")
	ids := f.Produce(3, nil)
	require.Len(t, trRead(t, f, "g", "c", 3), 3)
	trAck(t, f, "g", ids...)
	ctx := f.Context()
	user := fmt.Sprintf("trim-operator-%d", time.Now().UnixNano())
	require.NoError(t, s.rdb.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">op-pw", "%R~"+f.Stream,
		"+ping", "+fcall_ro", "+time", "+type", "+xlen", "+xrange", "+xpending", "+xinfo|groups", "+xinfo|consumers").Err())
	t.Cleanup(func() { _ = s.rdb.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	env := trimEnv{conn: []string{"--redis", "redis://" + user + ":op-pw@" + addr}}

	out, errOut, code := trimCLI(t, env, "trim", f.Stream, "--dry-run", "--json")
	require.Equal(t, exitOK, code, errOut)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.Equal(t, []any{3.0, true}, []any{v["would_trim"], v["would_trim_exact"]})

	out, errOut, code = trimCLI(t, env, "trim", f.Stream)
	require.Equal(t, exitFailure, code, "stdout: %s", out)
	require.Contains(t, errOut, "ACL")
	require.Equal(t, ids, trIDs(t, f), "nothing deleted")
}

// clusterTrimEnv runs trimSuite on the package's cluster, on keys outside
// the slots TestCluster moves to a new primary.
func clusterTrimEnv(c *testserver.Cluster) trimEnv {
	return trimEnv{
		client: func(t *testing.T) redis.UniversalClient {
			rdb := c.Client()
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		},
		keys: func(t *testing.T) pelwardentest.Keys {
			for {
				k := pelwardentest.NewKeys(t)
				if !newPrimarySlots.Contains(pelwarden.Slot(k.Stream)) {
					return k
				}
			}
		},
		conn: []string{"--cluster", "redis://" + c.Addrs()[0]},
	}
}

// trimEnv is where trimSuite runs: a client maker, key names (in slots the
// server serves) and the command line's connection flags.
type trimEnv struct {
	client func(t *testing.T) redis.UniversalClient
	keys   func(t *testing.T) pelwardentest.Keys
	conn   []string
}

// trimSuite runs the retention tests in parallel, each on its own keys.
func trimSuite(t *testing.T, env trimEnv) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, f *pelwardentest.Fixture, env trimEnv)
	}{
		{"AcknowledgedByAllOnly", testTrimAcknowledgedByAllOnly},
		{"LaggingGroupHoldsBack", testTrimLaggingGroup},
		{"BoundedCallsConverge", testTrimBoundedCalls},
		{"Refusals", testTrimRefusals},
		{"DriverTrimsAfterEveryGroup", testTrimDriver},
		{"DriverDeadLetterRetention", testTrimDeadLetterRetention},
		{"CommandLine", testTrimCLI},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := env.client(t)
			f := pelwardentest.Use(t, rdb).FixtureFor(t, env.keys(t))
			tc.fn(t, f, env)
		})
	}
}

// trGroup creates group on the fixture's stream at start (MKSTREAM).
func trGroup(t *testing.T, f *pelwardentest.Fixture, group, start string) {
	t.Helper()
	require.NoError(t, f.Client().XGroupCreateMkStream(f.Context(), f.Stream, group, start).Err())
}

// trRead delivers up to n new entries to group as consumer.
func trRead(t *testing.T, f *pelwardentest.Fixture, group, consumer string, n int) []string {
	t.Helper()
	res, err := f.Client().XReadGroup(f.Context(), &redis.XReadGroupArgs{Group: group, Consumer: consumer,
		Streams: []string{f.Stream, ">"}, Count: int64(n), Block: -1}).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	require.NoError(t, err)
	var ids []string
	for _, s := range res {
		for _, m := range s.Messages {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// trAck acknowledges ids in group.
func trAck(t *testing.T, f *pelwardentest.Fixture, group string, ids ...string) {
	t.Helper()
	n, err := f.Client().XAck(f.Context(), f.Stream, group, ids...).Result()
	require.NoError(t, err)
	require.EqualValues(t, len(ids), n)
}

// trIDs returns the ids in the stream.
func trIDs(t *testing.T, f *pelwardentest.Fixture) []string {
	t.Helper()
	es, err := f.Client().XRange(f.Context(), f.Stream, "-", "+").Result()
	require.NoError(t, err)
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.ID
	}
	return ids
}

// trNeeded returns the ids of the stream some group still needs: pending
// in it, or above its last-delivered id (not yet delivered to it).
func trNeeded(t *testing.T, f *pelwardentest.Fixture) map[string]bool {
	t.Helper()
	ctx, rdb := f.Context(), f.Client()
	groups, err := rdb.XInfoGroups(ctx, f.Stream).Result()
	require.NoError(t, err)
	ids := trIDs(t, f)
	needed := map[string]bool{}
	for _, g := range groups {
		p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: f.Stream, Group: g.Name, Start: "-", End: "+", Count: 100000}).Result()
		require.NoError(t, err)
		for _, e := range p {
			needed[e.ID] = true
		}
		last, err := pelwarden.ParseID(g.LastDeliveredID)
		require.NoError(t, err)
		for _, id := range ids {
			if trID(t, id).Compare(last) > 0 {
				needed[id] = true
			}
		}
	}
	return needed
}

// trNext is the id right after id.
func trNext(t *testing.T, id string) string {
	t.Helper()
	p := trID(t, id)
	p.Seq++
	return p.String()
}

func trID(t *testing.T, s string) pelwarden.StreamID {
	t.Helper()
	id, err := pelwarden.ParseID(s)
	require.NoError(t, err)
	return id
}

// trTrim runs one Trim call and checks the invariant: every entry some
// group needed before the call is still there, and when the call was not
// cut short by its limit, every entry below the first needed one is gone
// and every entry from it on is kept.
func trTrim(t *testing.T, f *pelwardentest.Fixture, a pelwarden.TrimArgs) *pelwarden.TrimResult {
	t.Helper()
	before := trIDs(t, f)
	needed := trNeeded(t, f)
	a.Stream = f.Stream
	res, err := f.Server().Library().Trim(f.Context(), a)
	require.NoError(t, err)
	after := trIDs(t, f)
	for id := range needed {
		require.Contains(t, after, id, "trim deleted %s, which a group still needs", id)
	}
	require.EqualValues(t, len(after), res.Length)
	if a.DryRun {
		require.Equal(t, before, after, "a dry run deletes nothing")
		return res
	}
	require.EqualValues(t, len(before)-len(after), res.Trimmed)
	require.Equal(t, before[len(before)-len(after):], after, "trim deletes the oldest entries only")
	if !res.More {
		first := len(before)
		for i, id := range before {
			if needed[id] {
				first = i
				break
			}
		}
		require.Equal(t, before[first:], after, "every entry all groups acknowledged is gone, up to the first one a group needs")
	}
	return res
}

// Two groups at different positions, each with pending entries: trim
// deletes only what both acknowledged, and follows them as they ack.
func testTrimAcknowledgedByAllOnly(t *testing.T, f *pelwardentest.Fixture, _ trimEnv) {
	trGroup(t, f, "g1", "0")
	trGroup(t, f, "g2", "0")
	ids := f.Produce(20, nil)
	require.Equal(t, ids[:15], trRead(t, f, "g1", "c1", 15))
	trAck(t, f, "g1", ids[:10]...) // g1: 10..14 pending, 15..19 not delivered
	require.Equal(t, ids, trRead(t, f, "g2", "c2", 20))
	trAck(t, f, "g2", slices.Concat(ids[:3], ids[4:12], ids[13:])...) // g2: 3 and 12 pending

	plan := trTrim(t, f, pelwarden.TrimArgs{DryRun: true})
	require.Equal(t, &pelwarden.TrimResult{Trimmed: 3, Bound: ids[3], Holder: "g2", FirstID: ids[0], LastID: ids[2], Length: 20,
		Groups: []pelwarden.GroupBound{
			{Name: "g1", Pending: 5, OldestPending: ids[10], LastDelivered: ids[14], Bound: ids[10]},
			{Name: "g2", Pending: 2, OldestPending: ids[3], LastDelivered: ids[19], Bound: ids[3]},
		}}, plan)
	pending, err := f.Client().XPending(f.Context(), f.Stream, "g1").Result()
	require.NoError(t, err)
	require.EqualValues(t, 5, pending.Count, "a dry run changes no group")

	res := trTrim(t, f, pelwarden.TrimArgs{})
	require.EqualValues(t, 3, res.Trimmed)
	require.Equal(t, ids[3:], trIDs(t, f))

	trAck(t, f, "g2", ids[3]) // now g1's oldest pending entry holds the bound
	res = trTrim(t, f, pelwarden.TrimArgs{})
	require.Equal(t, []any{int64(7), ids[10], "g1"}, []any{res.Trimmed, res.Bound, res.Holder})

	trAck(t, f, "g1", ids[10:15]...) // g2's pending 12 holds it
	res = trTrim(t, f, pelwarden.TrimArgs{})
	require.Equal(t, []any{int64(2), ids[12], "g2"}, []any{res.Trimmed, res.Bound, res.Holder})

	trAck(t, f, "g2", ids[12]) // g1 has not read 15..19
	res = trTrim(t, f, pelwarden.TrimArgs{})
	require.Equal(t, []any{int64(3), "g1"}, []any{res.Trimmed, res.Holder})
	require.Equal(t, ids[15:], trIDs(t, f))
	require.Equal(t, 1, trID(t, res.Bound).Compare(trID(t, ids[14])), "the bound is right after g1's last-delivered id")
	require.LessOrEqual(t, trID(t, res.Bound).Compare(trID(t, ids[15])), 0, "and at most the first entry g1 has not read")

	require.Equal(t, ids[15:], trRead(t, f, "g1", "c1", 10))
	trAck(t, f, "g1", ids[15:]...)
	res = trTrim(t, f, pelwarden.TrimArgs{})
	require.EqualValues(t, 5, res.Trimmed)
	require.Zero(t, res.Length, "everything both groups acknowledged is gone")
	res = trTrim(t, f, pelwarden.TrimArgs{})
	require.Zero(t, res.Trimmed)

	// A new entry is not delivered yet: it stays, and its id follows the
	// trimmed ones.
	id := f.Add("n", "new")
	res = trTrim(t, f, pelwarden.TrimArgs{})
	require.Zero(t, res.Trimmed)
	require.Equal(t, []string{id}, trIDs(t, f))
	require.Equal(t, 1, trID(t, id).Compare(trID(t, ids[19])))
}

// A group that never read holds every entry; a group created at an id in
// the middle counts what precedes it as skipped.
func testTrimLaggingGroup(t *testing.T, f *pelwardentest.Fixture, _ trimEnv) {
	trGroup(t, f, "fast", "0")
	trGroup(t, f, "lagging", "0")
	ids := f.Produce(10, nil)
	require.Equal(t, ids, trRead(t, f, "fast", "c", 10))
	trAck(t, f, "fast", ids...)
	res := trTrim(t, f, pelwarden.TrimArgs{})
	require.Zero(t, res.Trimmed)
	require.Equal(t, "lagging", res.Holder)
	require.Equal(t, "0-1", res.Bound, "the lagging group needs everything after 0-0")
	require.Len(t, trIDs(t, f), 10)

	// The lagging group reads 4 and acks 2: it holds the bound at its
	// oldest pending entry.
	require.Equal(t, ids[:4], trRead(t, f, "lagging", "c", 4))
	trAck(t, f, "lagging", ids[0], ids[1])
	res = trTrim(t, f, pelwarden.TrimArgs{})
	require.Equal(t, []any{int64(2), ids[2], "lagging"}, []any{res.Trimmed, res.Bound, res.Holder})

	// A group created at ids[5] skipped what precedes it; the lagging
	// group still holds the bound at ids[2].
	trGroup(t, f, "late", ids[5])
	res = trTrim(t, f, pelwarden.TrimArgs{})
	require.Zero(t, res.Trimmed)
	require.Equal(t, "lagging", res.Holder)
	require.NoError(t, f.Client().XGroupDestroy(f.Context(), f.Stream, "lagging").Err())
	res = trTrim(t, f, pelwarden.TrimArgs{})
	require.Equal(t, []any{int64(4), "late"}, []any{res.Trimmed, res.Holder})
	require.Equal(t, ids[6:], trIDs(t, f))
}

// Limit bounds each call; calls converge; ops.Trim loops until done.
func testTrimBoundedCalls(t *testing.T, f *pelwardentest.Fixture, _ trimEnv) {
	trGroup(t, f, "g", "0")
	ids := f.Produce(250, nil)
	require.Len(t, trRead(t, f, "g", "c", 250), 250)
	trAck(t, f, "g", ids...)

	res := trTrim(t, f, pelwarden.TrimArgs{Limit: 120, DryRun: true})
	require.Equal(t, []any{int64(120), true, ids[0], ids[119]}, []any{res.Trimmed, res.More, res.FirstID, res.LastID})
	res = trTrim(t, f, pelwarden.TrimArgs{Limit: pelwarden.MaxCount, DryRun: true})
	require.Equal(t, []any{int64(250), false, ids[249]}, []any{res.Trimmed, res.More, res.LastID})

	// Calls of 120 over stream nodes of 100 entries: whole nodes, then the
	// rest exactly; the last call ends on a node boundary at the bound.
	var got []int64
	var spans [][2]string
	for i := 0; ; i++ {
		require.Less(t, i, 10, "trim calls converge")
		res = trTrim(t, f, pelwarden.TrimArgs{Limit: 120})
		got = append(got, res.Trimmed)
		spans = append(spans, [2]string{res.FirstID, res.LastID})
		if !res.More {
			break
		}
	}
	require.Equal(t, []int64{120, 120, 10}, got)
	require.Equal(t, [][2]string{{ids[0], ids[119]}, {ids[120], ids[239]}, {ids[240], ids[249]}}, spans)
	require.Empty(t, trIDs(t, f))
	res = trTrim(t, f, pelwarden.TrimArgs{Limit: 120})
	require.Equal(t, []any{int64(0), false, "", ""}, []any{res.Trimmed, res.More, res.FirstID, res.LastID})

	// Limit 1: one entry per call, exactly.
	ids = f.Produce(3, nil)
	require.Len(t, trRead(t, f, "g", "c", 3), 3)
	trAck(t, f, "g", ids...)
	res = trTrim(t, f, pelwarden.TrimArgs{Limit: 1})
	require.Equal(t, []any{int64(1), true, ids[0], ids[0]}, []any{res.Trimmed, res.More, res.FirstID, res.LastID})
	res = trTrim(t, f, pelwarden.TrimArgs{Limit: 2})
	require.Equal(t, []any{int64(2), false, ids[1], ids[2]}, []any{res.Trimmed, res.More, res.FirstID, res.LastID})

	ids = f.Produce(30, nil)
	require.Len(t, trRead(t, f, "g", "c", 30), 30)
	trAck(t, f, "g", ids...)
	var calls []int64
	rep, err := ops.Trim(f.Context(), f.Client(), ops.TrimOptions{Stream: f.Stream, Batch: 7}, func(r ops.TrimReport) {
		calls = append(calls, r.Trimmed)
	})
	require.NoError(t, err)
	require.Equal(t, []int64{7, 14, 21, 28, 30}, calls)
	require.Equal(t, []any{int64(30), 5, ids[0], ids[29]}, []any{rep.Trimmed, rep.Calls, rep.FirstID, rep.LastID})

	ids = f.Produce(30, nil)
	require.Len(t, trRead(t, f, "g", "c", 30), 30)
	trAck(t, f, "g", ids...)
	rep, err = ops.Trim(f.Context(), f.Client(), ops.TrimOptions{Stream: f.Stream, Batch: 7, Limit: 10}, nil)
	require.NoError(t, err)
	require.Equal(t, []any{int64(10), 2, true}, []any{rep.Trimmed, rep.Calls, rep.Last.More})
	require.Equal(t, ids[10:], trIDs(t, f))
}

// No stream, no groups, another type: refused, nothing deleted.
func testTrimRefusals(t *testing.T, f *pelwardentest.Fixture, _ trimEnv) {
	lib := f.Server().Library()
	_, err := lib.Trim(f.Context(), pelwarden.TrimArgs{Stream: f.Stream})
	require.ErrorIs(t, err, pelwarden.ErrNoGroup, "missing stream")
	f.Produce(3, nil)
	_, err = lib.Trim(f.Context(), pelwarden.TrimArgs{Stream: f.Stream})
	require.ErrorIs(t, err, pelwarden.ErrNoGroup, "stream without groups")
	require.Contains(t, err.Error(), "no consumer groups")
	require.Len(t, trIDs(t, f), 3)
	wrong := f.Stream + ":string"
	require.NoError(t, f.Client().Set(f.Context(), wrong, "x", 0).Err())
	_, err = lib.Trim(f.Context(), pelwarden.TrimArgs{Stream: wrong, DryRun: true})
	require.ErrorIs(t, err, pelwarden.ErrWrongType)
}

// trMetrics counts driver events.
type trMetrics struct {
	events [32]atomic.Int64
	dead   atomic.Int64
}

func (m *trMetrics) Count(e driver.Event, n int)   { m.events[e].Add(int64(n)) }
func (m *trMetrics) DeadLettered(_ string, n int)  { m.dead.Add(int64(n)) }
func (m *trMetrics) HandlerDuration(time.Duration) {}
func (m *trMetrics) get(e driver.Event) int64      { return m.events[e].Load() }

// trCondition waits (up to trimWait) for cond.
func trCondition(t *testing.T, what string, cond func() (string, bool)) {
	t.Helper()
	retWait(t, trimWait, what, cond)
}

// retWait polls cond every 50 ms until it holds, failing the test with
// cond's last explanation after d.
func retWait(t *testing.T, d time.Duration, what string, cond func() (why string, ok bool)) {
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
		time.Sleep(50 * time.Millisecond)
	}
}

// trTrimmed waits until the consumers' metrics count n trimmed entries.
func trTrimmed(t *testing.T, n int64, ms ...*trMetrics) {
	t.Helper()
	trCondition(t, fmt.Sprint(n, " entries counted as trimmed"), func() (string, bool) {
		var got int64
		for _, m := range ms {
			got += m.get(driver.EventTrimmed)
		}
		return fmt.Sprint(got, " counted"), got == n
	})
}

// trimCalls counts the trim function calls a client makes.
type trimCalls struct{ n atomic.Int64 }

func (h *trimCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *trimCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); err == nil && len(args) > 1 && fmt.Sprint(args[1]) == pelwarden.FunctionTrim {
			h.n.Add(1)
		}
		return err
	}
}
func (h *trimCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A run: two groups consume with drivers that trim; the stream ends empty,
// every entry handled by both. Then a lagging group holds every entry it
// has not acknowledged, across many trim passes, until it catches up.
func testTrimDriver(t *testing.T, f *pelwardentest.Fixture, env trimEnv) {
	trGroup(t, f, f.Group, "0")
	trGroup(t, f, "audit", "0")
	// The consumers' own client, hooked to count their trim calls.
	rdb := env.client(t)
	calls := &trimCalls{}
	rdb.AddHook(calls)
	df := pelwardentest.Use(t, rdb).FixtureFor(t, f.Keys)
	seen := map[string]*atomic.Int64{f.Group: {}, "audit": {}}
	var ms []*trMetrics
	for _, group := range []string{f.Group, "audit"} {
		m := &trMetrics{}
		ms = append(ms, m)
		df.RunConsumer(driver.Config{Group: group, Consumer: "c-" + group, Metrics: m,
			TrimInterval: 20 * time.Millisecond, TrimLimit: 7,
			Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { seen[group].Add(1); return nil })})
	}
	f.Produce(100, nil)
	trCondition(t, "both groups handled 100 entries and the stream is trimmed empty", func() (string, bool) {
		n, err := f.Client().XLen(f.Context(), f.Stream).Result()
		if err != nil {
			return err.Error(), false
		}
		return fmt.Sprintf("handled %d and %d, length %d", seen[f.Group].Load(), seen["audit"].Load(), n),
			seen[f.Group].Load() >= 100 && seen["audit"].Load() >= 100 && n == 0
	})
	trTrimmed(t, 100, ms...) // each entry trimmed once, by one of the consumers

	// A lagging group: never reads until told to.
	trGroup(t, f, "reporting", "0")
	ids := f.Produce(50, nil)
	trCondition(t, "both groups handled the 50 new entries", func() (string, bool) {
		return fmt.Sprintf("handled %d and %d", seen[f.Group].Load(), seen["audit"].Load()),
			seen[f.Group].Load() >= 150 && seen["audit"].Load() >= 150
	})
	pelwardentest.Use(t, f.Client()).FixtureFor(t, f.Keys).Within(trimWait).RequirePELEmpty()
	from := calls.n.Load()
	trCondition(t, "20 more trim calls", func() (string, bool) {
		return fmt.Sprint(calls.n.Load()-from, " calls"), calls.n.Load()-from >= 20
	})
	require.Equal(t, ids, trIDs(t, f), "the lagging group holds every entry it has not acknowledged")
	plan, err := f.Server().Library().Trim(f.Context(), pelwarden.TrimArgs{Stream: f.Stream, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, []any{"reporting", "0-1"}, []any{plan.Holder, plan.Bound})

	// It catches up: half, then all.
	require.Equal(t, ids[:25], trRead(t, f, "reporting", "r", 25))
	trAck(t, f, "reporting", ids[:25]...)
	trCondition(t, "the first 25 trimmed", func() (string, bool) {
		got := trIDs(t, f)
		return fmt.Sprint(len(got), " entries"), slices.Equal(got, ids[25:])
	})
	require.Equal(t, ids[25:], trRead(t, f, "reporting", "r", 25))
	trAck(t, f, "reporting", ids[25:]...)
	trCondition(t, "the stream trimmed empty", func() (string, bool) {
		n, err := f.Client().XLen(f.Context(), f.Stream).Result()
		return fmt.Sprint(n, " entries ", err), err == nil && n == 0
	})
	trTrimmed(t, 150, ms...)
	require.EqualValues(t, 150, seen[f.Group].Load())
	require.EqualValues(t, 150, seen["audit"].Load())
}

var errTrimPoison = errors.New("poison")

// The dead-letter stream is bounded by age and by length.
func testTrimDeadLetterRetention(t *testing.T, f *pelwardentest.Fixture, _ trimEnv) {
	trGroup(t, f, f.Group, "0")
	ctx, rdb := f.Context(), f.Client()
	// Two old records (ids from 1970).
	for _, id := range []string{"1-0", "2-0"} {
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.DeadLetterStream, ID: id, Values: []string{"old", id}}).Err())
	}
	m := &trMetrics{}
	f.RunConsumer(driver.Config{Metrics: m, DeadLetterMaxAge: 30 * time.Minute, DeadLetterMaxLen: 3,
		Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { return driver.DeadLetter(errTrimPoison) })})
	ids := f.Produce(5, nil)
	trCondition(t, "5 dead-lettered, the dead-letter stream bounded to 3 records, the old ones gone", func() (string, bool) {
		recs, err := rdb.XRange(ctx, f.DeadLetterStream, "-", "+").Result()
		if err != nil {
			return err.Error(), false
		}
		var orig []string
		for _, r := range recs {
			orig = append(orig, fmt.Sprint(r.Values[pelwarden.FieldOriginalID]))
		}
		ok := m.dead.Load() == 5 && len(orig) == 3 && m.get(driver.EventDeadLetterTrimmed) == 4
		for _, o := range orig {
			ok = ok && slices.Contains(ids, o)
		}
		return fmt.Sprintf("dead-lettered %d, records %v, %d counted as trimmed", m.dead.Load(), orig, m.get(driver.EventDeadLetterTrimmed)), ok
	})
}

// trimCLI runs `pelwarden <conn> args...`.
func trimCLI(t *testing.T, env trimEnv, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = executeCLI(t.Context(), append(slices.Clone(env.conn), args...), &out, &errb)
	return out.String(), errb.String(), code
}

// `pelwarden trim`: the plan first (bound, groups, the lagging one), then
// the trim; --dry-run changes nothing; refusals exit 3, bad flags 2.
func testTrimCLI(t *testing.T, f *pelwardentest.Fixture, env trimEnv) {
	trGroup(t, f, "g1", "0")
	trGroup(t, f, "g2", "0")
	ids := f.Produce(12, nil)
	require.Len(t, trRead(t, f, "g1", "c", 12), 12)
	trAck(t, f, "g1", ids...)
	require.Len(t, trRead(t, f, "g2", "c", 8), 8)
	trAck(t, f, "g2", ids[:5]...) // g2: 5..7 pending, 8..11 not delivered

	out, errOut, code := trimCLI(t, env, "trim", f.Stream, "--dry-run")
	require.Equal(t, exitOK, code, errOut)
	for _, want := range []string{"bound " + ids[5], `held back by group "g2"`, "<- holds the bound", "would trim 5 entries (" + ids[0] + " .. " + ids[4] + ")", "dry run: nothing deleted"} {
		require.Contains(t, out, want)
	}
	require.Len(t, trIDs(t, f), 12)

	out, errOut, code = trimCLI(t, env, "trim", f.Stream, "--dry-run", "--limit", "2", "--json")
	require.Equal(t, exitOK, code, errOut)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.Equal(t, map[string]any{"stream": f.Stream, "dry_run": true, "bound": ids[5], "holder": "g2",
		"groups": []any{
			map[string]any{"name": "g1", "pending": 0.0, "oldest_pending_id": "", "last_delivered_id": ids[11], "bound": trNext(t, ids[11])},
			map[string]any{"name": "g2", "pending": 3.0, "oldest_pending_id": ids[5], "last_delivered_id": ids[7], "bound": ids[5]},
		},
		"would_trim": 2.0, "would_trim_exact": false, "trimmed": 0.0, "first_id": "", "last_id": "", "more": true,
		"length": 12.0, "calls": 1.0}, v)

	out, errOut, code = trimCLI(t, env, "trim", f.Stream, "--limit", "3", "--batch", "2", "--json")
	require.Equal(t, exitOK, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.Equal(t, []any{3.0, ids[0], ids[2], true, 9.0, 3.0}, []any{v["trimmed"], v["first_id"], v["last_id"], v["more"], v["length"], v["calls"]})
	require.Equal(t, ids[3:], trIDs(t, f))

	out, errOut, code = trimCLI(t, env, "trim", f.Stream)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "would trim 2 entries")
	require.Contains(t, out, "trimmed 2 entries ("+ids[3]+" .. "+ids[4]+") in 1 call; 7 entries left in the stream\n")
	require.Equal(t, ids[5:], trIDs(t, f))

	out, errOut, code = trimCLI(t, env, "trim", f.Stream)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "nothing below the bound")
	require.Contains(t, out, "nothing to trim; 7 entries in the stream")

	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"trim", f.Stream + ":missing"}, exitBadTarget, "does not exist"},
		{[]string{"trim", f.DeadLetterStream}, exitBadTarget, "does not exist"},
		{[]string{"trim", f.Stream, "--limit", "0"}, exitUsage, "--limit"},
		{[]string{"trim", f.Stream, "--batch", "10001"}, exitUsage, "--batch"},
		{[]string{"trim"}, exitUsage, "STREAM"},
	} {
		out, errOut, code := trimCLI(t, env, c.args...)
		require.Equal(t, c.code, code, "%v: %s", c.args, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, c.msg)
	}
	require.NoError(t, f.Client().XAdd(f.Context(), &redis.XAddArgs{Stream: f.DeadLetterStream, Values: []string{"a", "b"}}).Err())
	out, errOut, code = trimCLI(t, env, "trim", f.DeadLetterStream)
	require.Equal(t, exitBadTarget, code, errOut)
	require.Empty(t, out)
	require.Contains(t, errOut, "has no consumer groups")
}

// An older library on the server (1.0.4, without trim) is upgraded by the
// first Trim call (self-heal: "Function not found", Load, retry) on a
// server of its own.
func TestTrimUpgradesOlderLibrary(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := testserver.Start(ctx, servers[0].srv.Image, testserver.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	rdb := srv.Client()
	t.Cleanup(func() { _ = rdb.Close() })

	src, err := os.ReadFile("../lua/pelwarden.lua")
	require.NoError(t, err)
	old := strings.Replace(string(src), "local LIBRARY_VERSION = '"+pelwarden.LibraryVersion+"'", "local LIBRARY_VERSION = '1.0.4'", 1)
	for _, reg := range []string{
		"  {name = '" + pelwarden.FunctionTrim + "', fn = trim, flags = {'allow-oom'}},\n",
		"  {name = '" + pelwarden.FunctionTrimPlan + "', fn = trimplan, flags = {'no-writes'}},\n",
	} {
		require.Contains(t, old, reg)
		old = strings.Replace(old, reg, "", 1)
	}
	require.NoError(t, rdb.FunctionLoad(ctx, old).Err())
	require.ErrorContains(t, rdb.FCall(ctx, pelwarden.FunctionTrim, []string{"{s}"}, 10, 0).Err(), "Function not found")

	require.NoError(t, rdb.XGroupCreateMkStream(ctx, "{s}", "g", "0").Err())
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "{s}", Values: []string{"a", "1"}}).Err())
	require.NoError(t, rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"{s}", ">"}, Block: -1}).Err())
	lib := pelwarden.NewLibrary(rdb)
	res, err := lib.Trim(ctx, pelwarden.TrimArgs{Stream: "{s}"})
	require.NoError(t, err)
	require.Zero(t, res.Trimmed, "the entry is pending")
	v, err := rdb.FCallRO(ctx, pelwarden.FunctionVersion, nil).Text()
	require.NoError(t, err)
	require.Equal(t, pelwarden.LibraryVersion, v)

	// Load reports an upgrade from an older version.
	require.NoError(t, rdb.FunctionLoadReplace(ctx, old).Err())
	lr, err := pelwarden.Load(ctx, rdb)
	require.NoError(t, err)
	require.Equal(t, pelwarden.NodeLoad{Addr: "testserver", Before: "1.0.4", After: pelwarden.LibraryVersion, Action: pelwarden.ActionUpgraded}, lr.Nodes[0])
}

// BenchmarkTrim measures the server time of trim calls of 1000 entries on a
// stream every group (two of them) has acknowledged, from INFO
// commandstats (cmdstat_fcall), for small (16-byte) and 1 KiB entries. Each
// iteration trims 200,000 entries. Run it on one server:
//
//	PELWARDEN_IMAGES=pelwarden/redis:8.0 TESTCONTAINERS_RYUK_DISABLED=true \
//	  TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
//	  go test -run '^$' -bench '^BenchmarkTrim$' -benchtime 1x ./integration_test/
func BenchmarkTrim(b *testing.B) {
	s := servers[0]
	ctx := context.Background()
	for _, size := range []int{16, 1024} {
		b.Run(fmt.Sprintf("entry=%dB", size), func(b *testing.B) {
			stream := fmt.Sprintf("{bench-trim-%d}", size)
			b.Cleanup(func() { s.rdb.Del(context.Background(), stream) })
			const n = 200_000
			var serverUs, entries, calls float64
			for range b.N {
				b.StopTimer()
				s.rdb.Del(ctx, stream)
				for _, g := range []string{"g", "h"} {
					if err := s.rdb.XGroupCreateMkStream(ctx, stream, g, "0").Err(); err != nil {
						b.Fatal(err)
					}
				}
				val := strings.Repeat("x", size)
				for i := 0; i < n; i += 1000 {
					p := s.rdb.Pipeline()
					for range 1000 {
						p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"v", val}})
					}
					if _, err := p.Exec(ctx); err != nil {
						b.Fatal(err)
					}
				}
				last, err := s.rdb.XRevRangeN(ctx, stream, "+", "-", 1).Result()
				if err != nil {
					b.Fatal(err)
				}
				for _, g := range []string{"g", "h"} { // both groups read and acked everything
					if err := s.rdb.XGroupSetID(ctx, stream, g, last[0].ID).Err(); err != nil {
						b.Fatal(err)
					}
				}
				before := fcallStats(b, s.rdb)
				b.StartTimer()
				for {
					res, err := s.lib.Trim(ctx, pelwarden.TrimArgs{Stream: stream, Limit: 1000})
					if err != nil {
						b.Fatal(err)
					}
					entries += float64(res.Trimmed)
					if !res.More {
						break
					}
				}
				b.StopTimer()
				after := fcallStats(b, s.rdb)
				calls += after[0] - before[0]
				serverUs += after[1] - before[1]
			}
			b.ReportMetric(serverUs/entries, "server-µs/entry")
			b.ReportMetric(serverUs/calls, "server-µs/call")
		})
	}
}

// fcallStats returns the calls and microseconds of FCALL from INFO
// commandstats.
func fcallStats(b *testing.B, rdb redis.Cmdable) [2]float64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var out [2]float64
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_fcall:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				out[0] = x
			case "usec":
				out[1] = x
			}
		}
	}
	return out
}
