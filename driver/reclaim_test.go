package driver

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// A reclaim pass: it takes idle entries of dead consumers page by page,
// dead-letters those delivered MaxDeliveries times, clears deleted ones,
// and dispatches the rest to the handlers; one page only when nothing
// was idle (the check at start).
func TestReclaimPass(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		maxDeliveries int
		claimCount    int
		onePage       bool
		idle          int   // idle entries of a dead consumer
		deliveries    int64 // their delivery count
		fresh         int   // entries of a live consumer, not idle
		deleted       int   // idle entries gone from the stream
		errs          []error
		createGroup   bool
		dispatched    int
		dead          int
		cleared       int
		pages         int
		stopped       bool
	}{
		{name: "nothing pending", pages: 1},
		{name: "idle entries claimed", idle: 5, fresh: 2, dispatched: 5, pages: 1},
		{name: "pages follow the cursor", idle: 5, claimCount: 2, dispatched: 5, pages: 3},
		{name: "one page only", idle: 5, claimCount: 2, onePage: true, dispatched: 2, pages: 1},
		{name: "delivered too often: dead-lettered", idle: 3, deliveries: 5, dead: 3, pages: 1},
		{name: "NoDeliveryLimit: claimed however often delivered", maxDeliveries: NoDeliveryLimit, idle: 3, deliveries: 50, dispatched: 3, pages: 1},
		{name: "deleted entries cleared", idle: 4, deleted: 2, dispatched: 2, cleared: 2, pages: 1},
		{name: "a lost connection is retried", idle: 2, errs: []error{context.DeadlineExceeded}, dispatched: 2, pages: 2},
		{name: "out of memory: probed until freed", idle: 2, errs: []error{replyErr("OOM full"), replyErr("OOM full")}, dispatched: 2, pages: 3},
		{name: "the group is gone: stop", idle: 2, errs: []error{errNoGroup}, pages: 1, stopped: true},
		{name: "the group is gone and created again", createGroup: true, idle: 2, errs: []error{errNoGroup}, dispatched: 2, pages: 2},
		{name: "a wrong type stops", idle: 2, errs: []error{&pelwarden.Error{Kind: pelwarden.ErrWrongType}}, pages: 1, stopped: true},
		{name: "repeated failures end the pass", idle: 2, errs: slices.Repeat([]error{context.DeadlineExceeded}, reclaimAttempts), pages: reclaimAttempts},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, func(cfg *Config) {
					cfg.MaxDeliveries = c.maxDeliveries
					cfg.ClaimCount = c.claimCount
					cfg.CreateGroup = c.createGroup
					cfg.Concurrency = 10
				})
				advance(time.Hour)
				ids := h.srv.add(c.idle + c.fresh)
				h.srv.pending("dead", max(c.deliveries, 1), 2*time.Second, ids[:c.idle]...)
				h.srv.pending("alive", 1, 0, ids[c.idle:]...)
				h.srv.mu.Lock()
				for _, id := range ids[:c.deleted] {
					delete(h.srv.entries, id)
				}
				h.srv.mu.Unlock()
				h.srv.failNext("claim", c.errs...)

				h.l.reclaimPass(t.Context(), t.Context(), c.onePage)
				jobs := h.s.jobs.drain()
				require.Len(t, jobs, c.dispatched, "dispatched")
				for _, j := range jobs {
					require.Equal(t, "{s}", j.m.Stream)
					require.Equal(t, "me", j.m.Consumer)
					require.Greater(t, j.m.Deliveries, int64(1), "a claim is a delivery")
				}
				require.Len(t, h.srv.deadLettered(), c.dead, "dead-lettered")
				require.Equal(t, c.dead, h.m.deadLettered(pelwarden.ReasonMaxDeliveries))
				require.Equal(t, c.cleared, h.m.get(EventDeletedFromPEL), "cleared")
				require.Equal(t, c.dispatched, h.m.get(EventClaimed))
				require.Equal(t, c.pages, h.srv.callCount("claim"), "claim calls")
				require.Equal(t, c.stopped, h.s.stopping(), "stopped")
				require.False(t, h.l.flow.paused)
				if c.dead > 0 {
					require.Contains(t, h.logs.String(), "dead-lettered entries delivered too often")
				}
				if c.cleared > 0 {
					require.Contains(t, h.logs.String(), "deleted from the stream")
				}
				if c.dispatched > 0 {
					require.Contains(t, h.logs.String(), "reclaim pass took over entries of other consumers")
					require.Contains(t, h.logs.String(), fmt.Sprintf("count=%d from.dead=%d\n", c.dispatched, c.dispatched), "one record per pass")
				} else {
					require.NotContains(t, h.logs.String(), "took over")
				}
			})
		})
	}
}

// An entry whose handler still runs here is not dispatched again when a
// pass takes it back (its lease lapsed): the running handler settles it.
func TestReclaimPassSkipsEntriesInHand(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.srv.add(2)
		h.read(t.Context(), 2)
		advance(2 * time.Second)
		h.l.reclaimPass(t.Context(), t.Context(), false)
		require.Empty(t, h.s.jobs.drain())
		require.Equal(t, 2, h.l.hand.count())
		require.Equal(t, int64(2), h.l.drain.unfinished.Load())
		_, held := h.l.flow.size()
		require.Equal(t, 2, held, "the read's two places; the claim's were given back")
	})
}

// The loop runs a pass at start whatever is idle, then only when the
// check finds something idle; a failed check runs the pass anyway.
func TestReclaimLoop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.ReclaimInterval = time.Millisecond })
		h.srv.failNext("anyIdle", nil, replyErr("LOADING Redis is loading"))
		loopUntil(t, "checks after the first passes", func(ctx context.Context) { h.l.reclaimLoop(ctx, t.Context()) }, func() bool { return h.srv.callCount("anyIdle") >= 5 })
		require.Equal(t, 2, h.srv.callCount("claim"), "the pass at start and the one after the failed check")
		require.Equal(t, 1, h.m.get(EventCommandError))
	})
}

// claimGiveUp: permanent errors at once, others after reclaimAttempts,
// never while the server is out of memory.
func TestClaimGiveUp(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		never := func() bool { return false }
		stop := claimGiveUp(never)
		for range 100 {
			require.False(t, stop(replyErr("OOM full"), 0))
		}
		require.True(t, claimGiveUp(func() bool { return true })(replyErr("OOM full"), 0), "beside reads that claim")
		for i := range reclaimAttempts - 1 {
			require.False(t, stop(context.DeadlineExceeded, i))
		}
		require.True(t, stop(context.DeadlineExceeded, reclaimAttempts))
		require.True(t, claimGiveUp(never)(&pelwarden.Error{Kind: pelwarden.ErrCrossSlot}, 0))
	})
}

// claimThenAck is a laneServer whose claim runs afterClaim between the
// claim's work on the server and its reply: what another goroutine of the
// consumer did while the reply was on its way.
type claimThenAck struct {
	*fakeServer
	afterClaim func()
}

func (c *claimThenAck) claim(ctx context.Context, a pelwarden.ClaimArgs) (*pelwarden.ClaimPage, error) {
	page, err := c.fakeServer.claim(ctx, a)
	if err == nil && c.afterClaim != nil {
		c.afterClaim()
		c.afterClaim = nil
	}
	return page, err
}

// An entry of this consumer's own that a pass claims (its lease was late)
// while its ack lands, the ack's reply coming back before the page's, is
// not run a second time: the ack removed it from the PEL, so the claimed
// copy is stale. (TestDriverNewAndReclaimedShareTheWindow once handled an
// entry twice in one consumer this way, under load.)
func TestReclaimPassSkipsEntriesSettledDuringTheClaim(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		srv := &claimThenAck{fakeServer: h.srv}
		s, lanes := newSession(h.l.cfg, consumerLogger(h.l.cfg), h.lib, func(Config) laneServer { return srv }, h.clock)
		h.s, h.l = s, lanes[0]
		ids := h.srv.add(2)
		jobs := h.read(t.Context(), 2)
		advance(2 * time.Second) // the heartbeat loop was late: both are idle
		srv.afterClaim = func() {
			// 1-0's handler succeeded; its ack lands after the claim and is
			// settled before the page is dispatched.
			n, err := h.srv.ack(t.Context(), ids[:1])
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			h.l.hand.gone(ids[0])
			h.l.flow.free(1, jobs[0].f.bytes)
			h.l.drain.done(1)
		}
		h.l.reclaimPass(t.Context(), t.Context(), false)
		require.Empty(t, h.s.jobs.drain(), "1-0 was acked, 2-0 is still in hand")
		require.Equal(t, []string{ids[1]}, heldIDs(h.l.hand), "in hand")
		require.Equal(t, int64(1), h.l.drain.unfinished.Load())
		_, held := h.l.flow.size()
		require.Equal(t, 1, held, "2-0's place from the read; the claim's were given back")

		// A pass that begins after the ack may take a settled entry again
		// (it is pending once more only if something put it back): it runs.
		h.srv.pending("dead", 1, 2*time.Second, ids[0])
		h.l.reclaimPass(t.Context(), t.Context(), false)
		again := h.s.jobs.drain()
		require.Len(t, again, 1)
		require.Equal(t, ids[0], again[0].m.ID)
	})
}

// Beside reads that claim, a pass the full server refuses ends at once
// without pausing the consumer (reads and acks need no memory); once
// paused (a refused dead-letter), the pass is the probe again.
func TestReclaimPassBesideReadsOnFullServer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		advance(time.Hour)
		ids := h.srv.add(1)
		h.srv.pending("dead", 1, 2*time.Second, ids...)
		h.l.readClaim.Store(true)
		h.srv.failNext("claim", replyErr("OOM full"), replyErr("OOM full"))
		h.l.reclaimPass(t.Context(), t.Context(), false)
		require.Equal(t, 1, h.srv.callCount("claim"), "the pass ended")
		require.Zero(t, h.m.get(EventPaused))
		require.Zero(t, h.m.get(EventCommandError))
		require.Empty(t, h.s.jobs.drain())

		h.s.memoryFull("dead-letter", replyErr("OOM full"))
		h.l.reclaimPass(t.Context(), t.Context(), false)
		require.Equal(t, 3, h.srv.callCount("claim"), "probed until the claim went through")
		require.False(t, h.l.flow.isPaused(), "the claim that went through ended the pause")
		require.Len(t, h.s.jobs.drain(), 1)
	})
}

// An entry released after a failure while a pass is under way (forgotten
// after the pass's ticket, before its claim ran) is still pending: the
// claim that returns it is a delivery, and it runs. (Skipping it spent one
// of a poison entry's MaxDeliveries without a handler run:
// TestDriverPoisonAndDeadLetter.)
func TestReclaimPassRunsEntriesReleasedDuringTheClaim(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		ids := h.srv.add(1)
		h.read(t.Context(), 1)
		advance(2 * time.Second)
		h.srv.hook = func(op string) {
			if op == "claim" {
				h.l.hand.forget(ids[0]) // its handler failed; it was released
			}
		}
		h.l.reclaimPass(t.Context(), t.Context(), false)
		jobs := h.s.jobs.drain()
		require.Len(t, jobs, 1)
		require.Equal(t, ids[0], jobs[0].m.ID)
		require.Equal(t, int64(2), jobs[0].m.Deliveries)
	})
}

// Where the first read finds that the server refuses read claims, the
// reclaim loop runs a round at once: the round at start took one page
// only (it counted on the reads), and the rest of what was idle does not
// wait for ReclaimInterval.
func TestReclaimLoopRunsAtOnceWhenReadClaimsAreRefused(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) {
			cfg.ReclaimInterval = time.Hour
			cfg.ReadBlock = time.Hour
			cfg.ClaimCount = 2
			cfg.Concurrency = 10
		})
		advance(time.Hour)
		ids := h.srv.add(5)
		h.srv.pending("dead", 1, 2*time.Second, ids...)
		h.l.readClaim.Store(true)

		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		reclaimed := make(chan struct{})
		go func() { defer close(reclaimed); h.l.reclaimLoop(ctx, t.Context()) }()
		eventually(t, "the one-page round at start", func() bool { return h.m.get(EventClaimed) == 2 })
		require.Equal(t, 1, h.srv.callCount("claim"))

		read := make(chan struct{})
		go func() { defer close(read); h.l.readLoop(ctx, t.Context()) }()
		eventually(t, "the rest claimed without waiting for ReclaimInterval", func() bool { return h.m.get(EventClaimed) == len(ids) })
		require.False(t, h.l.readClaim.Load())
		cancel()
		<-reclaimed
		<-read
		require.Len(t, h.s.jobs.drain(), len(ids))
	})
}

// claimPacer keeps a page's claim within MinIdle/claimBudget, from the
// time per place the calls took so far: ClaimCount with the defaults,
// about a hundred entries with a MinIdle of 10 ms, never fewer than
// minClaimPage.
func TestClaimPacer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var p claimPacer
		require.Equal(t, 500, p.size(500, 10*time.Millisecond), "nothing measured yet")
		p.took(0, time.Millisecond)
		p.took(10, 0)
		require.Equal(t, 500, p.size(500, 10*time.Millisecond), "calls without places or time measure nothing")
		p.took(100, time.Millisecond) // 10µs a place
		require.Equal(t, 125, p.size(500, 10*time.Millisecond))
		require.Equal(t, 250, p.size(500, 20*time.Millisecond))
		require.Equal(t, 500, p.size(500, DefaultMinIdle))
		p.took(100, 5*time.Millisecond) // 50µs: the mean moves a quarter of the way
		require.Equal(t, 20*time.Microsecond, p.perEntry)
		p.took(1, time.Hour)
		require.Equal(t, minClaimPage, p.size(500, 10*time.Millisecond), "never below minClaimPage")
		require.Equal(t, 50, p.size(50, 10*time.Millisecond), "nor above ClaimCount")
	})
}
