package driver

// The acker: its queue, and batched acks, fenced or plain (Config.AckMode).

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/pelwarden/pelwarden"
)

// acker owns the acks of one lane: the queue the handler workers push the
// ids of succeeded entries to (add), and the loop that sends them in
// batches (start, stop). An entry stays in the hand until its ack was
// sent, so the heartbeat loop keeps protecting it meanwhile.
type acker struct {
	srv    settleServer
	hand   *hand
	clock  clock
	m      Metrics
	log    *slog.Logger
	faults faults

	batch, limit int // ids per call; the most the queue holds
	// interval: a queued id waits at most this long for a fuller batch
	// (AckInterval, at most MinIdle/4: a succeeded entry then needs no
	// lease extension, and its ack no fence; see Config.fenceFrom).
	interval     time.Duration
	flushTimeout time.Duration // bound of the final flush: ShutdownTimeout

	// Made by newAcker:
	queue *ackQueue
	// sendTime is the mean time an ack call took (0: none yet): how early
	// a flush timed by the fence goes out (see loop). The loop's own.
	sendTime time.Duration
	// plain, fenced, acked and kept are the loop's buffers for one batch
	// (see send and forgetAcked), reused from batch to batch: a consumer
	// acks every entry, so allocating them per batch would cost every
	// entry.
	plain, fenced []string
	acked, kept   []*handEntry
	stopped       chan struct{} // closed by stop: no more acks are coming
	gone          chan struct{} // closed when the loop has exited
	// live is the loop's context until stop (see start).
	live     context.Context
	stopLive context.CancelFunc
}

// newAcker returns an acker built from a's dependencies and bounds (the
// fields above "Made by newAcker").
func newAcker(a acker) *acker {
	a.queue = newAckQueue(a.batch, a.limit)
	a.stopped = make(chan struct{})
	a.gone = make(chan struct{})
	return &a
}

// add queues the ack of f; ownedUntil is when another consumer could
// first take it over (see Config.fenceFrom). It reports false once the
// acker has stopped: the entry then stays pending. It waits while the
// queue is full (the back-pressure of a slow or failing ack call).
func (a *acker) add(f *handEntry, ownedUntil, now time.Duration) bool {
	return a.queue.push(ackItem{f: f, ownedUntil: ownedUntil, ahead: ownedUntil > now})
}

// addAll queues the acks of items, in order, as add does, and returns how
// many it queued: fewer than all once the acker has stopped (those
// entries stay pending).
func (a *acker) addAll(items []ackItem) int { return a.queue.pushAll(items) }

// drained tells the loop to flush now: nothing is queued or running and
// the last read found nothing new, so no more acks are coming soon. Under
// load this never happens and acks go out in full batches; after a burst,
// its acks go out at once instead of after the interval.
func (a *acker) drained() { signal(a.queue.drained) }

// start runs the loop until stop, or until ctx ends (the bound of the
// shutdown: what is still queued then stays pending).
func (a *acker) start(ctx context.Context) {
	// live ends at stop, so a flush retrying on a server that does not
	// answer gives way to the final, bounded flush.
	a.live, a.stopLive = context.WithCancel(ctx)
	go func() {
		defer close(a.gone)
		a.loop(ctx)
	}()
}

// stop says no more acks are coming: the loop flushes what is queued,
// within flushTimeout, and exits; done is closed then. Adds from now on
// fail.
func (a *acker) stop() {
	close(a.stopped)
	if a.stopLive != nil {
		a.stopLive()
	}
}

// done is closed when the loop has exited.
func (a *acker) done() <-chan struct{} { return a.gone }

// loop batches acks: one call per batch ids or interval, or at once when
// the lane has drained what it had in hand. Failed batches are kept and
// retried, never dropped. It returns when stop was called and everything
// is flushed, or when ctx is cancelled, logging what stays pending.
//
// A batch also goes out early enough for its acks to be plain: before
// the first queued id's fence (its ownedUntil) less the time an ack call
// takes. An ack sent past the fence goes through the fenced ack function,
// several times the server's work of an XACK. With the defaults the fence
// is half a minute after the delivery and the interval (20 ms) always
// comes first; with a short MinIdle (10 ms: the fence 5 ms after the
// read or claim began) it is the fence that sets the pace, and waiting
// for the interval would send most acks fenced and leave their entries to
// lease extensions meanwhile.
func (a *acker) loop(ctx context.Context) {
	// pending: taken from the queue, not yet sent. Its buffer is reused:
	// what a flush leaves moves to the front (see keep).
	var pending []ackItem
	keep := func(rest []ackItem) {
		n := len(pending)
		pending = append(pending[:0], rest...) // memmove: rest is pending's tail
		clear(pending[len(pending):n])         // drop the ids sent
	}
	t := time.NewTimer(a.interval)
	defer t.Stop()
	// fence runs while queued ids wait for a flush timed by the fence.
	fence := time.NewTimer(time.Hour)
	fence.Stop()
	defer fence.Stop()
	take := func() {
		pending = a.queue.take(pending)
		fence.Stop() // the next push times the next one
	}
	flush := func(ctx context.Context) bool {
		rest, ok := a.flush(ctx, pending)
		keep(rest)
		return ok
	}
	live := a.live
	for {
		select {
		case <-a.queue.sooner:
			if d, ok := a.beforeFence(a.queue.earliest()); ok {
				fence.Reset(d)
			}
		case <-fence.C:
			take()
			flush(live)
		case <-a.queue.full:
			take()
			if len(pending) >= a.batch {
				flush(live)
			} else if d, ok := a.beforeFence(firstFence(pending)); ok {
				// A token left from before an earlier take: what it took
				// keeps its timing.
				fence.Reset(d)
			}
		case <-a.queue.drained:
			take()
			flush(live)
		case <-t.C:
			take()
			flush(live)
			t.Reset(a.interval)
		case <-a.stopped:
			// Handlers that return from now on (after the shutdown timeout)
			// are not acked: their entries stay pending.
			pending = append(pending, a.queue.close()...)
			// The final flush is bounded by flushTimeout (a deadline, so
			// clients with ContextTimeoutEnabled stop waiting on a hung server).
			fctx, cancel := context.WithTimeout(ctx, a.flushTimeout)
			for len(pending) > 0 && fctx.Err() == nil {
				if !flush(fctx) && a.faults.stopping() {
					break // a permanent error: retrying cannot help
				}
			}
			cancel()
			a.abandon(pending)
			return
		case <-ctx.Done():
			a.abandon(append(pending, a.queue.close()...))
			return
		}
	}
}

// abandon forgets acks that will not be sent, logging them.
func (a *acker) abandon(pending []ackItem) {
	ids := itemIDs(pending)
	a.hand.drop(false, itemEntries(pending)...)
	if len(pending) > 0 {
		a.log.Error("shutdown: acks not sent; these entries stay pending and will be handled again", "count", len(ids), "ids", firstIDs(ids))
	}
}

// flush sends pending in batches, retrying each until ctx ends, and
// returns what is left to send: nothing and true, or the rest and false
// when ctx ended or an error stopped the consumer.
//
// Each attempt is bounded by flushTimeout (ShutdownTimeout), as the
// driver's other settling calls are (see lane.withRetry): go-redis does
// not stop a call in progress when its context is cancelled, only at a
// deadline (Options.ContextTimeoutEnabled), so without one an ack call
// under way on a server that hangs when the consumer stops would hold the
// shutdown for the client's whole ReadTimeout.
func (a *acker) flush(ctx context.Context, pending []ackItem) ([]ackItem, bool) {
	failed := func(err error, attempt int) { a.faults.commandError("ack", err, attempt) }
	for len(pending) > 0 {
		batch := pending[:min(len(pending), a.batch)]
		var res ackResult
		err := retry(ctx, onPermanent, failed, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, a.flushTimeout)
			defer cancel()
			began := a.clock.now()
			var err error
			res, err = a.send(ctx, batch)
			if err == nil {
				a.timeSend(a.clock.now() - began)
			}
			return err
		})
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return pending, false
		case errors.Is(err, pelwarden.ErrNoGroup):
			// The group and its PEL are gone: nothing left to ack.
			a.faults.failedForGood(ctx, "ack", err)
			a.hand.drop(false, itemEntries(batch)...)
			pending = pending[len(batch):]
			continue
		default: // permanent: the consumer stops
			a.faults.failedForGood(ctx, "ack", err)
			return pending, false
		}
		a.m.Count(EventAcked, int(res.acked))
		if len(res.ownedElsewhere) > 0 {
			a.m.Count(EventLostOwnership, len(res.ownedElsewhere))
			a.log.Warn("acks refused: entries are owned by another consumer now (they will be handled again there)",
				"count", len(res.ownedElsewhere), "ids", firstIDs(res.ownedElsewhere))
		}
		if res.notPending > 0 {
			// Typically the retry of an ack whose first attempt was
			// applied but whose reply was lost with the connection.
			a.log.Info("acked entries were no longer pending (acked already, or cleared from the group)",
				"count", res.notPending, "ids", firstIDs(res.notPendingIDs))
		}
		a.forgetAcked(batch, res.ownedElsewhere)
		pending = pending[len(batch):]
	}
	return pending, true
}

// beforeFence is how long from now a flush may wait for the ack of an id
// fenced at ownedUntil (a clock reading) to be sent plain: until the
// fence less the time an ack call takes. It reports false when the fence
// has passed already (the ack is fenced whenever it goes) or comes after
// the interval (which sends it in time).
func (a *acker) beforeFence(ownedUntil time.Duration) (time.Duration, bool) {
	left := ownedUntil - a.clock.now()
	if left <= 0 || left > a.interval {
		return 0, false
	}
	return max(left-a.sendTime, 0), true
}

// firstFence is the earliest ownedUntil among items whose fence was ahead
// (the end of time when there is none).
func firstFence(items []ackItem) time.Duration {
	first := time.Duration(math.MaxInt64)
	for _, it := range items {
		if it.ahead {
			first = min(first, it.ownedUntil)
		}
	}
	return first
}

// timeSend records the time an ack call took (see sendTime).
func (a *acker) timeSend(took time.Duration) {
	if a.sendTime == 0 {
		a.sendTime = took
		return
	}
	a.sendTime += (took - a.sendTime) / 4
}

// ackResult is what one ack of a batch did.
type ackResult struct {
	acked          int64
	ownedElsewhere []string // refused: another consumer holds them
	notPending     int      // neither acked nor owned elsewhere
	notPendingIDs  []string // those of them the fenced ack named
}

// send acks a batch. The ack fence, in one place: an entry no other
// consumer can have taken over yet (its ownedUntil, see Config.fenceFrom, is
// still ahead) is acked with one plain XACK; only the others, held so long
// that a takeover was possible, go through the fenced ack function. Under
// load every entry is acked within milliseconds of its delivery, so the
// fence costs nothing there. With AckPlain every ownedUntil is the end of
// time.
func (a *acker) send(ctx context.Context, batch []ackItem) (ackResult, error) {
	now := a.clock.now()
	plain, fenced := a.plain[:0], a.fenced[:0]
	for _, it := range batch {
		if now < it.ownedUntil {
			plain = append(plain, it.f.id)
		} else {
			fenced = append(fenced, it.f.id)
		}
	}
	defer func() {
		// The calls keep neither slice; the ids are dropped for the GC.
		clear(plain)
		clear(fenced)
		a.plain, a.fenced = plain[:0], fenced[:0]
	}()
	var res ackResult
	if len(plain) > 0 {
		n, err := a.srv.ack(ctx, plain)
		if err != nil {
			return res, err
		}
		res.acked = n
		res.notPending = len(plain) - int(n)
	}
	if len(fenced) > 0 {
		f, err := a.srv.ackFenced(ctx, fenced)
		if err != nil {
			return res, err
		}
		res.acked += f.Acked
		res.ownedElsewhere = f.OwnedElsewhere()
		res.notPending += len(f.NotPending)
		res.notPendingIDs = f.NotPending
	}
	return res, nil
}

// forgetAcked stops tracking a batch the server answered: the entries
// owned elsewhere are still pending (another consumer handles them: see
// hand.forget), the others are gone from the PEL (see hand.gone).
func (a *acker) forgetAcked(batch []ackItem, ownedElsewhere []string) {
	var elsewhere map[string]bool
	if len(ownedElsewhere) > 0 {
		elsewhere = make(map[string]bool, len(ownedElsewhere))
		for _, id := range ownedElsewhere {
			elsewhere[id] = true
		}
	}
	acked, kept := a.acked[:0], a.kept[:0]
	for _, it := range batch {
		if elsewhere[it.f.id] {
			kept = append(kept, it.f)
		} else {
			acked = append(acked, it.f)
		}
	}
	defer func() {
		clear(acked)
		clear(kept)
		a.acked, a.kept = acked[:0], kept[:0]
	}()
	if len(kept) > 0 {
		a.hand.drop(false, kept...)
	}
	a.hand.drop(true, acked...)
}

func itemIDs(items []ackItem) []string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.f.id
	}
	return ids
}

func itemEntries(items []ackItem) []*handEntry {
	fs := make([]*handEntry, len(items))
	for i, it := range items {
		fs[i] = it.f
	}
	return fs
}

// ackItem is one entry to ack.
type ackItem struct {
	f *handEntry // its id, and its entry in hand
	// ownedUntil (a clock reading): until then no other consumer can have
	// taken the entry over, so a plain XACK acks exactly what the fenced
	// ack would (see fenceFrom).
	ownedUntil time.Duration
	// ahead: the fence was still ahead when the ack was queued, so the
	// queue times a flush by it (see acker.loop); an ack past its fence is
	// fenced whenever it goes.
	ahead bool
}

// ackQueue hands the entries whose handler succeeded from the handler
// workers to the ack loop.
//
// A push is one locked append; the ack loop is woken only when a batch is
// full (otherwise its interval timer collects the ids), instead of once per
// id as with a channel. The queue holds at most limit ids: a push beyond
// that waits for the ack loop, which is the back-pressure a slow or failing
// ack call puts on the handlers.
type ackQueue struct {
	batch, limit int

	mu     sync.Mutex
	ids    []ackItem
	closed bool

	full chan struct{} // holds a token once batch ids are queued
	// first is the earliest ownedUntil among the queued ids whose fence
	// was ahead (hasFirst: there is one); sooner holds a token after a
	// push lowered it (or set it, the first such push after a take), so
	// the ack loop times a flush by the fence (see acker.loop).
	first    time.Duration
	hasFirst bool
	sooner   chan struct{}
	// drained holds a token when the consumer has nothing in hand (no
	// entry queued or running, and its last read found nothing new): no
	// more acks are coming soon, so waiting for a fuller batch only delays
	// them.
	drained chan struct{}
	room    chan struct{} // holds a token after the ack loop took ids
	gone    chan struct{} // closed by close
	// testBlocked, set by tests only (before any push), is called each
	// time a push finds the queue full and is about to wait.
	testBlocked func()
}

func newAckQueue(batch, limit int) *ackQueue {
	return &ackQueue{
		batch: batch, limit: limit,
		full: make(chan struct{}, 1), sooner: make(chan struct{}, 1), drained: make(chan struct{}, 1), room: make(chan struct{}, 1), gone: make(chan struct{}),
	}
}

// push queues id. It reports false when the queue was closed: the ack loop
// has stopped and the entry stays pending.
func (q *ackQueue) push(id ackItem) bool {
	return q.pushAll([]ackItem{id}) == 1
}

// pushAll queues items in order, as many at a time as there is room for,
// and returns how many it queued: fewer than all once the queue was
// closed.
func (q *ackQueue) pushAll(items []ackItem) int {
	pushed := 0
	waited := false
	for pushed < len(items) {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return pushed
		}
		if room := q.limit - len(q.ids); room > 0 {
			sooner := false
			for _, id := range items[pushed : pushed+min(room, len(items)-pushed)] {
				q.ids = append(q.ids, id)
				if id.ahead && (!q.hasFirst || id.ownedUntil < q.first) {
					q.first, q.hasFirst = id.ownedUntil, true
					sooner = true
				}
				pushed++
			}
			n := len(q.ids)
			q.mu.Unlock()
			if n >= q.batch {
				signal(q.full)
			} else if sooner {
				signal(q.sooner)
			}
			if waited && n < q.limit {
				// A take wakes one waiting push; pass the wake-up on while
				// there is room, or the other waiters would trickle in one
				// per take.
				signal(q.room)
			}
			continue
		}
		q.mu.Unlock()
		waited = true
		if q.testBlocked != nil {
			q.testBlocked()
		}
		select {
		case <-q.room:
		case <-q.gone:
		}
	}
	return pushed
}

// earliest is the earliest ownedUntil among the queued ids whose fence
// was ahead (the end of time when there is none).
func (q *ackQueue) earliest() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.hasFirst {
		return math.MaxInt64
	}
	return q.first
}

// take removes every queued id and appends them to dst. The queue keeps
// its buffer for the next pushes.
func (q *ackQueue) take(dst []ackItem) []ackItem {
	q.mu.Lock()
	n := len(q.ids)
	dst = append(dst, q.ids...)
	clear(q.ids)
	q.ids = q.ids[:0]
	q.hasFirst = false
	q.mu.Unlock()
	if n > 0 {
		signal(q.room)
	}
	return dst
}

// close refuses further pushes and returns the ids still queued.
func (q *ackQueue) close() []ackItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	close(q.gone)
	ids := q.ids
	q.ids = nil
	q.hasFirst = false
	return ids
}

// signal puts a token in ch (capacity 1) unless one is there already.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
