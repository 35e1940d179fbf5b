package driver

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func trackerMsgs(ids ...string) []*Message {
	msgs := make([]*Message, len(ids))
	for i, id := range ids {
		msgs[i] = &Message{ID: id}
	}
	return msgs
}

// add tracks new entries and queues them; an entry a claim returns that is
// already in hand is skipped (its running handler settles it); after close
// nothing is added.
func TestTrackerAdd(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		clk := newClock()
		advance(time.Second)
		tr := newHand(clk)
		q := newJobQueue(1, &atomic.Bool{})
		msgs := trackerMsgs("1-0", "2-0")
		skipped, closed := tr.add(t.Context(), msgs, idleReset{ownedUntil: 5 * time.Second}, q, nil, 0, nil)
		require.False(t, closed)
		require.Empty(t, skipped)
		require.Equal(t, 2, tr.count())
		jobs := q.drain()
		require.Len(t, jobs, 2)
		require.Equal(t, time.Second, jobs[0].f.queued)
		require.EqualValues(t, 5*time.Second, jobs[0].f.ownedUntil.Load())
		require.EqualValues(t, 3, jobs[1].f.bytes)

		// A reclaim pass (a claim: it has a ticket) took back 2-0 while
		// its handler runs: skipped.
		msgs = trackerMsgs("2-0", "3-0")
		skipped, closed = tr.add(t.Context(), msgs, idleReset{}, q, nil, tr.claims.begin(), nil)
		require.False(t, closed)
		require.Equal(t, []*Message{msgs[0]}, skipped)
		require.Len(t, q.drain(), 1)
		require.Equal(t, 3, tr.count())

		tr.close()
		msgs = trackerMsgs("4-0")
		skipped, closed = tr.add(t.Context(), msgs, idleReset{}, q, nil, 0, nil)
		require.True(t, closed)
		require.Equal(t, msgs, skipped)
		require.Empty(t, q.drain())
		require.Equal(t, 3, tr.count())
	})
}

// A claim's entries gone from the PEL here (acked, dead-lettered) while
// it was under way are skipped as stale (see claimTicket); those gone
// before its ticket, and those only forgotten (released after a failure:
// still pending), are added; gone ids are kept only while some claim that
// can return them is under way.
func TestTrackerClaimTickets(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tr := newHand(newClock())
		q := newJobQueue(1, &atomic.Bool{})
		add := func(claim claimTicket, ids ...string) []*Message {
			t.Helper()
			msgs := trackerMsgs(ids...)
			skipped, closed := tr.add(t.Context(), msgs, idleReset{}, q, nil, claim, nil)
			require.False(t, closed)
			q.drain()
			return skipped
		}
		require.Empty(t, add(0, "1-0", "2-0", "3-0", "4-0", "9-0"))

		tr.gone("1-0") // acked before any claim: nothing to note
		require.Empty(t, tr.claims.goneAt)
		older := tr.claims.begin()
		tr.gone("2-0")   // acked during older
		tr.forget("9-0") // released during older: still pending
		newer := tr.claims.begin()
		tr.gone("3-0") // acked during both
		require.Len(t, tr.claims.goneAt, 2)

		// newer returns 1-0, 2-0, 3-0 and 9-0: 3-0 is stale; 1-0 and 2-0 went
		// before newer began (it cannot have run before those acks), and 9-0
		// is a delivery of a released entry.
		skipped := add(newer, "1-0", "2-0", "3-0", "9-0")
		require.Equal(t, []string{"3-0"}, messageIDs(skipped))
		tr.gone("1-0", "2-0")
		require.Len(t, tr.claims.goneAt, 3, "older is still under way")

		// older failed: nothing under way, nothing kept.
		tr.claims.end(older)
		require.Empty(t, tr.claims.goneAt)
		require.Empty(t, tr.claims.claims)
		tr.gone("4-0", "3-0")
		require.Empty(t, tr.claims.goneAt)

		// A claim ended by add drops the gone ids older than every claim left.
		a := tr.claims.begin()
		tr.gone("5-0")
		b := tr.claims.begin()
		tr.gone("6-0")
		require.Equal(t, []string{"5-0"}, messageIDs(add(a, "5-0", "7-0")))
		require.Equal(t, map[string]uint64{"6-0": tr.claims.seq}, tr.claims.goneAt, "5-0 went before b began")
		require.Equal(t, []string{"6-0"}, messageIDs(add(b, "6-0")))
		require.Empty(t, tr.claims.goneAt)

		// After close the claim ends too.
		c := tr.claims.begin()
		tr.close()
		msgs := trackerMsgs("8-0")
		_, closed := tr.add(t.Context(), msgs, idleReset{}, q, nil, c, nil)
		require.True(t, closed)
		require.Empty(t, tr.claims.claims)
	})
}

// heartbeatDue: which entries get a lease extension on a tick, which delayed
// ones are released (with the longest delay left among them).
func TestTrackerLeaseDue(t *testing.T) {
	t.Parallel()
	const minIdle = time.Second
	const every = 300 * time.Millisecond
	const tick = every / 2
	type entry struct {
		id          string
		age         time.Duration // held this long
		leased      time.Duration // its lease began this long ago (0: age)
		acking      bool
		lost        bool
		delayedLeft time.Duration // > 0: a RetryAfter held back this much longer
	}
	for _, c := range []struct {
		name         string
		heartbeat    bool
		entries      []entry
		extend       []string
		release      []string
		releaseDelay time.Duration
	}{
		{name: "young entries need nothing", heartbeat: true,
			entries: []entry{{id: "1-0", age: every - 1}}},
		{name: "held for every: extended", heartbeat: true,
			entries: []entry{{id: "1-0", age: every}, {id: "2-0", age: 2 * every}, {id: "3-0", age: 0}},
			extend:  []string{"1-0", "2-0"}},
		{name: "extended less than every ago: not yet again", heartbeat: true,
			entries: []entry{{id: "1-0", age: 3 * every, leased: every - 1}, {id: "2-0", age: 3 * every, leased: every}},
			extend:  []string{"2-0"}},
		{name: "no heartbeat: nothing extended", heartbeat: false,
			entries: []entry{{id: "1-0", age: 2 * every}}},
		{name: "lost entries are not extended", heartbeat: true,
			entries: []entry{{id: "1-0", age: every, lost: true}}},
		{name: "an ack queued needs no extension while the next tick comes in time", heartbeat: true,
			entries: []entry{
				{id: "1-0", age: every, acking: true},
				{id: "2-0", age: minIdle - tick - minIdle/8 - 1, acking: true},
				{id: "3-0", age: minIdle - tick - minIdle/8, acking: true},
				{id: "4-0", age: minIdle, acking: true},
			},
			extend: []string{"3-0", "4-0"}},
		{name: "however long its handler ran", heartbeat: true,
			entries: []entry{{id: "1-0", age: 3 * minIdle, leased: every, acking: true}, {id: "2-0", age: 3 * minIdle, leased: minIdle - tick - minIdle/8, acking: true}},
			extend:  []string{"2-0"}},
		{name: "a delay far off is extended, one due soon released", heartbeat: false,
			entries: []entry{{id: "1-0", delayedLeft: minIdle}, {id: "2-0", delayedLeft: minIdle - tick}, {id: "3-0", delayedLeft: tick}},
			extend:  []string{"1-0"}, release: []string{"2-0", "3-0"}, releaseDelay: minIdle - tick},
		{name: "a delay already past is released at once", heartbeat: true,
			entries: []entry{{id: "1-0", delayedLeft: -time.Second}},
			release: []string{"1-0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				clk := newClock()
				advance(time.Hour)
				tr := newHand(clk)
				q := newJobQueue(1, &atomic.Bool{})
				for _, e := range c.entries {
					if e.delayedLeft != 0 {
						tr.delay(e.id, clk.now()+e.delayedLeft)
						continue
					}
					msgs := trackerMsgs(e.id)
					tr.add(t.Context(), msgs, idleReset{from: clk.now() - e.age}, q, nil, 0, nil) // read e.age ago
					f := q.drain()[0].f
					if e.leased > 0 {
						tr.extended([]string{e.id}, idleReset{from: clk.now() - e.leased})
					}
					f.acking.Store(e.acking)
					f.lost.Store(e.lost)
				}
				extend, release, delay := tr.heartbeatDue(c.heartbeat, every, tick, minIdle)
				slices.Sort(extend)
				slices.Sort(release)
				require.Equal(t, c.extend, extend, "extend")
				require.Equal(t, c.release, release, "release")
				require.Equal(t, c.releaseDelay, delay, "release delay")
				// Released delays are no longer held.
				_, again, _ := tr.heartbeatDue(c.heartbeat, every, tick, minIdle)
				require.Empty(t, again)
			})
		})
	}
}

// Whatever the tick's phase against an entry's read, every extension of a
// slow handler's entry comes at most HeartbeatInterval+tick after the
// reset before it, which heartbeatTick keeps at most halfway between
// HeartbeatInterval and MinIdle: the margin against another consumer's
// claim never rests on the phase. (The keeper used to count an entry's
// age from its dispatch on ticks HeartbeatInterval apart, so a read just
// after a tick was first extended up to 2 HeartbeatIntervals, 2/3 MinIdle,
// after it.)
func TestHeartbeatMarginIgnoresPhase(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for _, every := range []time.Duration{0, 100 * time.Millisecond, 500 * time.Millisecond, 900 * time.Millisecond} {
			cfg := testConfig(t, func(c *Config) { c.MinIdle = time.Second; c.HeartbeatInterval = every })
			every = cfg.HeartbeatInterval
			tick := cfg.heartbeatTick()
			bound := every + (cfg.MinIdle-every)/2
			for phase := time.Duration(0); phase < tick; phase += tick / 16 {
				clk := newClock()
				tr := newHand(clk)
				q := newJobQueue(1, &atomic.Bool{})
				msgs := trackerMsgs("1-0")
				advance(phase) // the read lands phase after a tick
				tr.add(t.Context(), msgs, idleReset{from: clk.now()}, q, nil, 0, nil)
				q.drain()
				lastReset, extensions := clk.now(), 0
				for now := tick; now < 10*cfg.MinIdle; now += tick {
					advance(now - clk.now())
					extend, _, _ := tr.heartbeatDue(true, every, tick, cfg.MinIdle)
					if len(extend) == 0 {
						require.Less(t, now+tick-lastReset, cfg.MinIdle, "every %v phase %v: the next tick comes in time", every, phase)
						continue
					}
					require.LessOrEqual(t, now-lastReset, bound, "every %v phase %v: extended at %v after its reset", every, phase, now-lastReset)
					tr.extended(extend, idleReset{from: now})
					lastReset = now
					extensions++
				}
				require.Greater(t, extensions, 10, "every %v phase %v", every, phase)
			}
		}
	})
}

// extended moves the ownership bound on, except for lost entries; lost
// cancels the handler's context with ErrLostOwnership and drops a delay;
// forget, skipped and takeUnstarted give entries back.
func TestTrackerLoseExtendForget(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		clk := newClock()
		tr := newHand(clk)
		q := newJobQueue(1, &atomic.Bool{})
		msgs := trackerMsgs("1-0", "2-0", "3-0")
		tr.add(t.Context(), msgs, idleReset{ownedUntil: time.Second}, q, nil, 0, nil)
		jobs := q.drain()
		tr.delay("9-0", time.Hour)

		tr.lost([]string{"2-0", "9-0"})
		require.True(t, jobs[1].f.lost.Load())
		require.ErrorIs(t, context.Cause(&jobs[1].f.ctx), ErrLostOwnership)
		require.NoError(t, jobs[0].f.ctx.Err())
		extend, _, _ := tr.heartbeatDue(false, time.Second, time.Second, time.Minute)
		require.Empty(t, extend, "the lost delayed entry is no longer held")

		tr.extended([]string{"1-0", "2-0", "7-0"}, idleReset{from: 4 * time.Second, ownedUntil: 9 * time.Second})
		require.EqualValues(t, 9*time.Second, jobs[0].f.ownedUntil.Load())
		tr.mu.Lock()
		require.Equal(t, 4*time.Second, jobs[0].f.resetAt)
		tr.mu.Unlock()
		require.EqualValues(t, time.Second, jobs[1].f.ownedUntil.Load(), "a lost entry keeps its bound")

		tr.forget("1-0")
		tr.skipped(jobs[2].f)
		require.Equal(t, 1, tr.count())
		require.Equal(t, []string{"3-0"}, tr.takeUnstarted())
		require.Empty(t, tr.takeUnstarted())

		// Adding an entry again drops its delay.
		tr.delay("5-0", time.Hour)
		msgs = trackerMsgs("5-0")
		tr.add(t.Context(), msgs, idleReset{}, q, nil, 0, nil)
		_, release, _ := tr.heartbeatDue(false, time.Second, time.Second, 2*time.Hour)
		require.Empty(t, release)
		extend, _, _ = tr.heartbeatDue(false, time.Second, time.Second, 2*time.Hour)
		require.Empty(t, extend)
	})
}

// The hand finds its entries by range for reads of new entries and by id
// for the rest: claims, and a read below one before (the group moved back
// by XGROUP SETID), which skips what is held already. Dropping an entry
// is by the entry: a stale one (its id taken in hand again since) drops
// nothing. Emptied batches are compacted away.
func TestHandHeldSet(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tr := newHand(newClock())
		q := newJobQueue(1, &atomic.Bool{})
		add := func(claim claimTicket, ids ...string) ([]string, []job) {
			t.Helper()
			skipped, closed := tr.add(t.Context(), trackerMsgs(ids...), idleReset{}, q, nil, claim, nil)
			require.False(t, closed)
			return messageIDs(skipped), q.drain()
		}
		_, first := add(0, "1-0", "2-0", "10-5")
		_, second := add(0, "10-6", "11-0") // above the first: ranged
		require.Len(t, tr.held.ranged, 2)
		require.Empty(t, tr.held.byID)
		for _, id := range []string{"1-0", "2-0", "10-5", "10-6", "11-0"} {
			require.True(t, tr.holds(id), id)
		}
		for _, id := range []string{"0-1", "3-0", "10-4", "10-7", "12-0", "not-an-id"} {
			require.False(t, tr.holds(id), id)
		}

		// A read below the last: indexed by id; what it returns that is
		// held is skipped.
		skipped, below := add(0, "2-0", "5-0")
		require.Equal(t, []string{"2-0"}, skipped)
		require.Len(t, below, 1)
		require.Len(t, tr.held.ranged, 2)
		require.Contains(t, tr.held.byID, "5-0")
		// A claim: by id too, whatever its order.
		skipped, claimed := add(tr.claims.begin(), "7-0", "1-0", "6-0")
		require.Equal(t, []string{"1-0"}, skipped)
		require.Len(t, claimed, 2)
		require.Equal(t, []string{"1-0", "2-0", "5-0", "6-0", "7-0", "10-5", "10-6", "11-0"}, heldIDs(tr))
		require.Equal(t, 8, tr.count())

		// Dropped by entry or by id, from either kind of batch.
		tr.drop(true, first[0].f, below[0].f)
		tr.forget("7-0", "10-6")
		tr.gone("2-0")
		require.Equal(t, []string{"6-0", "10-5", "11-0"}, heldIDs(tr))
		require.NotContains(t, tr.held.byID, "5-0")
		require.False(t, tr.holds("2-0"))
		require.True(t, tr.holds("10-5"))

		// 10-6 is claimed again: its old entry drops nothing.
		_, again := add(tr.claims.begin(), "10-6")
		tr.drop(false, second[0].f)
		require.True(t, tr.holds("10-6"))
		tr.drop(false, again[0].f)
		require.False(t, tr.holds("10-6"))

		// The first batch is emptied: its entries are let go.
		tr.drop(false, first[2].f)
		require.Nil(t, first[2].f.batch.entries)
		require.Equal(t, []string{"6-0", "11-0"}, heldIDs(tr))

		// Many emptied batches are compacted away; the rest are found.
		var last []job
		for i := range 40 {
			_, jobs := add(0, fmt.Sprintf("%d-0", 100+i))
			if i < 39 {
				tr.drop(true, jobs[0].f)
			}
			last = jobs
		}
		require.Less(t, len(tr.held.batches), 20)
		require.True(t, tr.holds("139-0"))
		require.True(t, tr.holds("11-0"))
		require.False(t, tr.holds("120-0"))
		require.Equal(t, 3, tr.count())
		tr.drop(true, last[0].f)
		tr.forget("6-0", "11-0")
		require.Zero(t, tr.count())
		require.Empty(t, heldIDs(tr))
	})
}
