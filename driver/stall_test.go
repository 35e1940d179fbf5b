package driver

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// The stall check reports each entry idle past StallAfter once, with its
// id and owner; an entry that leaves and stalls again is reported again;
// a failed check is counted and forgets nothing.
func TestStallCheck(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.StallAfter = time.Minute })
		ids := h.srv.add(6)
		h.srv.pending("dead", 3, 2*time.Minute, ids[0], ids[1], ids[2])
		h.srv.pending("other", 1, 5*time.Minute, ids[3])
		h.srv.pending("dead", 1, 59*time.Second, ids[4]) // not yet
		h.srv.pending("me", 1, 0, ids[5])
		h.l.sweeps.record(h.clock.now()) // a pass walked the PEL and left them

		reported := h.l.maint.stallCheck(t.Context(), nil)
		require.Equal(t, 4, h.m.get(EventStalled))
		require.Len(t, reported, 4)
		logs := h.logs.String()
		require.Contains(t, logs, "level=WARN")
		require.Contains(t, logs, "recovery is stalled")
		require.Contains(t, logs, "ids=\"[1-0 2-0 3-0 4-0]\"")
		require.Contains(t, logs, "owners=\"[dead:3 other:1]\"")
		require.Contains(t, logs, "oldest_idle=5m0s")
		require.Contains(t, logs, "most_deliveries=3")

		h.logs.Reset()
		reported = h.l.maint.stallCheck(t.Context(), reported)
		require.Equal(t, 4, h.m.get(EventStalled), "reported once")
		require.Empty(t, h.logs.String())

		// ids[0] is acked, ids[4] passes StallAfter: one new report, of ids[4].
		_, err := h.srv.ack(t.Context(), ids[:1])
		require.NoError(t, err)
		advance(time.Second)
		reported = h.l.maint.stallCheck(t.Context(), reported)
		require.Equal(t, 5, h.m.get(EventStalled))
		require.Contains(t, h.logs.String(), "ids=[5-0]")

		h.srv.failNext("idlePending", context.DeadlineExceeded, errNoGroup)
		after := h.l.maint.stallCheck(t.Context(), reported)
		require.Equal(t, reported, after, "a failed check keeps what was reported")
		require.Equal(t, 1, h.m.get(EventCommandError))
		after = h.l.maint.stallCheck(t.Context(), after)
		require.Equal(t, 1, h.m.get(EventCommandError), "a missing group is the read loop's to report")
		require.Equal(t, 5, h.m.get(EventStalled))
	})
}

// An entry idle past StallAfter is reported only once a sweep of the PEL
// that began after it became claimable has completed and left it: a
// backlog still being worked through is not a stall. A reclaim pass that
// reaches the PEL's end is a sweep, from its start; so is a read that
// claims and finds fewer entries than it asked for.
func TestStallCheckWaitsForASweep(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.StallAfter = time.Minute })
		advance(time.Hour)
		ids := h.srv.add(2)
		h.srv.pending("dead", 1, 2*time.Minute, ids...)
		require.Empty(t, h.l.maint.stallCheck(t.Context(), nil), "no sweep yet")
		h.l.sweeps.record(h.clock.now() - 2*time.Minute) // began before they were claimable
		require.Empty(t, h.l.maint.stallCheck(t.Context(), nil), "that sweep could not take them")
		require.Zero(t, h.m.get(EventStalled))

		// A pass that walks the whole PEL is a sweep, from its start; an entry
		// idle past StallAfter that was claimable before that start and is
		// still pending (one the pass left) is stalled.
		before := h.clock.now()
		h.l.reclaimPass(t.Context(), t.Context(), false)
		require.True(t, h.l.sweeps.since(before))
		require.Len(t, h.s.jobs.drain(), 2, "the pass took both")
		left := h.srv.add(1)
		h.srv.pending("dead", 5, 2*time.Minute, left...)
		reported := h.l.maint.stallCheck(t.Context(), nil)
		require.Equal(t, map[string]bool{left[0]: true}, reported)

		// A read that claims and finds fewer entries than it asked for is a
		// sweep too.
		r := newHarness(t, nil)
		advance(time.Hour)
		r.srv.claims = true
		r.l.readClaim.Store(true)
		require.False(t, r.l.sweeps.since(0))
		loopUntil(t, "a read", func(ctx context.Context) { r.l.readLoop(ctx, t.Context()) }, func() bool { return r.srv.callCount("read") >= 1 })
		require.True(t, r.l.sweeps.since(time.Hour), "a read that found nothing swept the PEL")
	})
}

// A check looks at stallCount entries at most and says so.
func TestStallCheckBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.StallAfter = time.Minute })
		ids := h.srv.add(stallCount + 5)
		h.srv.pending("dead", 1, time.Hour, ids...)
		h.l.sweeps.record(h.clock.now())
		reported := h.l.maint.stallCheck(t.Context(), nil)
		require.Len(t, reported, stallCount)
		require.Equal(t, stallCount, h.m.get(EventStalled))
		require.Contains(t, h.logs.String(), "the check looks at the first 100 only")
		require.Contains(t, h.logs.String(), "owners=[dead:100]")
	})
}

// The loop checks every max(ReclaimInterval, StallAfter/3), not at start,
// and NoStallCheck starts no loop.
func TestStallLoop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) {
			cfg.MinIdle, cfg.ReclaimInterval, cfg.StallAfter = 10*time.Millisecond, time.Millisecond, 12*time.Millisecond
		})
		loopUntil(t, "checks every 4ms", h.l.maint.stallLoop, func() bool { return h.srv.callCount("idlePending") >= 3 })

		cfg := testConfig(t, func(c *Config) { c.StallAfter = NoStallCheck })
		require.Equal(t, time.Duration(NoStallCheck), cfg.StallAfter)
		cfg = testConfig(t, func(c *Config) { c.Backoff = []time.Duration{time.Second, time.Hour} })
		require.Equal(t, time.Hour+3*DefaultReclaimInterval, cfg.StallAfter, "the longest Backoff holds entries back longer than MinIdle")
	})
}
