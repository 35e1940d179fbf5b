package driver

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// party is a taker of room in the window: the read loop or the reclaim
// loop.
type party int

const (
	partyRead party = iota
	partyReclaim
	numParties
)

// window is the consumer's flow control. It counts the entries in hand
// (queued for a handler or running, plus those a read or claim call in
// flight may return) and their bytes of field data, and decides how many
// the next call may fetch.
//
// Its size (limit) adapts between Concurrency (at least 2, where MaxInHand
// allows: see least) and MaxInHand:
//   - it grows by half when a handler worker ran out of work while a call
//     was in flight that the window had held back (it waited for room, or
//     took less than it asked for) and that found as many entries as it
//     asked for (not counting the call that first fills the
//     room of the last growth): handlers empty the queue faster than reads
//     refill it, and a larger window lets the next read go out while they
//     work. It stops growing once its queue part holds what the handlers
//     handle in coverRoundTrips round trips (a 40 ms handler waits 0.3 ms
//     for a read at most: growing would only hoard);
//   - it shrinks by a quarter when queued entries wait longer than they
//     take to handle, longer than a few calls' round trips and longer than
//     hoardMinWait: the consumer hoards entries another consumer could run
//     sooner, and a smaller queue still covers the next read's round trip;
//     and when they wait longer than MinIdle/8, whatever their handling
//     time: they would soon need lease extensions (and fenced acks) just
//     for waiting.
//
// With Config.Prefetch set the size is fixed at Concurrency + Prefetch.
//
// A taker waits until the room is worth a call (half the queue part of the
// window, or what it asked for if less), so a fast consumer reads large
// batches and a slow one reads as soon as a handler is free. When both
// takers wait, they take turns, so neither new nor reclaimed entries
// starve. While the server refuses writes for lack of memory (see pause),
// only the reclaim loop takes, one entry per claim: its claims probe the
// server.
type window struct {
	floor, ceil int // Concurrency, MaxInHand: the bounds of limit
	// least is the smallest limit: floor, but at least 2 where ceil
	// allows. An idle consumer's read blocks holding one place for up to
	// ReadBlock, so a window of one (Concurrency 1) would leave a reclaim
	// pass no room until the next new entry arrives: entries released
	// for a retry would wait for it.
	least      int
	fixed      bool  // Prefetch set: limit stays ceil
	maxBytes   int64 // MaxInHandBytes
	batchBytes int64 // a call fetches about this many bytes at most
	// maxWait: queued entries waiting longer are hoarded whatever their
	// handling time (MinIdle/8: well before they need a lease extension
	// at HeartbeatInterval, MinIdle/3 by default, or their acks the fence at
	// MinIdle/2; see fenceFrom).
	maxWait float64

	mu    sync.Mutex
	limit int // current size in entries
	held  int // entries in hand plus reservations of calls in flight
	// bytes of field data in hand; inflight the bytes the calls in flight
	// may return (their entries times the mean entry size), so the reads
	// and claims of many streams together stay within maxBytes.
	bytes    int64
	inflight int64
	perEntry float64 // mean field bytes per entry seen (0: none yet)
	rtt      float64 // mean round trip of a call, in seconds
	handling float64 // mean handling time of an entry, in seconds
	last     party   // the last taker, for turns
	calls    uint64  // reservations made so far: each call's ticket
	grownAt  uint64  // tickets up to this one may not grow the window
	waiters  waiters // per party, first come first served
	paused   bool
	resumed  chan struct{} // closed when a pause ends
	// recheck is recheckEvery; tests that must see a wake-up itself set it
	// beyond their bound (before any reserve).
	recheck time.Duration
	// testWaiting, set by tests only (before any reserve), is called each
	// time a reserve of p finds no room and is about to wait: tests wait
	// for it instead of for a while.
	testWaiting func(p party)

	// timings are the handlers' since the last resize, added by the
	// workers without the lock.
	timings timings
	// starved is set when a handler worker found no job queued.
	starved atomic.Bool
	// waiting: a taker waits for room (waiters.any, stored whenever the
	// waiters change). Read without the lock by the workers: while it is
	// false, a worker gives its entries' places back with its batch of
	// finished entries, not one by one (see finished).
	waiting atomic.Bool
}

// waiters are the takers waiting for room, per party, first come first
// served. The window's mu guards them.
type waiters [numParties][]*waiter

// any reports whether a taker of either party waits (see window.waiting,
// set from it whenever the waiters change).
func (ws *waiters) any() bool { return len(ws[0]) > 0 || len(ws[1]) > 0 }

// head is the first waiting taker of p, or nil.
func (ws *waiters) head(p party) *waiter {
	if len(ws[p]) == 0 {
		return nil
	}
	return ws[p][0]
}

// drop removes wt (nil: nothing) from p's waiters, if it is still there.
func (ws *waiters) drop(p party, wt *waiter) {
	for i, x := range ws[p] {
		if x == wt {
			ws[p] = append(ws[p][:i:i], ws[p][i+1:]...)
			return
		}
	}
}

// timings sums the handlers' queue wait (dispatch to start) and handling
// time, in ns, since the window last took them.
type timings struct{ waitSum, runSum, timed atomic.Int64 }

// add records n handlers' wait and handling time, summed.
func (t *timings) add(n int, wait, took time.Duration) {
	t.waitSum.Add(int64(wait))
	t.runSum.Add(int64(took))
	t.timed.Add(int64(n))
}

type waiter struct {
	want int // what the waiting call asks for; its need follows the window
	wake chan struct{}
}

// Bounds of the window's measurements.
const (
	// batchBytesTarget: a read or claim fetches about this many bytes of
	// field data at most (a few MiB keep one XREADGROUP of large entries
	// well under 100 ms of server time).
	batchBytesTarget = 4 << 20
	// hoardRoundTrips: queued entries may wait this many call round trips
	// before the window counts as hoarding.
	hoardRoundTrips = 4
	// hoardMinWait: a queue wait below this is never hoarding (another
	// consumer could not have started the entry much sooner).
	hoardMinWait = 5 * time.Millisecond
	// coverRoundTrips: the window grows until its queue part covers this
	// many call round trips of handling.
	coverRoundTrips = 4
	// recheckEvery: a waiting taker looks at the window again this often
	// even without a wake-up.
	recheckEvery = 100 * time.Millisecond
	// minTimed: handler timings needed before the window may shrink.
	minTimed = 16
)

func newWindow(floor, ceil int, fixed bool, maxBytes int64, minIdle time.Duration) *window {
	least := max(floor, min(2, ceil))
	w := &window{
		floor: floor, ceil: ceil, least: least, fixed: fixed, maxBytes: maxBytes, maxWait: (minIdle / 8).Seconds(),
		batchBytes: min(batchBytesTarget, max(maxBytes/2, 1)),
		limit:      least,
		recheck:    recheckEvery,
	}
	if fixed {
		w.limit = ceil
	}
	return w
}

// reservation is a call's place in the window, from reserve to fill.
type reservation struct {
	n int // entries the call may fetch
	// bound: the window held the call back: it waited for room, or the
	// room, not want or the batch size, set n.
	bound  bool
	ticket uint64 // the call's number
	bytes  int64  // the bytes it may return, counted in window.inflight
}

// reserve waits for room and reserves it for one call of p fetching at most
// want entries; the reservation's n is at least 1, or 0 when ctx is done.
// The caller reports the call's result with fill (or giveBack).
func (w *window) reserve(ctx context.Context, p party, want int) reservation {
	for waited := false; ; waited = true {
		w.mu.Lock()
		n, bound := w.offerLocked(p, want, waited)
		// A taker that had to wait was held back by the window, whatever
		// it takes now (see resizeLocked).
		bound = bound || waited
		if n > 0 {
			est := int64(float64(n) * w.perEntry)
			w.held += n
			w.inflight += est
			w.last = p
			w.calls++
			// Workers that run out of work from now on ran out while this
			// call was in flight.
			w.starved.Store(false)
			w.wakeLocked()
			ticket := w.calls
			w.mu.Unlock()
			return reservation{n: n, bound: bound, ticket: ticket, bytes: est}
		}
		var wake <-chan struct{}
		var wt *waiter
		if w.paused && p != partyReclaim {
			wake = w.resumed
		} else {
			wt = &waiter{want: want, wake: make(chan struct{})}
			w.waiters[p] = append(w.waiters[p], wt)
			w.waiting.Store(w.waiters.any())
			wake = wt.wake
		}
		w.mu.Unlock()
		if w.testWaiting != nil {
			w.testWaiting(p)
		}
		// A waiter also looks again every recheckEvery: should a wake-up
		// ever be missed (a taker that yielded its turn, a size that
		// changed under it), the call is delayed, never stuck.
		recheck := time.NewTimer(w.recheck)
		select {
		case <-wake:
			recheck.Stop()
		case <-recheck.C:
			w.mu.Lock()
			w.waiters.drop(p, wt)
			w.waiting.Store(w.waiters.any())
			w.mu.Unlock()
		case <-ctx.Done():
			recheck.Stop()
			w.mu.Lock()
			w.waiters.drop(p, wt)
			w.wakeLocked() // the room it was to take may suit the next
			w.waiting.Store(w.waiters.any())
			w.mu.Unlock()
			return reservation{}
		}
	}
}

// offerLocked returns how many entries p may fetch now (0: it must wait),
// and whether the room set n. A taker that has not waited yet (waited
// false) lets the waiting takers of its party go first.
func (w *window) offerLocked(p party, want int, waited bool) (n int, bound bool) {
	if w.paused {
		if p != partyReclaim {
			return 0, false
		}
		// The reclaim loop probes a paused window with claims of one
		// entry: the claim refused for lack of memory is what paused it,
		// and one that succeeds ends the pause (session.memoryFreed).
		want = 1
	}
	size, need := w.sizeLocked(want)
	room := w.limit - w.held
	if w.held > 0 && w.bytes+w.inflight >= w.maxBytes {
		return 0, false // wait until bytes in hand are freed (one entry always fits)
	}
	if room < need {
		return 0, false
	}
	if !waited && len(w.waiters[p]) > 0 {
		return 0, false // takers of p that came first go first
	}
	if other := w.waiters.head(1 - p); other != nil && w.last == p {
		if _, otherNeed := w.sizeLocked(other.want); room >= otherNeed {
			return 0, false // the other taker's turn
		}
	}
	if room <= size {
		return room, true
	}
	return size, false
}

// needLocked is the room worth a call asking for want (see sizeLocked).
func (w *window) needLocked(want int) int {
	_, need := w.sizeLocked(want)
	return need
}

// sizeLocked returns how many entries a call asking for want may fetch at
// most (size), and the room worth a call (need): half the queue part of
// the window, or size if less. Both follow the window as it changes, so a
// waiter is woken by the room it needs now, not when it began to wait.
func (w *window) sizeLocked(want int) (size, need int) {
	size = want
	if w.perEntry > 0 {
		// Follow the observed entry size: a call stays under batchBytes
		// and within the bytes left in the window.
		size = min(size, max(int(float64(w.batchBytes)/w.perEntry), 1))
		size = min(size, max(int(float64(w.maxBytes-w.bytes-w.inflight)/w.perEntry), 1))
	} else {
		// Nothing seen yet: the first call takes at most one entry per
		// handler.
		size = min(size, w.floor)
	}
	return size, max(1, min(size, (w.limit-w.floor)/2))
}

// wakeLocked wakes a waiter whose room has come: the one whose turn it
// is first (the one that did not take last). A woken taker that leaves
// room behind wakes the other (see reserve).
func (w *window) wakeLocked() {
	room := w.limit - w.held
	if room <= 0 || (w.held > 0 && w.bytes+w.inflight >= w.maxBytes) {
		return
	}
	first := 1 - w.last
	for _, p := range [2]party{first, 1 - first} {
		if w.paused && p != partyReclaim {
			continue
		}
		if wt := w.waiters.head(p); wt != nil && room >= w.needLocked(wt.want) {
			close(wt.wake)
			w.waiters[p] = w.waiters[p][1:]
			w.waiting.Store(w.waiters.any())
			return
		}
	}
}

// fill reports the result of the call of reservation r: it fetched got
// entries, with bytes of field data, in rtt; more says the source had at
// least as many entries as the call asked for. It resizes the window and
// returns the new size when it changed (0 when not).
func (w *window) fill(r reservation, got int, bytes int64, rtt time.Duration, more bool) (resized int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	was := w.limit
	defer func() {
		if w.limit != was {
			resized = w.limit
		}
	}()
	w.held -= r.n - got
	w.inflight -= r.bytes
	w.bytes += bytes
	if got > 0 {
		per := float64(bytes) / float64(got)
		if w.perEntry == 0 {
			w.perEntry = per
		} else {
			w.perEntry += (per - w.perEntry) / 4
		}
	}
	if s := rtt.Seconds(); s <= 0 {
		// not measured (a read that waited for entries)
	} else if w.rtt == 0 {
		w.rtt = s
	} else {
		w.rtt += (s - w.rtt) / 8
	}
	w.resizeLocked(r, more)
	w.wakeLocked()
	return 0 // resized by the deferred check
}

// resizeLocked applies the sizing rule of window's doc after the call of r.
// Growth needs a call limited by the window, not by the source, and
// reserved after the first call that used the last growth: workers run
// out of work while that first call fills the new room, which says nothing
// about whether the new size suffices.
func (w *window) resizeLocked(r reservation, more bool) {
	if w.fixed {
		return
	}
	if n := w.timings.timed.Load(); n >= minTimed {
		wait := float64(w.timings.waitSum.Swap(0)) / float64(n) / 1e9
		took := float64(w.timings.runSum.Swap(0)) / float64(n) / 1e9
		w.timings.timed.Store(0)
		if w.handling == 0 {
			w.handling = took
		} else {
			w.handling += (took - w.handling) / 4
		}
		hoarding := wait > took && wait > max(hoardRoundTrips*w.rtt, hoardMinWait.Seconds())
		if (hoarding || wait > w.maxWait) && w.limit > w.least {
			w.limit = max(w.least, w.limit-w.limit/4)
			return
		}
	}
	if r.bound && more && r.ticket > w.grownAt && w.starved.Load() && float64(w.limit) < w.enoughLocked() {
		w.limit = min(w.ceil, max(w.limit+1, w.limit*3/2))
		w.grownAt = w.calls + 1 // the calls in flight and the next one
	}
}

// enoughLocked is the window beyond which growing cannot help: the running
// handlers plus what they handle in coverRoundTrips calls' round trips.
// Without measurements yet, it is unbounded.
func (w *window) enoughLocked() float64 {
	if w.handling == 0 || w.rtt == 0 {
		return math.Inf(1)
	}
	return float64(w.floor) * (1 + coverRoundTrips*w.rtt/w.handling)
}

// giveBack returns the places of a call that failed.
func (w *window) giveBack(r reservation) {
	w.mu.Lock()
	w.held -= r.n
	w.inflight -= r.bytes
	w.wakeLocked()
	w.mu.Unlock()
}

// pageBytes is the most bytes of field data one call should fetch.
func (w *window) pageBytes() int64 { return w.batchBytes }

// free gives back n entries' places and their bytes once their handlers
// returned (or they were dropped).
func (w *window) free(n int, bytes int64) {
	w.mu.Lock()
	w.held -= n
	w.bytes -= bytes
	if w.waiters.any() {
		w.wakeLocked()
	}
	w.mu.Unlock()
}

// pause stops the read loop's taking until resume, and limits the reclaim
// loop to probes of one entry; it reports whether this call paused (false:
// already paused).
func (w *window) pause() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.paused {
		return false
	}
	w.paused = true
	w.resumed = make(chan struct{})
	for _, wt := range w.waiters[partyRead] {
		close(wt.wake) // it waits on resumed from now on
	}
	w.waiters[partyRead] = nil
	w.waiting.Store(w.waiters.any())
	return true
}

// isPaused reports whether the window is paused (see pause).
func (w *window) isPaused() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.paused
}

// resume ends a pause; it reports whether there was one.
func (w *window) resume() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.paused {
		return false
	}
	w.paused = false
	close(w.resumed)
	return true
}

// size returns the window's current size and the entries in hand (with
// reservations).
func (w *window) size() (limit, held int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.limit, w.held
}
