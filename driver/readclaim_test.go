package driver

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// On a server whose reads claim, the read loop takes the idle entries of a
// dead consumer with its reads, longest idle first,
// each with its delivery count, taking turns with reads of new entries;
// an entry delivered MaxDeliveries times
// before is dead-lettered and never dispatched; an entry deleted while
// pending is left to the reclaim pass. No claim function call is made.
func TestReadLoopClaims(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.Concurrency = 10; cfg.MaxDeliveries = 3 })
		advance(time.Hour)
		h.srv.claims = true
		ids := h.srv.add(7)
		h.srv.pending("dead", 1, 3*time.Second, ids[0])
		h.srv.pending("dead", 2, 4*time.Second, ids[1]) // longest idle: first
		h.srv.pending("dead", 3, 2*time.Second, ids[2]) // delivered MaxDeliveries times
		h.srv.pending("dead", 1, 5*time.Second, ids[3]) // deleted while pending
		h.srv.pending("alive", 1, 0, ids[4])            // not idle
		h.srv.mu.Lock()
		delete(h.srv.entries, ids[3])
		h.srv.mu.Unlock()

		h.l.detectReadClaim()
		require.True(t, h.l.readClaim.Load())
		loopUntil(t, "claimed and new entries read", func(ctx context.Context) { h.l.readLoop(ctx, t.Context()) },
			func() bool { return h.m.get(EventRead) == 2 && h.m.get(EventClaimed) == 2 })

		var got []string
		var deliveries []int64
		for _, j := range h.s.jobs.drain() {
			got = append(got, j.m.ID)
			deliveries = append(deliveries, j.m.Deliveries)
		}
		// The first read (one entry: nothing was read yet) takes the longest
		// idle; the next one, new entries only; the next, the other idle ones.
		require.Equal(t, []string{ids[1], ids[5], ids[6], ids[0]}, got)
		require.Equal(t, []int64{3, 1, 1, 2}, deliveries, "a claim is a delivery")
		require.Equal(t, []string{ids[2]}, h.srv.deadLettered(), "never dispatched: dead-lettered")
		require.Equal(t, 1, h.m.deadLettered(pelwarden.ReasonMaxDeliveries))
		require.Equal(t, 1, h.srv.callCount("deadLetterSpent"))
		require.Contains(t, h.srv.pendingIDs(), ids[3], "deleted while pending: the reclaim pass clears it")
		require.Zero(t, h.srv.callCount("claim"))
		require.Zero(t, h.srv.callCount("deadLetter"))
	})
}

// NoDeliveryLimit: a read hands every idle entry to a handler however
// often it was delivered.
func TestReadLoopClaimsWithoutLimit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.MaxDeliveries = NoDeliveryLimit })
		advance(time.Hour)
		h.srv.claims = true
		ids := h.srv.add(1)
		h.srv.pending("dead", 50, 2*time.Second, ids...)
		h.l.readClaim.Store(true)
		loopUntil(t, "claimed", func(ctx context.Context) { h.l.readLoop(ctx, t.Context()) }, func() bool { return h.m.get(EventClaimed) == 1 })
		jobs := h.s.jobs.drain()
		require.Len(t, jobs, 1)
		require.Equal(t, int64(51), jobs[0].m.Deliveries)
		require.Empty(t, h.srv.deadLettered())
	})
}

// A dead-letter call that fails is retried; the entry is dispatched
// neither way.
func TestReadLoopSpentRetried(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.MaxDeliveries = 2 })
		advance(time.Hour)
		h.srv.claims = true
		ids := h.srv.add(1)
		h.srv.pending("dead", 2, 2*time.Second, ids...)
		h.srv.failNext("deadLetterSpent", context.DeadlineExceeded)
		h.l.readClaim.Store(true)
		loopUntil(t, "dead-lettered", func(ctx context.Context) { h.l.readLoop(ctx, t.Context()) }, func() bool { return len(h.srv.deadLettered()) == 1 })
		require.Empty(t, h.s.jobs.drain())
		require.Equal(t, 2, h.srv.callCount("deadLetterSpent"))
		require.Equal(t, 1, h.m.get(EventCommandError))
	})
}

// A server that refuses CLAIM turns the lane's read claims off: it reads
// new entries, and idle ones are left to the reclaim passes.
func TestReadLoopClaimRefused(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		ids := h.srv.add(2)
		h.l.readClaim.Store(true) // h.srv.claims is false: the fake refuses CLAIM
		loopUntil(t, "read without CLAIM", func(ctx context.Context) { h.l.readLoop(ctx, t.Context()) }, func() bool { return h.m.get(EventRead) == 2 })
		require.False(t, h.l.readClaim.Load())
		require.Len(t, h.s.jobs.drain(), len(ids))
		require.Contains(t, h.logs.String(), "the server has no XREADGROUP ... CLAIM")
		require.Zero(t, h.m.get(EventCommandError), "not a failure")
	})
}

// On a lane of several streams (which polls an idle stream every
// ReadBlock/2 instead of blocking), the refused probe is not an idle
// read: the first real read follows at once. (It waited ReadBlock/2, a
// second with the defaults, before any entry of a consumer of several
// streams reached a handler on servers without CLAIM.)
func TestReadLoopClaimRefusedReadsAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.ReadBlock = time.Hour })
		h.l.single = false
		ids := h.srv.add(3)
		h.l.readClaim.Store(true)
		loopUntil(t, "read at once after the refused probe", func(ctx context.Context) { h.l.readLoop(ctx, t.Context()) },
			func() bool { return h.m.get(EventRead) == len(ids) })
		require.False(t, h.l.readClaim.Load())
		require.Len(t, h.s.jobs.drain(), len(ids))
	})
}

// detectReadClaim turns read claims on unless ReadClaim is off or
// Backoff is set; the first read then tells (TestReadLoopClaimRefused).
func TestDetectReadClaim(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		change func(*Config)
		want   bool
	}{
		{name: "auto", want: true},
		{name: "off", change: func(c *Config) { c.ReadClaim = ReadClaimOff }},
		{name: "backoff", change: func(c *Config) { c.Backoff = []time.Duration{time.Minute} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, c.change)
				h.l.detectReadClaim()
				require.Equal(t, c.want, h.l.readClaim.Load())
			})
		})
	}
}

// A failed entry waits ReclaimInterval (at most MinIdle) where reads
// claim, as it would for a pass; elsewhere it is claimable at once; a
// RetryAfter keeps its delay (Outcome.ReleaseDelay, the rule the lane and
// the test kit share).
func TestReleaseDelay(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		readClaim bool
		interval  time.Duration
		err       error
		want      string
	}{
		{name: "passes only", interval: 100 * time.Millisecond, err: errHandler, want: "0s"},
		{name: "reads claim", readClaim: true, interval: 100 * time.Millisecond, err: errHandler, want: "100ms"},
		{name: "reads claim, long interval", readClaim: true, interval: time.Hour, err: errHandler, want: "1s"},
		{name: "RetryAfter keeps its delay", readClaim: true, interval: time.Hour, err: RetryAfter(0, errHandler), want: "0s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, func(cfg *Config) {
					cfg.ReclaimInterval = c.interval
					cfg.Handler = HandlerFunc(func(context.Context, *Message) error { return c.err })
				})
				h.l.readClaim.Store(c.readClaim)
				ids := h.srv.add(1)
				jobs := h.read(t.Context(), 1)
				h.l.exec.runJob(jobs[0])
				require.Equal(t, []string{c.want}, h.srv.releases(ids[0]))
			})
		})
	}
}

// A read with CLAIM gives four elements per entry: id, fields, idle time
// and the deliveries before this one (0 for a new entry).
func TestDecodeReadClaimed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reply := []any{[]any{"{s}", []any{
			[]any{"2-0", []any{"f", "b"}, int64(321), int64(1)},
			[]any{"3-0", []any{"f", "c"}, int64(0), int64(0)},
			[]any{"4-0", []any{"f", "d"}, "12", "4"},
		}}}
		msgs, err := decodeRead(reply, "{s}", "g", "me")
		require.NoError(t, err)
		require.Len(t, msgs, 3)
		require.Equal(t, []int64{2, 1, 5}, []int64{msgs[0].Deliveries, msgs[1].Deliveries, msgs[2].Deliveries})
		require.Equal(t, []pelwarden.Field{{Name: "f", Value: "b"}}, msgs[0].Fields)

		for _, bad := range []any{"x", int64(-1), nil} {
			_, err := decodeRead([]any{[]any{"{s}", []any{[]any{"2-0", []any{"f", "b"}, int64(1), bad}}}}, "{s}", "g", "me")
			require.ErrorIs(t, err, pelwarden.ErrMalformedReply)
		}
	})
}

// Where reads claim, the reclaim loop runs one page at start and then a
// pass only while the reads find nothing: for the deleted entries they
// leave.
func TestReclaimTickBesideReadClaims(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.ClaimCount = 1 })
		advance(time.Hour)
		ids := h.srv.add(3)
		h.srv.pending("dead", 1, 2*time.Second, ids...)
		h.srv.mu.Lock()
		delete(h.srv.entries, ids[0])
		delete(h.srv.entries, ids[1])
		h.srv.mu.Unlock()
		h.l.readClaim.Store(true)

		h.l.reclaimTick(t.Context(), t.Context(), true)
		require.Equal(t, 1, h.srv.callCount("claim"), "one page at start")
		require.Zero(t, h.srv.callCount("anyIdle"))
		require.Equal(t, 1, h.m.get(EventDeletedFromPEL))

		h.l.reclaimTick(t.Context(), t.Context(), false)
		require.Equal(t, 1, h.srv.callCount("claim"), "no pass beside busy reads")
		require.Zero(t, h.srv.callCount("anyIdle"))

		h.l.drain.readIdle.Store(true)
		h.l.reclaimTick(t.Context(), t.Context(), false)
		require.Equal(t, 1, h.srv.callCount("anyIdle"))
		require.Equal(t, 2, h.m.get(EventDeletedFromPEL), "a pass once the reads find nothing")
		require.Len(t, h.s.jobs.drain(), 1, "and it takes what is idle")
		require.Equal(t, 3, h.srv.callCount("claim"), "a whole pass: two pages, until the cursor returns")
	})
}

// Draining a backlog with no new entries, the reads do not take turns:
// after one read for new entries finds none, every read claims (no empty
// read per batch).
func TestReadLoopClaimsBacklogWithoutTurns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.Concurrency = 2; cfg.ReadCount = 2 })
		advance(time.Hour)
		h.srv.claims = true
		ids := h.srv.add(9)
		h.srv.pending("dead", 1, 2*time.Second, ids...)
		h.l.readClaim.Store(true)
		go func() {
			// Handlers: settle what is dispatched, so the window has room.
			for {
				j, ok := h.s.jobs.get()
				if !ok {
					return
				}
				h.l.exec.runJob(j)
			}
		}()
		t.Cleanup(h.s.jobs.close)
		loopUntil(t, "the backlog taken", func(ctx context.Context) { h.l.readLoop(ctx, t.Context()) }, func() bool { return h.m.get(EventClaimed) == 9 })
		h.srv.mu.Lock()
		defer h.srv.mu.Unlock()
		require.Equal(t, 1, h.srv.plain, "one read for new entries, which found none")
	})
}

// An entry a read hands over after MaxDeliveries deliveries that is too
// large to dead-letter is parked: never dispatched, held under the lease
// (so reads do not take it again and again), skipped when a read does
// take it, reported once by the stall check after StallAfter, and let go
// once someone else settles it.
func TestReadLoopParksTooLarge(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.MaxDeliveries = 3 })
		advance(time.Hour)
		h.srv.claims = true
		ids := h.srv.add(1)
		big := ids[0]
		h.srv.mu.Lock()
		h.srv.entries[big] = append(h.srv.entries[big], pelwarden.Field{Name: "huge", Value: "x"})
		h.srv.mu.Unlock()
		h.srv.pending("dead", 3, 2*time.Second, big)
		h.l.readClaim.Store(true)
		loopUntil(t, "parked", func(ctx context.Context) { h.l.readLoop(ctx, t.Context()) }, func() bool { return h.m.get(EventTooLarge) == 1 })
		require.Empty(t, h.s.jobs.drain())
		require.True(t, h.l.hand.holds(big))
		require.Zero(t, h.l.drain.unfinished.Load(), "a parked entry holds no place")
		require.Contains(t, h.logs.String(), "parked")
		extend, _, _ := h.l.hand.heartbeatDue(false, time.Millisecond, time.Millisecond, h.l.cfg.MinIdle)
		require.Equal(t, []string{big}, extend, "under the lease even without the heartbeat")

		// Its lease lapsed (nothing extends it here): a read takes it again;
		// it is neither dispatched nor sent to the dead-letter call again.
		advance(2 * time.Second)
		reads := h.srv.callCount("read")
		loopUntil(t, "read again", func(ctx context.Context) { h.l.readLoop(ctx, t.Context()) }, func() bool { return h.srv.callCount("read") > reads+1 })
		require.Empty(t, h.s.jobs.drain())
		require.Equal(t, 1, h.srv.callCount("deadLetterSpent"))
		require.EqualValues(t, 5, h.srv.pel[big].deliveries)

		// Reported once when parked for StallAfter (parked 2s before the
		// read that took it again).
		advance(h.l.cfg.StallAfter - 3*time.Second)
		require.Empty(t, h.l.maint.stallCheck(t.Context(), nil), "not parked for StallAfter yet")
		advance(2 * time.Second)
		reported := h.l.maint.stallCheck(t.Context(), nil)
		require.Equal(t, map[string]bool{big: true}, reported)
		require.Equal(t, 1, h.m.get(EventStalled))
		require.Contains(t, h.logs.String(), "owners=[me:1]")
		require.Contains(t, h.logs.String(), "most_deliveries=4")
		// The fake finds it idle past StallAfter too (no heartbeat loop runs
		// here): still one report.
		advance(2 * time.Second)
		reported = h.l.maint.stallCheck(t.Context(), reported)
		require.Equal(t, map[string]bool{big: true}, reported)
		require.Equal(t, 1, h.m.get(EventStalled), "once")

		// An operator acked it: the lease extension finds it gone, and it is
		// let go.
		_, err := h.srv.ack(t.Context(), []string{big})
		require.NoError(t, err)
		h.l.keep.heartbeatTick(t.Context(), time.Millisecond)
		require.False(t, h.l.hand.holds(big))
	})
}

// A read that claims and takes no entry over returned new entries only:
// the hand keeps them as a read's (by range, not by id), and the read's
// claim ticket ends with it.
func TestReadClaimOfNewEntriesIsRanged(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.Concurrency = 10 })
		h.srv.claims = true
		ids := h.srv.add(3)
		h.l.readClaim.Store(true)
		loopUntil(t, "new entries read", func(ctx context.Context) { h.l.readLoop(ctx, t.Context()) },
			func() bool { return h.m.get(EventRead) == 3 })
		require.Equal(t, ids, heldIDs(h.l.hand))
		h.l.hand.mu.Lock()
		defer h.l.hand.mu.Unlock()
		require.Empty(t, h.l.hand.held.byID, "no entry indexed by id")
		require.NotEmpty(t, h.l.hand.held.ranged)
		require.Empty(t, h.l.hand.claims.claims, "no claim under way")
	})
}
