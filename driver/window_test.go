package driver

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// The first call takes at most one entry per handler; later calls take what
// the window has room for.
func TestWindowFirstCallTakesConcurrency(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWindow(16, 2000, false, 32<<20, time.Minute)
		r := w.reserve(t.Context(), partyRead, 500)
		require.Equal(t, 16, r.n)
		require.True(t, r.bound, "the window's room set the size")
	})
}

// Workers that ran out of work during a full call that the window limited
// double the window, up to its cap, but not during the call that first
// fills the room of the last growth; a call that found fewer entries than
// it asked for (the stream ran dry) does not grow it.
func TestWindowGrowsWhenHandlersStarve(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		w := newWindow(16, 100, false, 32<<20, time.Minute)
		call := func(w *window, got int, more, starved bool) {
			r := w.reserve(ctx, partyRead, 500)
			if starved {
				w.starved.Store(true) // a worker parked while the call was in flight
			}
			w.fill(r, min(got, r.n), int64(min(got, r.n))*100, time.Millisecond, more)
			for range min(got, r.n) {
				w.free(1, 100)
			}
		}
		call(w, 500, true, true)
		limit, held := w.size()
		require.Equal(t, 24, limit)
		require.Zero(t, held)
		call(w, 500, true, true)
		limit, _ = w.size()
		require.Equal(t, 24, limit, "the call filling the new room does not count")
		call(w, 500, true, true)
		limit, _ = w.size()
		require.Equal(t, 36, limit)
		for range 10 {
			call(w, 500, true, true)
		}
		limit, _ = w.size()
		require.Equal(t, 100, limit, "capped at MaxInHand")

		// Slow handlers: the queue already covers the round trips.
		slow := newWindow(16, 100, false, 32<<20, time.Minute)
		for range minTimed {
			slow.timings.add(1, 0, 40*time.Millisecond)
		}
		for range 10 {
			call(slow, 500, true, true)
		}
		limit, _ = slow.size()
		require.Equal(t, 24, limit, "grows once: 16 handlers of 40 ms cover 4 round trips of 1 ms with 1.6 entries")

		// Source ran dry: no growth.
		w2 := newWindow(16, 100, false, 32<<20, time.Minute)
		call(w2, 3, false, true)
		call(w2, 3, false, true)
		limit, _ = w2.size()
		require.Equal(t, 16, limit)

		// Not starved: no growth.
		w3 := newWindow(16, 100, false, 32<<20, time.Minute)
		call(w3, 500, true, false)
		call(w3, 500, true, false)
		limit, _ = w3.size()
		require.Equal(t, 16, limit)
	})
}

// A call that had to wait for room was held back by the window, whatever
// it then took: with handlers starving it grows the window, so the next
// call can go out while they work. One that found its room at once, and
// asked for less than there was, does not.
func TestWindowGrowsAfterAWaitForRoom(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		w := newWindow(16, 1000, false, 32<<20, time.Minute)
		w.limit, w.perEntry = 100, 100
		r := w.reserve(ctx, partyReclaim, 20)
		require.Equal(t, 20, r.n)
		w.starved.Store(true)
		w.fill(r, 20, 2000, time.Millisecond, true)
		limit, _ := w.size()
		require.Equal(t, 100, limit, "room to spare: not held back")

		hold := w.reserve(ctx, partyRead, 70) // with the 20 above, 90 in hand
		require.Equal(t, 70, hold.n)
		got := make(chan reservation)
		go func() { got <- w.reserve(ctx, partyReclaim, 20) }()
		eventually(t, "waits for room", func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return len(w.waiters[partyReclaim]) == 1
		})
		w.fill(hold, 0, 0, time.Millisecond, false) // the read found nothing: its places free
		r = <-got
		require.Equal(t, 20, r.n)
		w.starved.Store(true)
		w.fill(r, 20, 2000, time.Millisecond, true)
		limit, _ = w.size()
		require.Equal(t, 150, limit)
	})
}

// Queued entries that wait longer than they take to handle (and longer
// than hoardMinWait) shrink the window, never below Concurrency; a
// Prefetch window never moves.
func TestWindowShrinksWhenEntriesWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		w := newWindow(16, 100, false, 32<<20, time.Minute)
		w.limit = 64
		for range minTimed {
			w.timings.add(1, 80*time.Millisecond, 40*time.Millisecond)
		}
		r := w.reserve(ctx, partyRead, 1)
		w.fill(r, r.n, 10, time.Millisecond, true)
		w.free(1, 10)
		limit, _ := w.size()
		require.Equal(t, 48, limit)

		// Waits shorter than the handling time: no change.
		for range minTimed {
			w.timings.add(1, 20*time.Millisecond, 40*time.Millisecond)
		}
		r = w.reserve(ctx, partyRead, 1)
		w.fill(r, r.n, 10, time.Millisecond, true)
		w.free(1, 10)
		limit, _ = w.size()
		require.Equal(t, 48, limit)

		for range 20 {
			for range minTimed {
				w.timings.add(1, time.Second, time.Millisecond)
			}
			r = w.reserve(ctx, partyRead, 1)
			w.fill(r, r.n, 10, time.Millisecond, true)
			w.free(1, 10)
		}
		limit, _ = w.size()
		require.Equal(t, 16, limit, "never below Concurrency")

		fixed := newWindow(4, 12, true, 32<<20, time.Minute)
		for range minTimed {
			fixed.timings.add(1, time.Second, time.Millisecond)
		}
		r = fixed.reserve(ctx, partyRead, 500)
		require.Equal(t, 4, r.n, "the first call still takes at most Concurrency")
		fixed.starved.Store(true)
		fixed.fill(r, r.n, 10, time.Millisecond, true)
		limit, _ = fixed.size()
		require.Equal(t, 12, limit, "Prefetch: fixed")
	})
}

// Calls follow the observed entry size: with 1 MiB entries a call fetches
// about batchBytes of them, and the bytes in hand stop further calls until
// entries settle.
func TestWindowFollowsEntrySize(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const mib = 1 << 20
		w := newWindow(16, 2000, false, 16*mib, time.Minute)
		waiting := waitings(w)
		require.EqualValues(t, 4*mib, w.pageBytes())
		r := w.reserve(ctx, partyRead, 500)
		require.Equal(t, 16, r.n)
		w.fill(r, 2, 2*mib, time.Millisecond, false)
		r = w.reserve(ctx, partyRead, 500)
		require.Equal(t, 4, r.n, "4 MiB of 1 MiB entries")
		w.fill(r, 4, 4*mib, time.Millisecond, true)
		for range 2 {
			r = w.reserve(ctx, partyRead, 500)
			require.Equal(t, 4, r.n)
			w.fill(r, r.n, int64(r.n)*mib, time.Millisecond, true)
		}
		r = w.reserve(ctx, partyRead, 500)
		require.Equal(t, 2, r.n, "14 MiB in hand: room for 2 MiB")
		w.fill(r, r.n, int64(r.n)*mib, time.Millisecond, true)
		_, held := w.size()
		require.Equal(t, 16, held)

		got := make(chan int)
		go func() { got <- w.reserve(ctx, partyRead, 500).n }()
		requireWaits(t, waiting, partyRead, got, "with the byte cap reached")
		w.free(1, mib)
		require.Equal(t, 1, <-got, "room for one more MiB")
	})
}

// A call reserved before any entry size is known (a claim page here)
// holds up to the window's floor for its whole call: a read meanwhile
// gets the one place left, however small the entries turn out to be; once
// the page is filled, its unused places come back and reads follow the
// entry size again.
func TestWindowCallBeforeSizeKnownHoldsItsPlaces(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const mib = 1 << 20
		w := newWindow(16, 2000, false, 32*mib, time.Minute)
		first := w.reserve(ctx, partyRead, 1)
		require.Equal(t, 1, first.n)
		claim := w.reserve(ctx, partyReclaim, 100)
		require.Equal(t, 15, claim.n, "nothing seen yet: up to the floor")
		w.fill(first, 1, mib, time.Millisecond, true)
		w.free(1, mib)
		r := w.reserve(ctx, partyRead, 500)
		require.Equal(t, 1, r.n, "the page in flight holds 15 places")
		w.fill(r, 1, mib, time.Millisecond, true)
		w.free(1, mib)
		w.fill(claim, 4, 4*mib, time.Millisecond, true) // a page of pageBytes
		r = w.reserve(ctx, partyRead, 500)
		require.Equal(t, 4, r.n, "4 MiB of 1 MiB entries")
	})
}

// Both takers waiting: they take turns, so neither starves.
func TestWindowTakersTakeTurns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		w := newWindow(4, 4, true, 32<<20, time.Minute)
		r := w.reserve(ctx, partyRead, 4)
		require.Equal(t, 4, r.n)
		w.fill(r, r.n, 40, time.Millisecond, true)

		reads, claims := make(chan reservation, 1), make(chan reservation, 1)
		go func() { claims <- w.reserve(ctx, partyReclaim, 4) }()
		waitWaiter(t, w, partyReclaim)
		go func() { reads <- w.reserve(ctx, partyRead, 4) }()
		waitWaiter(t, w, partyRead)
		w.free(1, 10) // one place: the read loop took last, so the claim goes first
		c := <-claims
		require.Equal(t, 1, c.n)
		w.fill(c, 1, 10, time.Millisecond, true)
		w.free(1, 10)
		require.Equal(t, 1, (<-reads).n)
	})
}

// Several takers of one party (the read loops of several streams) are
// served first come, first served: none starves, none waits behind a
// newcomer.
func TestWindowTakersOfOnePartyQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		w := newWindow(1, 1, true, 32<<20, time.Minute)
		r := w.reserve(ctx, partyRead, 1)
		require.Equal(t, 1, r.n)
		w.fill(r, 1, 10, time.Millisecond, true)

		order := make(chan int, 3)
		for i := range 3 {
			go func() {
				res := w.reserve(ctx, partyRead, 1)
				order <- i
				w.fill(res, 1, 10, time.Millisecond, true)
			}()
			waitWaiters(t, w, partyRead, i+1)
		}
		for want := range 3 {
			w.free(1, 10) // one place at a time
			require.Equal(t, want, <-order)
		}
	})
}

// The calls in flight count with the bytes they may return, so the reads
// of many streams together stay within MaxInHandBytes.
func TestWindowCountsCallsInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const mib = 1 << 20
		w := newWindow(16, 64, false, 8*mib, time.Minute)
		waiting := waitings(w)
		r := w.reserve(ctx, partyRead, 1)
		w.fill(r, 1, mib, time.Millisecond, false) // 1 MiB entries
		w.free(1, mib)
		a := w.reserve(ctx, partyRead, 500)
		require.Equal(t, 4, a.n, "a batch is 4 MiB")
		b := w.reserve(ctx, partyRead, 500)
		require.Equal(t, 4, b.n, "the second call gets the rest of the 8 MiB")
		got := make(chan int)
		go func() { got <- w.reserve(ctx, partyRead, 500).n }()
		requireWaits(t, waiting, partyRead, got, "with 8 MiB in flight")
		w.fill(a, 0, 0, time.Millisecond, false)
		require.Equal(t, 4, <-got)
	})
}

// waitings makes w report each reserve that finds no room and waits; set
// it before any reserve.
func waitings(w *window) <-chan party {
	ch := make(chan party, 64)
	w.testWaiting = func(p party) {
		select {
		case ch <- p:
		default: // a reserve that waits on reports again each recheck
		}
	}
	return ch
}

// requireWaits asserts that the reserve running into got waits rather than
// returns: it either returns (the failure) or reports that it found no room
// and waits, whichever comes first; nothing else can end the select.
func requireWaits(t *testing.T, waiting <-chan party, p party, got <-chan int, what string) {
	t.Helper()
	select {
	case n := <-got:
		t.Fatalf("reserved %d entries %s", n, what)
	case q := <-waiting:
		require.Equal(t, p, q)
	}
}

func waitWaiters(t *testing.T, w *window, p party, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d waiters", n), func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.waiters[p]) == n
	})
}

func waitWaiter(t *testing.T, w *window, p party) {
	t.Helper()
	eventually(t, "a waiter", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.waiters[p]) > 0
	})
}

// A pause stops the read loop until resume, while the reclaim loop still
// probes with claims of one entry; reserve still ends with its context.
func TestWindowPause(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWindow(4, 8, false, 32<<20, time.Minute)
		waiting := waitings(w)
		require.True(t, w.pause())
		require.False(t, w.pause(), "already paused")
		got := make(chan int)
		go func() { got <- w.reserve(t.Context(), partyRead, 4).n }()
		requireWaits(t, waiting, partyRead, got, "while paused")
		r := w.reserve(t.Context(), partyReclaim, 500)
		require.Equal(t, 1, r.n, "the reclaim loop probes a paused window with one entry")
		w.giveBack(r)
		require.True(t, w.resume())
		require.Equal(t, 4, <-got)

		w.pause()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.Zero(t, w.reserve(ctx, partyRead, 4).n)
	})
}

func TestLogLimiter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := newLogLimiter(3, 0.000001)
		for range 3 {
			ok, n := l.allow()
			require.True(t, ok)
			require.Zero(t, n)
		}
		for range 5 {
			ok, _ := l.allow()
			require.False(t, ok)
		}
		l.mu.Lock()
		l.tokens = 1
		l.mu.Unlock()
		ok, n := l.allow()
		require.True(t, ok)
		require.Equal(t, 5, n, "reports what it suppressed")
	})
}

// Queued entries that wait longer than MinIdle/8 shrink the window even
// when their handling takes longer still: they would need lease extensions
// just for waiting.
func TestWindowShrinksBeforeLeasesAreNeeded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		w := newWindow(16, 100, false, 32<<20, 80*time.Millisecond)
		w.limit = 64
		for range minTimed {
			w.timings.add(1, 20*time.Millisecond, 100*time.Millisecond)
		}
		r := w.reserve(ctx, partyRead, 1)
		w.fill(r, r.n, 10, time.Millisecond, true)
		limit, _ := w.size()
		require.Equal(t, 48, limit)
	})
}

// A waiter registered while the window was large is woken by the room it
// needs once the window shrank, not by the room it needed then.
func TestWindowWaiterFollowsAShrink(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		w := newWindow(4, 400, false, 32<<20, time.Minute)
		w.recheck = time.Hour // only the wake-up itself ends the wait within the bound below
		w.limit = 200
		w.perEntry = 10
		r := w.reserve(ctx, partyRead, 500)
		require.Equal(t, 200, r.n)
		w.fill(r, r.n, 2000, time.Millisecond, false)
		got := make(chan int, 1)
		go func() { got <- w.reserve(ctx, partyReclaim, 500).n }()
		waitWaiter(t, w, partyReclaim) // waits for 98 places
		w.mu.Lock()
		w.limit = 8 // shrunk meanwhile
		w.mu.Unlock()
		for range 200 - 4 {
			w.free(1, 10) // down to 4 held: room for 4; 2 are worth a call
		}
		select {
		case n := <-got:
			// Woken once the room is worth a call (2 places) at the latest
			// when the last free leaves 4: the frees race with the wake-up.
			require.GreaterOrEqual(t, n, 2)
			require.LessOrEqual(t, n, 4)
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter still waits for the room it needed before the shrink")
		}
	})
}

// With Concurrency 1, an idle consumer's blocking read holds one place;
// a reclaim pass still gets one at once (a window of one would make it
// wait for the next new entry), and a handler holding the other place
// makes it wait only until that entry settles.
func TestWindowOfOneHandlerLeavesRoomForReclaim(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		w := newWindow(1, 2000, false, 32<<20, time.Minute)
		waiting := waitings(w)
		read := w.reserve(ctx, partyRead, 1) // the idle read, blocking
		require.Equal(t, 1, read.n)
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		claim := w.reserve(short, partyReclaim, 500)
		require.Equal(t, 1, claim.n, "the reclaim pass got a place beside the blocked read")
		w.fill(claim, 1, 10, time.Millisecond, false) // one entry in hand, handler running
		got := make(chan reservation, 1)
		go func() { got <- w.reserve(ctx, partyReclaim, 500) }()
		select {
		case r := <-got:
			t.Fatalf("reclaim got %d places while the read and a handler hold the window", r.n)
		case p := <-waiting: // it found no room and waits
			require.Equal(t, partyReclaim, p)
		}
		w.free(1, 10)
		select {
		case r := <-got:
			require.Equal(t, 1, r.n)
		case <-time.After(10 * time.Second): // only turns a hang into a failure: a missed wake-up still ends at the next recheck (recheckEvery)
			t.Fatal("the settled entry's place did not reach the waiting reclaim pass")
		}
		w.giveBack(read)
	})
}

// MaxInHand 1 keeps the window at one entry.
func TestWindowOfOneStaysWithinMaxInHand(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWindow(1, 1, false, 32<<20, time.Minute)
		r := w.reserve(t.Context(), partyRead, 500)
		require.Equal(t, 1, r.n)
		require.Equal(t, 1, w.limit)
	})
}
