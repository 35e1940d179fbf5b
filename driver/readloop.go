package driver

// The read loop: new entries with XREADGROUP ">", as many as the window
// has room for; and dispatch, where read and reclaimed entries enter the
// tracker and the job queue.

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
// A lane of a consumer of several streams does not block: an idle stream
// is polled without BLOCK every ReadBlock/2 (see idlePoll), so idle
// streams hold neither a connection nor a place in the window.
func (l *lane) readLoop(ctx, handlerCtx context.Context) {
	idle := true // the last read found nothing new (or none ran yet)
	block := l.single
	for first := true; ctx.Err() == nil; first = false {
		want := l.cfg.ReadCount
		if idle {
			want = 1
			if !block && !first && !l.idlePoll(ctx) {
				return
			}
		}
		res := l.flow.reserve(ctx, partyRead, want)
		n := res.n
		if n == 0 {
			return
		}
		var msgs []*Message
		var began, rtt time.Duration
		err := retry(ctx, l.readGiveUp, l.readFailed, func(ctx context.Context) error {
			began = l.clock.now()
			var err error
			msgs, err = l.srv.read(ctx, n, idle && block)
			rtt = l.clock.now() - began
			return err
		})
		if err != nil {
			l.flow.giveBack(res)
			if ctx.Err() != nil || l.stopping() {
				return
			}
			if errors.Is(err, pelwarden.ErrNoGroup) && !l.groupMissing(ctx, err) {
				return
			}
			continue
		}
		if idle {
			rtt = 0 // it waited for entries: not a round trip
		}
		idle = len(msgs) == 0
		l.readIdle.Store(idle)
		if idle && l.inHand.Load() == 0 {
			l.acks.drained()
		}
		l.m.Count(EventRead, len(msgs))
		l.dispatch(handlerCtx, msgs, res, began, rtt, len(msgs) == n, 0)
	}
}

// idlePoll waits before the next read of an idle stream of a consumer of
// several streams: ReadBlock/2, jittered by ±10% so the streams' polls
// spread out. It reports false when ctx ended.
func (l *lane) idlePoll(ctx context.Context) bool {
	d := l.cfg.ReadBlock / 2
	d += time.Duration(rand.Int64N(int64(d)/5+1)) - d/10
	return ctxwait.Sleep(ctx, d)
}

// readGiveUp stops retrying a read at a missing group (handled by the
// caller) and once the consumer is stopping.
func (l *lane) readGiveUp(err error, _ int) bool {
	return errors.Is(err, pelwarden.ErrNoGroup) || l.stopping()
}

func (l *lane) readFailed(err error, attempt int) {
	if !errors.Is(err, pelwarden.ErrNoGroup) {
		l.commandError("read", err, attempt)
	}
}

// dispatch hands msgs, fetched by the call of reservation res begun at
// began (a clock reading), to the handler workers, and reports the call
// to the window. rtt is the call's round trip; more says the source had
// at least as many entries as the call asked for.
func (l *lane) dispatch(handlerCtx context.Context, msgs []*Message, res reservation, began, rtt time.Duration, more bool, claim claimTicket) {
	sizes := make([]int64, len(msgs))
	var total int64
	for i, m := range msgs {
		sizes[i] = entryBytes(m)
		total += sizes[i]
	}
	if limit := l.flow.fill(res, len(msgs), total, rtt, more); limit > 0 {
		l.log.Debug("flow window resized", "max_in_hand", limit)
	}
	if len(msgs) == 0 {
		l.held.endClaim(claim)
		return
	}
	l.inHand.Add(int64(len(msgs)))
	skipped, closed := l.held.add(handlerCtx, msgs, sizes, l.fenceFrom(began), l.jobs, l, claim)
	if closed {
		l.log.Warn("entries read during shutdown; they stay pending", "count", len(msgs), "ids", firstIDs(messageIDs(msgs)))
	}
	for _, m := range skipped {
		l.flow.free(entryBytes(m))
		l.settled()
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
