package driver

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// A lease tick extends the entries held long enough, marks lost (and
// cancels) those another consumer owns now, moves their ack fence on, and
// releases delayed entries whose retry time is near.
func TestLeaseTick(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		noLease   bool
		heldFor   time.Duration
		takenOver bool // another consumer owns 1-0
		deleted   bool // 2-0 was deleted from the stream
		failure   error
		extended  int // EventLeaseExtended
		lost      []bool
		fenceMove bool // the extended entries' ownedUntil moved on
		errors    int
	}{
		{name: "too young", heldFor: time.Millisecond, lost: []bool{false, false}},
		{name: "extended", heldFor: time.Second / 2, extended: 2, lost: []bool{false, false}, fenceMove: true},
		{name: "taken over: lost", heldFor: time.Second / 2, takenOver: true, extended: 1, lost: []bool{true, false}, fenceMove: true},
		{name: "deleted: lost", heldFor: time.Second / 2, deleted: true, extended: 1, lost: []bool{false, true}, fenceMove: true},
		{name: "no heartbeat", noLease: true, heldFor: time.Second / 2, lost: []bool{false, false}},
		{name: "a failed extension is counted", heldFor: time.Second / 2, failure: context.DeadlineExceeded, lost: []bool{false, false}, errors: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, func(cfg *Config) {
					if c.noLease {
						cfg.HeartbeatInterval = NoHeartbeat
					}
				})
				ids := h.srv.add(2)
				jobs := h.read(t.Context(), 2)
				before := jobs[1].f.ownedUntil.Load()
				advance(c.heldFor)
				if c.takenOver {
					h.srv.pending("other", 2, 0, ids[0])
				}
				if c.deleted {
					h.srv.mu.Lock()
					delete(h.srv.entries, ids[1])
					h.srv.mu.Unlock()
				}
				if c.failure != nil {
					h.srv.failNext("extend", c.failure)
				}
				h.l.keep.heartbeatTick(t.Context(), h.l.cfg.MinIdle/3)
				require.Equal(t, c.extended, h.m.get(EventLeaseExtended))
				for i, lost := range c.lost {
					require.Equal(t, lost, jobs[i].f.lost.Load(), "entry %d lost", i)
					if lost {
						require.ErrorIs(t, context.Cause(&jobs[i].f.ctx), ErrLostOwnership)
					}
				}
				if c.fenceMove {
					i := 1
					if c.deleted {
						i = 0
					}
					require.Greater(t, jobs[i].f.ownedUntil.Load(), before, "the fence moved with the lease")
				}
				require.Equal(t, c.errors, h.m.get(EventCommandError))
			})
		})
	}
}

// A RetryAfter longer than MinIdle is held by the heartbeat loop (extended)
// until its retry time is within MinIdle, then released with the rest.
func TestLeaseHoldsLongRetryAfter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil) // MinIdle 1s, HeartbeatInterval 333ms
		ids := h.srv.add(1)
		jobs := h.read(t.Context(), 1)
		j := jobs[0]
		require.False(t, h.l.exec.applyOutcome(j.m, j.f, RetryAfter(3*time.Second, errHandler), false, h.l.clock.now()))
		h.l.hand.forget(j.m.ID)
		every := h.l.cfg.MinIdle / 3
		h.l.keep.heartbeatTick(t.Context(), every)
		require.Equal(t, 1, h.m.get(EventLeaseExtended), "held: extended")
		require.Empty(t, h.srv.releases(ids[0]))
		advance(2*time.Second + every)
		h.l.keep.heartbeatTick(t.Context(), every)
		require.Equal(t, []string{(time.Second - every).String()}, h.srv.releases(ids[0]), "released for what is left")
		h.l.keep.heartbeatTick(t.Context(), every)
		require.Len(t, h.srv.releases(ids[0]), 1, "released once")
	})
}

// The loop ticks until its context ends.
func TestLeaseLoop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.MinIdle = 30 * time.Millisecond; cfg.HeartbeatInterval = NoHeartbeat })
		ids := h.srv.add(1)
		jobs := h.read(t.Context(), 1)
		h.l.exec.applyOutcome(jobs[0].m, jobs[0].f, RetryAfter(time.Hour, errHandler), false, h.l.clock.now())
		loopUntil(t, "the delayed entry extended", h.l.keep.heartbeatLoop, func() bool { return h.srv.callCount("extend") >= 2 })
		require.Empty(t, h.srv.releases(ids[0]))
	})
}
