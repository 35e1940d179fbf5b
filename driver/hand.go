package driver

import (
	"context"
	"iter"
	"runtime"
	"slices"
	"sort"
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
	held      heldSet                  // the entries in hand
	delayed   map[string]time.Duration // RetryAfter beyond MinIdle: id -> retry at (a clock reading)
	unstarted []string                 // queued entries skipped at shutdown
	closed    bool                     // shutdown began: add refuses
	// jobs is add's buffer of the jobs it queues, reused from call to
	// call (every entry passes through it; see jobQueue.pushBuffer).
	jobs []job

	// claims are the claims under way and what was settled meanwhile
	// (see claimTicket). It has its own lock; add and gone take it under
	// mu, so an add sees either the entry or the mark its gone left.
	claims claimLog

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
	id    string
	batch *heldBatch // the add that took it in hand
	// held: it is in hand (false once dropped, even if the same id was
	// taken in hand again since: see hand.drop). Under the hand's lock.
	held   bool
	queued time.Duration // dispatch time (a clock reading)
	due    time.Duration // its handler starts no earlier (a limit's rate; a clock reading)
	ctx    entryContext  // the handler's context
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
	// the earliest. Under the hand's lock.
	resetAt time.Duration
}

// idleReset is what a call that reset entries' idle time (a read, a claim,
// an extension) tells the hand: when it began (a clock reading; the
// server reset the idle times after that) and the ack fence from then on
// (see Config.idleResetFrom).
type idleReset struct {
	from, ownedUntil time.Duration
}

// heldSet holds the entries in hand, for the hand (under its lock), by
// batch: the entries of one add share an array.
//
// Every entry in hand is added once and dropped once, so the set's cost
// is paid by every entry. A map by id cost an insert and a delete each,
// more than any other step of the hand. Instead, a read of new entries
// (XREADGROUP ">") returns them in ascending id order, above every entry
// read before (the group's last delivered id only moves forward): its
// batch is ranged, found by binary search on its first and last ids, and
// an entry within it the same way. Adding and dropping such an entry
// touches no map; the lookups by id (claims, lease extensions, failures
// told by id) are the rarer paths. Entries of other batches are indexed
// in a map: claims (which return entries in any order, some held here),
// and a read below one before (after an operator moved the group back
// with XGROUP SETID).
type heldSet struct {
	// batches are the batches with entries held, in add order, and
	// ranged those of them that are ranged, in id order; both keep
	// batches emptied since until compact (dead, deadRanged: how many).
	batches, ranged  []*heldBatch
	dead, deadRanged int
	top              pelwarden.StreamID    // the highest id of a ranged batch so far
	byID             map[string]*handEntry // the entries of the other batches
	n                int                   // entries held
}

// heldBatch is the entries of one add: ranged ones by range (first and
// last), the others by heldSet.byID.
type heldBatch struct {
	entries     []handEntry // nil once none is held
	first, last pelwarden.StreamID
	ranged      bool
	held        int
}

// batch returns a batch of the entries in fs for msgs, to fill in order
// (insert each one taken in hand), then keep. It is ranged when claim is
// zero (new entries: a read without CLAIM, or one whose CLAIM took no
// entry over, see readLoop) and their ids allow it: they parse, the last
// is not below the first, and the first is above every ranged batch's so
// far. A read returns its entries in ascending order, so the two ends
// stand for the rest.
func (h *heldSet) batch(fs []handEntry, msgs []*Message, claim claimTicket) *heldBatch {
	b := &heldBatch{entries: fs}
	if claim != 0 || len(msgs) == 0 {
		return b
	}
	first, err := pelwarden.ParseID(msgs[0].ID)
	if err != nil || first.Compare(h.top) <= 0 {
		return b
	}
	last, err := pelwarden.ParseID(msgs[len(msgs)-1].ID)
	if err != nil || last.Compare(first) < 0 {
		return b
	}
	b.ranged, b.first, b.last = true, first, last
	return b
}

// keep lists b, filled, unless it holds nothing.
func (h *heldSet) keep(b *heldBatch) {
	if b.held == 0 {
		return
	}
	if b.ranged {
		h.top = b.last
		h.ranged = append(h.ranged, b)
	}
	h.batches = append(h.batches, b)
}

// insert holds f, filled in by the caller (its id and batch set).
func (h *heldSet) insert(f *handEntry) {
	f.held = true
	f.batch.held++
	h.n++
	if !f.batch.ranged {
		if h.byID == nil {
			h.byID = map[string]*handEntry{}
		}
		h.byID[f.id] = f
	}
}

// find returns the entry held for id, or nil.
func (h *heldSet) find(id string) *handEntry {
	if f := h.byID[id]; f != nil {
		return f
	}
	if len(h.ranged) == h.deadRanged {
		return nil
	}
	x, err := pelwarden.ParseID(id)
	if err != nil {
		return nil
	}
	i, _ := slices.BinarySearchFunc(h.ranged, x, func(b *heldBatch, x pelwarden.StreamID) int { return b.last.Compare(x) })
	if i == len(h.ranged) || h.ranged[i].first.Compare(x) > 0 {
		return nil
	}
	fs := h.ranged[i].entries
	j := sort.Search(len(fs), func(j int) bool { return pelwarden.CompareIDs(fs[j].id, id) >= 0 })
	if j == len(fs) || fs[j].id != id || !fs[j].held {
		return nil
	}
	return &fs[j]
}

// remove drops f (nil: none), reporting whether it was held.
func (h *heldSet) remove(f *handEntry) bool {
	if f == nil || !f.held {
		return false
	}
	f.held = false
	h.n--
	b := f.batch
	if !b.ranged {
		delete(h.byID, f.id)
	}
	if b.held--; b.held > 0 {
		return true
	}
	b.entries = nil // the array lives on only as long as its entries are referenced elsewhere
	h.dead++
	if b.ranged {
		h.deadRanged++
	}
	if h.dead > 16 && h.dead > len(h.batches)/2 {
		h.compact()
	}
	return true
}

// compact drops the emptied batches from the lists.
func (h *heldSet) compact() {
	empty := func(b *heldBatch) bool { return b.held == 0 }
	h.batches = slices.DeleteFunc(h.batches, empty)
	h.ranged = slices.DeleteFunc(h.ranged, empty)
	h.dead, h.deadRanged = 0, 0
}

// all yields the entries held.
func (h *heldSet) all() iter.Seq[*handEntry] {
	return func(yield func(*handEntry) bool) {
		for _, b := range h.batches {
			for i := range b.entries {
				if f := &b.entries[i]; f.held && !yield(f) {
					return
				}
			}
		}
	}
}

// job is one entry handed to a handler worker.
type job struct {
	m    *Message
	f    *handEntry
	exec *executor // the stream's: runs the handler, applies the outcome
}

func newHand(clk clock) *hand {
	return &hand{clock: clk, delayed: map[string]time.Duration{}}
}

// add tracks msgs and queues them on q for the workers, in one locked step
// (so nothing is queued after close). An entry already held is skipped: a
// reclaim pass took back an entry whose handler still runs here (its lease
// lapsed), and the running handler settles it. It returns the skipped
// messages (all of them after close: they stay pending), so the caller
// gives their places back.
//
// Each entry counts entryBytes in the window. ls is the lease of the call
// that fetched them; due[i] (when due has that many) is when msgs[i]'s
// handler may start, under a limit's rate (a clock reading).
func (t *hand) add(handlerCtx context.Context, msgs []*Message, ls idleReset, q *jobQueue, exec *executor, claim claimTicket, due []time.Duration) (skipped []*Message, closed bool) {
	now := t.clock.now()
	fs := make([]handEntry, len(msgs))
	parent := &handlerCtx // shared by the entries of this call
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.claims.end(claim)
	if t.closed {
		return msgs, true
	}
	// What left the PEL since the claim began: gone takes mu, so nothing
	// is added to it during this call.
	gone := t.claims.goneSince(claim)
	// New entries above every entry read before are none held here: their
	// batch needs neither lookups nor an index (see heldSet).
	b := t.held.batch(fs, msgs, claim)
	defer t.held.keep(b)
	for i, m := range msgs {
		// A claim can return entries held here (their handler still
		// runs: the running one settles them), parked, or acked during
		// the claim (stale: see claimTicket).
		if !b.ranged {
			_, parked := t.parked[m.ID]
			if t.held.find(m.ID) != nil || parked || gone[m.ID] {
				skipped = append(skipped, m)
				continue
			}
		}
		f := &fs[i]
		f.id, f.batch = m.ID, b
		f.queued = now
		f.bytes = entryBytes(m)
		if i < len(due) {
			f.due = due[i]
		}
		f.ownedUntil.Store(int64(ls.ownedUntil))
		f.resetAt = ls.from
		f.ctx.parent = parent
		t.held.insert(f)
		if len(t.delayed) > 0 {
			delete(t.delayed, m.ID)
		}
		t.jobs = append(t.jobs, job{m: m, f: f, exec: exec})
	}
	t.jobs = q.pushBuffer(t.jobs)
	return skipped, false
}

// holds reports whether the entry id is in hand (queued or running) or
// parked.
func (t *hand) holds(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, parked := t.parked[id]
	return t.held.find(id) != nil || parked
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

// claimLog numbers the claims under way (see claimTicket) and, while one
// is, the entries that left the PEL meanwhile: seq numbers claims and gone
// calls in the order they happen; goneAt holds the number of the last
// gone call of each id, only while a claim is under way.
type claimLog struct {
	mu     sync.Mutex
	seq    uint64
	claims []claimTicket
	goneAt map[string]uint64
}

// begin returns the ticket of a claim about to be sent; the hand's add
// (or end, when the claim failed) ends it.
func (c *claimLog) begin() claimTicket {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := claimTicket(c.seq)
	c.claims = append(c.claims, t)
	return t
}

// end ends claim t (zero: none) and drops the gone ids no claim under way
// can return any more.
func (c *claimLog) end(t claimTicket) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.claims, t)
	if t == 0 || i < 0 {
		return
	}
	c.claims = slices.Delete(c.claims, i, i+1)
	if len(c.claims) == 0 {
		clear(c.goneAt)
		return
	}
	oldest := uint64(slices.Min(c.claims))
	for id, at := range c.goneAt {
		if at < oldest {
			delete(c.goneAt, id)
		}
	}
}

// underWay reports whether a claim is under way.
func (c *claimLog) underWay() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.claims) > 0
}

// noteGone notes that ids left the PEL, when a claim is under way.
func (c *claimLog) noteGone(ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.claims) == 0 {
		return
	}
	if c.goneAt == nil {
		c.goneAt = map[string]uint64{}
	}
	c.seq++
	for _, id := range ids {
		c.goneAt[id] = c.seq
	}
}

// goneSince returns the ids that left the PEL after claim t began (nil
// when none did, or t is zero): a claim's copies of them are stale.
func (c *claimLog) goneSince(t claimTicket) map[string]bool {
	if t == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out map[string]bool
	for id, at := range c.goneAt {
		if at > uint64(t) {
			if out == nil {
				out = map[string]bool{}
			}
			out[id] = true
		}
	}
	return out
}

// forget stops tracking ids, which are still pending (released, or owned
// by another consumer now) or no longer of this group. Callers that have
// the entries drop them instead.
func (t *hand) forget(ids ...string) {
	t.mu.Lock()
	for _, id := range ids {
		t.held.remove(t.held.find(id))
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
		t.held.remove(t.held.find(id))
	}
	t.claims.noteGone(ids) // under mu: add sees it or the entry
}

// drop is forget (gone false) or gone for entries the caller has: the
// handler's outcome, the acks. Dropping an entry no longer held does
// nothing, even when its id was taken in hand again since (a later
// delivery, held by its own entry).
func (t *hand) drop(gone bool, fs ...*handEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range fs {
		t.held.remove(f)
	}
	if gone && t.claims.underWay() {
		ids := make([]string, len(fs))
		for i, f := range fs {
			ids[i] = f.id
		}
		t.claims.noteGone(ids) // under mu: add sees it or the entry
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
func (t *hand) skipped(f *handEntry) {
	t.mu.Lock()
	if t.held.remove(f) {
		t.unstarted = append(t.unstarted, f.id)
	}
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

// heartbeatDue returns the entries whose lease to extend now, on the
// keeper's ticks, tick apart: those whose idle time was last reset at
// least every ago (heartbeat true), parked ones, and delayed ones whose
// retry time is more than MinIdle-tick away. Delayed entries due sooner are removed and
// returned in release, with the longest delay left among them, to be
// released with that delay.
//
// The age is counted from the entry's last reset, not from the tick's
// phase: an entry is extended at most every+tick after its read began,
// however its read fell between two ticks (Config.heartbeatTick keeps that
// within MinIdle).
func (t *hand) heartbeatDue(heartbeat bool, every, tick, minIdle time.Duration) (extend, release []string, releaseDelay time.Duration) {
	now := t.clock.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if heartbeat {
		for f := range t.held.all() {
			id := f.id
			if now-f.resetAt < every || f.lost.Load() {
				continue
			}
			if f.acking.Load() && now+tick+minIdle/8 < f.resetAt+minIdle {
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
		if left <= minIdle-tick {
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
		if f := t.held.find(id); f != nil && !f.lost.Load() {
			f.ownedUntil.Store(int64(ls.ownedUntil))
			f.resetAt = ls.from
		}
	}
}

// lost marks ids as taken over by another consumer: their handlers are
// cancelled with ErrLostOwnership and their outcome will be dropped.
func (t *hand) lost(ids []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if f := t.held.find(id); f != nil {
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
	return t.held.n
}

// jobQueue hands dispatched entries to the handler workers, first in first
// out.
//
// It replaces a channel of jobs. A send on a channel with parked receivers
// wakes one receiver per job, so a batch of 500 entries cost 500 goroutine
// wake-ups and switches even when two running workers could have taken
// every job in less time than the wake-ups took. Here wake-ups are chained:
// a push wakes one parked worker, and a woken worker that finds more jobs
// queued wakes the next, so at most one wake-up is in flight. Workers that
// are running keep taking jobs without parking.
//
// The chain stops at as many running workers as the process has cores
// while handlers finish in less than slowHandler: a batch of 500 fast
// handlers would otherwise wake every worker, each wake-up costing more
// than the handlers it runs, for no more parallelism than the cores give.
// Should the queue then stop moving (the running workers' handlers block,
// or take longer than they did), the watch wakes the next worker within
// queueWatch, and handlers found slow let the chain wake every worker
// again: parallelism grows to every worker within about a millisecond
// when handlers block.
type jobQueue struct {
	mu      sync.Mutex
	jobs    []job
	head    int  // jobs[head:] are queued
	closed  bool // no more pushes; get returns false once the queue is empty
	parked  int  // workers waiting in get
	waking  bool // a wake-up is in flight: its worker has not looked yet
	wakeups chan struct{}
	// starved is set whenever a worker finds the queue empty and parks
	// (the window's signal to grow).
	starved *atomic.Bool

	// cores: the most running workers the chain wakes while handlers are
	// fast; slow: the last handler a worker reported ran slowHandler or
	// longer (or the watch found the queue stuck); taken counts the jobs
	// taken; watch, armed while a wake-up is held back, fires queueWatch
	// later (watchFrom: taken then).
	cores     int
	slow      bool
	taken     uint64
	watch     *time.Timer
	watching  bool
	watchFrom uint64
}

const (
	// slowHandler: a handler that runs this long or longer is worth a
	// wake-up of its own (one costs a few µs of CPU).
	slowHandler = 50 * time.Microsecond
	// queueWatch: while the chain holds wake-ups back, queued jobs wait
	// at most about this long before one more worker is woken.
	queueWatch = time.Millisecond
)

// newJobQueue returns a queue for at most workers concurrent getters; it
// sets starved whenever a worker runs out of jobs.
func newJobQueue(workers int, starved *atomic.Bool) *jobQueue {
	return &jobQueue{wakeups: make(chan struct{}, workers), starved: starved, cores: runtime.GOMAXPROCS(0)}
}

// push queues jobs. It never blocks. It reports false, queueing nothing,
// once the queue is closed.
func (q *jobQueue) push(jobs ...job) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.appendLocked(jobs)
	q.unlockWaking()
	return true
}

// pushBuffer is push for a caller that queues from a buffer it reuses
// (the hand's add): it returns the buffer to fill next, empty. When every
// queued job was taken (a fast consumer's queue mostly is), the queue
// takes jobs as its array, without copying them, and gives its old array
// back (take zeroed each slot, so it keeps nothing alive); otherwise it
// copies them, and the buffer is cleared.
func (q *jobQueue) pushBuffer(jobs []job) (next []job) {
	q.mu.Lock()
	switch {
	case q.closed:
		q.mu.Unlock()
	case q.head == len(q.jobs):
		next = q.jobs[:0]
		q.jobs, q.head = jobs, 0
		q.unlockWaking()
		return next
	default:
		q.appendLocked(jobs)
		q.unlockWaking()
	}
	clear(jobs) // the queue copied them (or refused them)
	return jobs[:0]
}

// appendLocked queues jobs (q.mu held).
func (q *jobQueue) appendLocked(jobs []job) {
	if q.head > 0 && q.head >= len(q.jobs)/2 {
		// Reuse the taken front: under steady load the queue may never be
		// empty, and appending behind an ever-advancing head would grow
		// the slice without bound.
		n := copy(q.jobs, q.jobs[q.head:])
		clear(q.jobs[n:])
		q.jobs, q.head = q.jobs[:n], 0
	}
	q.jobs = append(q.jobs, jobs...)
}

// unlockWaking unlocks q.mu, then wakes a parked worker when queued jobs
// need one (see wakeOneLocked).
func (q *jobQueue) unlockWaking() {
	wake := q.wakeOneLocked()
	q.mu.Unlock()
	if wake {
		q.wakeups <- struct{}{}
	}
}

// wakeOneLocked decides whether to wake a parked worker for queued jobs:
// yes when one is parked and no wake-up is in flight already, unless
// handlers are fast and as many workers run as there are cores (the watch
// then looks again after queueWatch).
func (q *jobQueue) wakeOneLocked() bool {
	if q.head == len(q.jobs) || q.parked == 0 || q.waking {
		return false
	}
	if !q.slow && cap(q.wakeups)-q.parked >= q.cores {
		q.watchLocked()
		return false
	}
	q.parked--
	q.waking = true
	return true
}

// watchLocked arms the watch, unless it is armed.
func (q *jobQueue) watchLocked() {
	if q.watching || q.closed {
		return
	}
	q.watching, q.watchFrom = true, q.taken
	if q.watch == nil {
		q.watch = time.AfterFunc(queueWatch, q.watched)
		return
	}
	q.watch.Reset(queueWatch)
}

// watched is the watch firing: jobs were queued queueWatch ago and no
// worker was woken for them. It wakes one; and when the running workers
// took none meanwhile, their handlers block: the chain wakes freely until
// a worker reports a fast handler again.
func (q *jobQueue) watched() {
	q.mu.Lock()
	q.watching = false
	if q.taken == q.watchFrom {
		q.slow = true
	}
	wake := q.head < len(q.jobs) && q.parked > 0 && !q.waking
	if wake {
		q.parked--
		q.waking = true
	}
	q.mu.Unlock()
	if wake {
		q.wakeups <- struct{}{}
	}
}

// get returns the next job, waiting while the queue is empty. It returns
// false once the queue is closed and empty.
func (q *jobQueue) get() (job, bool) {
	j, ok, _ := q.take(nil, -1)
	return j, ok
}

// take is get, and reports whether it waited for the job. When it is
// about to wait, it first calls beforeWait (when not nil), once. took is
// how long the worker's last handler ran (negative: none), which paces
// the wake-ups (see jobQueue).
func (q *jobQueue) take(beforeWait func(), took time.Duration) (j job, ok, waited bool) {
	woken := false
	q.mu.Lock()
	if took >= 0 {
		q.slow = took >= slowHandler
	}
	for {
		if woken {
			q.waking = false
			woken = false
		}
		if q.head < len(q.jobs) {
			next := q.jobs[q.head]
			q.jobs[q.head] = job{} // the queue does not keep the entry alive
			q.head++
			q.taken++
			q.unlockWaking()
			return next, true, waited
		}
		if q.closed {
			q.mu.Unlock()
			return job{}, false, waited
		}
		if beforeWait != nil {
			q.mu.Unlock()
			beforeWait()
			beforeWait = nil
			q.mu.Lock()
			continue // jobs may have come meanwhile
		}
		q.parked++
		q.mu.Unlock()
		if !q.starved.Load() {
			q.starved.Store(true)
		}
		<-q.wakeups
		woken, waited = true, true
		q.mu.Lock()
	}
}

// close stops pushes and wakes every parked worker; they take what is
// queued, then get returns false. It returns nothing: the workers see the
// queued jobs (and skip them at shutdown).
func (q *jobQueue) close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	n := q.parked
	q.parked = 0
	if q.watch != nil {
		q.watch.Stop()
	}
	q.mu.Unlock()
	for range n {
		q.wakeups <- struct{}{}
	}
}

// drain removes and returns the queued jobs.
func (q *jobQueue) drain() []job {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := append([]job(nil), q.jobs[q.head:]...)
	clear(q.jobs)
	q.jobs, q.head = q.jobs[:0], 0
	return out
}

// entryContext is the context a handler gets: the consumer's handler
// context, plus cancellation of this one entry when its lease is lost.
//
// Cancelling one handler needs a context of its own per entry, and
// context.WithCancelCause for every entry costs more client CPU than a
// fast handler does (it registers with the parent under the parent's lock,
// and unregisters). So the per-entry context is made on first use: a
// handler that never looks at its context, or whose entry is never lost,
// pays nothing. A cause set before the context is made cancels it as soon
// as it is made.
//
// It is part of every entry in hand, so it is two words: a pointer to the
// handler context (shared by the entries of a dispatch) and one to its
// state, without a lock: a fast handler's entry goes from nil to
// finishedUnmade in one compare-and-swap.
type entryContext struct {
	parent *context.Context
	state  atomic.Pointer[entryState] // nil: not made, nothing asked
}

// entryState is an entryContext's state once it was made or cancelled.
// It never changes once stored: a change stores a new one.
type entryState struct {
	// ctx and cancel: the per-entry context, once made (nil before).
	ctx    context.Context
	cancel context.CancelCauseFunc
	// cause: the cancellation asked for before the context was made.
	cause error
}

// finishedUnmade is the state of an entry whose handler returned without
// looking at its context (most do): shared, so finishing one costs no
// allocation.
var finishedUnmade = &entryState{cause: context.Canceled}

var _ context.Context = (*entryContext)(nil)

// get returns the per-entry context, making it on first use.
func (e *entryContext) get() context.Context {
	for {
		s := e.state.Load()
		if s != nil && s.ctx != nil {
			return s.ctx
		}
		ctx, cancel := context.WithCancelCause(*e.parent)
		if s != nil {
			cancel(s.cause)
		}
		if e.state.CompareAndSwap(s, &entryState{ctx: ctx, cancel: cancel}) {
			return ctx
		}
		// A cancellation or another get came first: ours is dropped (its
		// cancel unregisters it from the parent), and the next round sees
		// theirs.
		cancel(context.Canceled)
	}
}

// handlerContext returns the handler context the entry's context derives
// from.
func (e *entryContext) handlerContext() context.Context { return *e.parent }

// Deadline implements context.Context.
func (e *entryContext) Deadline() (time.Time, bool) { return (*e.parent).Deadline() }

// Done implements context.Context.
func (e *entryContext) Done() <-chan struct{} { return e.get().Done() }

// Err implements context.Context.
func (e *entryContext) Err() error { return e.get().Err() }

// Value implements context.Context. It goes through the per-entry context
// so that context.Cause finds it.
func (e *entryContext) Value(key any) any { return e.get().Value(key) }

// cancelWith cancels the entry's context with cause, now or when it is
// made; the first cause stays.
func (e *entryContext) cancelWith(cause error) {
	for {
		s := e.state.Load()
		switch {
		case s != nil && s.ctx != nil:
			s.cancel(cause)
			return
		case s != nil:
			return // a cause is set: it stays
		}
		next := finishedUnmade
		if cause != context.Canceled { // identity: only the sentinel itself shares the state
			next = &entryState{cause: cause}
		}
		if e.state.CompareAndSwap(nil, next) {
			return
		}
	}
}

// finish cancels the entry's context once its handler returned, freeing
// it if it was made (a goroutine the handler left behind that looks at the
// context later finds it cancelled).
func (e *entryContext) finish() { e.cancelWith(context.Canceled) }
