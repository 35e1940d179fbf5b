package driver

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pelwarden/pelwarden"
)

// hand owns the entries a consumer holds: dispatched to the handler
// workers and not yet settled (queued or running, or succeeded with the
// ack not yet sent), entries held back by a RetryAfter delay beyond
// MinIdle, parked entries (see park), and queued entries skipped at
// shutdown. The heartbeat loop asks it which entries are due for a lease
// extension; every other part goes through it to add entries, to stop
// tracking them once settled (forget: still pending; gone: no longer
// pending) or to give them back.
type hand struct {
	clock clock

	mu        sync.Mutex
	entries   map[string]*handEntry    // by entry id
	delayed   map[string]time.Duration // RetryAfter beyond MinIdle: id -> retry at (a clock reading)
	unstarted []string                 // queued entries skipped at shutdown
	closed    bool                     // shutdown began: add refuses

	// Claims under way and what was settled meanwhile (see claimTicket):
	// seq numbers claims and gone calls in the order they happen; goneAt
	// holds, only while a claim is under way, the number of the last
	// gone call of each id.
	seq    uint64
	claims []claimTicket
	goneAt map[string]uint64

	parked map[string]parkedEntry // by entry id
}

// parkedEntry is an entry that can be neither handled nor dead-lettered:
// delivered MaxDeliveries times, and with too many fields for the
// library to copy to the dead-letter stream. Left idle, a read that
// claims would take it again every MinIdle, its delivery count growing
// without end, its idle time never reaching StallAfter. Parked, it stays
// pending with this consumer under the heartbeat, untouched, and
// the stall check reports it once it has been parked for StallAfter: an
// operator's to settle (see EventTooLarge).
type parkedEntry struct {
	at         time.Duration // when it was parked (a clock reading)
	deliveries int64
}

// claimTicket numbers a claim under way: a reclaim page, or any call that
// can return entries already delivered. Such a call can return an entry
// this consumer settled while the call was under way: the claim ran on the
// server before the entry's ack (or dead-letter), the ack's reply came
// back first, and the entry was forgotten before the page was dispatched.
// The ack removed it from the PEL, so the claimed copy is stale, and
// running it would be a duplicate in one consumer. add skips the entries
// gone (see gone) after their claim's ticket was taken. Only those: an
// entry settled otherwise (released after a failure, or refused its ack
// because another consumer owns it) is still pending, so a claim that
// returns it is a delivery, to be run (skipping it would spend one of its
// MaxDeliveries without a handler run). Zero is no ticket: reads of new
// entries cannot return a delivered one.
type claimTicket uint64

// handEntry is one entry in hand.
type handEntry struct {
	queued time.Duration // dispatch time (a clock reading)
	ctx    *entryContext // the handler's context
	bytes  int64         // field bytes, counted in the window
	lost   atomic.Bool   // another consumer took it over
	// acking: the handler succeeded and the ack is queued; the ack loop
	// sends it within MinIdle/4.
	acking atomic.Bool
	// ownedUntil (a clock reading): no other consumer can take the entry
	// over before then (see fenceFrom); moved on by lease extensions.
	ownedUntil atomic.Int64
	// resetAt (a clock reading): when the call that last reset the
	// entry's idle time began (its read or claim, or its latest lease
	// extension). Another consumer can take it over MinIdle after that at
	// the earliest.
	resetAt atomic.Int64
}

// idleReset is what a call that reset entries' idle time (a read, a claim,
// an extension) tells the hand: when it began (a clock reading; the
// server reset the idle times after that) and the ack fence from then on
// (see Config.idleResetFrom).
type idleReset struct {
	from, ownedUntil time.Duration
}

// job is one entry handed to a handler worker.
type job struct {
	m    *Message
	f    *handEntry
	exec *executor // the stream's: runs the handler, applies the outcome
}

func newHand(clk clock) *hand {
	return &hand{clock: clk, entries: map[string]*handEntry{}, delayed: map[string]time.Duration{}}
}

// add tracks msgs and queues them on q for the workers, in one locked step
// (so nothing is queued after close). An entry already held is skipped: a
// reclaim pass took back an entry whose handler still runs here (its lease
// lapsed), and the running handler settles it. It returns the skipped
// messages (all of them after close: they stay pending), so the caller
// gives their places back.
//
// ls is the lease of the call that fetched them.
func (t *hand) add(handlerCtx context.Context, msgs []*Message, sizes []int64, ls idleReset, q *jobQueue, exec *executor, claim claimTicket) (skipped []*Message, closed bool) {
	now := t.clock.now()
	fs := make([]handEntry, len(msgs))
	ctxs := make([]entryContext, len(msgs))
	jobs := make([]job, 0, len(msgs))
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.endClaimLocked(claim)
	if t.closed {
		return msgs, true
	}
	for i, m := range msgs {
		if _, busy := t.entries[m.ID]; busy {
			skipped = append(skipped, m)
			continue
		}
		if _, ok := t.parked[m.ID]; ok {
			skipped = append(skipped, m)
			continue
		}
		if claim != 0 {
			if at, ok := t.goneAt[m.ID]; ok && at > uint64(claim) {
				skipped = append(skipped, m) // acked during the claim: stale
				continue
			}
		}
		f := &fs[i]
		f.queued = now
		f.bytes = sizes[i]
		f.ownedUntil.Store(int64(ls.ownedUntil))
		f.resetAt.Store(int64(ls.from))
		f.ctx = &ctxs[i]
		f.ctx.parent = handlerCtx
		t.entries[m.ID] = f
		if len(t.delayed) > 0 {
			delete(t.delayed, m.ID)
		}
		jobs = append(jobs, job{m: m, f: f, exec: exec})
	}
	q.push(jobs...)
	return skipped, false
}

// holds reports whether the entry id is in hand (queued or running) or
// parked.
func (t *hand) holds(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.entries[id]
	_, parked := t.parked[id]
	return ok || parked
}

// park holds entries that can be neither handled nor dead-lettered (see
// parkedEntry), with their delivery count.
func (t *hand) park(deliveries map[string]int64) {
	now := t.clock.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.parked == nil {
		t.parked = map[string]parkedEntry{}
	}
	for id, n := range deliveries {
		if _, ok := t.parked[id]; !ok {
			t.parked[id] = parkedEntry{at: now, deliveries: n}
		}
	}
}

// parkedSince returns the entries parked for at least d, as the stall
// check reports them (this consumer owns them; idle is the time parked).
func (t *hand) parkedSince(d time.Duration, consumer string) []pendingEntry {
	now := t.clock.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []pendingEntry
	for id, p := range t.parked {
		if now-p.at >= d {
			out = append(out, pendingEntry{ID: id, Consumer: consumer, Idle: now - p.at, Deliveries: p.deliveries})
		}
	}
	slices.SortFunc(out, func(a, b pendingEntry) int { return pelwarden.CompareIDs(a.ID, b.ID) })
	return out
}

// close refuses further adds. Once every hand feeding a job queue is
// closed, no push can follow, and the queue may close.
func (t *hand) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}

// beginClaim returns the ticket of a claim about to be sent; add (or
// endClaim, when the claim failed) ends it.
func (t *hand) beginClaim() claimTicket {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	c := claimTicket(t.seq)
	t.claims = append(t.claims, c)
	return c
}

// endClaim ends a claim whose entries will not be added (it failed).
func (t *hand) endClaim(c claimTicket) {
	t.mu.Lock()
	t.endClaimLocked(c)
	t.mu.Unlock()
}

// endClaimLocked ends claim c (zero: none) and drops the gone ids no claim
// under way can return any more. mu is held.
func (t *hand) endClaimLocked(c claimTicket) {
	i := slices.Index(t.claims, c)
	if c == 0 || i < 0 {
		return
	}
	t.claims = slices.Delete(t.claims, i, i+1)
	if len(t.claims) == 0 {
		clear(t.goneAt)
		return
	}
	oldest := uint64(slices.Min(t.claims))
	for id, at := range t.goneAt {
		if at < oldest {
			delete(t.goneAt, id)
		}
	}
}

// forget stops tracking ids, which are still pending (released, or owned
// by another consumer now) or no longer of this group.
func (t *hand) forget(ids ...string) {
	t.mu.Lock()
	for _, id := range ids {
		delete(t.entries, id)
	}
	t.mu.Unlock()
}

// gone stops tracking ids that are no longer pending: acked, or
// dead-lettered. While a claim is under way it notes them (see
// claimTicket).
func (t *hand) gone(ids ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		delete(t.entries, id)
	}
	if len(t.claims) == 0 {
		return
	}
	if t.goneAt == nil {
		t.goneAt = map[string]uint64{}
	}
	t.seq++
	for _, id := range ids {
		t.goneAt[id] = t.seq
	}
}

// delay holds id back until at, a clock reading (a RetryAfter beyond
// MinIdle): the heartbeat loop keeps it ours until then.
func (t *hand) delay(id string, at time.Duration) {
	t.mu.Lock()
	t.delayed[id] = at
	t.mu.Unlock()
}

// skipped records a queued entry skipped at shutdown, for takeUnstarted.
func (t *hand) skipped(id string) {
	t.mu.Lock()
	delete(t.entries, id)
	t.unstarted = append(t.unstarted, id)
	t.mu.Unlock()
}

// takeUnstarted returns and clears the entries skipped at shutdown.
func (t *hand) takeUnstarted() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := t.unstarted
	t.unstarted = nil
	return ids
}

// heartbeatDue returns the entries whose lease to extend now: held for at
// least every (heartbeat true) and delayed ones whose retry time is more
// than MinIdle-every away. Delayed entries due sooner are removed and
// returned in release, with the longest delay left among them, to be
// released with that delay.
func (t *hand) heartbeatDue(heartbeat bool, every, minIdle time.Duration) (extend, release []string, releaseDelay time.Duration) {
	now := t.clock.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if heartbeat {
		for id, f := range t.entries {
			age := now - f.queued
			if age < every || f.lost.Load() {
				continue
			}
			if f.acking.Load() && now+every+minIdle/8 < time.Duration(f.resetAt.Load())+minIdle {
				// Its handler is done and its ack queued, and the next tick
				// still comes before another consumer could take the entry
				// over (MinIdle after its lease began, less MinIdle/8 for a
				// late tick and the extension's own round trip): no
				// extension yet, however long its handler ran. The ack
				// loop sends it within MinIdle/4; should it be late (a slow
				// or failing call), a later tick extends it in time.
				continue
			}
			extend = append(extend, id)
		}
	}
	for id := range t.parked {
		extend = append(extend, id)
	}
	for id, at := range t.delayed {
		left := at - now
		if left <= minIdle-every {
			release = append(release, id)
			releaseDelay = max(releaseDelay, left)
			delete(t.delayed, id)
		} else {
			extend = append(extend, id)
		}
	}
	return extend, release, max(releaseDelay, 0)
}

// extended records the lease ls of ids that an extension call reset: it
// moves their ownership bound on (see fenceFrom); ids marked lost are
// left alone.
func (t *hand) extended(ids []string, ls idleReset) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if f, ok := t.entries[id]; ok && !f.lost.Load() {
			f.ownedUntil.Store(int64(ls.ownedUntil))
			f.resetAt.Store(int64(ls.from))
		}
	}
}

// lost marks ids as taken over by another consumer: their handlers are
// cancelled with ErrLostOwnership and their outcome will be dropped.
func (t *hand) lost(ids []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if f, ok := t.entries[id]; ok {
			f.lost.Store(true)
			f.ctx.cancelWith(ErrLostOwnership)
		}
		delete(t.delayed, id)
		delete(t.parked, id) // settled by someone else (an operator)
	}
}

// count returns how many entries are tracked as in hand.
func (t *hand) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}
