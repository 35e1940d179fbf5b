package driver

// The read loop: new entries with XREADGROUP ">", as many as the window
// has room for, and on servers that have it (readClaim) the idle entries
// of dead consumers with the same read; and dispatch, where read and
// reclaimed entries enter the hand and the job queue.

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ctxwait"
)

// readLoop reads new entries with XREADGROUP ">", as many as the window
// offers (at most ReadCount). Only a read for a single entry blocks (up to
// ReadBlock): while entries keep coming, reads take what the window offers
// without blocking; once one finds nothing new, the loop waits for the
// next entry holding a single place. A blocked read holding the whole
// window would starve the reclaim pass for ReadBlock at a time.
//
// While the group is paused on the stream (see pauseGate), no read is
// sent; a read already under way delivers what it finds, and its entries
// wait in hand for the resume.
//
// A lane of a consumer of several streams does not block: an idle stream
// is polled without BLOCK every ReadBlock/2 (see idlePoll), so idle
// streams hold neither a connection nor a place in the window.
//
// With readClaim each read also asks for entries idle for MinIdle (CLAIM
// MinIdle): the server hands them over first, longest idle first, and
// wakes a blocked read when one becomes idle. Those delivered
// MaxDeliveries times before never reach a handler (see takenOver). A
// read that took idle entries over is followed by one for new entries
// only, so new and reclaimed entries take turns, as with the passes.
func (l *lane) readLoop(ctx, handlerCtx context.Context) {
	idle := true // the last read found nothing new (or none ran yet)
	block := l.single
	// newTurn: the last read took idle entries over, so this one asks for
	// new entries only. CLAIM hands idle entries out ahead of new ones;
	// reads taking turns keep a backlog from holding new entries back.
	newTurn := false
	// fresh: new entries were seen lately (the last read for new ones
	// only found some, or a read that claimed also returned new ones).
	// Turns are taken only then: without new entries they would only
	// add an empty read per batch of a backlog.
	fresh := true
	// first: no read has run yet, or only the probe that the server
	// refused (see errReadClaimRefused), so an idle lane reads at once.
	for first := true; ctx.Err() == nil; {
		want := l.cfg.ReadCount
		if idle {
			want = 1
			l.readPulse.wait(true)
			if !block && !first && !l.idlePoll(ctx) {
				return
			}
			l.readPulse.wait(false)
		}
		first = false
		l.readPulse.wait(true) // paused, or waiting for room while handlers run
		if !l.pause.await(ctx) {
			return
		}
		res := l.flow.reserve(ctx, partyRead, want)
		l.readPulse.wait(false)
		n := res.n
		if n == 0 {
			return
		}
		if l.pause.isPaused() {
			// Paused while waiting for room: no read.
			l.flow.giveBack(res)
			continue
		}
		// Under a limit, the read takes only as many entries as it has
		// permits for.
		l.readPulse.wait(true) // throttled
		grant, ok := l.sess.limit.take(ctx, n)
		l.readPulse.wait(false)
		if !ok {
			l.flow.giveBack(res)
			return
		}
		if l.pause.isPaused() {
			l.sess.limit.unused(grant.n)
			l.flow.giveBack(res)
			continue
		}
		n = grant.n
		var msgs []*Message
		var began, rtt time.Duration
		var claim time.Duration
		var ticket claimTicket // a read that claims can return entries settled meanwhile
		if l.readClaim.Load() && !newTurn {
			claim = l.cfg.MinIdle
			ticket = l.hand.claims.begin()
		}
		err := retry(ctx, l.readGiveUp, l.readFailed, func(ctx context.Context) error {
			began = l.clock.now()
			l.readPulse.beat() // each attempt is progress, even against a server that does not answer
			var err error
			msgs, err = l.srv.read(ctx, n, idle && block, claim)
			rtt = l.clock.now() - began
			return err
		})
		if err != nil {
			l.hand.claims.end(ticket)
			l.flow.giveBack(res)
			l.sess.limit.unused(grant.n)
			if ctx.Err() != nil || l.faults.stopping() {
				return
			}
			if errors.Is(err, errReadClaimRefused) {
				l.readClaim.Store(false)
				signal(l.reclaimNow)
				l.log.Info("the server has no XREADGROUP ... CLAIM; idle entries are taken by the reclaim passes", "err", err)
				// The probe read nothing: the real first read goes now,
				// not after an idle stream's poll (ReadBlock/2, a second
				// with the defaults, before a consumer of several streams
				// handled anything).
				first = true
				continue
			}
			if !l.faults.failedForGood(ctx, "read", err) {
				return
			}
			continue
		}
		l.sess.limit.unused(n - len(msgs))
		if newTurn {
			newTurn = false
			if len(msgs) == 0 {
				// Nothing new: the next read takes idle entries again at once.
				fresh = false
				l.flow.giveBack(res)
				continue
			}
		}
		if idle {
			rtt = 0 // it waited for entries: not a round trip
		}
		got := len(msgs)
		if claim > 0 {
			if got < n {
				// Nothing more idle for MinIdle: a sweep (see lane.sweptAt).
				l.sweeps.record(began)
			}
			claimed := false
			for _, m := range msgs {
				if m.Deliveries > 1 {
					claimed = true
				} else {
					fresh = true
				}
			}
			newTurn = claimed && fresh
			if !claimed {
				// Only new entries: none can be held or settled here, so
				// the hand takes them as a read's (see heldSet).
				l.hand.claims.end(ticket)
				ticket = 0
			}
		}
		idle = got == 0
		msgs = l.takenOver(ctx, msgs)
		l.sess.limit.unused(got - len(msgs)) // dead-lettered, or still running here
		l.drain.read(idle)
		l.dispatch(handlerCtx, msgs, res, began, rtt, got == n, ticket, grant)
	}
}

// detectReadClaim sets readClaim unless Config.ReadClaim is off or
// Backoff is set (a read claims by MinIdle alone). The first read is the
// probe: a server without the option (Redis before 8.4, Valkey) refuses
// it with an error reply before reading anything, and the read loop then
// turns it off for the lane (see errReadClaimRefused). It needs no
// command beyond XREADGROUP, so a least-privilege ACL user has it too.
func (l *lane) detectReadClaim() {
	l.readClaim.Store(l.cfg.ReadClaim != ReadClaimOff && len(l.cfg.Backoff) == 0)
}

// takenOver counts a read's entries, new and taken over (Deliveries > 1),
// and returns those that may reach a handler: an entry a read's CLAIM
// handed over after MaxDeliveries deliveries (its count now one more) is
// dead-lettered here instead, before any handler sees it (unless this
// consumer still holds it: see dispatch).
func (l *lane) takenOver(ctx context.Context, msgs []*Message) []*Message {
	limit := int64(l.cfg.deliveryLimit())
	var claimed int
	var spent []string
	deliveries := map[string]int64{}
	keep := msgs[:0]
	for _, m := range msgs {
		if m.Deliveries > 1 {
			claimed++
		}
		if limit > 0 && m.Deliveries > limit {
			// One whose handler still runs here (its lease lapsed) is left
			// to it, as dispatch leaves it: its outcome settles it.
			if !l.hand.holds(m.ID) {
				spent = append(spent, m.ID)
				deliveries[m.ID] = m.Deliveries
			}
			continue
		}
		keep = append(keep, m)
	}
	l.m.Count(EventRead, len(msgs)-claimed)
	l.takeovers.read(claimed)
	if claimed > 0 {
		l.m.Count(EventClaimed, claimed-len(spent))
	}
	if len(spent) > 0 {
		l.settle.deadLetterSpent(ctx, spent, deliveries)
	}
	return keep
}

// idlePoll waits before the next read of an idle stream of a consumer of
// several streams: ReadBlock/2, jittered by ±10% so the streams' polls
// spread out. It reports false when ctx ended.
func (l *lane) idlePoll(ctx context.Context) bool {
	d := l.cfg.ReadBlock / 2
	d += time.Duration(rand.Int64N(int64(d)/5+1)) - d/10
	return ctxwait.Sleep(ctx, d)
}

// readGiveUp stops retrying a read at an error retrying cannot fix (a
// missing group among them) and at a refused CLAIM, both handled by the
// caller, and once the consumer is stopping.
func (l *lane) readGiveUp(err error, _ int) bool {
	return permanent(err) || errors.Is(err, errReadClaimRefused) || l.faults.stopping()
}

func (l *lane) readFailed(err error, attempt int) {
	if !errors.Is(err, pelwarden.ErrNoGroup) && !errors.Is(err, errReadClaimRefused) {
		l.faults.commandError("read", err, attempt)
	}
}

// dispatch hands msgs, fetched by the call of reservation res begun at
// began (a clock reading), to the handler workers, and reports the call
// to the window. rtt is the call's round trip; more says the source had
// at least as many entries as the call asked for. Under a limit, msgs[k]
// starts no earlier than grant's permit k comes due; the permits of
// entries skipped are given back.
func (l *lane) dispatch(handlerCtx context.Context, msgs []*Message, res reservation, began, rtt time.Duration, more bool, claim claimTicket, grant permitGrant) {
	var total int64
	for _, m := range msgs {
		total += entryBytes(m)
	}
	if limit := l.flow.fill(res, len(msgs), total, rtt, more); limit > 0 {
		l.log.Debug("flow window resized", "max_in_hand", limit)
	}
	if len(msgs) == 0 {
		l.hand.claims.end(claim)
		return
	}
	l.drain.add(len(msgs))
	skipped, closed := l.hand.add(handlerCtx, msgs, l.cfg.idleResetFrom(began), l.jobs, l.exec, claim, grant.due)
	if closed {
		l.log.Warn("entries read during shutdown; they stay pending", "count", len(msgs), "ids", firstIDs(messageIDs(msgs)))
	}
	l.sess.limit.unused(len(skipped))
	for _, m := range skipped {
		l.flow.free(1, entryBytes(m))
		l.drain.done(1)
	}
}

// entryBytes is the size the window counts for an entry: its field data
// and its id (never zero, so the window learns the size of entries whose
// fields are empty).
func entryBytes(m *Message) int64 {
	n := int64(len(m.ID))
	for _, f := range m.Fields {
		n += int64(len(f.Name) + len(f.Value))
	}
	return n
}

func messageIDs(msgs []*Message) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}
