package driver

// The reclaim loop: passes over the PEL through the claim function.

import (
	"context"
	"errors"
	"time"

	"github.com/pelwarden/pelwarden"
)

// reclaimAttempts: a claim call failing this many times in a row (for
// another reason than a full server) ends the pass; the next one starts
// over.
const reclaimAttempts = 6

// reclaimLoop runs a reclaim pass at start and every ReclaimInterval, when
// something is idle. At start it calls the claim function at least once,
// idle entries or not (one page when nothing is idle): the library checks
// the ACL for every command a claim can need, so a consumer that may not,
// say, XACK stops at start instead of at its first poison entry.
//
// Where reads claim (readClaim), they take the idle entries over, and a
// pass running beside them would only compete for the same entries and
// places in the window: the pass at start is one page (the ACL check),
// and later passes run only while the reads find nothing, for what they
// leave: entries deleted while pending, which CLAIM skips. The first read
// tells whether the server has CLAIM; where it refuses it, the loop runs
// a round at once (reclaimNow), so what was idle at start is not left
// waiting for ReclaimInterval behind the one-page pass of a round that
// still counted on the reads.
func (l *lane) reclaimLoop(ctx, handlerCtx context.Context) {
	defer l.takeovers.reportReads(l.log) // what the reads took since the last round
	repeatOrNow(ctx, l.cfg.ReclaimInterval, l.reclaimNow, func(first bool) { l.reclaimTick(ctx, handlerCtx, first) })
}

// reclaimTick is one round of the reclaim loop (first: the one at start).
func (l *lane) reclaimTick(ctx, handlerCtx context.Context, first bool) {
	l.takeovers.reportReads(l.log)
	if l.pause.isPaused() {
		return // the passes resume with the group
	}
	if l.readClaim.Load() {
		if first {
			l.reclaimPass(ctx, handlerCtx, true)
		} else if l.drain.idle() && l.anythingIdle(ctx) {
			l.reclaimPass(ctx, handlerCtx, false)
		}
		return
	}
	if idle := l.anythingIdle(ctx); idle || first {
		l.reclaimPass(ctx, handlerCtx, !idle)
	}
}

// anythingIdle reports whether some pending entry has been idle for MinIdle,
// so a reclaim pass may find work. A pass over a PEL with nothing idle
// would walk all of it through the claim function (about 6 ms of server
// time per 5,000 entries: 1.2 s for 1,000,000); XPENDING IDLE scans the PEL
// in the server's own code and stops at the first idle entry (75 ms for
// 1,000,000 entries with nothing idle, microseconds for a small PEL). An
// error is logged and the pass runs anyway.
func (l *lane) anythingIdle(ctx context.Context) bool {
	idle, err := l.srv.anyIdle(ctx, l.cfg.MinIdle)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, pelwarden.ErrNoGroup) {
			l.faults.commandError("check for idle entries", err, 0)
		}
		return true
	}
	return idle
}

// reclaimPass walks the PEL page by page with the claim function until the
// cursor returns to 0-0 (after the first page with onePage). Each page
// takes the room the window offers (waiting for room while the handlers
// are busy, never for more than can come), up to ClaimCount entries (fewer
// where a page that large would take too long for MinIdle: see
// claimPacer) and about the window's batch of bytes. What the pass
// dead-lettered, found deleted or could not dead-letter is logged once at
// its end.
func (l *lane) reclaimPass(ctx, handlerCtx context.Context, onePage bool) {
	rep := passReport{maxDeliveries: l.cfg.deliveryLimit()}
	defer rep.log(l)
	cursor := "0-0"
	passBegan := l.clock.now()
	for ctx.Err() == nil {
		res := l.flow.reserve(ctx, partyReclaim, l.claimPage.size(l.cfg.ClaimCount, l.cfg.MinIdle))
		n := res.n
		if n == 0 {
			return
		}
		if l.pause.isPaused() {
			l.flow.giveBack(res)
			return // the passes resume with the group
		}
		// Under a limit, the page takes only as many entries as the pass
		// has permits for.
		grant, ok := l.sess.limit.take(ctx, n)
		if !ok {
			l.flow.giveBack(res)
			return
		}
		n = grant.n
		var page *pelwarden.ClaimPage
		var began, rtt time.Duration
		claim := l.hand.claims.begin()
		err := retry(ctx, claimGiveUp(l.passBesideReads), func(err error, attempt int) {
			if outOfMemory(err) && l.passBesideReads() {
				return // the pass ends; see passBesideReads
			}
			if !errors.Is(err, pelwarden.ErrNoGroup) && !permanent(err) {
				l.faults.commandError("reclaim", err, attempt)
			}
		}, func(ctx context.Context) error {
			began = l.clock.now()
			var err error
			page, err = l.srv.claim(ctx, pelwarden.ClaimArgs{MinIdle: l.cfg.MinIdle, Cursor: cursor, Count: n,
				MaxDeliveries: l.cfg.MaxDeliveries, Backoff: l.cfg.Backoff, MaxBytes: int(l.flow.pageBytes())})
			rtt = l.clock.now() - began
			return err
		})
		if err != nil {
			l.hand.claims.end(claim)
			l.flow.giveBack(res)
			l.sess.limit.unused(grant.n)
			switch {
			case ctx.Err() != nil:
			case permanent(err):
				if l.faults.failedForGood(ctx, "reclaim", err) {
					continue // the group was created again
				}
			}
			return // the next pass starts over
		}
		l.claimPage.took(n, rtt)
		l.sess.memoryFreed("reclaim")
		l.m.Count(EventClaimed, len(page.Entries))
		rep.add(l, page)
		msgs := make([]Message, len(page.Entries))
		ptrs := make([]*Message, len(page.Entries))
		for i, e := range page.Entries {
			msgs[i] = Message{ID: e.ID, Fields: e.Fields, Deliveries: e.Deliveries, Stream: l.cfg.Stream, Group: l.cfg.Group, Consumer: l.cfg.Consumer}
			ptrs[i] = &msgs[i]
		}
		l.sess.limit.unused(n - len(ptrs))
		l.dispatch(handlerCtx, ptrs, res, began, rtt, !page.Done(), claim, grant)
		if page.Done() {
			l.sweeps.record(passBegan) // the whole PEL, from cursor 0-0 to its end
		}
		if page.Done() || onePage {
			return
		}
		cursor = page.Cursor
	}
}

// passBesideReads reports whether a pass only clears what reads that
// claim leave (entries deleted while pending) and the consumer is not
// paused. A full server refusing such a pass is no reason to pause: the
// reads and acks need no memory, so consumption goes on, and a refused
// write that matters (a dead-letter) pauses it. The pass just ends, and
// the next one tries again. Once paused, the pass's claims are the probe
// that ends the pause, as everywhere else.
func (l *lane) passBesideReads() bool {
	return l.readClaim.Load() && !l.flow.isPaused()
}

// claimGiveUp ends a pass at errors retrying cannot fix and after
// reclaimAttempts other failures, but never while the server is out of
// memory: the claim is then the probe that ends the pause (see
// memoryFull), and refusals for lack of memory do not count as attempts.
// A pass beside reads that claim (besideReads) ends at once instead.
func claimGiveUp(besideReads func() bool) giveUp {
	failures := 0
	return func(err error, _ int) bool {
		if outOfMemory(err) {
			return besideReads()
		}
		failures++
		return permanent(err) || failures >= reclaimAttempts
	}
}

// passReport sums up what a reclaim pass did, for one log record per kind
// at the end of the pass (and the metrics, page by page): the entries it
// took over from other consumers, and what it dead-lettered, could not
// dead-letter or found deleted.
type passReport struct {
	maxDeliveries int
	deadLettered  idList
	tooLarge      idList
	deleted       idList
	takeover      passTakeover
}

// idList counts ids and keeps the first few.
type idList struct {
	n     int
	first []string
}

func (l *idList) add(ids []string) {
	l.n += len(ids)
	if room := 10 - len(l.first); room > 0 {
		l.first = append(l.first, ids[:min(room, len(ids))]...)
	}
}

func (p *passReport) add(l *lane, page *pelwarden.ClaimPage) {
	p.takeover.add(page.TakenFrom)
	if len(page.DeadLettered) > 0 {
		l.m.DeadLettered(pelwarden.ReasonMaxDeliveries, len(page.DeadLettered))
		p.deadLettered.add(page.DeadLettered)
	}
	if len(page.TooLarge) > 0 {
		l.m.Count(EventTooLarge, len(page.TooLarge))
		p.tooLarge.add(page.TooLarge)
	}
	if len(page.Deleted) > 0 {
		l.m.Count(EventDeletedFromPEL, len(page.Deleted))
		p.deleted.add(page.Deleted)
	}
}

func (p *passReport) log(l *lane) {
	l.takeovers.report(l.log, &p.takeover)
	if p.deadLettered.n > 0 {
		l.log.Warn("reclaim pass dead-lettered entries delivered too often", "count", p.deadLettered.n,
			"max_deliveries", p.maxDeliveries, "first_ids", p.deadLettered.first)
	}
	if p.tooLarge.n > 0 {
		l.log.Error("entries at MaxDeliveries have too many fields to dead-letter atomically; they stay pending for an operator",
			"count", p.tooLarge.n, "first_ids", p.tooLarge.first)
	}
	if p.deleted.n > 0 {
		l.log.Warn("pending entries were deleted from the stream; cleared from the PEL", "count", p.deleted.n, "first_ids", p.deleted.first)
	}
}

// claimPacer sizes the reclaim pass's pages by MinIdle. A claim takes
// its entries over when the function runs, so they arrive already aged by
// the call's round trip: a page whose call takes a good part of MinIdle
// would arrive with its lease nearly spent, and every entry of it would
// need an extension (and its ack the fence) before its handler even ran.
// The pacer keeps a page's call within claimBudget of MinIdle, from the
// time per entry the calls took so far. With the defaults (MinIdle a
// minute) that bound is far above ClaimCount; with a MinIdle of 10 ms it
// is about a hundred entries, minClaimPage. It belongs to the reclaim loop.
type claimPacer struct {
	perEntry time.Duration // mean round trip per claimed place (0: none measured)
}

// claimBudget is the share of MinIdle one claim call may take: MinIdle/8,
// the queue wait beyond which the window counts entries as hoarded (see
// window.maxWait), so an entry's claim and its wait for a handler
// together stay well within the lease interval (MinIdle/3).
const claimBudget = 8

// minClaimPage is the smallest page the pacer asks for (or ClaimCount if
// less). The time per entry it measures is a round trip's share, fixed
// costs included (the call's checks, the network, the wait behind other
// commands): on a slow or busy server the pages it derives would shrink
// towards a few entries each, every call paying those costs again, and
// the drain would collapse (a run on a loaded machine fell to 16 entries
// a page and a fifth of the throughput) without the pages arriving any
// fresher. A hundred entries keep the calls' fixed part small.
const minClaimPage = 100

// size is how many entries the next page asks for: count, or fewer where
// that many would take longer than MinIdle/claimBudget (never fewer than
// minClaimPage).
func (p *claimPacer) size(count int, minIdle time.Duration) int {
	if p.perEntry <= 0 {
		return count
	}
	return min(count, max(minClaimPage, int(minIdle/claimBudget/p.perEntry)))
}

// took records a claim call of n places (the reservation: the call asked
// for that many, whatever it found) that took rtt.
func (p *claimPacer) took(n int, rtt time.Duration) {
	if n <= 0 || rtt <= 0 {
		return
	}
	per := rtt / time.Duration(n)
	if p.perEntry == 0 {
		p.perEntry = per
		return
	}
	p.perEntry += (per - p.perEntry) / 4
}
